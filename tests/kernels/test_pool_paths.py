"""Pooling fast paths give exactly what the plain paths give.

- MaxPool without indices runs separably (nn_pool._separable_max) on NCHW input, on padded
  windows, and on large channels-last outputs. Max is exact, so the values must be
  bit-identical to torch's pooling of the -inf-padded input, NaN included, in every
  geometry ONNX allows (asymmetric pads, SAME_*, ceil mode, dilation), and the output keeps
  the input's layout.
- AveragePool windows that torch cannot pad are summed by torch's pooling with divisor 1.
- GlobalAveragePool of channels-last input gives every identical channel the same mean.
All three are checked against onnxruntime on whole models too (test_light_models.py).
"""
from __future__ import annotations

import math

import numpy as np
import onnx
import pytest
import torch
import torch.nn.functional as F
from hypothesis import given, settings
from hypothesis import strategies as st
from onnx import helper

from pyge.frontends import load_onnx
from pyge.kernels import nn_pool
from pyge.executors.interpreter import compile_reference


def _runner(op, attrs, shape, opset=18):
    node = helper.make_node(op, ["x"], ["y"], **attrs)
    g = helper.make_graph([node], "t", [helper.make_tensor_value_info("x", onnx.TensorProto.FLOAT, shape)],
                          [onnx.ValueInfoProto(name="y")])
    m = helper.make_model(g, opset_imports=[helper.make_opsetid("", opset)])
    m.ir_version = 8
    run = compile_reference(load_onnx(m))
    return lambda x: run([x], {})[0]


def _pool_attrs(attrs) -> nn_pool._Attrs:
    class Ctx:
        @staticmethod
        def attr(key, default=None):
            return attrs.get(key, default)
    return nn_pool._Attrs(Ctx())


def _plain_max(x, attrs):
    """torch's max_pool2d on the input padded with -inf to ONNX's geometry."""
    a = _pool_attrs(attrs)
    in_sp = tuple(x.shape[2:])
    out, pb, _ = nn_pool._geometry(a, in_sp)
    pads = nn_pool._fpad(nn_pool._explicit_pads(a, in_sp, out, pb))
    return F.max_pool2d(F.pad(x, pads, value=-math.inf), a.k, a.s, 0, a.d, False)


def _max_attrs(k, s, d, pads, ceil, auto_pad):
    attrs = {"kernel_shape": list(k), "strides": list(s), "dilations": list(d), "ceil_mode": ceil}
    if auto_pad:
        attrs["auto_pad"] = auto_pad
    else:
        attrs["pads"] = list(pads)
    return attrs


@settings(max_examples=150, deadline=None)
@given(st.data())
def test_separable_max_equals_plain(data):
    k = [data.draw(st.integers(1, 4)) for _ in range(2)]
    s = [data.draw(st.integers(1, 3)) for _ in range(2)]
    d = [data.draw(st.integers(1, 2)) for _ in range(2)]
    pads = [data.draw(st.integers(0, k[i % 2] - 1)) for i in range(4)]
    auto_pad = data.draw(st.sampled_from([None, None, "SAME_UPPER", "SAME_LOWER", "VALID"]))
    ceil = data.draw(st.integers(0, 1)) if auto_pad is None else 0
    h = data.draw(st.integers((k[0] - 1) * d[0] + 1, 12))
    w = data.draw(st.integers((k[1] - 1) * d[1] + 1, 12))
    c = data.draw(st.integers(1, 5))
    cl = data.draw(st.booleans())
    attrs = _max_attrs(k, s, d, pads, ceil, auto_pad)
    x = torch.from_numpy(np.random.default_rng(data.draw(st.integers(0, 99))).standard_normal(
        (2, c, h, w)).astype(np.float32))
    if data.draw(st.booleans()):
        x[0, 0, 0, 0] = math.nan
    if cl:
        x = x.contiguous(memory_format=torch.channels_last)
    a = _pool_attrs(attrs)
    out, pb, _ = nn_pool._geometry(a, (h, w))
    got = nn_pool._separable_max(x, a, out, pb)
    exp = _plain_max(x, attrs)
    assert got.shape == exp.shape
    assert torch.equal(torch.nan_to_num(got, nan=7.0), torch.nan_to_num(exp, nan=7.0))
    assert torch.isnan(got).equal(torch.isnan(exp))
    if cl and c > 1:
        assert got.is_contiguous(memory_format=torch.channels_last)


@pytest.mark.parametrize("shape,attrs", [
    ((1, 24, 112, 112), {"kernel_shape": [3, 3], "strides": [2, 2], "pads": [1, 1, 1, 1]}),
    ((1, 96, 109, 109), {"kernel_shape": [3, 3], "strides": [2, 2], "ceil_mode": 1}),
    ((1, 64, 27, 27), {"kernel_shape": [3, 3], "strides": [2, 2], "pads": [0, 0, 1, 1]}),
    ((1, 32, 13, 13), {"kernel_shape": [3, 3], "pads": [1, 1, 1, 1]}),   # small: torch's kernel
])
@pytest.mark.parametrize("cl", [False, True])
def test_max_pool_kernel_paths(shape, attrs, cl, monkeypatch):
    """The registered kernel, whichever path it picks, equals the plain one and keeps the
    layout; forcing each path gives the same values."""
    x = torch.randn(shape)
    if cl:
        x = x.contiguous(memory_format=torch.channels_last)
    exp = _plain_max(x, attrs)
    got = _runner("MaxPool", attrs, list(shape))(x)
    assert torch.equal(got, exp)
    if cl:
        assert got.is_contiguous(memory_format=torch.channels_last)
    for forced in (False, True):
        monkeypatch.setattr(nn_pool, "_use_separable", lambda *a, f=forced: f)
        assert torch.equal(_runner("MaxPool", attrs, list(shape))(x), exp)


def test_separable_rule():
    out_small, out_big = [13, 13], [56, 56]
    cl = torch.empty(1, 8, 4, 4).contiguous(memory_format=torch.channels_last)
    assert nn_pool._use_separable(torch.empty(1, 8, 4, 4), out_small, None)      # NCHW: always
    assert nn_pool._use_separable(cl, out_small, ([0, 1, 0, 1], [0, 0]))         # padding avoided
    assert not nn_pool._use_separable(cl, out_small, None)                       # torch wins
    assert nn_pool._use_separable(cl, out_big, None)
    assert not nn_pool._use_separable(torch.empty(1, 8, 4), [2], None)           # 1-D: torch
    assert not nn_pool._use_separable(torch.empty(1, 8, 4, 4, dtype=torch.int32), out_small, None)
    assert not nn_pool._use_separable(torch.empty(1, 8, 4, 4, device="meta"), out_big, None)  # not CPU


@pytest.mark.parametrize("include", [0, 1])
@pytest.mark.parametrize("cl", [False, True])
@pytest.mark.parametrize("shape,attrs", [
    ((1, 32, 6, 6), {"kernel_shape": [7, 7], "pads": [0, 0, 1, 1]}),          # googlenet's last pool
    ((2, 3, 9, 8), {"kernel_shape": [3, 3], "strides": [2, 2], "pads": [0, 0, 1, 1]}),
    ((2, 3, 9, 8), {"kernel_shape": [2, 3], "pads": [1, 0, 1, 2], "ceil_mode": 1}),
])
def test_average_pool_pooled_sum(shape, attrs, cl, include):
    ort = pytest.importorskip("onnxruntime")
    attrs = {**attrs, "count_include_pad": include}
    node = helper.make_node("AveragePool", ["x"], ["y"], **attrs)
    g = helper.make_graph([node], "t", [helper.make_tensor_value_info("x", onnx.TensorProto.FLOAT, shape)],
                          [helper.make_tensor_value_info("y", onnx.TensorProto.FLOAT, None)])
    m = helper.make_model(g, opset_imports=[helper.make_opsetid("", 18)])
    m.ir_version = 8
    x = np.random.default_rng(0).standard_normal(shape).astype(np.float32)
    exp = ort.InferenceSession(m.SerializeToString(), providers=["CPUExecutionProvider"]).run(None, {"x": x})[0]
    t = torch.from_numpy(x)
    if cl:
        t = t.contiguous(memory_format=torch.channels_last)
    got = compile_reference(load_onnx(m))([t], {})[0]
    np.testing.assert_allclose(got.numpy(), exp, rtol=1e-5, atol=1e-6)


@pytest.mark.parametrize("c,h", [(1000, 13), (1000, 7), (1024, 7), (37, 8), (2048, 7)])
def test_global_average_pool_channels_last_uniform(c, h):
    """Identical channels, identical means (squeezenet's zero-input output depends on it),
    and the same means as the NCHW path within rounding."""
    run = _runner("GlobalAveragePool", {}, [1, c, h, h])
    plane = torch.randn(1, 1, h, h) * 1000
    x = plane.expand(1, c, h, h).contiguous(memory_format=torch.channels_last)
    y = run(x)
    assert y.shape == (1, c, 1, 1)
    assert bool((y == y.flatten()[0]).all())
    xr = torch.randn(1, c, h, h)
    np.testing.assert_allclose(run(xr.contiguous(memory_format=torch.channels_last)).numpy(),
                               run(xr).numpy(), rtol=1e-5, atol=1e-6)
