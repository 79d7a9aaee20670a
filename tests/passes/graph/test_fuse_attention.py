"""MatMul -> [scale] -> [Add mask] -> Softmax -> MatMul fused into one Attention node.

Every model is an ONNX file run by onnxruntime as written (the oracle) and by pyge with the
fusion; random shapes from a seed per case. The patterns that must not fuse (softmax on
another axis, a scale that is not a constant, a score or probability tensor read elsewhere,
a mask broadcast over the keys, broadcast batches, a scale applied after the mask, a
negative scale, no key transpose) are compiled too and must keep their MatMul/Softmax.
"""
from __future__ import annotations

import io
import warnings

import numpy as np
import onnx
import onnxruntime as ort
import pytest
import torch
import torch.nn.functional as F
from onnx import TensorProto as TP
from onnx import helper, numpy_helper

import pyge
from pyge.passes.graph.fuse_attention import ORIGINAL_NAMES

_TP = {np.float32: TP.FLOAT, np.float64: TP.DOUBLE, np.float16: TP.FLOAT16}


def _model(seed=0, *, rank=4, hk=None, perm=None, q_scale=None, k_scale=None, k_scale_first=False,
           post=None, mask=None, mask_first=False, axis=-1, opset=17, dtype=np.float32,
           scale_input=False, scores_out=False, probs_out=False, mask_after_scale=True,
           kt_input=False, kb=None, pv_swapped=False, b=None):
    """An attention graph in ONNX and its random feeds. `mask` is a shape (or None) in which
    "L"/"S" stand for the query/key lengths; `post` is ("Mul"|"Div", c) on the scores."""
    rng = np.random.default_rng(seed)
    b, h = b or int(rng.integers(1, 3)), int(rng.integers(1, 4))
    lq, lk, d = int(rng.integers(2, 8)), int(rng.integers(2, 9)), int(rng.choice([4, 8]))
    hk = h if hk is None else hk
    lead_q = (b, h) if rank == 4 else (b,)
    lead_k = ((kb or b), hk) if rank == 4 else ((kb or b),)
    perm = list(perm or range(rank - 2)) + ([rank - 1, rank - 2] if perm is None else [])
    kt_shape = lead_k + (d, lk)
    k0_shape = [0] * rank
    for i, p in enumerate(perm):
        k0_shape[p] = kt_shape[i]
    t = _TP[dtype]
    nodes, inits = [], []
    ins = {"q": lead_q + (lq, d), "v": lead_k + (lk, d + 1)}
    ins["kt" if kt_input else "k"] = kt_shape if kt_input else tuple(k0_shape)

    def const(name, value):
        inits.append(numpy_helper.from_array(np.asarray(value, dtype=dtype), name))
        return name

    q = "q"
    if q_scale is not None:
        nodes.append(helper.make_node("Mul", ["q", const("cq", q_scale)], ["qs"], name="q_mul"))
        q = "qs"
    if kt_input:
        kt = "kt"
    else:
        k = "k"
        if k_scale is not None and k_scale_first:
            nodes.append(helper.make_node("Mul", ["k", const("ck", k_scale)], ["ks"], name="k_mul"))
            k = "ks"
        nodes.append(helper.make_node("Transpose", [k], ["kt"], name="k_tr", perm=perm))
        kt = "kt"
        if k_scale is not None and not k_scale_first:
            nodes.append(helper.make_node("Mul", ["kt", const("ck", k_scale)], ["kts"], name="k_mul"))
            kt = "kts"
    nodes.append(helper.make_node("MatMul", [q, kt], ["s"], name="qk"))
    cur = "s"

    def scale_node(cur):
        if scale_input:
            ins["c"] = ()
            nodes.append(helper.make_node("Mul", [cur, "c"], [cur + "_sc"], name="scale"))
        elif post is not None:
            nodes.append(helper.make_node(post[0], [cur, const("cs", post[1])], [cur + "_sc"],
                                          name="scale"))
        else:
            return cur
        return cur + "_sc"

    if mask_after_scale:
        cur = scale_node(cur)
    if mask is not None:
        ms = tuple({"L": lq, "S": lk, "B": b, "H": h}.get(m, m) for m in mask)
        ins["m"] = ms
        nodes.append(helper.make_node("Add", ["m", cur] if mask_first else [cur, "m"], ["sm_in"],
                                      name="add_mask"))
        cur = "sm_in"
    if not mask_after_scale:
        cur = scale_node(cur)
    nodes.append(helper.make_node("Softmax", [cur], ["p"], name="softmax", axis=axis))
    nodes.append(helper.make_node("MatMul", ["v", "p"] if pv_swapped else ["p", "v"], ["y"],
                                  name="pv"))
    outs = [helper.make_tensor_value_info("y", t, None)]
    if scores_out:
        outs.append(helper.make_tensor_value_info("s", t, None))
    if probs_out:
        outs.append(helper.make_tensor_value_info("p", t, None))
    if pv_swapped:   # V is (…, S, dv) and p (…, L, S): give V a shape that multiplies p
        ins["v"] = lead_q + (d + 1, lq)
    g = helper.make_graph(nodes, "attn", [helper.make_tensor_value_info(n, t, s)
                                           for n, s in ins.items()], outs, inits)
    m = helper.make_model(g, opset_imports=[helper.make_opsetid("", opset)])
    m.ir_version = 9
    feeds = {n: rng.standard_normal(s).astype(dtype) for n, s in ins.items()}
    if "c" in feeds:
        feeds["c"] = np.asarray(0.3, dtype=dtype)
    return m, feeds


def _compare(m, feeds, fused=True, rtol=1e-4, atol=1e-5):
    cm = pyge.compile(pyge.load_onnx(m))
    ops = [n.op_type for n in cm.plan.nodes]
    if fused:
        assert "Attention" in ops and "Softmax" not in ops, ops
    else:
        assert "Attention" not in ops and "Softmax" in ops, ops
    want = ort.InferenceSession(m.SerializeToString(), providers=["CPUExecutionProvider"]).run(
        None, feeds)
    got = cm.run(feeds)
    for o, w in zip(m.graph.output, want):
        np.testing.assert_allclose(got[o.name], w, rtol=rtol, atol=atol, err_msg=o.name)
    return cm


# ---------------------------------------------------------------------------------------
# fused, and the same numbers as onnxruntime


@pytest.mark.parametrize("seed", range(3))
@pytest.mark.parametrize("kw", [
    {}, dict(post=("Mul", 0.125)), dict(post=("Div", 2.5)), dict(q_scale=0.5, k_scale=0.4),
    dict(q_scale=0.6, k_scale=0.5, k_scale_first=True, post=("Div", 0.9)),
    dict(perm=(0, 2, 3, 1)), dict(perm=(1, 0, 3, 2), k_scale=0.7, k_scale_first=True),
], ids=lambda kw: ",".join(f"{k}={v}" for k, v in kw.items()) or "plain")
def test_scales_and_key_transposes(seed, kw):
    _compare(*_model(seed, **kw))


@pytest.mark.parametrize("mask", [("L", "S"), ("B", 1, "L", "S"), (1, "H", "L", "S"),
                                  ("B", 1, 1, "S"), (1, "S")])
@pytest.mark.parametrize("mask_first", [False, True])
def test_masks(mask, mask_first):
    _compare(*_model(3, mask=mask, mask_first=mask_first, post=("Mul", 0.3)))


@pytest.mark.parametrize("mask", [None, ("L", "S"), (1, "L", "S")])
def test_three_d_is_attention_with_one_head(mask):
    cm = _compare(*_model(4, rank=3, mask=mask, post=("Div", 3.0)))
    node = next(n for n in cm.graph.nodes if n.op_type == "Attention")
    assert node.attrs["q_num_heads"] == node.attrs["kv_num_heads"] == 1


def test_one_key_head_broadcast_is_grouped_query_attention():
    _compare(*_model(5, hk=1, mask=("L", "S")))


def test_half_and_double():
    _compare(*_model(6, dtype=np.float64, post=("Mul", 0.2)), rtol=1e-10, atol=1e-12)
    # float16: Attention computes in float32 and rounds once; the unfused graph rounds often
    _compare(*_model(6, dtype=np.float16, post=("Mul", 0.2)), rtol=2e-2, atol=2e-3)


def test_softmax_axis_rank_minus_one_before_opset_13():
    _compare(*_model(7, opset=11, axis=3))
    _compare(*_model(7, opset=11, axis=1), fused=False)   # opset 11's default: not the last axis


def test_fused_node_names_domain_and_switch():
    m, feeds = _model(8, q_scale=0.5, k_scale=0.5, mask=("L", "S"), post=("Mul", 1.5))
    cm = pyge.compile(pyge.load_onnx(m))
    (node,) = [n for n in cm.graph.nodes if n.op_type == "Attention"]
    assert node.name == "qk" and node.domain == "pyge"      # opset 17 has no Attention
    assert node.attrs[ORIGINAL_NAMES] == ["qk", "q_mul", "k_tr", "k_mul", "scale", "add_mask",
                                          "softmax", "pv"]
    assert node.attrs["scale"] == pytest.approx(0.375)
    assert node.outputs[0].name == "y"
    assert "qk+q_mul+k_tr" in cm.graph.metadata["fused"]
    assert [n.op_type for n in cm.plan.nodes] == ["Attention"]   # K's transpose was the swap
    plain = pyge.compile(pyge.load_onnx(m), options={"ge.exec.enableFusion": "false"})
    assert "Attention" not in [n.op_type for n in plain.plan.nodes]
    np.testing.assert_allclose(cm.run(feeds)["y"], plain.run(feeds)["y"], rtol=1e-5, atol=1e-6)


def test_opset_23_graph_gets_the_onnx_op_and_a_kept_transpose():
    m, feeds = _model(9, opset=23, perm=(0, 2, 3, 1))
    cm = _compare(m, feeds)
    (node,) = [n for n in cm.graph.nodes if n.op_type == "Attention"]
    assert node.domain == ""
    tr = node.inputs[1].producer
    assert tr.op_type == "Transpose" and tr.attrs["perm"] == [0, 2, 1, 3]


def test_fully_masked_rows_become_zeros_not_nan():
    # The one deliberate difference: Attention (and torch's SDPA) give 0 for a row that may
    # attend no key; Softmax over a row of -inf gives NaN.
    m, feeds = _model(10, mask=("L", "S"))
    feeds["m"][1] = -np.inf
    want = ort.InferenceSession(m.SerializeToString(), providers=["CPUExecutionProvider"]).run(
        None, feeds)[0]
    got = pyge.compile(pyge.load_onnx(m)).run(feeds)["y"]
    assert np.isnan(want[..., 1, :]).all() and (got[..., 1, :] == 0).all()
    keep = [i for i in range(want.shape[-2]) if i != 1]
    np.testing.assert_allclose(got[..., keep, :], want[..., keep, :], rtol=1e-4, atol=1e-5)


# ---------------------------------------------------------------------------------------
# not fused


@pytest.mark.parametrize("kw", [
    dict(axis=2),                                   # softmax over the queries
    dict(scale_input=True),                         # a scale that is not a constant
    dict(scores_out=True),                          # the scores are read elsewhere
    dict(probs_out=True),                           # so are the probabilities
    dict(mask=("L", 1)),                            # a mask broadcast over the keys
    dict(kb=1, b=2),                                # K's batch broadcast against Q's
    dict(mask=("L", "S"), mask_after_scale=False, post=("Mul", 0.5)),  # (s + m) * c
    dict(post=("Mul", -0.5)),                       # a negative scale
    dict(kt_input=True),                            # K^T from nowhere: no transpose to undo
    dict(pv_swapped=True),                          # V @ P, not P @ V
    dict(rank=3, mask=("B", "L", "S"), b=2),        # 3-D mask with a batch: misaligned heads
], ids=lambda kw: ",".join(f"{k}={v}" for k, v in kw.items()))
def test_patterns_that_must_not_fuse(kw):
    _compare(*_model(11, **kw), fused=False)


def test_extra_consumer_of_the_scores_node():
    m, feeds = _model(12, post=("Mul", 0.5))
    m.graph.node.append(helper.make_node("ReduceMax", ["s_sc"], ["r"], name="peek", keepdims=1))
    m.graph.output.append(helper.make_tensor_value_info("r", TP.FLOAT, None))
    _compare(m, feeds, fused=False)


def test_scale_that_would_broadcast_the_scores():
    m, feeds = _model(13, rank=3, post=("Mul", 0.5))
    m.graph.initializer[0].CopyFrom(numpy_helper.from_array(np.full((1, 1, 1, 1), 0.5, np.float32),
                                                            "cs"))
    _compare(m, feeds, fused=False)


def test_two_layers_both_fuse():
    m, feeds = _model(14, post=("Mul", 0.5))
    g = m.graph
    # a second attention reading the first one's output as its queries
    g.node.extend([helper.make_node("Transpose", ["k"], ["kt2"], name="k_tr2", perm=[0, 1, 3, 2]),
                   helper.make_node("MatMul", ["y_q", "kt2"], ["s2"], name="qk2"),
                   helper.make_node("Softmax", ["s2"], ["p2"], name="softmax2", axis=-1),
                   helper.make_node("MatMul", ["p2", "v2"], ["y2"], name="pv2")])
    d = feeds["q"].shape[-1]
    g.node.insert(len(g.node) - 4, helper.make_node("Slice", ["y", "st", "en", "ax"], ["y_q"],
                                                    name="cut"))
    g.initializer.extend([numpy_helper.from_array(np.array([0], np.int64), n) for n in ("st", "ax")])
    g.initializer[-1].CopyFrom(numpy_helper.from_array(np.array([3], np.int64), "ax"))
    g.initializer.append(numpy_helper.from_array(np.array([d], np.int64), "en"))
    v2 = feeds["v"][..., :3]
    g.input.append(helper.make_tensor_value_info("v2", TP.FLOAT, v2.shape))
    g.output.append(helper.make_tensor_value_info("y2", TP.FLOAT, None))
    feeds["v2"] = np.ascontiguousarray(v2)
    cm = _compare(m, feeds)
    assert [n.op_type for n in cm.plan.nodes].count("Attention") == 2


# ---------------------------------------------------------------------------------------
# torch's own ONNX export of scaled_dot_product_attention


class _Sdpa(torch.nn.Module):
    def __init__(self, **kw):
        super().__init__()
        self.kw = kw

    def forward(self, q, k, v, *mask):
        return F.scaled_dot_product_attention(q, k, v, *mask, **self.kw)


@pytest.mark.parametrize("mask,kw", [(None, {}), ("float", {}), ("bool", {}), (None, dict(scale=0.3)),
                                     (None, dict(is_causal=True))])
def test_torch_onnx_export_fuses(mask, kw):
    rng = np.random.default_rng(15)
    q, k, v = (torch.from_numpy(rng.standard_normal(s).astype(np.float32))
               for s in ((2, 3, 5, 8), (2, 3, 7, 8), (2, 3, 7, 8)))
    args = (q, k, v)
    if mask == "float":
        args += (torch.from_numpy(rng.standard_normal((5, 7)).astype(np.float32)),)
    elif mask == "bool":
        # a row with no key: the exporter's Where(IsNaN(p), 0, p) gives zeros, as Attention
        bmask = torch.from_numpy(rng.random((5, 7)) > 0.3) | (torch.arange(7) == 0)
        bmask[2] = False
        args += (bmask,)
    m = _torch_export(_Sdpa(**kw), args)
    feeds = {i.name: a.numpy() for i, a in zip(m.graph.input, args)}
    cm = _compare(m, feeds)
    if mask == "bool":
        assert cm.graph.nodes[-1].attrs[ORIGINAL_NAMES][-3:] == ["/IsNaN", "/Where_1", "/MatMul_1"]
    with torch.no_grad():
        want = _Sdpa(**kw)(*args).numpy()
    np.testing.assert_allclose(cm.run(feeds)[m.graph.output[0].name], want, rtol=1e-4, atol=1e-5)


def test_nan_guard_read_elsewhere_is_not_fused():
    rng = np.random.default_rng(16)
    args = tuple(torch.from_numpy(rng.standard_normal(s).astype(np.float32))
                 for s in ((1, 2, 4, 8), (1, 2, 6, 8), (1, 2, 6, 8))) + (torch.rand(4, 6) > 0.5,)
    m = _torch_export(_Sdpa(), args)
    m.graph.output.append(helper.make_tensor_value_info("/IsNaN_output_0", TP.BOOL, None))
    _compare(m, {i.name: a.numpy() for i, a in zip(m.graph.input, args)}, fused=False)


def _torch_export(module, args) -> onnx.ModelProto:
    f = io.BytesIO()
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        torch.onnx.export(module, args, f, dynamo=False, opset_version=17)
    return onnx.load_from_string(f.getvalue())
