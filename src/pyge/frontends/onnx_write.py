"""The common cases of writing an attribute or a tensor into an ONNX message in place, with
the bytes onnx.helper.make_attribute and onnx.numpy_helper.from_array would give.

graph_to_proto (onnx_proto.py) writes every node and initializer of a graph, for type
inference on every compile: the generic helpers inspect each value's type through the
numbers ABCs and build a message that is then copied in, which on a 100,000-node graph
with 43,000 small weights was a third of a second. Here a plain int, float, str or list of
ints, and an array of a fixed-size numeric dtype in native little-endian order, are
written directly into the message's own field; anything else answers False, and the
caller takes the generic path.
"""
from __future__ import annotations

import sys

import numpy as np
from onnx import AttributeProto, TensorProto, helper

_INT, _FLOAT, _STRING, _INTS = (AttributeProto.INT, AttributeProto.FLOAT, AttributeProto.STRING,
                                AttributeProto.INTS)
# numpy dtype -> TensorProto data type, for the dtypes from_array writes as plain raw bytes
_RAW = {np.dtype(t): helper.np_dtype_to_tensor_dtype(np.dtype(t))
        for t in ("float32", "float64", "float16", "int8", "int16", "int32", "int64",
                  "uint8", "uint16", "uint32", "uint64", "bool")}
_LITTLE = sys.byteorder == "little"


def add_attribute(attributes, key: str, value) -> bool:
    """Append attribute `key` = `value` to the repeated field `attributes` if `value` is a
    plain int, float, str or non-empty list of ints; False (nothing added) otherwise."""
    t = type(value)
    if t is list:
        if not value or any(type(x) is not int for x in value):
            return False
        a = attributes.add()
        a.name = key
        a.ints.extend(value)
        a.type = _INTS
    elif t is int:
        a = attributes.add()
        a.name = key
        a.i = value
        a.type = _INT
    elif t is float:
        a = attributes.add()
        a.name = key
        a.f = value
        a.type = _FLOAT
    elif t is str:
        a = attributes.add()
        a.name = key
        a.s = value.encode("utf-8")
        a.type = _STRING
    else:
        return False
    return True


def raw_tensor(name: str, arr: np.ndarray) -> TensorProto | None:
    """numpy_helper.from_array(arr, name) for a numeric array in native little-endian order
    (its raw bytes, C order); None for any other array."""
    tp = TensorProto()
    return tp if fill_raw_tensor(tp, name, arr) else None


def fill_raw_tensor(tp: TensorProto, name: str, arr: np.ndarray) -> bool:
    """raw_tensor(name, arr), written into the empty `tp`; False (tp left empty) for an
    array raw_tensor would refuse."""
    code = _RAW.get(arr.dtype)
    if code is None or not _LITTLE or arr.dtype.byteorder == ">":
        return False
    tp.dims.extend(arr.shape)
    if name:
        tp.name = name
    tp.raw_data = arr.tobytes()
    tp.data_type = code
    return True
