"""Quantization kernels (kernels/tensor_quant.py) beyond the onnx node cases: random cases
against onnxruntime and the onnx ReferenceEvaluator, exact ties (round half to even),
saturation, the layouts (per tensor, per axis, blocked), and the compile-time refusals.

Integer results must match exactly. Where onnxruntime and the spec part ways, the spec
(and its reference implementation) wins; those places are noted at the test.
"""
from __future__ import annotations

import re

import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper, numpy_helper
from onnx.reference import ReferenceEvaluator

from pyge.errors import GraphError
from pyge.frontends import load_onnx
from pyge.kernels.runtime import compile_reference, run_reference

ort = pytest.importorskip("onnxruntime")


def _model(op, inputs, attrs=None, opset=21, n_out=1, consts=()):
    node = helper.make_node(op, [n if inputs[n] is not None else "" for n in inputs],
                            [f"y{i}" for i in range(n_out)], name="q0", **(attrs or {}))
    g_in, inits = [], []
    for n, a in inputs.items():
        if a is None:
            continue
        a = np.asarray(a)
        if n in consts:
            inits.append(numpy_helper.from_array(a, n))
        else:
            g_in.append(helper.make_tensor_value_info(
                n, helper.np_dtype_to_tensor_dtype(a.dtype), a.shape))
    outs = [onnx.ValueInfoProto(name=f"y{i}") for i in range(n_out)]
    m = helper.make_model(helper.make_graph([node], "t", g_in, outs, inits),
                          opset_imports=[helper.make_opsetid("", opset)])
    m.ir_version = 9
    return m


def _run(op, inputs, attrs=None, opset=21, n_out=1, consts=(), refs=("ort", "onnx")):
    """pyge's outputs, checked exactly against each reference in refs."""
    m = _model(op, inputs, attrs, opset, n_out, consts)
    feeds = {n: np.asarray(a) for n, a in inputs.items() if a is not None and n not in consts}
    g = load_onnx(m)
    out = run_reference(g, feeds)
    got = [out[v.name] for v in g.outputs]
    for ref in refs:
        if ref == "ort":
            so = ort.SessionOptions()
            so.log_severity_level = 3
            exp = ort.InferenceSession(m.SerializeToString(), so,
                                       providers=["CPUExecutionProvider"]).run(None, feeds)
        else:
            with np.errstate(all="ignore"):
                exp = ReferenceEvaluator(m).run(None, feeds)
        for a, b in zip(got, exp):
            assert a.shape == b.shape and a.dtype == b.dtype, (ref, a.shape, a.dtype, b.shape,
                                                               b.dtype)
            np.testing.assert_array_equal(a, b, err_msg=ref)
    return got


def _scale_full(scale, shape, axis, block):
    from onnx.reference.ops._quant_utils import reshape_input
    return np.broadcast_to(reshape_input(scale, shape, axis, block), shape).astype(np.float64)


# ---------------------------------------------------------------------------------------
# QuantizeLinear / DequantizeLinear


_LAYOUTS = [(10, "tensor", None, 0), (13, "axis", 1, 0), (13, "axis", -1, 0),
            (19, "axis", 0, 0), (21, "block", 1, 2), (21, "block", -1, 4), (23, "block", 2, 3),
            (21, "tensor", None, 0)]


@pytest.mark.parametrize("opset,mode,axis,block,qt", [
    (*lay, qt) for lay in _LAYOUTS for qt in ("uint8", "int8", "int16", "uint16")
    if lay[0] >= 21 or qt in ("uint8", "int8")])   # 16-bit types since opset 21
def test_quantize_dequantize_float32_vs_ort_and_reference(opset, mode, axis, block, qt):
    rng = np.random.default_rng(abs(hash((opset, mode, axis, block, qt))) % 2**32)
    shape = (2, 5, 6, 4)
    attrs = {} if axis is None else {"axis": axis}
    if mode == "tensor":
        sshape = ()
    elif mode == "axis":
        sshape = (shape[axis],)
    else:
        sshape = list(shape)
        sshape[axis] = -(-shape[axis] // block)
        sshape = tuple(sshape)
        attrs["block_size"] = block
    info = np.iinfo(qt)
    scale = rng.uniform(0.01, 0.2, sshape).astype(np.float32)
    zp = rng.integers(info.min // 4, info.max // 4 + 1, sshape).astype(qt)
    k = rng.integers(info.min // 2, info.max // 2, shape)
    # exact ties k + 0.5 (rounded to even), integers, and other values, some saturating
    frac = rng.choice([0.5, 0.0, 0.3, -0.7], shape)
    x = ((k + frac) * _scale_full(scale, shape, 1 if axis is None else axis, block)).astype(np.float32)
    x.flat[:4] = [1e5, -1e5, 0.0, 3.5]
    for z in (zp, None):
        if z is None and qt != "uint8":
            continue  # no zero point: the output is uint8
        _run("QuantizeLinear", {"x": x, "s": scale, "z": z}, attrs, opset, consts=("s", "z"))
    xq = rng.integers(info.min, info.max + 1, shape).astype(qt)
    refs = ("ort", "onnx") if opset >= 19 else ("ort",)  # the reference starts at 19
    _run("DequantizeLinear", {"x": xq, "s": scale, "z": zp}, attrs, opset, consts=("s",),
         refs=refs)


def test_quantize_rounds_half_to_even_and_saturates():
    x = np.array([0.5, 1.5, 2.5, -0.5, -1.5, -2.5, 254.5, 255.5, 300, -3, np.inf, -np.inf],
                 np.float32)
    s = np.array(1.0, np.float32)
    got = _run("QuantizeLinear", {"x": x, "s": s}, None, 13, refs=("ort",))[0]
    np.testing.assert_array_equal(got, [0, 2, 2, 0, 0, 0, 254, 255, 255, 0, 255, 0])
    z = np.array(-128, np.int8)
    got = _run("QuantizeLinear", {"x": x, "s": s, "z": z}, None, 13, refs=("ort",))[0]
    np.testing.assert_array_equal(got, [-128, -126, -126, -128, -128, -128, 126, 127, 127,
                                        -128, 127, -128])


@pytest.mark.parametrize("opset", [19, 21])
@pytest.mark.parametrize("ft", ["float16", "bfloat16"])
def test_quantize_half_types_divide_in_the_scale_type(opset, ft):
    # The spec: "the type of y_scale determines the precision of the division". The
    # quotient is rounded to float16/bfloat16 before round-half-even; onnxruntime divides
    # in float32 instead, so only the reference is compared here.
    import ml_dtypes
    dt = np.float16 if ft == "float16" else ml_dtypes.bfloat16
    rng = np.random.default_rng(3)
    s = np.array([0.05, 0.1, 0.3], dt)
    x = (rng.integers(-200, 200, (4, 3)) * np.float32(0.5) * s.astype(np.float32)).astype(dt)
    z = np.array([3, -7, 0], np.int8)
    _run("QuantizeLinear", {"x": x, "s": s, "z": z}, {"axis": 1}, opset, consts=("s", "z"),
         refs=("onnx",))
    xq = rng.integers(-128, 128, (4, 3)).astype(np.int8)
    _run("DequantizeLinear", {"x": xq, "s": s, "z": z}, {"axis": 1}, opset, consts=("s",),
         refs=("onnx",))


def test_dequantize_int32_and_output_dtype():
    rng = np.random.default_rng(4)
    x = rng.integers(-2**31, 2**31, (3, 5)).astype(np.int32)
    s = np.array(0.001, np.float32)
    _run("DequantizeLinear", {"x": x, "s": s}, None, 13, refs=("ort",))
    xq = rng.integers(0, 256, (3, 5)).astype(np.uint8)
    got = _run("DequantizeLinear", {"x": xq, "s": s, "z": np.array(7, np.uint8)},
               {"output_dtype": TensorProto.FLOAT16}, 23, refs=("onnx",))[0]
    assert got.dtype == np.float16


def test_quantize_output_dtype_without_zero_point():
    x = np.linspace(-1000, 1000, 11, dtype=np.float32)
    got = _run("QuantizeLinear", {"x": x, "s": np.array(0.25, np.float32)},
               {"output_dtype": TensorProto.INT16}, 21)[0]
    assert got.dtype == np.int16 and got.min() == -4000 and got.max() == 4000


@pytest.mark.parametrize("op,attrs,opset,inputs,msg", [
    ("QuantizeLinear", {"output_dtype": TensorProto.FLOAT8E4M3FN}, 21, {},
     "output_dtype=17 (float8e4m3fn) is not supported"),
    ("QuantizeLinear", {"output_dtype": TensorProto.INT8}, 21, {"z": np.array(0, np.uint8)},
     "output_dtype int8 differs from y_zero_point's type uint8"),
    ("QuantizeLinear", {"precision": TensorProto.INT32}, 23, {}, "precision=6 (int32)"),
    ("QuantizeLinear", {"block_size": -2}, 21, {}, "block_size=-2 must be positive"),
    ("DequantizeLinear", {"output_dtype": TensorProto.DOUBLE}, 23, {"x": np.zeros(3, np.uint8)},
     "output_dtype=11 (double) is not supported"),
    ("DequantizeLinear", {}, 13, {"x": np.zeros(3, np.int16)},
     "x (input 0) of type int16 is not supported"),
])
def test_quantize_refusals_name_node_and_attribute(op, attrs, opset, inputs, msg):
    ins = {"x": np.zeros(3, np.float32), "s": np.array(1.0, np.float32), **inputs}
    m = _model(op, ins, attrs, opset)
    with pytest.raises(GraphError, match=re.escape(f"node 'q0' ({op}): ") + ".*" + re.escape(msg)):
        compile_reference(load_onnx(m))


def test_quantize_blocked_layout_mismatch_is_a_run_error():
    from pyge.errors import ExecutionError
    x = np.zeros((2, 8), np.float32)
    s = np.ones((2, 3), np.float32)   # 8 / block 2 needs 4 blocks, not 3
    m = _model("QuantizeLinear", {"x": x, "s": s}, {"axis": 1, "block_size": 2}, 21)
    with pytest.raises(ExecutionError, match="block_size=2"):
        run_reference(load_onnx(m), {"x": x, "s": s})


# ---------------------------------------------------------------------------------------
# DynamicQuantizeLinear


@pytest.mark.parametrize("case", ["normal", "positive", "negative", "zeros", "constant", "wide",
                                  "empty", "ties"])
def test_dynamic_quantize_linear_vs_ort_and_reference(case):
    rng = np.random.default_rng(5)
    x = {"normal": rng.standard_normal((3, 17)), "positive": rng.uniform(1, 5, (40,)),
         "negative": -rng.uniform(1, 5, (2, 2, 5)), "zeros": np.zeros((4, 4)),
         "constant": np.full((3, 3), 2.5), "wide": rng.standard_normal((8, 8)) * 1e4,
         "empty": np.zeros((0, 3)),
         # max - min = 255: scale 1, every x.5 an exact tie
         "ties": np.arange(-100, 155.5, 0.5)}[case].astype(np.float32)
    # An all-zero x has no range: scale 1 as onnxruntime has it (the reference gives 1/255;
    # the spec's function body 0/0). The reference takes np.max, undefined for an empty x.
    got = _run("DynamicQuantizeLinear", {"x": x}, None, 11, n_out=3,
               refs=("ort",) if case in ("empty", "zeros") else ("ort", "onnx"))
    assert got[1].shape == () and got[2].shape == () and got[0].dtype == np.uint8
