"""Fast paths in the kernels give the same values as the plain ones.

Gemm / MatMul with a constant float32 weight run on oneDNN's packed weight
(nn_matmul._packed_linear) when the weight is large enough; everything else (a weight fed at run time, alpha or beta other than 1,
a bias oneDNN cannot take, other dtypes) keeps torch's matmul. Both must give numpy's answer.

Reshape: a copy-requiring 4-D reshape of a channels-last-backed view (the channel shuffle
Reshape -> Transpose -> Reshape after a convolution) is written channels-last; the values
must equal torch's plain reshape, and the whole shuffle must match onnxruntime.
"""
from __future__ import annotations

import numpy as np
import onnx
import pytest
import torch
from onnx import TensorProto, helper

import pyge
from pyge.kernels.tensor_shape import _reshape


@pytest.mark.parametrize("c,h,g", [(136, 28, 4), (272, 14, 4), (24, 20, 3), (64, 16, 2)])
def test_shuffle_reshape_channels_last(c, h, g):
    x = torch.randn(1, c, h, h).contiguous(memory_format=torch.channels_last)
    x5 = x.reshape(1, g, c // g, h, h).permute(0, 2, 1, 3, 4)
    y = _reshape(x5, [1, c, h, h])
    assert torch.equal(y, x5.reshape(1, c, h, h))
    assert y.is_contiguous(memory_format=torch.channels_last)
    y = _reshape(x5, [1, -1, h, h])
    assert torch.equal(y, x5.reshape(1, c, h, h))


@pytest.mark.parametrize("make", [
    lambda: torch.randn(2, 8, 16, 16),                                          # contiguous: a view
    lambda: torch.randn(2, 16, 16, 8).permute(0, 3, 1, 2),                      # channels-last
    lambda: torch.randn(2, 8, 16, 16).transpose(2, 3),                          # H/W swapped
    lambda: torch.randn(4, 8, 16, 16).contiguous(memory_format=torch.channels_last)[::2],
    lambda: torch.randn(2, 4, 2, 16, 16).transpose(1, 2),                       # NCHW shuffle
])
@pytest.mark.parametrize("shape", [[2, 8, 16, 16], [2, 4, 32, 16], [2, 16, 8, 16], [2, 8, 256, 1],
                                   [1, 1024, 1, 4]])
def test_reshape_matches_plain(make, shape):
    x = make()
    if x.ndim == 5:
        shape = [shape[0], -1] + shape[2:]
    y = _reshape(x, shape)
    assert torch.equal(y, x.reshape(shape))


def test_reshape_int_and_small_unchanged():
    x = torch.arange(2 * 4 * 2 * 8 * 8).reshape(2, 4, 2, 8, 8).transpose(1, 2)
    assert torch.equal(_reshape(x, [2, 8, 8, 8]), x.reshape(2, 8, 8, 8))


def test_channel_shuffle_model_matches_onnxruntime():
    ort = pytest.importorskip("onnxruntime")
    c, h, g = 48, 14, 4
    rng = np.random.default_rng(0)
    w1 = rng.standard_normal((c, c // g, 1, 1)).astype(np.float32)
    w2 = rng.standard_normal((c, 1, 3, 3)).astype(np.float32)
    inits = [onnx.numpy_helper.from_array(w1, "w1"), onnx.numpy_helper.from_array(w2, "w2"),
             onnx.numpy_helper.from_array(np.array([1, g, c // g, h, h], np.int64), "s5"),
             onnx.numpy_helper.from_array(np.array([1, c, h, h], np.int64), "s4")]
    nodes = [helper.make_node("Conv", ["x", "w1"], ["a"], group=g),
             helper.make_node("Relu", ["a"], ["b"]),
             helper.make_node("Reshape", ["b", "s5"], ["c"]),
             helper.make_node("Transpose", ["c"], ["d"], perm=[0, 2, 1, 3, 4]),
             helper.make_node("Reshape", ["d", "s4"], ["e"]),
             helper.make_node("Conv", ["e", "w2"], ["y"], group=c, pads=[1, 1, 1, 1])]
    graph = helper.make_graph(nodes, "shuffle", [helper.make_tensor_value_info(
        "x", TensorProto.FLOAT, [1, c, h, h])], [helper.make_tensor_value_info(
            "y", TensorProto.FLOAT, [1, c, h, h])], inits)
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 13)])
    model.ir_version = 8
    x = rng.standard_normal((1, c, h, h)).astype(np.float32)
    want = ort.InferenceSession(model.SerializeToString(),
                                providers=["CPUExecutionProvider"]).run(None, {"x": x})[0]
    m = pyge.compile(pyge.load_onnx(model), device="cpu")
    got = m.run({"x": x})
    got = got["y"] if isinstance(got, dict) else got[0]
    np.testing.assert_allclose(np.asarray(got), want, rtol=1e-4, atol=1e-4)


def _bn_fn(eps=1e-5, n_out=1):
    from pyge.kernels.nn_norm import batch_norm

    class _Ctx:
        opset = 15
        num_outputs = n_out

        @staticmethod
        def attr(name, default=None):
            return {"epsilon": eps}.get(name, default)
    return batch_norm(_Ctx)


@pytest.mark.parametrize("dtype", [torch.float32, torch.float64])
@pytest.mark.parametrize("shape,cl", [((2, 8, 5, 7), False), ((1, 16, 9, 9), True), ((3, 6), False),
                                      ((2, 4, 6), False), ((1, 4, 3, 3, 3), False)])
def test_batchnorm_affine_matches_batch_norm(dtype, shape, cl):
    c = shape[1]
    x = torch.randn(shape, dtype=dtype)
    if cl:
        x = x.contiguous(memory_format=torch.channels_last)
    params = [torch.rand(c, dtype=dtype) + 0.5, torch.randn(c, dtype=dtype),
              torch.randn(c, dtype=dtype), torch.rand(c, dtype=dtype) + 0.5]
    fn = _bn_fn(1e-3)
    want = torch.nn.functional.batch_norm(x, params[2], params[3], params[0], params[1],
                                          False, 0.0, 1e-3)
    for _ in range(2):   # the second call reuses the cached affine
        y = fn([x] + params)[0]
        torch.testing.assert_close(y, want, rtol=1e-5, atol=1e-5)
    if cl:
        assert y.is_contiguous(memory_format=torch.channels_last)
    # New parameter tensors (different values) are picked up, not served from the cache.
    params2 = [p * 2 for p in params]
    want2 = torch.nn.functional.batch_norm(x, params2[2], params2[3], params2[0], params2[1],
                                           False, 0.0, 1e-3)
    torch.testing.assert_close(fn([x] + params2)[0], want2, rtol=1e-5, atol=1e-5)


def test_batchnorm_affine_extra_outputs_and_half():
    fn = _bn_fn(n_out=3)
    x = torch.randn(2, 4, 3, 3)
    ps = [torch.ones(4), torch.zeros(4), torch.randn(4), torch.rand(4) + 0.5]
    y, rm, rv = fn([x] + ps)
    assert rm is ps[2] and rv is ps[3]
    xh = x.to(torch.bfloat16)   # not float32/64: the F.batch_norm path
    yh = _bn_fn()([xh] + [p.to(torch.bfloat16) for p in ps])[0]
    torch.testing.assert_close(yh.float(), y, rtol=2e-2, atol=2e-2)


class _CountingMkldnn:
    """Delegates to torch.ops.mkldnn, counting the packed-linear calls."""

    def __init__(self, real):
        self.real, self.packs, self.calls = real, 0, 0

    def _reorder_linear_weight(self, *a):
        self.packs += 1
        return self.real._reorder_linear_weight(*a)

    def _linear_pointwise(self, *a):
        self.calls += 1
        return self.real._linear_pointwise(*a)


@pytest.fixture
def linear_spy(monkeypatch):
    from pyge.kernels import nn_matmul
    if not nn_matmul.PACKED_LINEAR_OK:
        pytest.skip("this torch has no oneDNN linear (torch.ops.mkldnn._linear_pointwise)")
    spy = _CountingMkldnn(nn_matmul.MKLDNN)
    monkeypatch.setattr(nn_matmul, "MKLDNN", spy)
    # These small weights would take torch's path by shape (test_gemm_choice.py tests that
    # choice); here every weight takes the packed path, to test its packing and fallbacks.
    monkeypatch.setattr(nn_matmul, "PACKED_MIN_WEIGHT", (0, 0, 0))
    return spy


def _matmul_model(op, a_shape, w, bias=None, w_const=True, **attrs):
    ins = ["a", "w"] + (["c"] if bias is not None else [])
    inits = [onnx.numpy_helper.from_array(w, "w")] if w_const else []
    if bias is not None:
        inits.append(onnx.numpy_helper.from_array(bias, "c"))
    g_in = [helper.make_tensor_value_info("a", TensorProto.FLOAT, list(a_shape))]
    if not w_const:
        g_in.append(helper.make_tensor_value_info("w", TensorProto.FLOAT, list(w.shape)))
    graph = helper.make_graph([helper.make_node(op, ins, ["y"], **attrs)], "mm", g_in,
                              [helper.make_tensor_value_info("y", TensorProto.FLOAT, None)], inits)
    m = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 13)])
    m.ir_version = 8
    return m


@pytest.mark.parametrize("tb", [0, 1])
@pytest.mark.parametrize("bias_shape,attrs,packed", [
    (None, {}, True), ((5,), {}, True), ((1, 5), {}, True),
    ((3, 5), {}, False), ((1,), {}, False),                     # bias per element / broadcast scalar
    ((5,), {"alpha": 0.5}, False), ((5,), {"beta": 2.0}, False), ((5,), {"beta": 0.0}, True),
])
def test_gemm_packed_weight(tb, bias_shape, attrs, packed, linear_spy):
    spy = linear_spy
    rng = np.random.default_rng(1)
    a = rng.standard_normal((3, 4)).astype(np.float32)
    w = rng.standard_normal((5, 4) if tb else (4, 5)).astype(np.float32)
    c = rng.standard_normal(bias_shape).astype(np.float32) if bias_shape else None
    m = pyge.compile(pyge.load_onnx(_matmul_model("Gemm", a.shape, w, c, transB=tb, **attrs)),
                     device="cpu")
    want = attrs.get("alpha", 1.0) * (a @ (w.T if tb else w))
    if c is not None:
        want = want + attrs.get("beta", 1.0) * c
    for _ in range(3):
        np.testing.assert_allclose(m.run({"a": a})["y"], want, rtol=1e-5, atol=1e-5)
    assert (spy.calls, spy.packs) == ((3, 1) if packed else (0, 0))


def test_matmul_packed_weight_and_fallbacks(linear_spy):
    spy = linear_spy
    rng = np.random.default_rng(2)
    w = rng.standard_normal((6, 7)).astype(np.float32)
    a3 = rng.standard_normal((2, 3, 6)).astype(np.float32)
    m = pyge.compile(pyge.load_onnx(_matmul_model("MatMul", a3.shape, w)), device="cpu")
    np.testing.assert_allclose(m.run({"a": a3})["y"], a3 @ w, rtol=1e-5, atol=1e-5)
    assert (spy.calls, spy.packs) == (1, 1)
    m = pyge.compile(pyge.load_onnx(_matmul_model("MatMul", ["n", 6], w)), device="cpu")
    for rows in (1, 4, 1, 7):   # other batch sizes reuse the one packing
        a = rng.standard_normal((rows, 6)).astype(np.float32)
        np.testing.assert_allclose(m.run({"a": a})["y"], a @ w, rtol=1e-5, atol=1e-5)
    assert (spy.calls, spy.packs) == (5, 2)
    a1 = rng.standard_normal(6).astype(np.float32)             # 1-D: torch.matmul
    m = pyge.compile(pyge.load_onnx(_matmul_model("MatMul", a1.shape, w)), device="cpu")
    np.testing.assert_allclose(m.run({"a": a1})["y"], a1 @ w, rtol=1e-5, atol=1e-5)
    assert spy.calls == 5
    m = pyge.compile(pyge.load_onnx(_matmul_model("MatMul", a3.shape, w, w_const=False)),
                     device="cpu")                               # weight fed at run time
    np.testing.assert_allclose(m.run({"a": a3, "w": w})["y"], a3 @ w, rtol=1e-5, atol=1e-5)
    assert spy.calls == 5


class _CountingConvPacks:
    def __init__(self, real):
        self.real, self.packs = real, 0

    def _reorder_convolution_weight(self, *a):
        self.packs += 1
        return self.real._reorder_convolution_weight(*a)

    def __getattr__(self, name):
        return getattr(self.real, name)


def test_conv_weight_packed_once_across_batch_sizes(monkeypatch):
    from pyge.kernels import nn_conv
    if not nn_conv._PACKED_OK:
        pytest.skip("this torch has no packed oneDNN convolution")
    spy = _CountingConvPacks(nn_conv._MKLDNN)
    monkeypatch.setattr(nn_conv, "_MKLDNN", spy)
    rng = np.random.default_rng(3)
    w = rng.standard_normal((8, 4, 3, 3)).astype(np.float32)
    g = helper.make_graph([helper.make_node("Conv", ["x", "w"], ["y"], pads=[1, 1, 1, 1])], "c",
                          [helper.make_tensor_value_info("x", TensorProto.FLOAT, ["n", 4, 10, 10])],
                          [helper.make_tensor_value_info("y", TensorProto.FLOAT, None)],
                          [onnx.numpy_helper.from_array(w, "w")])
    m = pyge.compile(pyge.load_onnx(helper.make_model(g, opset_imports=[helper.make_opsetid("", 13)])), "cpu")
    for n in (1, 8, 1, 3, 8):
        x = rng.standard_normal((n, 4, 10, 10)).astype(np.float32)
        want = torch.nn.functional.conv2d(torch.from_numpy(x), torch.from_numpy(w), padding=1).numpy()
        np.testing.assert_allclose(m.run({"x": x})["y"], want, rtol=1e-4, atol=1e-4)
    assert spy.packs == 1


def test_batchnorm_affine_follows_parameters_changed_in_place():
    """The same parameter tensors with new contents (a planned value's fixed arena view,
    or a torch tensor the caller feeds again after writing into it) are folded again."""
    fn = _bn_fn(1e-3)
    x = torch.randn(2, 4, 3, 3)
    params = [torch.rand(4) + 0.5, torch.randn(4), torch.randn(4), torch.rand(4) + 0.5]
    fn([x] + params)
    for p in params:
        p.mul_(2)
    want = torch.nn.functional.batch_norm(x, params[2], params[3], params[0], params[1],
                                          False, 0.0, 1e-3)
    torch.testing.assert_close(fn([x] + params)[0], want, rtol=1e-5, atol=1e-5)


def test_conv_weight_fed_again_after_an_in_place_change_is_repacked(monkeypatch):
    """Packed once while the weight stays the same unchanged tensor; the caller changing
    it in place between runs gets the new weight's result, not the first packing's."""
    from pyge.kernels import nn_conv
    if not nn_conv._PACKED_OK:
        pytest.skip("this torch has no packed oneDNN convolution")
    spy = _CountingConvPacks(nn_conv._MKLDNN)
    monkeypatch.setattr(nn_conv, "_MKLDNN", spy)
    g = helper.make_graph([helper.make_node("Conv", ["x", "w"], ["y"], pads=[1, 1, 1, 1])], "c",
                          [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 4, 6, 6]),
                           helper.make_tensor_value_info("w", TensorProto.FLOAT, [8, 4, 3, 3])],
                          [helper.make_tensor_value_info("y", TensorProto.FLOAT, None)])
    m = pyge.compile(pyge.load_onnx(helper.make_model(g, opset_imports=[helper.make_opsetid("", 13)])), "cpu")
    x, w = torch.randn(1, 4, 6, 6), torch.randn(8, 4, 3, 3)
    for _ in range(2):
        m.run({"x": x, "w": w})
    assert spy.packs == 1
    w.mul_(-3)
    want = torch.nn.functional.conv2d(x, w, padding=1).numpy()
    np.testing.assert_allclose(m.run({"x": x, "w": w})["y"], want, rtol=1e-4, atol=1e-4)
    assert spy.packs == 2
