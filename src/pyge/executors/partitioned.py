"""Running a dynamic-shape model: the dynamic root, whose call nodes run static sub-models.

Each static sub-model gets the executor a static model of its plan would get
(make_executor: one thread per busy stream on the CPU, CUDA streams and a CUDA graph of its
own on a GPU); the root gets one too, built with a kernel per call node (`calls`) that runs
the sub-model's executor, so that a call node is a kernel like any other whichever way the
root's executor runs its steps. On CUDA the root always runs eagerly (its shapes change
from run to run); it issues everything on its streams, and a sub-model's executor forks its
streams from the stream current when the call node runs (the root's) and joins them back
into it before it returns, as CudaExecutor does for any caller: the boundary is ordered by
those events. On the CPU a sub-model's stream threads have finished when its run returns.

Outputs handed to the root stay valid while the root reads them: on the CPU they are fresh
tensors whose ownership passes to the root (the sub-model's executor keeps no reference;
inputs of the planned dtypes and shapes go in, and the outputs come back, as tensors, through
run_tensors, with outputs_to_numpy's copies where an output shares memory with a constant,
an input or another output);
on CUDA a replayed graph writes its static outputs again at the next replay, so the call
takes copies (CudaExecutor.run with output_device, copy=True), made on the root's stream;
an eager sub-model hands its fresh results over, recorded for the root's stream.
"""
from __future__ import annotations

import threading
from typing import Any, Mapping

import numpy as np
import torch

from ..errors import ExecutionError, InputError
from ..options import parse_options
from . import make_executor
from .symbols import StaticFeeds, SymbolBinder, describe_shape


class _RunState:
    """What the call kernels of one run share: the profiling hooks, if any."""
    __slots__ = ("hooks",)

    def __init__(self):
        self.hooks = None


class _PartHooks:
    """A part's hooks in the model's numbering (plan/flatten.FlatMaps); call nodes are left
    out (their sub-model's nodes are recorded instead)."""

    __slots__ = ("_h", "_nodes", "_s", "_e", "_rec", "_wait")

    def __init__(self, hooks, nodes: list[int], stream_offset: int, event_offset: int):
        self._h, self._nodes, self._s, self._e = hooks, nodes, stream_offset, event_offset
        self._rec = getattr(hooks, "record", None)
        self._wait = getattr(hooks, "wait", None)

    def before(self, ni: int, stream: int) -> None:
        gi = self._nodes[ni]
        if gi >= 0:
            self._h.before(gi, stream + self._s)

    def after(self, ni: int, stream: int) -> None:
        gi = self._nodes[ni]
        if gi >= 0:
            self._h.after(gi, stream + self._s)

    def record(self, ei: int, stream: int) -> None:
        if self._rec is not None:
            self._rec(ei + self._e, stream + self._s)

    def wait(self, ei: int, stream: int) -> None:
        if self._wait is not None:
            self._wait(ei + self._e, stream + self._s)


def _from_host(x: Any) -> Any:
    """A CPU executor's numpy output as a tensor again, sharing its memory (strides kept)."""
    if isinstance(x, np.ndarray):
        if x.dtype == object:
            return x
        if str(x.dtype) == "bfloat16":
            return torch.from_numpy(x.view(np.uint16)).view(torch.bfloat16)
        return torch.from_numpy(x)
    if isinstance(x, list):
        return [_from_host(e) for e in x]
    return x


class CallKernel:
    """The kernel of one call node: inputs -> the sub-model's outputs, as tensors."""

    def __init__(self, part, call_name: str, executor, device: str, state: _RunState,
                 maps_index: int, maps):
        self.part, self.call, self.executor, self.state = part, call_name, executor, state
        plan = part.plan
        self.in_names = [plan.values[i].name for i in plan.inputs]
        self.in_shapes = [plan.values[i].shape for i in plan.inputs]
        self.out_names = [plan.values[i].name for i in plan.outputs]
        self.readers = _first_readers(plan)
        self.on_cuda = str(device).startswith("cuda")
        self.kw = {"output_device": str(device)} if self.on_cuda else {}
        # CPU executors take the root's tensors and give theirs back as they are, where the
        # inputs are what the sub-model's plan says (run_tensors; else the numpy round trip)
        self.run_tensors = None if self.on_cuda else getattr(executor, "run_tensors", None)
        self.hook_args = (maps.nodes[maps_index], maps.stream_offset[maps_index],
                          maps.event_offset[maps_index])

    def __call__(self, inputs: list) -> list:
        self._check(inputs)
        hooks = self.state.hooks
        sub_hooks = _PartHooks(hooks, *self.hook_args) if hooks is not None else None
        try:
            if self.run_tensors is not None:
                got = self.run_tensors(inputs, hooks=sub_hooks)
                if got is not None:
                    return got
            out = self.executor.run(dict(zip(self.in_names, inputs)), hooks=sub_hooks, **self.kw)
        except ExecutionError as err:
            raise ExecutionError(f"{err.node} in static sub-model {self.part.name!r}", err.cause) from err
        except InputError as err:
            raise InputError(f"static sub-model {self.part.name!r} (node {self.call!r}): {err}") from err
        if self.on_cuda:
            self.part.capture_error = getattr(self.executor, "capture_error", None)
            return [out[n] for n in self.out_names]
        return [_from_host(out[n]) for n in self.out_names]

    def _check(self, inputs: list) -> None:
        """A value the dynamic part made must have the shape the sub-model was compiled for."""
        for name, want, x in zip(self.in_names, self.in_shapes, inputs):
            got = tuple(x.shape) if isinstance(x, (torch.Tensor, np.ndarray)) else None
            if got is not None and want is not None and got != tuple(want):
                raise InputError(f"static sub-model {self.part.name!r}: input {name!r} (read by node "
                                 f"{self.readers.get(name, '?')!r}) has shape {list(got)}, but the "
                                 f"sub-model was compiled for {describe_shape(want)}")


def _first_readers(plan) -> dict[str, str]:
    out: dict[str, str] = {}
    for pn in plan.nodes:
        for vi in pn.inputs:
            if vi >= 0:
                out.setdefault(plan.values[vi].name, pn.name)
    return out


class PartitionedExecutor:
    """Runs a partitioned model (`parts`: model.submodels, root first) on `device`."""

    name = "partitioned"
    mode = "eager"      # the root is never captured (profiling reads this)

    def __init__(self, parts: list, maps, call_names: dict[str, str], device: str = "cpu",
                 options=None):
        """`maps`: plan/flatten.FlatMaps of the parts; `call_names`: sub-model name -> the
        root's node that calls it."""
        self.parts, self.device = parts, device
        self._state = _RunState()
        self._lock = threading.Lock()
        root = parts[0]
        self.subs = {p.name: make_executor(p.graph, p.plan, device, options) for p in parts[1:]}
        index = {p.name: k for k, p in enumerate(parts)}
        calls = {p.name: CallKernel(p, call_names[p.name], self.subs[p.name], device, self._state,
                                    index[p.name], maps) for p in parts[1:]}
        self.calls = calls          # sub-model name -> the kernel of the node that calls it
        root_opts = parse_options(options)
        if str(device).startswith("cuda"):
            root_opts = root_opts.merged({"pyge.cudaGraph": "false"})
        self.root = make_executor(root.graph, root.plan, device, root_opts, calls=calls)
        self._root_hooks = (maps.nodes[0], 0, 0)
        self.symbols = SymbolBinder(root.graph, root.plan)
        fed = {root.plan.values[vi].name for vi in root.plan.inputs}
        self.static_feeds = StaticFeeds([(n, shape, k.part.name, k.readers.get(n, "?"))
                                         for k in calls.values()
                                         for n, shape in zip(k.in_names, k.in_shapes) if n in fed])

    @property
    def streams(self) -> list:
        """The CUDA streams of every part, in the model's stream numbering (CUDA only)."""
        out = list(getattr(self.root, "streams", []))
        for p in self.parts[1:]:
            out += list(getattr(self.subs[p.name], "streams", []))
        return out

    def run(self, feeds: Mapping[str, Any], hooks=None, output_names=None, **kwargs) -> dict[str, Any]:
        self.static_feeds.check(feeds)
        self.symbols.check(feeds)
        with self._lock:
            self._state.hooks = hooks
            try:
                root_hooks = _PartHooks(hooks, *self._root_hooks) if hooks is not None else None
                return self.root.run(feeds, hooks=root_hooks, output_names=output_names, **kwargs)
            finally:
                self._state.hooks = None

    def close(self) -> None:
        for ex in [self.root, *self.subs.values()]:
            close = getattr(ex, "close", None)
            if close is not None:
                close()


__all__ = ["PartitionedExecutor", "CallKernel"]
