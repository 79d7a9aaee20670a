"""onnxruntime's transformer contrib ops (com.microsoft) against onnxruntime's CPU kernels:
seeded random shapes and attributes, float32, rtol = atol = 1e-5."""
from __future__ import annotations

import warnings

import numpy as np
import pytest

from pyge.errors import GraphError
from pyge.frontends import load_onnx
from pyge.executors.interpreter import run_reference
from pyge.testing import one_node_model

ort = pytest.importorskip("onnxruntime")
MS = "com.microsoft"
TOL = dict(rtol=1e-5, atol=1e-5)


def _model(op, inputs, attrs=None, n_out=1, domain=MS, consts=(), outs=None):
    return one_node_model(op, inputs, attrs, n_out=n_out, outputs=outs or None, consts=consts,
                          domain=domain, trim=True)


def _run_both(m, feeds):
    so = ort.SessionOptions()
    so.log_severity_level = 3
    sess = ort.InferenceSession(m.SerializeToString(), so, providers=["CPUExecutionProvider"])
    exp = sess.run(None, feeds)
    g = load_onnx(m)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        got = run_reference(g, dict(feeds))
    return [got[v.name] for v in g.outputs], exp


def check(op, inputs, attrs=None, n_out=1, consts=(), outs=None, domain=MS, skip=()):
    m = _model(op, inputs, attrs, n_out, domain, consts, outs)
    feeds = {n: a for n, a in inputs.items() if a is not None and n not in consts}
    got, exp = _run_both(m, feeds)
    assert len(got) == len(exp)
    for i, (a, b) in enumerate(zip(got, exp)):
        if i in skip:
            continue
        a = np.asarray(a)
        assert a.dtype == b.dtype, (i, a.dtype, b.dtype)
        assert a.shape == b.shape, (i, a.shape, b.shape)
        np.testing.assert_allclose(a, b, **TOL, err_msg=f"output {i}")


def f32(rng, *shape, scale=1.0):
    return (rng.standard_normal(shape) * scale).astype(np.float32)


# ---------------------------------------------------------------------------------------
# activations


@pytest.mark.parametrize("seed", range(8))
def test_gelu_family(seed):
    rng = np.random.default_rng(seed)
    shape = tuple(rng.integers(1, 6, rng.integers(1, 4)))
    x, b = f32(rng, *shape, scale=3), f32(rng, shape[-1])
    check("Gelu", {"x": x})
    check("BiasGelu", {"x": x, "b": b})
    check("FastGelu", {"x": x})
    check("FastGelu", {"x": x, "b": b})
    check("QuickGelu", {"x": x}, {"alpha": float(rng.uniform(0.5, 2.5))})
    check("QuickGelu", {"x": x})


# ---------------------------------------------------------------------------------------
# normalizations


@pytest.mark.parametrize("seed", range(12))
def test_skip_layer_norm(seed):
    rng = np.random.default_rng(100 + seed)
    b, s, h = (int(v) for v in rng.integers(1, 7, 3))
    x = f32(rng, b, s, h)
    skip_shape = [(b, s, h), (1, s, h), (s, h)][seed % 3]
    skip = f32(rng, *skip_shape)
    gamma, beta, bias = f32(rng, h), f32(rng, h), f32(rng, h)
    eps = float(rng.choice([1e-12, 1e-5]))
    n_out = [1, 4, 4, 1][seed % 4]
    inputs = {"x": x, "skip": skip, "gamma": gamma, "beta": beta if seed % 2 else None,
              "bias": bias if seed % 5 < 3 else None}
    check("SkipLayerNormalization", inputs, {"epsilon": eps}, n_out=n_out)
    sinputs = {"x": x, "skip": skip, "gamma": gamma,
               "bias": bias if seed % 5 < 3 else None}
    check("SkipSimplifiedLayerNormalization", sinputs, {"epsilon": eps}, n_out=n_out)


@pytest.mark.parametrize("seed", range(8))
def test_simplified_and_layer_norm(seed):
    rng = np.random.default_rng(200 + seed)
    shape = tuple(int(v) for v in rng.integers(1, 6, 3))
    axis = int(rng.integers(-3, 3))
    x = f32(rng, *shape)
    ax = axis % 3
    scale, bias = f32(rng, *shape[ax:]), f32(rng, *shape[ax:])
    n_out = 1 + seed % 2
    check("SimplifiedLayerNormalization", {"x": x, "s": scale}, {"axis": axis, "epsilon": 1e-5},
          n_out=n_out, domain="")
    check("LayerNormalization", {"x": x, "s": scale, "b": bias}, {"axis": axis},
          n_out=1 + seed % 3, domain="")


@pytest.mark.parametrize("seed", range(4))
def test_bias_add(seed):
    rng = np.random.default_rng(300 + seed)
    b, s, c = (int(v) for v in rng.integers(1, 6, 3))
    # onnxruntime implements BiasAdd on CUDA only: numpy is the reference here.
    x, bias, skip = f32(rng, b, s, c), f32(rng, c), f32(rng, b, s, c)
    m = _model("BiasAdd", {"x": x, "bias": bias, "skip": skip})
    got = run_reference(load_onnx(m), {"x": x, "bias": bias, "skip": skip})
    np.testing.assert_allclose(got["y0"], x + bias + skip, **TOL)


@pytest.mark.parametrize("seed", range(24))
def test_fused_matmul(seed):
    rng = np.random.default_rng(400 + seed)
    rank = [2, 3, 4][seed % 3]
    ta, tb = int(rng.integers(0, 2)), int(rng.integers(0, 2))
    tba, tbb = (int(rng.integers(0, 2)), int(rng.integers(0, 2))) if rank > 2 else (0, 0)
    m, k, n = (int(v) for v in rng.integers(1, 6, 3))
    batch = [int(v) for v in rng.integers(1, 4, rank - 2)]
    a_logical, b_logical = batch + [m, k], batch + [k, n]

    def physical(shape, t, tbatch):
        shape = list(shape)
        if t:
            shape[-1], shape[-2] = shape[-2], shape[-1]
        if tbatch:  # logical [d1..dn-2, d0, dn-1] from physical [d0, d1, ..., dn-1]
            shape = [shape[-2]] + shape[:-2] + [shape[-1]]
        return shape

    a = f32(rng, *physical(a_logical, ta, tba))
    b = f32(rng, *physical(b_logical, tb, tbb))
    attrs = {"alpha": float(rng.uniform(-2, 2)), "transA": ta, "transB": tb}
    if rank > 2:
        attrs.update(transBatchA=tba, transBatchB=tbb)
    check("FusedMatMul", {"a": a, "b": b}, attrs)


@pytest.mark.parametrize("seed", range(12))
def test_embed_layer_norm(seed):
    rng = np.random.default_rng(500 + seed)
    b, s, h = int(rng.integers(1, 4)), int(rng.integers(1, 7)), int(rng.integers(2, 9))
    vocab, max_pos, n_seg = 11, 8, 2
    with_seg, with_mask, with_pos = seed % 2 == 0, seed % 3 != 0, seed % 4 == 3
    mask = (rng.random((b, s)) > 0.3).astype(np.int32)
    inputs = {
        "ids": rng.integers(0, vocab, (b, s)).astype(np.int32),
        "seg": rng.integers(0, n_seg, (b, s)).astype(np.int32) if with_seg else None,
        "word": f32(rng, vocab, h), "pos": f32(rng, max_pos, h),
        "segemb": f32(rng, n_seg, h) if with_seg else None,
        "gamma": f32(rng, h), "beta": f32(rng, h),
        "mask": mask if with_mask else None,
        "pos_ids": rng.integers(0, max_pos, (b, s)).astype(np.int32) if with_pos else None,
    }
    check("EmbedLayerNormalization", inputs, {"epsilon": 1e-5}, n_out=[2, 3][seed % 2],
          consts=("word", "pos", "segemb", "gamma", "beta"))


# ---------------------------------------------------------------------------------------
# attention


def _mask(rng, form, b, s, t):
    if form == "1d":
        return rng.integers(1, t + 1, b).astype(np.int32)
    if form == "1d2":
        end = rng.integers(1, t + 1, b)
        start = np.array([rng.integers(0, e) for e in end])
        return np.concatenate([end, start]).astype(np.int32)
    if form == "2d":
        m = (rng.random((b, t)) > 0.3).astype(np.int32)
        m[:, 0] = 1
        return m
    if form == "3d":
        m = (rng.random((b, s, t)) > 0.3).astype(np.int32)
        m[..., 0] = 1
        return m
    return None


@pytest.mark.parametrize("seed", range(30))
def test_attention(seed):
    rng = np.random.default_rng(600 + seed)
    b, s = int(rng.integers(1, 4)), int(rng.integers(1, 6))
    heads = int(rng.integers(1, 4))
    hs = int(rng.integers(1, 5))
    d_in = int(rng.integers(2, 9))
    use_past = seed % 4 == 1
    p = int(rng.integers(1, 4)) if use_past else 0
    qkv = [heads * hs] * 3
    if seed % 5 == 2 and not use_past:
        qkv[2] = heads * int(rng.integers(1, 5))
    form = [None, "1d", "1d2", "2d", "3d"][seed % 5]
    causal = int(seed % 3 == 0)
    t = s + p
    attrs = {"num_heads": heads, "unidirectional": causal}
    if qkv[2] != qkv[0]:
        attrs["qkv_hidden_sizes"] = qkv
    if seed % 7 == 3:
        attrs["scale"] = 0.3
    inputs = {"x": f32(rng, b, s, d_in), "w": f32(rng, d_in, sum(qkv)),
              "bias": f32(rng, sum(qkv)) if seed % 6 else None,
              "mask": _mask(rng, form, b, s, t),
              "past": f32(rng, 2, b, heads, p, hs) if use_past else None,
              "attn_bias": f32(rng, b, heads, s, t) if seed % 8 == 5 and not use_past else None}
    check("Attention", inputs, attrs, n_out=2 if use_past else 1)


@pytest.mark.parametrize("seed", range(24))
def test_multi_head_attention(seed):
    rng = np.random.default_rng(700 + seed)
    b, s, l_ = int(rng.integers(1, 4)), int(rng.integers(1, 6)), int(rng.integers(1, 6))
    heads, hs = int(rng.integers(1, 4)), int(rng.integers(1, 5))
    d = heads * hs
    use_past = seed % 4 == 1
    p = int(rng.integers(1, 4)) if use_past else 0
    t = l_ + p
    form = [None, "2d", "1d", "3d"][seed % 4]
    if use_past or seed % 6 == 0:
        l_ = s if not use_past else l_
        t = l_ + p
    # unidirectional: query i sees keys j <= i + past length. onnxruntime agrees when the new
    # keys are not longer than the queries; with more new keys than queries its CPU kernel
    # matches no offset at all, so those configurations are not compared.
    attrs = {"num_heads": heads, "unidirectional": int(seed % 5 == 1 and l_ <= s)}
    if seed % 5 == 3:
        attrs["scale"] = 0.4
    inputs = {"q": f32(rng, b, s, d), "k": f32(rng, b, l_, d), "v": f32(rng, b, l_, d),
              "bias": f32(rng, 3 * d) if seed % 3 else None,
              "mask": _mask(rng, form, b, s, t),
              "attn_bias": f32(rng, 1, heads, s, t) if seed % 7 == 2 else None,
              "past_k": f32(rng, b, heads, p, hs) if use_past else None,
              "past_v": f32(rng, b, heads, p, hs) if use_past else None}
    check("MultiHeadAttention", inputs, attrs, n_out=3 if use_past else 1)


@pytest.mark.parametrize("seed", range(6))
def test_multi_head_attention_bnsh(seed):
    # key and value already projected: (b, n, l, h)
    rng = np.random.default_rng(750 + seed)
    b, s, l_ = int(rng.integers(1, 4)), int(rng.integers(1, 6)), int(rng.integers(1, 6))
    heads, hs = int(rng.integers(1, 4)), int(rng.integers(1, 5))
    inputs = {"q": f32(rng, b, s, heads * hs), "k": f32(rng, b, heads, l_, hs),
              "v": f32(rng, b, heads, l_, hs), "bias": None,
              "mask": _mask(rng, "2d", b, s, l_) if seed % 2 else None}
    check("MultiHeadAttention", inputs, {"num_heads": heads})


def _pyge_run(op, inputs, attrs):
    m = _model(op, inputs, attrs)
    feeds = {n: a for n, a in inputs.items() if a is not None}
    return run_reference(load_onnx(m), feeds)["y0"]


@pytest.mark.parametrize("seed", range(4))
def test_multi_head_attention_packed(seed):
    # onnxruntime's CPU kernel refuses packed QKV (b, s, n, 3, h) and packed KV
    # (b, l, n, 2, h): they must equal the unpacked inputs.
    rng = np.random.default_rng(780 + seed)
    b, s, l_ = int(rng.integers(1, 4)), int(rng.integers(1, 6)), int(rng.integers(1, 6))
    heads, hs = int(rng.integers(1, 4)), int(rng.integers(1, 5))
    attrs = {"num_heads": heads}
    qkv = f32(rng, b, s, heads, 3, hs)
    split = [qkv[:, :, :, i].reshape(b, s, heads * hs) for i in range(3)]
    np.testing.assert_allclose(
        _pyge_run("MultiHeadAttention", {"q": qkv}, attrs),
        _pyge_run("MultiHeadAttention", dict(zip("qkv", split)), attrs), **TOL)
    q, kv = f32(rng, b, s, heads * hs), f32(rng, b, l_, heads, 2, hs)
    k, v = (kv[:, :, :, i].reshape(b, l_, heads * hs) for i in range(2))
    np.testing.assert_allclose(
        _pyge_run("MultiHeadAttention", {"q": q, "k": kv}, attrs),
        _pyge_run("MultiHeadAttention", {"q": q, "k": k, "v": v}, attrs), **TOL)


@pytest.mark.parametrize("seed", range(12))
def test_rotary_embedding(seed):
    rng = np.random.default_rng(800 + seed)
    b, s, heads = int(rng.integers(1, 4)), int(rng.integers(1, 6)), int(rng.integers(1, 4))
    hs = 2 * int(rng.integers(1, 5))
    max_pos = 16
    rot = hs if seed % 3 else 2 * int(rng.integers(1, hs // 2 + 1))
    attrs = {"interleaved": seed % 2}
    if rot != hs:
        attrs["rotary_embedding_dim"] = rot
        attrs["num_heads"] = heads
    elif seed % 4 == 0:
        attrs["num_heads"] = heads
    x = f32(rng, b, s, heads * hs) if seed % 5 != 4 else f32(rng, b, heads, s, hs)
    if seed % 3 == 1:
        pos = np.array([int(rng.integers(0, max_pos - s))], np.int64)
    else:
        pos = rng.integers(0, max_pos, (b, s)).astype(np.int64)
    theta = rng.uniform(0, 6, (max_pos, rot // 2))
    check("RotaryEmbedding", {"x": x, "pos": pos, "cos": np.cos(theta).astype(np.float32),
                              "sin": np.sin(theta).astype(np.float32)}, attrs)


# ---------------------------------------------------------------------------------------
# refusals


@pytest.mark.parametrize("op,attrs,what", [
    ("Attention", {"num_heads": 2, "do_rotary": 1}, "do_rotary"),
    ("Attention", {"num_heads": 2, "qkv_hidden_sizes": [4, 6, 4]}, "qkv_hidden_sizes"),
    ("Attention", {"num_heads": 2, "unidirectional": 2}, "unidirectional"),
    ("Attention", {}, "num_heads"),
])
def test_refusals(op, attrs, what):
    rng = np.random.default_rng(0)
    m = _model(op, {"x": f32(rng, 1, 2, 4), "w": f32(rng, 4, 12)}, attrs)
    with pytest.raises(GraphError, match=rf"\(Attention\).*{what}"):
        run_reference(load_onnx(m), {"x": f32(rng, 1, 2, 4), "w": f32(rng, 4, 12)})


# ---------------------------------------------------------------------------------------
# end to end: a tiny BERT optimized by onnxruntime's transformer optimizer


def _tiny_bert(path):
    torch = pytest.importorskip("torch")
    from torch import nn
    h, heads, vocab = 32, 4, 50

    class Layer(nn.Module):
        def __init__(self):
            super().__init__()
            self.q, self.k, self.v, self.o = (nn.Linear(h, h) for _ in range(4))
            self.ln1, self.ln2 = nn.LayerNorm(h, eps=1e-12), nn.LayerNorm(h, eps=1e-12)
            self.f1, self.f2 = nn.Linear(h, 4 * h), nn.Linear(4 * h, h)

        def forward(self, x, mask):
            b, t, _ = x.shape

            def split(y):
                return y.view(b, t, heads, h // heads).permute(0, 2, 1, 3)
            q, k, v = split(self.q(x)), split(self.k(x)).permute(0, 1, 3, 2), split(self.v(x))
            a = torch.softmax(torch.matmul(q, k) / 2.8284271247461903 + mask, -1)
            c = torch.matmul(a, v).permute(0, 2, 1, 3).reshape(b, t, h)
            x = self.ln1(x + self.o(c))
            return self.ln2(x + self.f2(nn.functional.gelu(self.f1(x))))

    class Bert(nn.Module):
        def __init__(self):
            super().__init__()
            self.w, self.p, self.t = nn.Embedding(vocab, h), nn.Embedding(16, h), nn.Embedding(2, h)
            self.ln = nn.LayerNorm(h, eps=1e-12)
            self.layers = nn.ModuleList(Layer() for _ in range(2))

        def forward(self, ids, tt, am):
            pos = torch.arange(ids.shape[1]).unsqueeze(0)
            x = self.ln(self.w(ids) + self.p(pos) + self.t(tt))
            m = (1.0 - am[:, None, None, :].float()) * -10000.0
            for layer in self.layers:
                x = layer(x, m)
            return x

    torch.manual_seed(0)
    ids = torch.randint(0, vocab, (2, 7))
    names = ["input_ids", "token_type_ids", "attention_mask"]
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        torch.onnx.export(Bert().eval(), (ids, ids % 2, torch.ones_like(ids)), str(path),
                          input_names=names, output_names=["out"], opset_version=14,
                          dynamic_axes={n: {0: "b", 1: "s"} for n in names}, dynamo=False)


def test_optimized_tiny_bert(tmp_path):
    import pyge
    optimizer = pytest.importorskip("onnxruntime.transformers.optimizer")
    path = tmp_path / "bert.onnx"
    _tiny_bert(path)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        m = optimizer.optimize_model(str(path), model_type="bert", num_heads=4, hidden_size=32,
                                     opt_level=0, use_gpu=False).model
    ops = {n.op_type for n in m.graph.node if n.domain == MS}
    assert {"EmbedLayerNormalization", "Attention", "SkipLayerNormalization",
            "BiasGelu"} <= ops, ops
    so = ort.SessionOptions()
    so.log_severity_level = 3
    sess = ort.InferenceSession(m.SerializeToString(), so, providers=["CPUExecutionProvider"])
    compiled = pyge.compile(load_onnx(m))
    rng = np.random.default_rng(0)
    for b, s in [(2, 7), (3, 5), (1, 9)]:
        feeds = {"input_ids": rng.integers(0, 50, (b, s)),
                 "token_type_ids": rng.integers(0, 2, (b, s)),
                 "attention_mask": np.ones((b, s), np.int64)}
        feeds["attention_mask"][0, s - 2:] = 0
        exp = sess.run(None, feeds)[0]
        got = np.asarray(compiled.run(dict(feeds))["out"])
        np.testing.assert_allclose(got, exp, **TOL)


@pytest.mark.parametrize("seed", range(16))
def test_group_query_attention(seed):
    # a first prompt (no past) or decoding steps after an exact-length past; rotary,
    # softcap, local windows and packed QKV on some seeds
    rng = np.random.default_rng(900 + seed)
    b, kv_heads, g = int(rng.integers(1, 4)), int(rng.integers(1, 3)), int(rng.integers(1, 3))
    heads, hs = kv_heads * g, 16 * int(rng.integers(1, 3))  # ORT (rotary): head_size % 16 == 0
    prompt = seed % 2 == 0
    # ORT: more than one new token after a past only with batch 1
    s = int(rng.integers(1, 6)) if prompt else (int(rng.integers(1, 3)) if b == 1 else 1)
    p = 0 if prompt else int(rng.integers(1, 5))
    total = p + s
    attrs = {"num_heads": heads, "kv_num_heads": kv_heads}
    if seed % 3 == 1:
        attrs["softcap"] = 2.0
    if seed % 5 == 2:
        attrs["local_window_size"] = 2
    rotary = seed % 4 >= 2
    if rotary:
        attrs.update(do_rotary=1, rotary_interleaved=seed % 8 >= 4)
    theta = rng.uniform(0, 6, (16, hs // 2))
    q, k, v = f32(rng, b, s, heads * hs), f32(rng, b, s, kv_heads * hs), f32(rng, b, s, kv_heads * hs)
    packed = seed % 7 == 3
    inputs = {"q": np.concatenate([q, k, v], -1) if packed else q,
              "k": None if packed else k, "v": None if packed else v,
              "past_k": f32(rng, b, kv_heads, p, hs), "past_v": f32(rng, b, kv_heads, p, hs),
              "seqlens": np.full(b, total - 1, np.int32),
              "total": np.array(total, np.int32),
              "cos": np.cos(theta).astype(np.float32) if rotary else None,
              "sin": np.sin(theta).astype(np.float32) if rotary else None}
    check("GroupQueryAttention", inputs, attrs, n_out=3)


@pytest.mark.parametrize("decode", [False, True])
def test_group_query_attention_ragged(decode):
    # per-batch lengths: a right-padded first prompt (seqlens_k < S - 1), or one new token
    # after pasts of different lengths in a longer buffer (the present is zero past them)
    rng = np.random.default_rng(950 + decode)
    b, kv, heads, hs = 3, 1, 2, 16
    s, p = (1, 6) if decode else (5, 0)
    seq = np.array([3, 5, 1] if decode else [4, 2, 3], np.int32)
    inputs = {"q": f32(rng, b, s, heads * hs), "k": f32(rng, b, s, kv * hs),
              "v": f32(rng, b, s, kv * hs),
              "past_k": f32(rng, b, kv, p, hs) if decode else None,
              "past_v": f32(rng, b, kv, p, hs) if decode else None,
              "seqlens": seq, "total": np.array(6 if decode else s, np.int32)}
    check("GroupQueryAttention", inputs, {"num_heads": heads, "kv_num_heads": kv}, n_out=3)


@pytest.mark.parametrize("attrs,what", [
    ({"num_heads": 3, "kv_num_heads": 2}, "kv_num_heads"),
    ({"num_heads": 2, "kv_num_heads": 1, "smooth_softmax": 1}, "smooth_softmax"),
])
def test_group_query_attention_refusals(attrs, what):
    rng = np.random.default_rng(0)
    inputs = {"q": f32(rng, 1, 2, 32), "k": f32(rng, 1, 2, 16), "v": f32(rng, 1, 2, 16),
              "past_k": None, "past_v": None, "seqlens": np.array([1], np.int32),
              "total": np.array(2, np.int32)}
    m = _model("GroupQueryAttention", inputs, attrs)
    feeds = {n: a for n, a in inputs.items() if a is not None}
    with pytest.raises(GraphError, match=rf"\(GroupQueryAttention\).*{what}"):
        run_reference(load_onnx(m), feeds)
