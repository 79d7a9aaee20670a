"""Convolution, pooling and LRN geometry (pads, auto_pad, strides, dilations, ceil_mode,
groups, fused activations) against onnx's ReferenceEvaluator and onnxruntime, through the
one-node harness of node_checks.py."""
from __future__ import annotations

import numpy as np
import pytest
from onnx.reference import ReferenceEvaluator

from pyge.frontends import load_onnx

from .node_checks import CONV_ATOL, RTOL, _model, _pyge, check

RNG = np.random.default_rng(0)


def f32(*shape):
    return RNG.standard_normal(shape).astype(np.float32)

# ---------------------------------------------------------------------------------------
# convolution and pooling geometry


@pytest.mark.parametrize("auto_pad", ["SAME_UPPER", "SAME_LOWER", "VALID"])
@pytest.mark.parametrize("stride", [1, 2])
def test_conv_auto_pad(auto_pad, stride):
    check("Conv", {"x": f32(1, 3, 9, 8), "w": f32(4, 3, 3, 2)},
          {"auto_pad": auto_pad, "strides": [stride, stride]}, 13, ref="ort", atol=CONV_ATOL)


@pytest.mark.parametrize("shape,w,attrs", [
    ((1, 4, 10, 11), (6, 2, 3, 3), {"group": 2, "dilations": [2, 1], "pads": [0, 1, 2, 0]}),
    ((2, 3, 12), (5, 3, 4), {"strides": [3], "pads": [2, 1]}),
    ((1, 2, 5, 6, 7), (3, 2, 2, 3, 2), {"strides": [1, 2, 2], "pads": [1, 0, 1, 0, 1, 1]}),
    ((1, 6, 8, 8), (6, 1, 3, 3), {"group": 6, "pads": [1, 1, 1, 1]}),
    ((1, 8, 9, 9), (4, 8, 1, 1), {"strides": [2, 2]}),  # strided 1x1 fast path
])
def test_conv_shapes(shape, w, attrs):
    check("Conv", {"x": f32(*shape), "w": f32(*w), "b": f32(w[0])}, attrs, 13, consts=("w", "b"),
          atol=CONV_ATOL)


@pytest.mark.parametrize("with_z", [False, True])
@pytest.mark.parametrize("act,params", [(None, []), ("Relu", []), ("LeakyRelu", [0.2]),
                                        ("Clip", [-0.5, 0.5]), ("Sigmoid", []),
                                        ("HardSigmoid", [0.3, 0.4])])
def test_fused_conv(act, params, with_z):
    # onnxruntime's com.microsoft.FusedConv: activation(Conv(X, W, B) + Z).
    attrs = {"pads": [1, 1, 1, 1], **({"activation": act} if act else {}),
             **({"activation_params": params} if params else {})}
    inputs = {"x": f32(1, 8, 10, 10), "w": f32(16, 8, 3, 3), "b": f32(16)}
    if with_z:
        inputs["z"] = f32(1, 16, 10, 10)
    check("FusedConv", inputs, attrs, 13, consts=("w", "b"), ref="ort", domain="com.microsoft",
          atol=CONV_ATOL)


def test_conv_weight_cache_follows_the_weight():
    # The packed-weight cache is keyed on the weight tensor itself: a new weight each run
    # (a graph input) must never reuse the previous packing.
    x = f32(1, 4, 6, 6)
    m = _model("Conv", {"x": x, "w": f32(5, 4, 3, 3)}, {"pads": [1, 1, 1, 1]}, 13)
    g = load_onnx(m)
    from pyge.executors.interpreter import compile_reference
    from pyge.kernels.convert import to_numpy, to_torch
    run = compile_reference(g)
    for _ in range(3):
        w = f32(5, 4, 3, 3)
        got = to_numpy(run([to_torch(x), to_torch(w)], {})[0])
        exp = ReferenceEvaluator(m).run(None, {"x": x, "w": w})[0]
        np.testing.assert_allclose(got, exp, rtol=RTOL, atol=CONV_ATOL)


@pytest.mark.parametrize("op,attrs", [("Conv", {"auto_pad": "SAME"}), ("Resize", {"mode": "area"}),
                                      ("Gelu", {"approximate": "fast"}),
                                      ("Pad", {"mode": "mirror"})])
def test_bad_attributes_are_graph_errors(op, attrs):
    from pyge.errors import GraphError
    from pyge.executors.interpreter import compile_reference
    inputs = {"x": f32(1, 2, 4, 4)}
    if op == "Conv":
        inputs["w"] = f32(2, 2, 1, 1)
    if op == "Pad":
        inputs["p"] = np.zeros(8, np.int64)
    with pytest.raises(GraphError, match=op):
        compile_reference(load_onnx(_model(op, inputs, attrs, 20)))


@pytest.mark.parametrize("attrs", [
    {"strides": [2, 3], "pads": [1, 1, 1, 1], "output_padding": [1, 2]},
    {"strides": [2, 2], "output_shape": [10, 9]},
    {"strides": [2, 2], "auto_pad": "SAME_UPPER"},
    {"strides": [3, 2], "pads": [0, 2, 1, 0], "dilations": [2, 1]},
    {"strides": [1, 1], "group": 2},
])
def test_conv_transpose(attrs):
    bias = f32(6 if attrs.get("group") else 3)
    check("ConvTranspose", {"x": f32(1, 4, 4, 4), "w": f32(4, 3, 3, 3), "b": bias}, attrs, 13,
          ref="ort", atol=CONV_ATOL)


@pytest.mark.parametrize("attrs", [
    {"kernel_shape": [3, 3], "strides": [2, 2], "ceil_mode": 1},
    {"kernel_shape": [3, 3], "strides": [2, 2], "pads": [0, 0, 1, 1]},
    {"kernel_shape": [2, 2], "strides": [2, 2], "pads": [1, 1, 1, 1], "ceil_mode": 1},
    {"kernel_shape": [3, 2], "dilations": [2, 1], "pads": [2, 1, 2, 0]},
    {"kernel_shape": [5, 5], "pads": [4, 4, 4, 4]},  # pads larger than torch allows
    {"kernel_shape": [3, 3], "auto_pad": "SAME_LOWER", "strides": [2, 2]},
])
def test_max_pool_with_indices(attrs):
    check("MaxPool", {"x": f32(2, 3, 9, 8)}, attrs, 12, n_out=2, ref="ort")


def test_max_pool_storage_order():
    # onnxruntime: the ReferenceEvaluator (onnx 1.23) gets column-major indices wrong.
    check("MaxPool", {"x": f32(1, 2, 5, 6)}, {"kernel_shape": [2, 2], "storage_order": 1}, 12,
          n_out=2, ref="ort")


@pytest.mark.parametrize("include", [0, 1])
@pytest.mark.parametrize("attrs", [
    {"kernel_shape": [3, 3], "strides": [2, 2], "ceil_mode": 1, "pads": [1, 1, 1, 1]},
    {"kernel_shape": [3, 3], "strides": [2, 2], "pads": [0, 0, 1, 1]},
    {"kernel_shape": [2, 3], "pads": [1, 0, 1, 2]},
    {"kernel_shape": [3, 3], "auto_pad": "SAME_UPPER", "strides": [2, 2]},
])
def test_average_pool(attrs, include):
    check("AveragePool", {"x": f32(2, 3, 9, 8)}, {**attrs, "count_include_pad": include}, 12,
          ref="ort")


def test_average_pool_dilated_3d():
    check("AveragePool", {"x": f32(1, 2, 6, 7, 8)},
          {"kernel_shape": [2, 2, 3], "dilations": [2, 1, 2], "pads": [1, 0, 1, 1, 0, 1]}, 19)


@pytest.mark.parametrize("attrs", [{"kernel_shape": [2, 1, 2], "auto_pad": "SAME_UPPER"},
                                   {"kernel_shape": [2, 3, 3], "strides": [2, 2, 1],
                                    "pads": [1, 1, 1, 1, 2, 2], "count_include_pad": 1}])
def test_average_pool_3d_float16(attrs):
    # torch's CPU avg_pool3d has no float16 kernel; onnxruntime pools float16 in 3-D.
    check("AveragePool", {"x": f32(1, 2, 5, 6, 6).astype(np.float16)}, attrs, 19, ref="ort",
          atol=2e-3)


@pytest.mark.parametrize("size", [3, 4, 5])
def test_lrn(size):
    # Checked against the spec's formula in numpy: the ReferenceEvaluator's LRN (onnx 1.23)
    # departs from the spec's channel window, and onnxruntime accepts odd sizes only.
    x = f32(2, 7, 4, 5)
    alpha, beta, bias = 0.01, 0.6, 2.0
    m = _model("LRN", {"x": x}, {"size": size, "alpha": alpha, "beta": beta, "bias": bias}, 13)
    sq = np.zeros_like(x)
    for c in range(7):
        lo, hi = max(0, c - (size - 1) // 2), min(6, c + size - 1 - (size - 1) // 2)
        sq[:, c] = (x[:, lo:hi + 1] ** 2).sum(1)
    exp = x / (bias + alpha / size * sq) ** beta
    np.testing.assert_allclose(_pyge(m, {"x": x})[0], exp, rtol=RTOL, atol=1e-6)
