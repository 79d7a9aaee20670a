"""CompiledModel: what pyge.compile and pyge.load_model return.

Its front door follows the habits users bring from onnxruntime and torch:
    model.run({"x": x})                       dict: output name -> numpy array
    model.run([x])                            feeds as a list, in input order
    model.run(feeds, output_names=["y"])      only these outputs, in this order
    model(feeds)                              the same as run
    model.run(None, feeds), run(["y"], feeds) onnxruntime's call: a list, as onnxruntime gives
    model.get_inputs(), model.get_outputs()   NodeArgs: .name .shape .type, as onnxruntime's
`model.return_torch` (set by pyge.from_torch(..., return_torch=True)) hands outputs over as
torch tensors on the model's device instead of numpy arrays.
"""
from __future__ import annotations

import os
import re
import threading
from collections.abc import Mapping, Sequence  # (isinstance on typing's aliases is 3x slower)
from typing import Any

from . import modelfile
from .errors import InputError, PygeError
from .ir.graph import OPTIONAL, SEQUENCE, Graph
from .options import Options
from .passes.verify.checks import verify_plan
from .plan.plan import LAUNCH, Event, MemoryPlan, Plan
from .profiling import profile_model
from .submodels import STATIC, SubModel, flat_view, is_call, make_parts

# Graph metadata key that pyge.from_torch(..., return_torch=True) writes: it travels with the
# graph through compile, dumps and .pgm files, and makes the model hand over torch tensors.
RETURN_TORCH_KEY = "pyge.return_torch"
# numpy dtype names whose ONNX (and so onnxruntime) element names differ; the rest are equal.
_ONNX_ELEM = {"float32": "float", "float64": "double", "object": "string"}
_UNNAMED = re.compile(r"unk__\d+")


class NodeArg:
    """One input or output of a compiled model, as onnxruntime's NodeArg.

    `.shape` is a list of dims: an int, the symbolic name (a str), or None when unknown; an
    unknown rank, and a sequence or optional value, is [] as in onnxruntime. `.type` is
    onnxruntime's string: "tensor(float)", "seq(tensor(int64))", "optional(tensor(float))".
    """

    __slots__ = ("name", "shape", "type")

    def __init__(self, name: str, shape: list, type: str):  # noqa: A002 - onnxruntime's name
        self.name, self.shape, self.type = name, shape, type

    def __repr__(self) -> str:
        return f"NodeArg(name={self.name!r}, type={self.type!r}, shape={self.shape!r})"


def _dim(d: Any) -> Any:
    # ONNX shape inference names a dim it cannot tell "unk__<n>": that is no user's symbol,
    # and onnxruntime shows such a dim as unknown.
    return None if isinstance(d, str) and _UNNAMED.fullmatch(d) else d


def _type_string(dtype: str | None, kind: str, elem_kind: str | None) -> str:
    elem = f"tensor({_ONNX_ELEM.get(dtype, dtype) if dtype else 'undefined'})"
    if kind == SEQUENCE:
        return f"seq({elem})"
    if kind == OPTIONAL:
        return f"optional({'seq(' + elem + ')' if elem_kind == SEQUENCE else elem})"
    return elem


def feeds_by_name(plan: Plan, inputs: Sequence[Any] | Mapping[str, Any]) -> Mapping[str, Any]:
    """`inputs` as a dict of input name -> value: a dict as it is, a list in input order."""
    if isinstance(inputs, Mapping):
        return inputs
    names = [plan.values[i].name for i in plan.inputs]
    if isinstance(inputs, (str, bytes)) or not isinstance(inputs, (list, tuple)):
        raise InputError(f"feeds must be a dict of input name -> array or a list in input order "
                         f"({', '.join(names)}), got {type(inputs).__name__}")
    if len(inputs) != len(names):
        raise InputError(f"model {plan.graph_name!r} takes {len(names)} input(s) "
                         f"({', '.join(names)}), got a list of {len(inputs)}")
    return dict(zip(names, inputs))


def _is_name_list(x: Any) -> bool:
    return isinstance(x, (list, tuple)) and all(isinstance(n, str) for n in x)


class CompiledModel:
    """A compiled plan plus the graph it was built from, bound to a device.

    A dynamic-shape model (passes/partition/) also holds its parts, `submodels`: `graph` and
    `plan` are then its dynamic root's, whose call nodes run the static sub-models, and the
    model-wide views (streams, events, stream_of, num_streams, memory, profile) read
    `flat_plan`, the parts' plans as one (plan/flatten.py)."""

    def __init__(self, graph: Graph, plan: Plan, device: str, options: Options,
                 timings: list | None = None, submodels: Sequence[SubModel] | None = None):
        self.graph = graph
        self.plan = plan
        self.device = device
        self.options = options
        self.compile_timings = list(timings or [])
        self.return_torch = graph.metadata.get(RETURN_TORCH_KEY) == "true"
        self._parts = list(submodels) if submodels else None
        self._flat = None
        self._executor = None
        self._lock = threading.Lock()

    # -- parts -------------------------------------------------------------------------
    @property
    def submodels(self) -> list[SubModel]:
        """The parts in execution order, root first (submodels.py); a fully static model is
        one static sub-model, itself."""
        if self._parts is None:
            return [SubModel(self.plan.graph_name, STATIC, self.graph, self.plan)]
        return list(self._parts)

    @property
    def partitioned(self) -> bool:
        """Whether the model has a dynamic part (and so its own submodels)."""
        return self._parts is not None

    def _flat_view(self):
        if self._flat is None:
            self._flat = flat_view(self._parts)
        return self._flat

    @property
    def flat_plan(self) -> Plan:
        """Every part's plan as one, with the streams numbered across the parts (for
        reading; a static model's is its plan)."""
        return self._flat_view()[0] if self._parts is not None else self.plan

    # -- running -----------------------------------------------------------------------
    @property
    def executor(self):
        if self._executor is None:
            # Deferred on purpose: executors load torch, which reading a model file or
            # looking at its streams does not need.
            if self._parts is not None:
                from .executors.partitioned import PartitionedExecutor
                calls = {n.attrs["submodel"]: n.name for n in self.graph.nodes if is_call(n)}
                self._executor = PartitionedExecutor(self._parts, self._flat_view()[1], calls,
                                                     self.device, self.options)
            else:
                from .executors import make_executor
                self._executor = make_executor(self.graph, self.plan, self.device, self.options)
        return self._executor

    def run(self, feeds: Mapping[str, Any] | Sequence[Any], output_names: Sequence[str] | None = None,
            **kwargs) -> dict[str, Any] | list[Any]:
        """Run once; returns output name -> numpy array (torch tensors with `return_torch`).

        `feeds`: a dict of input name -> array, or a list in input order. `output_names`:
        only these outputs, in this order (every output is still computed; only these are
        copied out); an unknown name is an InputError listing the outputs. onnxruntime's
        positional call `run(output_names, feeds)`, told apart by its None or list of names
        before a dict, returns a list in `output_names` order as onnxruntime does.
        Concurrent calls on one model are serialised by a lock (one run owns the stream
        workers and, on CUDA, the captured buffers at a time); each caller gets its own results.
        """
        ort_form = isinstance(output_names, Mapping) and (feeds is None or _is_name_list(feeds))
        if ort_form:
            feeds, output_names = output_names, feeds
        elif isinstance(output_names, Mapping):
            raise InputError("run(feeds, output_names): output_names is a dict; pyge's call is "
                             "run(feeds, output_names=[...]), onnxruntime's run(None or [names], feeds)")
        named = feeds_by_name(self.plan, feeds)
        torch_out = self.return_torch and "output_device" not in kwargs
        if torch_out and self.device != "cpu":
            kwargs["output_device"] = self.device       # the executor keeps them on the GPU
        with self._lock:
            out = self.executor.run(named, output_names=output_names, **kwargs)
        if torch_out and self.device == "cpu":
            from .kernels.convert import to_torch       # deferred (torch); no copy of the arrays
            out = {k: to_torch(v, "cpu") for k, v in out.items()}
        return list(out.values()) if ort_form else out

    __call__ = run

    def get_inputs(self) -> list[NodeArg]:
        """The model's inputs in feed order, as onnxruntime's InferenceSession.get_inputs()."""
        return self._node_args(self.plan.inputs, self.graph.inputs)

    def get_outputs(self) -> list[NodeArg]:
        """The model's outputs in result order, as onnxruntime's get_outputs()."""
        return self._node_args(self.plan.outputs, self.graph.outputs)

    def _node_args(self, indices: list[int], values: list) -> list[NodeArg]:
        elem = {v.name: v.elem_kind for v in values}
        out = []
        for i in indices:
            v = self.plan.values[i]
            shape = [] if v.shape is None or v.kind != "tensor" else [_dim(d) for d in v.shape]
            out.append(NodeArg(v.name, shape, _type_string(v.dtype, v.kind, elem.get(v.name))))
        return out

    def profile(self, feeds: Mapping[str, Any], runs: int = 10, warmup: int = 1):
        with self._lock:
            return profile_model(self, feeds, runs=runs, warmup=warmup)

    # -- what the compiler decided -----------------------------------------------------
    def stream_of(self, name: str) -> int:
        """The final stream of node `name`: a root-graph node, a node of a control-flow body
        (its parent's stream), or a source node that fusion merged into another (GE's
        `_datadump_original_op_names` names it); in a dynamic-shape model, of whichever part
        holds it, in the model's stream numbering."""
        for part in self.submodels:
            s = part.local_stream_of(name)
            if s is not None:
                return s + part.stream_offset
        raise KeyError(f"no node named {name!r} in compiled model {self.plan.graph_name!r} "
                       "(nor one fused into another)")

    @property
    def num_streams(self) -> int:
        return self.flat_plan.num_streams

    @property
    def streams(self) -> list[list[str]]:
        """Per stream, its operator nodes' names in execution order."""
        plan = self.flat_plan
        return [[plan.nodes[s.arg].name for s in steps if s.kind == LAUNCH]
                for steps in plan.streams]

    @property
    def events(self) -> list[Event]:
        return list(self.flat_plan.events)

    @property
    def num_event_pairs(self) -> int:
        """Send/Recv pairs: len(model.events)."""
        return len(self.flat_plan.events)

    @property
    def num_physical_events(self) -> int:
        """Physical event ids the pairs use (ids are reused where lifetimes do not overlap)."""
        return self.flat_plan.num_physical_events

    @property
    def custom_streams(self) -> list[int]:
        return list(self.flat_plan.custom_streams)

    @property
    def memory(self) -> MemoryPlan:
        return self.flat_plan.memory

    def verify(self) -> None:
        """Raise VerificationError if a dependency or buffer reuse is unordered across
        streams (in any part)."""
        for part in self.submodels:
            verify_plan(part.plan)

    def save(self, path) -> None:
        modelfile.save_model(self, path)

    def __repr__(self) -> str:
        flat = self.flat_plan
        parts = f" in {len(self._parts)} parts" if self._parts is not None else ""
        return (f"<CompiledModel {self.plan.graph_name!r} on {self.device}: {len(flat.nodes)} nodes{parts}, "
                f"{self.num_streams} streams, {len(flat.events)} events>")


def load_model(path: str | os.PathLike, device: str | None = None) -> CompiledModel:
    """Read a .pgm file (pyge/modelfile.py) into a CompiledModel, without running any
    compiler pass; `device` overrides the one it was compiled for."""
    graph, plan, dev, options, statics = modelfile.read_model(path, device)
    parts = make_parts(graph, plan, statics) if statics is not None else None
    return CompiledModel(graph, plan, dev, options, submodels=parts)


__all__ = ["CompiledModel", "NodeArg", "feeds_by_name", "load_model", "PygeError"]
