"""What every executor shares: kernels per plan node, feed checking, output conversion.

Profiling hooks protocol (every executor supports `run(feeds, hooks=None)`): when `hooks`
is given, the executor calls, on the thread that runs the stream,
    hooks.before(node_index, stream)   right before a node's kernel
    hooks.after(node_index, stream)    right after it returns
    hooks.record(event_index, stream)  after a Send (record) step   [optional method]
    hooks.wait(event_index, stream)    after a Recv (wait) step completes [optional method]
Hooks must be cheap and thread-safe; they must not raise.
Event indices are logical (into plan.events). CPU threads: hooks run on each stream's own
worker thread. CUDA: a run with hooks is always eager (a graph replay has no per-op host
calls); hooks run on the one issuing thread with the logical stream's torch.cuda.Stream
current, so `torch.cuda.Event.record()` inside before/after lands on that stream.
"""
from __future__ import annotations

from collections.abc import Mapping   # (isinstance on typing's alias is 3x slower)
from typing import Any, Callable

import numpy as np
import torch

from ..errors import InputError
from ..ir.graph import Graph
from ..kernels._util import describe, is_held
from ..kernels.build import build_kernel
from ..kernels.convert import to_numpy, to_torch, torch_dtype
from ..plan.order import host_order
from ..plan.plan import Plan
from .interpreter import subgraph_compiler


def build_kernels(graph: Graph, plan: Plan, device: Any, calls: Mapping[str, Any] | None = None) -> list:
    """One run-time function per plan node (plan node i is graph node `plan.nodes[i].name`).

    `calls` (a dynamic-shape model's root: executors/partitioned.py) maps a static
    sub-model's name to the kernel that runs it; a call node (`pyge.PartitionedCall`, whose
    attribute `submodel` names it) gets that kernel. Without `calls` a call node has no
    kernel, as any operator without one."""
    by_name = {n.name: n for n in graph.nodes}
    compile_subgraph = subgraph_compiler(device)
    return [_call_kernel(by_name[pn.name], calls) or build_kernel(by_name[pn.name], device, compile_subgraph)
            for pn in plan.nodes]


def _call_kernel(node, calls: Mapping[str, Any] | None):
    if not calls or node.op_type != "PartitionedCall" or node.domain != "pyge":
        return None
    return calls.get(node.attrs.get("submodel"))


def node_descriptions(graph: Graph, plan: Plan) -> list[str]:
    by_name = {n.name: n for n in graph.nodes}
    return [describe(by_name[pn.name]) for pn in plan.nodes]


_KIND = {"f": "float", "i": "int", "u": "uint", "b": "bool", "O": "string", "U": "string", "S": "string"}


def check_feeds(graph: Graph, plan: Plan, feeds: Mapping[str, Any]) -> list[Any]:
    """Validate user feeds against the graph inputs; returns numpy arrays in input order."""
    if not isinstance(feeds, Mapping):
        raise InputError(f"feeds must be a dict of input name -> array, got {type(feeds).__name__}")
    names = [plan.values[i].name for i in plan.inputs]
    extra = sorted(set(feeds) - set(names))
    if extra:
        raise InputError(f"unexpected feed {extra[0]!r}; the model's inputs are: {', '.join(names)}")
    out = []
    for vi in plan.inputs:
        pv = plan.values[vi]
        if pv.name not in feeds:
            raise InputError(f"missing feed for input {pv.name!r}")
        x = feeds[pv.name]
        if pv.kind != "tensor":
            out.append(x)
            continue
        try:
            arr = x if isinstance(x, (np.ndarray, torch.Tensor)) else np.asarray(x)
        except Exception as err:  # noqa: BLE001 - the object's own __array__ / __len__ failed
            first = str(err).strip().splitlines()[0] if str(err).strip() else ""
            raise InputError(f"feed {pv.name!r} cannot be converted to an array: "
                             f"{type(err).__name__}{': ' + first if first else ''}") from err
        dt = _dtype_name(arr.dtype)
        if pv.dtype is not None and dt != pv.dtype:
            raise InputError(f"feed {pv.name!r} has dtype {dt}, expected {pv.dtype}")
        if pv.shape is not None:
            shape = tuple(arr.shape)
            ok = len(shape) == len(pv.shape) and all(
                not isinstance(d, int) or d == s for d, s in zip(pv.shape, shape))
            if not ok:
                want = "[" + ",".join(str(d) if d is not None else "?" for d in pv.shape) + "]"
                raise InputError(f"feed {pv.name!r} has shape {list(shape)}, expected {want}")
        out.append(arr)
    return out


_DTYPE_NAMES: dict[Any, str] = {}   # numpy / torch dtype -> pyge's name (str() is slow)


def _dtype_name(dtype: Any) -> str:
    """The dtype's name as plan values spell it ("float32"; every string dtype "object")."""
    name = _DTYPE_NAMES.get(dtype)
    if name is None:
        kind = getattr(dtype, "kind", "")
        name = "object" if dtype == object or kind in ("U", "S") else str(dtype).replace("torch.", "")
        if kind not in ("U", "S"):          # one per length: not worth keeping
            _DTYPE_NAMES[dtype] = name
    return name


# numpy dtypes torch.from_numpy takes as they are (to_torch's general path for the rest)
_FROM_NUMPY = frozenset(np.dtype(n) for n in (
    "float32", "float64", "float16", "int8", "int16", "int32", "int64", "uint8", "bool",
    "complex64", "complex128"))


def feeds_to_device(arrays: list[Any], device: Any) -> list[Any]:
    """Feeds as run-time values; a writable, C-contiguous numpy array of a plain dtype
    becomes a CPU tensor sharing its memory (to_torch's rule, without its checks)."""
    if str(device) != "cpu":
        return [to_torch(a, device) for a in arrays]
    out = []
    for a in arrays:
        if a.__class__ is np.ndarray and a.dtype in _FROM_NUMPY and a.flags.writeable \
                and a.flags.c_contiguous:
            out.append(torch.from_numpy(a))
        else:
            out.append(to_torch(a, device))
    return out


def _static_inputs(plan: Plan) -> list | None:
    """The plan's input values where every one is a tensor of known dtype and static shape
    (what the fast feed checks below take); None otherwise."""
    inputs = [plan.values[vi] for vi in plan.inputs]
    for v in inputs:
        if v.kind != "tensor" or v.dtype is None or v.shape is None \
                or not all(isinstance(d, int) for d in v.shape):
            return None
    return inputs


def fast_feeds(plan: Plan) -> Callable[[Any], list | None]:
    """check_feeds + feeds_to_device for the common call on the CPU, cheaper: a dict of
    exactly the inputs, each a writable C-contiguous numpy array of its planned dtype and
    static shape, becomes CPU tensors sharing the arrays' memory. The function returns None
    where anything differs (then the general pair runs, and gives the errors)."""
    inputs = _static_inputs(plan)
    if inputs is None:
        return lambda feeds: None
    spec = []
    for v in inputs:
        try:
            dt = np.dtype(v.dtype)
        except TypeError:
            return lambda feeds: None
        if dt not in _FROM_NUMPY:
            return lambda feeds: None
        spec.append((v.name, dt, tuple(v.shape)))
    n, from_numpy = len(spec), torch.from_numpy

    def check(feeds: Any) -> list | None:
        if feeds.__class__ is not dict or len(feeds) != n:
            return None
        out = []
        for name, dt, shape in spec:
            x = feeds.get(name)
            if x.__class__ is not np.ndarray or x.dtype != dt or x.shape != shape:
                return None
            flags = x.flags
            if not (flags.writeable and flags.c_contiguous):
                return None
            out.append(from_numpy(x))
        return out
    return check


def tensor_feeds(plan: Plan) -> Callable[[list], list | None]:
    """For a caller holding the inputs as CPU tensors in the plan's input order (a
    partitioned model's call node, executors/partitioned.py): the list itself where each is a
    plain tensor of its planned dtype and static shape, as check_feeds + feeds_to_device would
    pass it on; None where anything differs (the caller then takes `run`, which gives the
    errors)."""
    inputs = _static_inputs(plan)
    if inputs is None:
        return lambda xs: None
    spec = []
    for v in inputs:
        dt = torch_dtype(v.dtype)
        if dt is None:
            return lambda xs: None
        spec.append((dt, torch.Size(v.shape)))
    n = len(spec)

    def check(xs: list) -> list | None:
        if len(xs) != n:
            return None
        for x, (dt, shape) in zip(xs, spec):
            if x.__class__ is not torch.Tensor or x.dtype != dt or x.shape != shape \
                    or not x.is_cpu:
                return None
        return xs
    return check


def tensor_outputs(plan: Plan, env_out: list[Any], owned: Any = (),
                   owned_keys: frozenset = frozenset()) -> list[Any]:
    """outputs_to_numpy's outputs, every one, in order, left as CPU tensors (the same copies
    where an output shares memory with `owned`, a constant, a held tensor or another)."""
    seen = {_storage(t) for t in owned if isinstance(t, torch.Tensor) and t.is_cpu}
    return [_unshared(x, seen, "cpu", owned_keys) for x in env_out]


def select_outputs(plan: Plan, output_names: Any) -> list[int] | None:
    """Positions in plan.outputs of `output_names` (None: every output, as None), checked
    before anything runs: an unknown or repeated name is an InputError listing the outputs."""
    if output_names is None:
        return None
    names = [plan.values[vi].name for vi in plan.outputs]
    listed = ", ".join(names)
    if isinstance(output_names, (str, bytes)) or not isinstance(output_names, (list, tuple)):
        raise InputError(f"output_names must be a list of output names, got "
                         f"{type(output_names).__name__}; the model's outputs are: {listed}")
    if not output_names:
        raise InputError(f"output_names is empty; name at least one output, or pass None for all: {listed}")
    where = {n: i for i, n in enumerate(names)}
    out: list[int] = []
    for n in output_names:
        if not isinstance(n, str) or n not in where:
            raise InputError(f"unknown output {n!r} in output_names; the model's outputs are: {listed}")
        if where[n] in out:
            raise InputError(f"output {n!r} is named twice in output_names")
        out.append(where[n])
    return out


def pick(items: list[Any], positions: list[int] | None) -> list[Any]:
    """items at `positions` (select_outputs'), in that order; `items` itself for None."""
    return items if positions is None else [items[p] for p in positions]


def outputs_to_numpy(plan: Plan, env_out: list[Any], owned: Any = (),
                     positions: list[int] | None = None,
                     owned_keys: frozenset = frozenset()) -> dict[str, Any]:
    """Outputs as numpy arrays, none sharing memory with `owned` (the feeds and the model's
    constants), with a tensor some kernel returns on every run (kernels._util.held: a
    Constant node's value, an If branch's initializer) or with one another: Identity or
    Reshape of an input or a weight returns a view, and a caller writing into that output
    must not change its feeds, a later output, or what every later run reads. Elements of
    sequence outputs likewise (SequenceConstruct of a feed and a weight). Fresh results are
    not copied. `positions` (select_outputs') picks the outputs to hand over, in that order;
    `env_out` holds every output. `owned_keys`: storage_keys of more owned tensors, taken
    once (an executor's constants: the same tensors every run)."""
    seen = {_storage(t) for t in owned if isinstance(t, torch.Tensor) and t.is_cpu}
    return {plan.values[vi].name: _host(_unshared(x, seen, "cpu", owned_keys))
            for vi, x in zip(pick(plan.outputs, positions), pick(env_out, positions))}


def _host(x: Any) -> Any:
    """to_numpy(x), a plain tensor's numpy() first: numpy() refuses every tensor that
    to_numpy must treat before (bfloat16 and other types numpy lacks, a conj or neg bit, one
    that requires grad, one on another device), and it is the common case's whole cost."""
    if x.__class__ is torch.Tensor:
        try:
            return x.numpy()
        except (TypeError, RuntimeError):
            pass
    return to_numpy(x)


def unshared(outs: list[Any], owned: Any = ()) -> list[Any]:
    """Device outputs (any device) for the caller, as outputs_to_numpy's rule has them: a
    copy where an output shares storage with `owned`, a held tensor or an earlier output."""
    seen = {_storage(t) for t in owned if isinstance(t, torch.Tensor)}
    return [_unshared(x, seen, None) for x in outs]


def _unshared(x: Any, seen: set[int], device_type: str | None = "cpu",
              also: frozenset = frozenset()) -> Any:
    """x, or a copy where it shares storage with `seen`, `also` or a held tensor (adds x's
    to `seen`); only tensors on `device_type` (None: any device). String values (numpy
    object arrays: a Constant's, an initializer's, or a view of one) are always copied:
    they are small and numpy views give no cheap way to tell a fresh one."""
    if isinstance(x, list):
        return [_unshared(e, seen, device_type, also) for e in x]
    if isinstance(x, np.ndarray) and x.dtype == object:
        return x.copy()
    if isinstance(x, torch.Tensor) and x.numel() > 0 \
            and (device_type is None or (x.is_cpu if device_type == "cpu"
                                         else x.device.type == device_type)):
        key = _storage(x)
        if key in seen or key in also or is_held(x):
            return x.clone()
        seen.add(key)
    return x


def storage_keys(tensors: Any) -> frozenset:
    """The storages of the CPU tensors among `tensors`, for outputs_to_numpy's owned_keys."""
    return frozenset(_storage(t) for t in tensors
                     if isinstance(t, torch.Tensor) and t.device.type == "cpu")


def _storage(t: torch.Tensor) -> int:
    return t.untyped_storage().data_ptr()


def constants(graph: Graph, plan: Plan, device: Any) -> dict[int, Any]:
    out = {}
    for v in plan.values:
        if v.is_const:
            out[v.index] = to_torch(graph.initializers[v.name].const, device)
    return out


def merged_steps(plan: Plan) -> list[tuple[int, int, int]]:
    """Every step as (stream, kind, arg), in plan.order.host_order.

    An executor that issues all streams from one thread must use exactly this order: physical
    event ids are reused on the strength of it (passes/sync/event_ids.py), and CUDA binds a wait to
    the latest record issued before it. Raises PlanError if the plan deadlocks.
    """
    steps = plan.streams
    return [(s, steps[s][i].kind, steps[s][i].arg) for s, i in host_order(plan)]


def stream_tables(plan: Plan) -> tuple[list[int], list[tuple[int, ...]]]:
    """Per node: its stream; per node: input value indices with -1 mapped to a None slot.

    The None slot is index len(plan.values): executors keep one extra, always-None entry at
    the end of their value table so the hot loop needs no `if i >= 0` test.
    """
    none_slot = len(plan.values)
    ins = [tuple(i if i >= 0 else none_slot for i in n.inputs) for n in plan.nodes]
    return [n.stream for n in plan.nodes], ins


class Arena:
    """One allocation holding every planned intermediate at its planned offset.

    `place(vi, result)` copies a kernel's result into value vi's fixed view (on the current
    stream) and returns the view; a result that merely *aliases* arena bytes without being
    planned itself is cloned, since those bytes will be reused.
    """

    def __init__(self, plan: Plan, device: torch.device):
        size = max(plan.memory.peak_bytes, 1)
        self.tensor = torch.empty(size, dtype=torch.uint8, device=device)
        self.ptr = self.tensor.data_ptr()
        self.end = self.ptr + size
        self.views: list[torch.Tensor | None] = [None] * (len(plan.values) + 1)
        for v in plan.values:
            if v.buffer < 0:
                continue
            dt = torch_dtype(v.dtype)
            if dt is None:
                continue
            off = plan.memory.buffers[v.buffer].offset
            self.views[v.index] = self.tensor[off:off + v.nbytes].view(dt).reshape(v.shape)

    def aliases(self, x: Any) -> bool:
        if isinstance(x, torch.Tensor):
            return (x.device == self.tensor.device
                    and self.ptr <= x.untyped_storage().data_ptr() < self.end)
        if isinstance(x, list):
            return any(self.aliases(e) for e in x)
        return False

    def place(self, vi: int, r: Any) -> Any:
        """The value to keep for output vi: its arena view (holding r), or r itself."""
        view = self.views[vi]
        if view is not None and isinstance(r, torch.Tensor) and r.shape == view.shape \
                and r.dtype == view.dtype:
            if r.data_ptr() != view.data_ptr():
                view.copy_(r)
            return view
        if self.aliases(r):
            return [e.clone() for e in r] if isinstance(r, list) else r.clone()
        return r
