"""DeformConv (kernels/nn_deform_conv.py), TensorScatter (tensor_index.py), SwiGLU
(elementwise_act.py), CausalConvWithState and LinearAttention (nn_linear_attention.py)
beyond the onnx node cases: random cases against
onnxruntime (DeformConv, TensorScatter) or the onnx reference evaluator, shapes the node
cases miss (1-D/3-D deformable convolutions, GQA with per-key decay, ...), and the
compile-time refusals."""
from __future__ import annotations

import numpy as np
import pytest
import torch
import torch.nn.functional as F
from onnx.reference import ReferenceEvaluator

from pyge.errors import GraphError
from pyge.frontends import load_onnx
from pyge.executors.interpreter import run_reference
from pyge.testing import one_node_model


def _model(op, feeds, attrs, opset, n_out=1, consts=()):
    return one_node_model(op, feeds, attrs, opset=opset, n_out=n_out, consts=consts, trim=True,
                          name="n0", ir_version=10)


def _run(m, feeds, consts=()):
    g = load_onnx(m)
    got = run_reference(g, {k: v for k, v in feeds.items() if v is not None and k not in consts})
    return [got[v.name] for v in g.outputs]


def _ort(m, feeds):
    ort = pytest.importorskip("onnxruntime")
    so = ort.SessionOptions()
    so.log_severity_level = 3
    s = ort.InferenceSession(m.SerializeToString(), so, providers=["CPUExecutionProvider"])
    return s.run(None, {k: v for k, v in feeds.items() if v is not None})


def _ref(m, feeds):
    return ReferenceEvaluator(m).run(None, {k: v for k, v in feeds.items() if v is not None})


# ---------------------------------------------------------------------------------------
# DeformConv


def _deform_case(rng, nd, group, og, k, s, d, p, bias, mask, n=2, cpg=2, ocpg=2, size=6):
    c, oc = group * og * cpg, group * ocpg
    ins = [size] * nd
    outs = [(ins[i] + p[i] + p[nd + i] - (k[i] - 1) * d[i] - 1) // s[i] + 1 for i in range(nd)]
    kk = int(np.prod(k))
    feeds = {
        "x": rng.standard_normal((n, c, *ins)).astype(np.float32),
        "w": rng.standard_normal((oc, c // group, *k)).astype(np.float32),
        "o": (rng.standard_normal((n, og * kk * nd, *outs)) * 2).astype(np.float32),
        "b": rng.standard_normal(oc).astype(np.float32) if bias else None,
        "m": rng.random((n, og * kk, *outs)).astype(np.float32) if mask else None,
    }
    attrs = dict(group=group, offset_group=og, kernel_shape=k, strides=s, dilations=d, pads=p)
    return feeds, attrs


@pytest.mark.parametrize("seed", range(6))
def test_deform_conv_2d_matches_onnxruntime(seed):
    rng = np.random.default_rng(seed)
    feeds, attrs = _deform_case(
        rng, 2, group=[1, 2][seed % 2], og=[1, 2, 1][seed % 3], k=[3, 2], s=[1 + seed % 2, 1],
        d=[1, 1 + seed % 2], p=[1, 0, seed % 3, 1], bias=seed % 2 == 0, mask=seed % 3 != 2)
    m = _model("DeformConv", feeds, attrs, 22)
    got, = _run(m, feeds)
    exp, = _ort(m, feeds)
    np.testing.assert_allclose(got, exp, rtol=1e-4, atol=1e-5)


@pytest.mark.parametrize("nd", [1, 3])
def test_deform_conv_1d_3d_integer_offsets_are_shifted_convolutions(nd):
    # Offsets that are whole numbers move every tap by the same amount: the result is a
    # Conv of the input shifted (with zeros entering at the border).
    rng = np.random.default_rng(nd)
    feeds, attrs = _deform_case(rng, nd, group=2, og=2, k=[2] * nd, s=[1] * nd, d=[1] * nd,
                                p=[0] * (2 * nd), bias=True, mask=False, size=5)
    shift = np.zeros(feeds["o"].shape, np.float32)
    shift.reshape(2, 2, 2 ** nd, nd, -1)[:, :, :, 0] = 1.0  # +1 along the first axis
    feeds["o"] = shift
    got, = _run(_model("DeformConv", feeds, attrs, 19), feeds)
    x = torch.from_numpy(feeds["x"])
    xs = torch.cat([x[:, :, 1:], torch.zeros_like(x[:, :, :1])], 2)
    conv = (F.conv1d, F.conv2d, F.conv3d)[nd - 1]
    exp = conv(xs, torch.from_numpy(feeds["w"]), torch.from_numpy(feeds["b"]), groups=2)
    np.testing.assert_allclose(got, exp.numpy(), rtol=1e-5, atol=1e-5)


def test_deform_conv_3d_with_a_flat_axis_equals_2d():
    # A 3-D deformable convolution over depth 1 (kernel depth 1, zero depth offsets) is the
    # 2-D one, fractional offsets included.
    rng = np.random.default_rng(7)
    feeds, attrs = _deform_case(rng, 2, group=1, og=2, k=[3, 3], s=[1, 2], d=[1, 1],
                                p=[1, 1, 1, 1], bias=True, mask=True)
    got2, = _run(_model("DeformConv", feeds, attrs, 22), feeds)
    n, _, oh, ow = feeds["o"].shape
    o3 = np.zeros((n, 2, 9, 3, oh, ow), np.float32)
    o3[:, :, :, 1:] = feeds["o"].reshape(n, 2, 9, 2, oh, ow)
    f3 = {"x": feeds["x"][:, :, None], "w": feeds["w"][:, :, None],
          "o": o3.reshape(n, 54, 1, oh, ow), "b": feeds["b"], "m": feeds["m"][:, :, None]}
    a3 = dict(attrs, kernel_shape=[1, 3, 3], strides=[1, 1, 2], dilations=[1, 1, 1],
              pads=[0, 1, 1, 0, 1, 1])
    got3, = _run(_model("DeformConv", f3, a3, 22), f3)
    np.testing.assert_allclose(got3[:, :, 0], got2, rtol=1e-5, atol=1e-6)


def test_deform_conv_refusals():
    rng = np.random.default_rng(0)
    feeds, attrs = _deform_case(rng, 2, 1, 1, [2, 2], [1, 1], [1, 1], [0] * 4, False, False)
    with pytest.raises(GraphError, match=r"'n0' \(DeformConv\): strides=\[1\] must have 2"):
        _run(_model("DeformConv", feeds, dict(attrs, strides=[1]), 22), feeds)
    with pytest.raises(GraphError, match=r"'n0' \(DeformConv\): offset_group=0 must be >= 1"):
        _run(_model("DeformConv", feeds, dict(attrs, offset_group=0), 22), feeds)
    bad = dict(feeds, o=feeds["o"][:, :4])
    with pytest.raises(Exception, match="offset has shape"):
        _run(_model("DeformConv", bad, attrs, 22), bad)


# ---------------------------------------------------------------------------------------
# TensorScatter


@pytest.mark.parametrize("mode", ["linear", "circular"])
@pytest.mark.parametrize("seed", range(4))
def test_tensor_scatter_matches_onnxruntime(mode, seed):
    rng = np.random.default_rng(seed)
    rank = 3 + seed % 2
    axis = 1 + seed % (rank - 1)
    shape = [2, 3, 2, 2][:rank]
    shape[axis] = m_len = 5
    s_len = [1, 2, 3, 5][seed]
    us = list(shape)
    us[axis] = s_len
    w = rng.integers(0, m_len - s_len + 1, shape[0]) if mode == "linear" \
        else rng.integers(-3, 9, shape[0])
    feeds = {"p": rng.standard_normal(shape).astype(np.float32),
             "u": rng.standard_normal(us).astype(np.float32),
             "w": w.astype(np.int64) if seed != 1 else None}
    m = _model("TensorScatter", feeds, {"mode": mode, "axis": axis - (rank if seed % 2 else 0)},
               24)
    got, = _run(m, feeds)
    exp, = _ref(m, feeds) if mode == "circular" and w.min() < 0 else _ort(m, feeds)
    np.testing.assert_array_equal(got, exp)


@pytest.mark.parametrize("dtype", [np.int64, np.bool_, object])
def test_tensor_scatter_other_types(dtype):
    rng = np.random.default_rng(0)
    past = rng.integers(0, 9, (2, 4, 3)).astype(dtype)
    upd = rng.integers(10, 19, (2, 2, 3)).astype(dtype)
    if dtype is object:
        past, upd = past.astype(str).astype(object), upd.astype(str).astype(object)
    feeds = {"p": past, "u": upd, "w": np.array([3, 1], np.int64)}
    m = _model("TensorScatter", feeds, {"mode": "circular", "axis": 1}, 24)
    np.testing.assert_array_equal(_run(m, feeds)[0], _ref(m, feeds)[0])


def test_tensor_scatter_errors():
    feeds = {"p": np.zeros((2, 4, 1), np.float32), "u": np.ones((2, 2, 1), np.float32),
             "w": np.array([3, 1], np.int64)}
    with pytest.raises(Exception, match=r"write_indices \[3, 1\] \+ sequence length 2 go "
                                        r"outside the cache's 4 positions"):
        _run(_model("TensorScatter", feeds, {"axis": 1}, 24), feeds)
    with pytest.raises(GraphError, match=r"'n0' \(TensorScatter\): mode='ring' is not one of"):
        _run(_model("TensorScatter", feeds, {"axis": 1, "mode": "ring"}, 24), feeds)
    with pytest.raises(GraphError, match=r"'n0' \(TensorScatter\): axis=-3 is the batch axis"):
        _run(_model("TensorScatter", feeds, {"axis": -3}, 24), feeds)


# ---------------------------------------------------------------------------------------
# SwiGLU


@pytest.mark.parametrize("dtype,alpha", [(np.float32, 1.0), (np.float32, 1.702),
                                         (np.float64, 0.5), (np.float16, 1.0)])
def test_swiglu_matches_reference(dtype, alpha):
    rng = np.random.default_rng(0)
    feeds = {"a": (rng.standard_normal((2, 3, 8)) * 3).astype(dtype),
             "b": rng.standard_normal((2, 3, 8)).astype(dtype)}
    m = _model("SwiGLU", feeds, {"alpha": alpha}, 28)
    got, = _run(m, feeds)
    exp, = _ref(m, feeds)
    assert got.dtype == exp.dtype
    np.testing.assert_allclose(got, exp, rtol=2e-3 if dtype == np.float16 else 1e-6, atol=1e-6)


def test_swiglu_refuses_broadcasting():
    feeds = {"a": np.ones((2, 4), np.float32), "b": np.ones((1, 4), np.float32)}
    with pytest.raises(Exception, match="must have the same shape"):
        _run(_model("SwiGLU", feeds, {}, 28), feeds)


# ---------------------------------------------------------------------------------------
# CausalConvWithState


@pytest.mark.parametrize("k,length,past,bias,act", [
    (4, 7, True, True, "silu"), (3, 1, True, False, "none"), (5, 2, False, True, "swish"),
    (1, 3, False, True, "none"), (2, 6, True, True, "none")])
def test_causal_conv_with_state_matches_reference(k, length, past, bias, act):
    rng = np.random.default_rng(k)
    feeds = {"x": rng.standard_normal((2, 3, length)).astype(np.float32),
             "w": rng.standard_normal((3, 1, k)).astype(np.float32),
             "b": rng.standard_normal(3).astype(np.float32) if bias else None,
             "s": rng.standard_normal((2, 3, k - 1)).astype(np.float32) if past else None}
    m = _model("CausalConvWithState", feeds, {"activation": act}, 27, n_out=2)
    got = _run(m, feeds)
    exp = _ref(m, feeds)
    for g, e in zip(got, exp):
        assert g.shape == e.shape and g.dtype == e.dtype
        np.testing.assert_allclose(g, e, rtol=1e-5, atol=1e-6)


def test_causal_conv_with_state_chunked_equals_whole():
    # Feeding a sequence in pieces, each with the previous piece's present_state, gives the
    # outputs of one call over the whole sequence.
    rng = np.random.default_rng(1)
    x = rng.standard_normal((2, 4, 9)).astype(np.float32)
    w = rng.standard_normal((4, 1, 4)).astype(np.float32)
    whole = {"x": x, "w": w}
    y_all, s_all = _run(_model("CausalConvWithState", whole, {"activation": "silu"}, 27, 2),
                        whole)
    state, ys = np.zeros((2, 4, 3), np.float32), []
    for a, b in [(0, 2), (2, 3), (3, 9)]:
        f = {"x": x[:, :, a:b], "w": w, "b": None, "s": state}
        y, state = _run(_model("CausalConvWithState", f, {"activation": "silu"}, 27, 2), f)
        ys.append(y)
    np.testing.assert_allclose(np.concatenate(ys, 2), y_all, rtol=1e-6, atol=1e-6)
    np.testing.assert_array_equal(state, s_all)


def test_causal_conv_with_state_refuses_unknown_activation():
    feeds = {"x": np.ones((1, 2, 3), np.float32), "w": np.ones((2, 1, 2), np.float32)}
    with pytest.raises(GraphError, match=r"'n0' \(CausalConvWithState\): activation='gelu' is "
                                         "not one of 'none', 'silu', 'swish'"):
        _run(_model("CausalConvWithState", feeds, {"activation": "gelu"}, 27, 2), feeds)


# ---------------------------------------------------------------------------------------
# LinearAttention


@pytest.mark.parametrize("rule,hq,hkv,per_dim,beta1,past,t", [
    ("linear", 4, 2, False, False, True, 6), ("linear", 2, 2, False, False, False, 1),
    ("gated", 4, 1, True, False, True, 5), ("gated", 3, 3, False, False, False, 4),
    ("delta", 4, 2, False, True, True, 5), ("delta", 2, 1, False, False, False, 3),
    ("gated_delta", 6, 2, True, False, True, 7), ("gated_delta", 4, 4, False, True, True, 1),
    ("gated_delta", 2, 2, False, False, False, 0)])
def test_linear_attention_matches_reference(rule, hq, hkv, per_dim, beta1, past, t):
    rng = np.random.default_rng(hq * 10 + t)
    b, dk, dv = 2, 4, 3

    def l2(x):
        return x / np.linalg.norm(x, axis=-1, keepdims=True)
    key = l2(rng.standard_normal((b, t, hkv, dk))).reshape(b, t, hkv * dk)
    feeds = {
        "q": rng.standard_normal((b, t, hq * dk)).astype(np.float32),
        "k": key.astype(np.float32),
        "v": rng.standard_normal((b, t, hkv * dv)).astype(np.float32),
        "s": rng.standard_normal((b, hkv, dk, dv)).astype(np.float32) if past else None,
        "g": -rng.random((b, t, hkv * dk if per_dim else hkv)).astype(np.float32)
        if "gated" in rule else None,
        "be": rng.random((b, t, 1 if beta1 else hkv)).astype(np.float32)
        if "delta" in rule else None,
    }
    attrs = {"update_rule": rule, "q_num_heads": hq, "kv_num_heads": hkv}
    if rule == "delta":
        attrs["scale"] = 0.7
    m = _model("LinearAttention", feeds, attrs, 27, n_out=2)
    got = _run(m, feeds)
    exp = _ref(m, feeds)
    for g, e in zip(got, exp):
        assert g.shape == e.shape and g.dtype == e.dtype
        np.testing.assert_allclose(g, e, rtol=1e-5, atol=1e-5)


def test_linear_attention_chunked_equals_whole():
    # A prefill in pieces, each starting from the previous piece's present_state, equals
    # one pass (and decode steps of T=1 are such pieces).
    rng = np.random.default_rng(3)
    b, t, hq, hkv, dk, dv = 1, 6, 4, 2, 4, 4
    q = rng.standard_normal((b, t, hq * dk)).astype(np.float32)
    k = (rng.standard_normal((b, t, hkv * dk)) * 0.5).astype(np.float32)
    v = rng.standard_normal((b, t, hkv * dv)).astype(np.float32)
    g = -rng.random((b, t, hkv)).astype(np.float32)
    be = rng.random((b, t, hkv)).astype(np.float32)
    attrs = {"q_num_heads": hq, "kv_num_heads": hkv}
    whole = {"q": q, "k": k, "v": v, "s": None, "g": g, "be": be}
    y_all, s_all = _run(_model("LinearAttention", whole, attrs, 27, 2), whole)
    state, ys = np.zeros((b, hkv, dk, dv), np.float32), []
    for lo, hi in [(0, 3), (3, 4), (4, 5), (5, 6)]:
        f = {"q": q[:, lo:hi], "k": k[:, lo:hi], "v": v[:, lo:hi], "s": state,
             "g": g[:, lo:hi], "be": be[:, lo:hi]}
        y, state = _run(_model("LinearAttention", f, attrs, 27, 2), f)
        ys.append(y)
    np.testing.assert_allclose(np.concatenate(ys, 1), y_all, rtol=1e-5, atol=1e-6)
    np.testing.assert_allclose(state, s_all, rtol=1e-5, atol=1e-6)


def test_linear_attention_refusals():
    x = np.ones((1, 2, 8), np.float32)
    feeds = {"q": x, "k": x, "v": x}
    with pytest.raises(GraphError, match=r"'n0' \(LinearAttention\): update_rule='mamba' is "
                                         "not one of"):
        _run(_model("LinearAttention", feeds, {"update_rule": "mamba", "q_num_heads": 2,
                                               "kv_num_heads": 2}, 27, 2), feeds)
    with pytest.raises(GraphError, match=r"q_num_heads=3 must be a positive multiple of "
                                         r"kv_num_heads=2"):
        _run(_model("LinearAttention", feeds, {"update_rule": "linear", "q_num_heads": 3,
                                               "kv_num_heads": 2}, 27, 2), feeds)
    with pytest.raises(GraphError, match=r"update_rule='gated_delta' needs the decay input"):
        _run(_model("LinearAttention", feeds, {"q_num_heads": 2, "kv_num_heads": 2}, 27, 2),
             feeds)
