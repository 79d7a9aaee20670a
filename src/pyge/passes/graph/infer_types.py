"""The infer_types pass: ONNX type and shape inference on the compiler's graph, and its errors.

Front ends run inference when they load a model, but a graph built by hand (GraphBuilder,
pyge.from_torch) may leave node outputs without a dtype or a shape. Inference here is the
ONNX reference's (onnx.shape_inference with data propagation), run on the graph turned into
an ONNX model without its large weights; newly known types are copied back. An operator
ONNX does not know (other domains) leaves its outputs as they were.

What inference refuses is an error (GraphTypeError naming the node), as onnxruntime
refuses such a model when it loads it: inputs of types the operator does not take
(Add(float32, int64), Relu of strings, Where on a float condition), the wrong number of
inputs, dims that cannot broadcast or multiply, a missing required attribute or one out of
range (an axis, a repeated perm), a Split that does not add up, a node whose output type
contradicts a declared one. Inference runs with onnx's strict mode and type checks, and three
kinds of its complaints are not errors, because onnxruntime runs such models:
- a declared intermediate shape that differs from the inferred one (onnxruntime merges
  leniently, and so does pyge: the declared shape is kept);
- missing information: an input without a type, or with an element type pyge cannot
  write back to ONNX (float8 and 4-bit types);
- a failure inside the function body ONNX expands for an operator (its own nodes have no
  names; MeanVarianceNormalization at opset 13 is one).
"""
from __future__ import annotations

import logging
import re

import onnx

from ...errors import GraphTypeError
from ...frontends.onnx_proto import graph_to_model, read_type
from ...ir.graph import Graph
from ...ir.value import Value

log = logging.getLogger(__name__)

# One node in an onnx inference message: "(op_type:Add, node name: add): " (no name inside
# an expanded function body). The innermost header of a line names the culprit.
_HEADER = re.compile(r"\(op_type:([^,()]*)(?:, node name: ([^()]*))?\): ")
_TAG = re.compile(r"^(?:\[\w+\]\s*)+")
_LENIENT = ("Inferred shape and existing shape differ",       # onnxruntime merges leniently
            "expected to have type but instead is null",       # missing information
            "Element type of input")                           # ... "unknown"


def infer_types(graph: Graph) -> int:
    """Fill in the dtype and shape of root-graph node outputs that lack one, where ONNX
    inference knows them; raise GraphTypeError where it refuses a node (module doc).
    Returns how many values it changed."""
    try:
        mp = graph_to_model(graph, weights="shapes")      # large weights' data is not needed
    except Exception as err:  # noqa: BLE001 - e.g. over protobuf's 2 GiB: nothing to check with
        log.info("graph %r cannot be written for shape inference: %s", graph.name, err)
        return 0
    mp.ir_version = max(mp.ir_version, 4)   # below 4 ONNX types an initializer only as an input
    try:
        inferred = onnx.shape_inference.infer_shapes(mp, check_type=True, strict_mode=True,
                                                     data_prop=True)
    except Exception as err:  # noqa: BLE001 - InferenceError, or onnx failing on its own input
        _raise_refusal(graph, str(err))
        inferred = _lenient(mp, graph)
        if inferred is None:
            return 0
    return _copy_back(graph, inferred)


def _lenient(mp: onnx.ModelProto, graph: Graph) -> onnx.ModelProto | None:
    """Inference as best effort, for a graph whose only complaints are not errors."""
    try:
        return onnx.shape_inference.infer_shapes(mp, check_type=False, strict_mode=False,
                                                 data_prop=True)
    except Exception as err:  # noqa: BLE001 - best effort
        log.info("shape inference on graph %r failed: %s", graph.name, err)
        return None


def _copy_back(graph: Graph, inferred: onnx.ModelProto) -> int:
    infos = {vi.name: vi for vi in list(inferred.graph.value_info) + list(inferred.graph.output)}
    reads: dict[bytes, tuple[tuple[str, object], ...] | None] = {}
    changed = 0
    for n in graph._nodes:
        for o in n._outputs:
            vi = infos.get(o.name)
            if vi is not None and (o.dtype is None or o.shape is None):
                before = (o.dtype, o.shape)
                tp = vi.type
                got = reads.get(tp.SerializeToString())     # _read_type_cached's hit, inline
                if got:
                    for f, x in got:
                        setattr(o, f, x)
                else:
                    _read_type_cached(o, tp, reads)
                changed += (o.dtype, o.shape) != before
    return changed


_UNSET = object()
_TYPE_FIELDS = ("kind", "dtype", "shape", "elem_kind")


def _read_type_cached(v, tp: onnx.TypeProto, reads: dict) -> None:
    """read_type(v, tp), reading each distinct type once: large graphs repeat a few types
    over thousands of values. What read_type assigns is learnt on a scratch value whose
    fields start unset (it leaves some alone, such as the shape of a type without one); a
    type it refuses is read again on `v` itself, for the error naming `v`."""
    key = tp.SerializeToString()
    got = reads.get(key, _UNSET)
    if got is _UNSET:
        scratch = Value("_")
        for f in _TYPE_FIELDS:
            setattr(scratch, f, _UNSET)
        try:
            read_type(scratch, tp)
            got = tuple((f, getattr(scratch, f)) for f in _TYPE_FIELDS
                        if getattr(scratch, f) is not _UNSET)
        except Exception:  # noqa: BLE001 - refused: read on v below, which raises naming it
            got = None
        reads[key] = got
    if got is None:
        read_type(v, tp)
        return
    for f, x in got:
        setattr(v, f, x)


def refusals(text: str) -> list[tuple[str, str, str]]:
    """(op type, node name, message) for each complaint of an onnx inference error message
    that is an error (see the module doc for those that are not)."""
    out = []
    for line in text.splitlines():
        heads = list(_HEADER.finditer(line))
        if not heads:
            continue                          # no node to blame (e.g. an unknown element type)
        last = heads[-1]
        if last.group(2) is None:
            continue                          # inside an expanded function body: onnx's own
        msg = _TAG.sub("", line[last.end():]).strip()
        if any(k in msg for k in _LENIENT):
            continue
        out.append((last.group(1), last.group(2), msg))
    return out


def _raise_refusal(graph: Graph, text: str) -> None:
    found = refusals(text)
    if not found:
        log.info("shape inference on graph %r: %s", graph.name, " ".join(text.split()))
        return
    op, name, msg = found[0]
    more = ""
    if len(found) > 1:
        others = ", ".join(repr(n) for _, n, _ in found[1:4])
        more = f" (and {len(found) - 1} more: {others}{', ...' if len(found) > 4 else ''})"
    raise GraphTypeError(f"node {name!r} ({op}): {msg or 'refused by type inference'}{more}",
                         node=name)
