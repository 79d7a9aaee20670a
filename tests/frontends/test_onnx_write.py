"""frontends/onnx_write.py: the in-place writers give exactly the bytes of onnx's helpers."""
from __future__ import annotations

import numpy as np
import onnx
import pytest
from onnx import helper, numpy_helper

from pyge.frontends.onnx_write import add_attribute, raw_tensor

WRITTEN = [0, -3, 2**62, -(2**63), 1.5, -0.0, 1e-30, float("inf"), "", "relu", "ünï",
           [1], [0, -1, 2**40], [3, 2, 1, 0]]
GENERIC = [True, np.int64(3), np.float32(2.5), [], [True, False], [1, 2.0], ["a", "b"],
           [1.0, 2.0], b"raw", np.array([1, 2]), None]


@pytest.mark.parametrize("value", WRITTEN, ids=repr)
def test_written_attributes_are_make_attributes_bytes(value):
    node = onnx.NodeProto()
    assert add_attribute(node.attribute, "k", value)
    assert node.attribute[0].SerializeToString() == helper.make_attribute("k", value).SerializeToString()


@pytest.mark.parametrize("value", GENERIC, ids=repr)
def test_other_attributes_are_left_to_the_generic_path(value):
    node = onnx.NodeProto()
    assert not add_attribute(node.attribute, "k", value)
    assert len(node.attribute) == 0


ARRAYS = [np.arange(6, dtype=d).reshape(2, 3) for d in
          ("float32", "float64", "float16", "int8", "int16", "int32", "int64", "uint8",
           "uint16", "uint32", "uint64")] + [
    np.array([True, False]), np.zeros((0, 4), np.float32), np.array(3.5, np.float32),
    np.arange(12, dtype=np.float32).reshape(3, 4).T]            # not C-contiguous


@pytest.mark.parametrize("arr", ARRAYS, ids=lambda a: f"{a.dtype}{a.shape}")
@pytest.mark.parametrize("name", ["w", ""])
def test_raw_tensors_are_from_arrays_bytes(arr, name):
    got = raw_tensor(name, arr)
    assert got is not None
    assert got.SerializeToString() == numpy_helper.from_array(arr, name).SerializeToString()


@pytest.mark.parametrize("arr", [np.array(["a", "b"], dtype=object), np.array([1, 2], dtype=">i4"),
                                 np.array([1 + 2j], np.complex64)], ids=str)
def test_other_arrays_are_left_to_from_array(arr):
    assert raw_tensor("w", arr) is None


@pytest.mark.parametrize("weights", [True, "shapes"])
def test_a_whole_model_is_written_as_by_the_generic_helpers(monkeypatch, weights):
    import pyge
    from pyge.frontends import onnx_proto

    b = pyge.GraphBuilder("g")
    x = b.input("x", "float32", (4, 8))
    w = b.initializer("w", np.random.default_rng(0).standard_normal((8, 8)).astype(np.float32))
    t = b.op("Transpose", [b.op("MatMul", [x, w], name="mm")], name="t", perm=[1, 0])
    s = b.op("Softmax", [t], name="sm", axis=-1)
    r = b.op("ReduceMean", [s], name="mu", axes=[-1], keepdims=1)
    p = b.op("LeakyRelu", [r], name="lr", alpha=0.25)
    shape = b.constant(np.array([2, 2], np.int64), "shape")
    b.output(b.op("Reshape", [p, shape], name="rs"), "y")
    g = b.build()
    g.metadata["k"] = "v"
    fast = onnx_proto.graph_to_model(g, weights=weights).SerializeToString()
    # the model as onnx.helper.make_model builds it around graph_to_proto's graph
    mp = helper.make_model(onnx_proto.graph_to_proto(g, weights=weights), producer_name="pyge",
                           opset_imports=[helper.make_opsetid(d, v)
                                          for d, v in sorted(g.opset_imports.items())])
    mp.ir_version = g.ir_version
    p = mp.metadata_props.add()
    p.key, p.value = "k", "v"
    assert fast == mp.SerializeToString()
    monkeypatch.setattr(onnx_proto, "add_attribute", lambda *a: False)
    monkeypatch.setattr(onnx_proto, "fill_raw_tensor", lambda *a: False)
    assert fast == onnx_proto.graph_to_model(g, weights=weights).SerializeToString()
