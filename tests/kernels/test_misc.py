"""kernels/tensor_misc.py: BitCast against numpy's view (and onnxruntime where it has
the op), and its refusals."""
from __future__ import annotations

import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper

from pyge.errors import GraphError
from pyge.frontends import load_onnx
from pyge.kernels.runtime import run_reference

RNG = np.random.default_rng(3)


def _model(op, inputs, attrs, opset, n_out=1):
    ins = [helper.make_tensor_value_info(n, helper.np_dtype_to_tensor_dtype(a.dtype), a.shape)
           for n, a in inputs.items()]
    node = helper.make_node(op, list(inputs), [f"y{i}" for i in range(n_out)], **attrs)
    g = helper.make_graph([node], "t", ins,
                          [onnx.ValueInfoProto(name=f"y{i}") for i in range(n_out)])
    m = helper.make_model(g, opset_imports=[helper.make_opsetid("", opset)])
    m.ir_version = 10
    return m


def _run(m, feeds):
    g = load_onnx(m)
    out = run_reference(g, feeds)
    return [out[v.name] for v in g.outputs]


@pytest.mark.parametrize("src,to,npdt", [
    (np.float32, TensorProto.UINT32, np.uint32), (np.uint64, TensorProto.DOUBLE, np.float64),
    (np.int16, TensorProto.FLOAT16, np.float16), (np.float16, TensorProto.UINT16, np.uint16),
    (np.complex64, TensorProto.INT64, np.int64), (np.uint8, TensorProto.INT8, np.int8),
    (np.int64, TensorProto.COMPLEX64, np.complex64)])
def test_bitcast_matches_numpy_view(src, to, npdt):
    x = RNG.integers(0, 255, (3, 4, 2 * np.dtype(src).itemsize)).astype(np.uint8).view(src)
    got = _run(_model("BitCast", {"x": x}, {"to": to}, 26), {"x": x})[0]
    assert got.dtype == npdt and got.shape == x.shape
    assert got.tobytes() == x.view(npdt).tobytes()
    ort = pytest.importorskip("onnxruntime")
    m = _model("BitCast", {"x": x}, {"to": to}, 26)
    try:
        sess = ort.InferenceSession(m.SerializeToString(), providers=["CPUExecutionProvider"])
    except Exception:  # noqa: BLE001 - a type pair onnxruntime has no kernel for
        return
    exp = sess.run(None, {"x": x})[0]
    assert exp.dtype == got.dtype and exp.tobytes() == got.tobytes()


def test_bitcast_refuses_another_width():
    x = np.zeros((2,), np.float32)
    with pytest.raises(GraphError, match=r"\(BitCast\): attribute to=11 .* differ in bit width"):
        _run(_model("BitCast", {"x": x}, {"to": TensorProto.DOUBLE}, 26), {"x": x})
    with pytest.raises(GraphError, match=r"\(BitCast\): attribute to=8 \(string\)"):
        _run(_model("BitCast", {"x": x}, {"to": TensorProto.STRING}, 26), {"x": x})
