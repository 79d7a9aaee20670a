"""onnxruntime's quantized contrib ops (com.microsoft; kernels/tensor_quant_ms*.py) against
onnxruntime, their oracle (no onnx node cases exist for them): random cases per op, exact
for integer outputs (float outputs too: the same float32 operations), refusals, and a
whole CNN quantized by onnxruntime's tool in the QOperator format.
"""
from __future__ import annotations

import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper, numpy_helper

from pyge.errors import GraphError
from pyge.frontends import load_onnx
from pyge.executors.interpreter import compile_reference, run_reference
from pyge.testing import one_node_model

ort = pytest.importorskip("onnxruntime")
MS = "com.microsoft"


def _model(op, inputs, attrs=None, consts=()):
    return one_node_model(op, inputs, attrs, outputs=["y"], consts=consts, domain=MS,
                          name="q0", ir_version=9)


def _run(op, inputs, attrs=None, consts=()):
    m = _model(op, inputs, attrs, consts)
    feeds = {n: np.asarray(a) for n, a in inputs.items() if a is not None and n not in consts}
    so = ort.SessionOptions()
    so.log_severity_level = 4
    exp = ort.InferenceSession(m.SerializeToString(), so,
                               providers=["CPUExecutionProvider"]).run(None, feeds)[0]
    g = load_onnx(m)
    got = run_reference(g, feeds)[g.outputs[0].name]
    assert got.shape == exp.shape and got.dtype == exp.dtype, (got.shape, got.dtype, exp.shape,
                                                               exp.dtype)
    np.testing.assert_array_equal(got, exp, err_msg=op)
    return got


def _q(rng, shape, t):
    lo, hi = (0, 255) if t == np.uint8 else (-128, 127)
    return rng.integers(lo, hi + 1, shape).astype(t)


def _zp(rng, t):
    return t(rng.integers(0, 100))


_T = [np.uint8, np.int8]


@pytest.mark.parametrize("op", ["QLinearAdd", "QLinearMul"])
@pytest.mark.parametrize("t", _T)
@pytest.mark.parametrize("b_shape", [(3, 37), (37,), (1,)])
def test_binary_vs_ort(op, t, b_shape):
    rng = np.random.default_rng(len(op) + len(b_shape))
    for _ in range(4):
        _run(op, {"a": _q(rng, (3, 37), t), "sa": np.float32(rng.uniform(0.001, 0.1)),
                  "za": _zp(rng, t), "b": _q(rng, b_shape, t),
                  "sb": np.float32(rng.uniform(0.001, 0.1)), "zb": _zp(rng, t),
                  "sc": np.float32(rng.uniform(0.005, 0.2)), "zc": _zp(rng, t)})


@pytest.mark.parametrize("op,attrs", [("QLinearSigmoid", {}), ("QLinearLeakyRelu", {"alpha": 0.13}),
                                      ("QLinearLeakyRelu", {})])
@pytest.mark.parametrize("t", _T)
def test_lookup_tables_vs_ort(op, attrs, t):
    # every 8-bit value, fine output scales (the table's rounding is what is tested)
    rng = np.random.default_rng(11)
    x = np.arange(256).astype(np.uint8).view(t).reshape(4, 64)
    for _ in range(8):
        _run(op, {"x": x, "sx": np.float32(rng.uniform(0.001, 0.2)), "zx": _zp(rng, t),
                  "sy": np.float32(rng.uniform(0.0001, 0.01)), "zy": _zp(rng, t)}, attrs,
             consts=("sx", "zx", "sy", "zy"))


@pytest.mark.parametrize("t", _T)
@pytest.mark.parametrize("last", [0, 1])
def test_global_average_pool_vs_ort(t, last):
    rng = np.random.default_rng(12)
    for _ in range(4):
        _run("QLinearGlobalAveragePool",
             {"x": _q(rng, (2, 5, 7, 6), t), "sx": np.float32(rng.uniform(0.001, 0.2)),
              "zx": _zp(rng, t), "sy": np.float32(rng.uniform(0.001, 0.2)), "zy": _zp(rng, t)},
             {"channels_last": last})


@pytest.mark.parametrize("t", _T)
def test_concat_vs_ort(t):
    rng = np.random.default_rng(13)
    sy, zy = np.float32(0.05), _zp(rng, t)
    _run("QLinearConcat", {"sy": sy, "zy": zy, "x1": _q(rng, (2, 3, 4), t), "s1": sy, "z1": zy,
                           "x2": _q(rng, (2, 5, 4), t), "s2": np.float32(0.013), "z2": _zp(rng, t),
                           "x3": _q(rng, (2, 1, 4), t), "s3": np.float32(0.2), "z3": zy},
         {"axis": 1}, consts=("sy", "zy", "s1", "z1", "s2", "z2", "s3", "z3"))


_POOLS = [dict(kernel_shape=[3, 3]), dict(kernel_shape=[3, 3], pads=[1, 1, 1, 1], strides=[2, 2]),
          dict(kernel_shape=[3, 3], pads=[1, 1, 1, 1], count_include_pad=1),
          dict(kernel_shape=[2, 3], strides=[2, 2], ceil_mode=1),
          dict(kernel_shape=[3, 3], strides=[2, 2], auto_pad="SAME_UPPER"),
          dict(kernel_shape=[3, 3], strides=[2, 2], auto_pad="SAME_LOWER", count_include_pad=1),
          dict(kernel_shape=[3, 3], channels_last=1, pads=[0, 1, 1, 0]),
          dict(kernel_shape=[3], pads=[1, 2], strides=[2]),
          dict(kernel_shape=[2, 2, 2], pads=[1, 0, 1, 0, 1, 0])]


@pytest.mark.parametrize("attrs", _POOLS)
def test_average_pool_vs_ort(attrs):
    rng = np.random.default_rng(14)
    for t in _T:
        nd = len(attrs["kernel_shape"])
        _run("QLinearAveragePool",
             {"x": _q(rng, (2, 5) + (9, 8, 7)[:nd], t), "sx": np.float32(rng.uniform(0.001, 0.2)),
              "zx": _zp(rng, t), "sy": np.float32(rng.uniform(0.001, 0.02)), "zy": _zp(rng, t)},
             attrs)


@pytest.mark.parametrize("ta,tb", [(0, 0), (1, 0), (0, 1), (1, 1)])
@pytest.mark.parametrize("quantized_out", [True, False])
@pytest.mark.parametrize("per_column", [False, True])
def test_qgemm_vs_ort(ta, tb, quantized_out, per_column):
    rng = np.random.default_rng(15 + ta + 2 * tb)
    m, k, n = 5, 33, 7
    b_t = np.int8 if tb else np.uint8
    ins = {"A": _q(rng, (k, m) if ta else (m, k), np.uint8), "sa": np.float32(0.02),
           "za": np.uint8(rng.integers(0, 100)), "B": _q(rng, (n, k) if tb else (k, n), b_t),
           "sb": rng.uniform(0.001, 0.02, n).astype(np.float32) if per_column
           else np.float32(0.01),
           "zb": _q(rng, (n,), b_t) if per_column else b_t(3),
           "C": rng.integers(-1000, 1000, (n,)).astype(np.int32)}
    if quantized_out:
        ins.update({"sy": np.float32(rng.uniform(0.5, 3)), "zy": np.uint8(rng.integers(0, 100))})
    _run("QGemm", ins, {"transA": ta, "transB": tb, "alpha": 0.7}, consts=("B", "sb", "zb"))


@pytest.mark.parametrize("b_t", _T)
@pytest.mark.parametrize("per_column", [False, True])
def test_float_output_matmuls_vs_ort(b_t, per_column):
    rng = np.random.default_rng(16)
    b = _q(rng, (40, 6), b_t)
    sb = rng.uniform(0.001, 0.02, 6).astype(np.float32) if per_column else np.float32(0.01)
    zb = _q(rng, (6,), b_t) if per_column else b_t(1)
    bias = rng.standard_normal(6).astype(np.float32)
    for bi in (bias, None):
        _run("DynamicQuantizeMatMul", {"A": rng.standard_normal((2, 3, 40)).astype(np.float32),
                                       "B": b, "sb": sb, "zb": zb, "bias": bi},
             consts=("B", "sb", "zb", "bias"))
        _run("MatMulIntegerToFloat", {"A": _q(rng, (2, 3, 40), np.uint8), "B": b,
                                      "sa": np.float32(0.03), "sb": sb, "za": np.uint8(5),
                                      "zb": zb, "bias": bi}, consts=("B", "sb", "zb", "bias"))


@pytest.mark.parametrize("t", [np.uint8, np.int8, np.uint16, np.int16])
@pytest.mark.parametrize("axis", [None, 0, 1])
def test_ms_quantize_dequantize_vs_ort(t, axis):
    rng = np.random.default_rng(17)
    x = rng.standard_normal((3, 4, 5)).astype(np.float32) * 3
    n = x.shape[axis] if axis is not None else 1
    s = rng.uniform(0.005, 0.05, n).astype(np.float32) if axis is not None else np.float32(0.02)
    z = rng.integers(0, 100, n).astype(t) if axis is not None else t(7)
    attrs = {"axis": axis} if axis is not None else {}
    q = _run("QuantizeLinear", {"x": x, "s": s, "z": z}, attrs)
    _run("DequantizeLinear", {"x": q, "s": s, "z": z}, attrs)


@pytest.mark.parametrize("op,inputs,attrs,msg", [
    ("QLinearAveragePool", {"x": np.zeros((1, 1, 4, 4), np.uint8), "sx": np.float32(1),
                            "zx": np.uint8(0), "sy": np.float32(1), "zy": np.uint8(0)},
     {"kernel_shape": [2, 2], "dilations": [2, 2]}, "dilations"),
    ("QLinearAveragePool", {"x": np.zeros((1, 1, 4, 4), np.uint8), "sx": np.float32(1),
                            "zx": np.uint8(0), "sy": np.float32(1), "zy": np.uint8(0)},
     {}, "kernel_shape"),
    ("QLinearAdd", {"a": np.zeros(3, np.int32), "sa": np.float32(1), "za": np.int32(0),
                    "b": np.zeros(3, np.int32), "sb": np.float32(1), "zb": np.int32(0),
                    "sc": np.float32(1), "zc": np.int32(0)}, {}, "int32"),
])
def test_refusals_name_node_and_attribute(op, inputs, attrs, msg):
    g = load_onnx(_model(op, inputs, attrs))
    with pytest.raises(GraphError, match=rf"'q0' \({op}\).*{msg}"):
        compile_reference(g)


# ---------------------------------------------------------------------------------------
# A whole CNN quantized by onnxruntime's tool (QOperator format)


def _float_cnn(path, rng):
    def w(name, *shape):
        return numpy_helper.from_array((rng.standard_normal(shape) * 0.3).astype(np.float32), name)
    inits = [w("w1", 8, 3, 3, 3), w("b1", 8), w("w2", 8, 8, 3, 3), w("b2", 8),
             w("w3", 8, 8, 1, 1), w("b3", 8), w("wg", 16, 10), w("bg", 10)]
    nodes = [
        helper.make_node("Conv", ["x", "w1", "b1"], ["c1"], pads=[1, 1, 1, 1]),
        helper.make_node("Relu", ["c1"], ["r1"]),
        helper.make_node("Conv", ["r1", "w2", "b2"], ["c2"], pads=[1, 1, 1, 1]),
        helper.make_node("Sigmoid", ["c2"], ["s2"]),
        helper.make_node("Conv", ["r1", "w3", "b3"], ["c3"]),
        helper.make_node("LeakyRelu", ["c3"], ["l3"], alpha=0.1),
        helper.make_node("Add", ["s2", "l3"], ["a"]),
        helper.make_node("Mul", ["a", "r1"], ["mu"]),
        helper.make_node("AveragePool", ["mu"], ["ap"], kernel_shape=[2, 2], strides=[2, 2]),
        helper.make_node("GlobalAveragePool", ["ap"], ["p1"]),
        helper.make_node("GlobalAveragePool", ["r1"], ["p2"]),
        helper.make_node("Concat", ["p1", "p2"], ["cat"], axis=1),
        helper.make_node("Flatten", ["cat"], ["f"]),
        helper.make_node("Gemm", ["f", "wg", "bg"], ["y"]),
    ]
    g = helper.make_graph(nodes, "cnn", [helper.make_tensor_value_info("x", TensorProto.FLOAT,
                                                                       [2, 3, 12, 12])],
                          [helper.make_tensor_value_info("y", TensorProto.FLOAT, [2, 10])], inits)
    m = helper.make_model(g, opset_imports=[helper.make_opsetid("", 17)])
    m.ir_version = 9
    onnx.save(m, path)


@pytest.mark.parametrize("act", ["u8", "s8"])
def test_qoperator_cnn_matches_onnxruntime(act, tmp_path):
    quant = pytest.importorskip("onnxruntime.quantization")
    import pyge
    rng = np.random.default_rng(21)
    f32, q = str(tmp_path / "f.onnx"), str(tmp_path / "q.onnx")
    _float_cnn(f32, rng)

    class Reader(quant.CalibrationDataReader):
        def __init__(self):
            self.it = iter([{"x": rng.standard_normal((2, 3, 12, 12)).astype(np.float32)}
                            for _ in range(3)])

        def get_next(self):
            return next(self.it, None)

    qt = quant.QuantType.QUInt8 if act == "u8" else quant.QuantType.QInt8
    quant.quantize_static(f32, q, Reader(), quant_format=quant.QuantFormat.QOperator,
                          activation_type=qt, weight_type=quant.QuantType.QInt8)
    ops = {(n.domain, n.op_type) for n in onnx.load(q).graph.node}
    for op in ("QLinearAdd", "QLinearMul", "QLinearGlobalAveragePool", "QLinearConcat",
               "QLinearSigmoid", "QLinearLeakyRelu", "QLinearAveragePool", "QGemm"):
        assert (MS, op) in ops, (op, sorted(ops))
    so = ort.SessionOptions()
    so.log_severity_level = 3
    sess = ort.InferenceSession(q, so, providers=["CPUExecutionProvider"])
    model = pyge.compile(pyge.load_onnx(q))
    for _ in range(3):
        feeds = {"x": rng.standard_normal((2, 3, 12, 12)).astype(np.float32)}
        exp = sess.run(None, feeds)[0]
        got = list(model.run(feeds).values())[0]
        np.testing.assert_array_equal(got, exp)


@pytest.mark.parametrize("t", _T)
@pytest.mark.parametrize("opset,axis", [(13, -1), (13, 1), (11, 1), (12, -1)])
def test_softmax_vs_ort(t, opset, axis):
    rng = np.random.default_rng(18)
    lo, hi = (0, 255) if t == np.uint8 else (-128, 127)
    for _ in range(3):
        _run("QLinearSoftmax", {"x": rng.integers(lo, hi + 1, (3, 5, 17)).astype(t),
                                "sx": np.float32(rng.uniform(0.01, 0.3)), "zx": _zp(rng, t),
                                "sy": np.float32(1 / 256), "zy": t(lo)},
             {"opset": opset, "axis": axis}, consts=("sx", "zx", "sy", "zy"))
