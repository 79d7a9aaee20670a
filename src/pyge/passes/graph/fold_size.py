"""The bytes a constant node's outputs will take, known before its kernel runs.

fold_constants asks this first, so that a node asking for gigabytes is left to run time
instead of being computed at compile time. The answer comes from ONNX's own inference for
the one node, given its constant inputs' types and (for the small ones that can hold
shapes: ConstantOfShape's shape, Reshape's target, Range's bounds) their values, which is
more than whole-graph inference knew when it ran; failing that, from the output types
already on the graph. Unknown (None) when neither gives every output a dtype and static
dims.
"""
from __future__ import annotations

import logging
import math

import onnx
from onnx import defs, helper, numpy_helper

from ...frontends.onnx_proto import dtype_to_onnx, keeps_shape_data, node_to_proto, read_type
from ...ir.graph import Node, Value
from ...plan.plan import itemsize

log = logging.getLogger(__name__)

OBJECT_ITEM = 8      # a string element is counted as its pointer (strings are small here)


def output_bytes(n: Node, opsets: dict[str, int]) -> int | None:
    """Total bytes of `n`'s outputs, or None when some output's size is unknown."""
    if n.op_type == "Constant" and not n.domain and len(n.outputs) == 1:
        return _array_bytes(n)            # the value is the attribute, in memory already
    types = _node_types(n, opsets)
    total = 0
    for o in n.outputs:
        dtype, shape = types.get(o.name, (o.dtype, o.shape))
        size = _bytes(dtype, shape)
        if size is None:
            size = _bytes(o.dtype, o.shape)
        if size is None:
            return None
        total += size
    return total


def _bytes(dtype: str | None, shape: tuple | None) -> int | None:
    if dtype is None or shape is None or not all(isinstance(d, int) and d >= 0 for d in shape):
        return None
    return math.prod(shape) * (OBJECT_ITEM if dtype == "object" else itemsize(dtype))


def _array_bytes(n: Node) -> int | None:
    for key in ("value", "sparse_value"):
        a = n.attrs.get(key)
        if a is not None and hasattr(a, "nbytes"):
            return int(a.nbytes)
    for key in ("value_float", "value_int", "value_string"):
        if key in n.attrs:
            return 8
    for key in ("value_floats", "value_ints", "value_strings"):
        if key in n.attrs:
            return 8 * len(n.attrs[key])
    return None


def _node_types(n: Node, opsets: dict[str, int]) -> dict[str, tuple]:
    """ONNX inference on `n` alone with its constant inputs: output name -> (dtype, shape).
    Empty when ONNX has no schema for the node or its inference fails."""
    domain = n.domain if n.domain not in ("", "ai.onnx") else ""
    try:
        schema = defs.get_schema(n.op_type, opsets.get(domain, 1), domain)
        proto = node_to_proto(n, weights="shapes")
        types, data = {}, {}
        for v in n.inputs:
            if v is None or v.name in types:
                continue
            types[v.name] = helper.make_tensor_type_proto(dtype_to_onnx(v.dtype), list(v.const.shape))
            if v.const.dtype != object and keeps_shape_data(v.const.dtype, v.const.size):
                data[v.name] = numpy_helper.from_array(v.const, v.name)
        opset_ids = [helper.make_opsetid(d, ver) for d, ver in opsets.items()]
        out = onnx.shape_inference.infer_node_outputs(schema, proto, types, data, opset_imports=opset_ids)
    except Exception as err:  # noqa: BLE001 - no schema, or inference refused: not known
        log.debug("no node inference for %s: %s", n.name, err)
        return {}
    known = {}
    for name, tp in out.items():
        v = Value(name)
        read_type(v, tp)
        known[name] = (v.dtype, v.shape)
    return known
