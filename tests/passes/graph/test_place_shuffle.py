"""A channel shuffle moved below the strided depthwise convolution that reads it
(passes/graph/place_shuffle.py).

Every model is an ONNX file run by onnxruntime as written (the oracle) and by pyge; shapes
come from a seed per case. The convolution's weights and bias are random per channel, so a
wrong permutation of them changes the numbers. The patterns that must stay as they are
(stride 1, a depth multiplier, a grouped but not depthwise convolution, a second reader of
the shuffled tensor, a weight that is not constant) are compiled too and must keep the
shuffle before the convolution.
"""
from __future__ import annotations

import numpy as np
import onnxruntime as ort
import pytest
from onnx import TensorProto as TP
from onnx import helper, numpy_helper

import pyge
from pyge.passes.graph import place_shuffle

SINGLE = {"ge.enableSingleStream": "true"}


def _model(seed=0, *, c=12, g=3, h=9, w=7, k=3, stride=2, pad=1, mult=1, group=None, bn=True,
           relu=False, extra_use=False, weight_input=False, side=False, cin=32, pre_group=2,
           pre_k=1, pre_twice=False):
    """x -> Conv (pre_group groups, pre_k x pre_k) -> Relu -> Reshape/Transpose/Reshape
    shuffle -> depthwise Conv [-> BN] [-> Relu] -> grouped 1x1 Conv -> y; side: a second
    branch from x, for several streams; pre_twice: the pre Conv's result read again. By
    default pre has 16 channels per group (DENSE_BELOW), so the shuffle is not folded."""
    rng = np.random.default_rng(seed)
    n = 1 + seed % 2
    group = c if group is None else group
    inits = {"w0": rng.standard_normal((c, cin // pre_group, pre_k, pre_k)),
             "b0": rng.standard_normal(c),
             "s1": np.array([n, g, c // g, h, w]), "s2": np.array([n, c, h, w]),
             "wd": rng.standard_normal((c * mult, c // group, k, k)),
             "bd": rng.standard_normal(c * mult),
             "w2": rng.standard_normal((c, c * mult // g, 1, 1)), "b2": rng.standard_normal(c)}
    nodes = [helper.make_node("Conv", ["x", "w0", "b0"], ["c0"], name="pre", group=pre_group,
                              pads=[pre_k // 2] * 4),
             helper.make_node("Relu", ["c0"], ["r0"], name="pre_relu"),
             helper.make_node("Reshape", ["r0", "s1"], ["t1"], name="split"),
             helper.make_node("Transpose", ["t1"], ["t2"], name="swap", perm=[0, 2, 1, 3, 4]),
             helper.make_node("Reshape", ["t2", "s2"], ["shuf"], name="merge"),
             helper.make_node("Conv", ["shuf", "wd", "bd"], ["d"], name="dw", group=group,
                              kernel_shape=[k, k], strides=[stride, stride], pads=[pad] * 4)]
    cur = "d"
    if bn:
        cm = c * mult
        inits.update(gamma=rng.uniform(0.5, 2, cm), beta=rng.standard_normal(cm),
                     mean=rng.standard_normal(cm), var=rng.uniform(0.5, 2, cm))
        nodes.append(helper.make_node("BatchNormalization", [cur, "gamma", "beta", "mean", "var"],
                                      ["dbn"], name="bn"))
        cur = "dbn"
    if relu:
        nodes.append(helper.make_node("Relu", [cur], ["drelu"], name="dw_relu"))
        cur = "drelu"
    nodes.append(helper.make_node("Conv", [cur, "w2", "b2"], ["y"], name="post", group=g))
    outs = [helper.make_tensor_value_info("y", TP.FLOAT, None)]
    if pre_twice:
        nodes.append(helper.make_node("Sigmoid", ["c0"], ["p"], name="pre_again"))
        outs.append(helper.make_tensor_value_info("p", TP.FLOAT, None))
    if extra_use:
        nodes.append(helper.make_node("ReduceMean", ["shuf"], ["m"], name="mean", keepdims=1))
        outs.append(helper.make_tensor_value_info("m", TP.FLOAT, None))
    if side:
        inits["ws"] = rng.standard_normal((4, cin, 3, 3))
        nodes.append(helper.make_node("Conv", ["x", "ws"], ["sc"], name="side", pads=[1] * 4))
        nodes.append(helper.make_node("Relu", ["sc"], ["s"], name="side_relu"))
        outs.append(helper.make_tensor_value_info("s", TP.FLOAT, None))
    ins = [helper.make_tensor_value_info("x", TP.FLOAT, [n, cin, h, w])]
    if weight_input:
        ins.append(helper.make_tensor_value_info("wd", TP.FLOAT, list(inits["wd"].shape)))
    feeds = {"x": rng.standard_normal((n, cin, h, w)).astype(np.float32)}
    if weight_input:
        feeds["wd"] = inits.pop("wd").astype(np.float32)
    tensors = [numpy_helper.from_array(v.astype(np.int64 if v.dtype.kind == "i" else np.float32), k_)
               for k_, v in inits.items()]
    g_ = helper.make_graph(nodes, "sink", ins, outs, tensors)
    m = helper.make_model(g_, opset_imports=[helper.make_opsetid("", 13)], ir_version=8)
    return m, feeds


def _where(cm) -> str:
    """'folded' (no shuffle left), 'moved' (after the depthwise conv) or 'kept'."""
    order = {n.name: i for i, n in enumerate(cm.plan.nodes)}
    ops = {n.name: n.op_type for n in cm.plan.nodes}
    if "split" not in ops:
        assert "ChannelShuffle" not in ops.values(), ops
        return "folded"
    assert ops["split"] == "ChannelShuffle", ops
    return "moved" if order["split"] > order["dw"] else "kept"


def _compare(m, feeds, where, options=None):
    cm = pyge.compile(pyge.load_onnx(m), options=options)
    assert _where(cm) == where
    want = ort.InferenceSession(m.SerializeToString(), providers=["CPUExecutionProvider"]).run(
        None, feeds)
    got = cm.run(feeds)
    for o, w in zip(m.graph.output, want):
        np.testing.assert_allclose(got[o.name], w, rtol=1e-4, atol=1e-4, err_msg=o.name)
    return cm, got


@pytest.mark.parametrize("seed", range(3))
@pytest.mark.parametrize("kw", [dict(), dict(c=16, g=4, h=10, w=10), dict(c=24, g=4, h=8, w=13),
                                dict(c=18, g=2, h=11, w=11, k=5, pad=2), dict(bn=False),
                                dict(stride=3, pad=0, h=12, w=10), dict(relu=True),
                                dict(c=136, g=4, h=28, w=28)])
def test_moved_below_strided_depthwise_conv_matches_onnxruntime(seed, kw):
    m, feeds = _model(seed, **kw)
    _compare(m, feeds, "moved")


def test_the_move_leaves_the_bits_unchanged(monkeypatch):
    m, feeds = _model(1, c=136, g=4, h=28, w=28)
    moved = pyge.compile(pyge.load_onnx(m), options=SINGLE)
    monkeypatch.setattr(place_shuffle, "sink_channel_shuffle", lambda graph: 0)
    kept = pyge.compile(pyge.load_onnx(m), options=SINGLE)
    assert _where(moved) == "moved" and _where(kept) == "kept"
    np.testing.assert_array_equal(moved.run(feeds)["y"], kept.run(feeds)["y"])


@pytest.mark.parametrize("kw", [dict(stride=1), dict(mult=2), dict(group=6),
                                dict(extra_use=True), dict(weight_input=True)])
def test_patterns_left_alone(kw):
    m, feeds = _model(2, **kw)
    _compare(m, feeds, "kept")


# fewer than DENSE_BELOW input channels per group (shufflenet's first unit: 24 in, 4
# groups), or a dense producer of any kernel size: the shuffle goes into its weights
@pytest.mark.parametrize("seed", range(3))
@pytest.mark.parametrize("kw", [dict(cin=24, pre_group=4, c=16, g=4),
                                dict(cin=24, pre_group=4, c=112, g=4, h=14, w=14),
                                dict(cin=30, pre_group=2, c=18, g=3), dict(cin=5, pre_group=1),
                                dict(cin=5, pre_group=1, pre_k=3),
                                dict(cin=24, pre_group=4, c=16, g=4, stride=1, relu=True)])
def test_folded_into_the_convolution_before_matches_onnxruntime(seed, kw):
    m, feeds = _model(seed, **kw)
    cm, _ = _compare(m, feeds, "folded")
    assert "split" in cm.graph.node("pre").attrs["_datadump_original_op_names"]
    assert "pre+split" in cm.graph.metadata["fused"] and cm.stream_of("split") == cm.stream_of("pre")


@pytest.mark.parametrize("kw", [dict(cin=32, pre_group=2), dict(cin=24, pre_group=4, pre_k=3),
                                dict(cin=24, pre_group=4, pre_twice=True)])
def test_not_folded(kw):
    m, feeds = _model(1, c=16, g=4, **kw)
    _compare(m, feeds, "moved")


def test_multi_stream_equals_single_stream():
    m, feeds = _model(0, c=24, g=4, h=14, w=14, side=True)
    _, single = _compare(m, feeds, "moved", options=SINGLE)
    for opts in ({}, {"ge.autoMultistreamParallelMode": "LoadBalance:2"}):
        cm, got = _compare(m, feeds, "moved", options=opts)
        for k, v in single.items():
            np.testing.assert_allclose(got[k], v, rtol=1e-6, atol=1e-6, err_msg=k)


def test_fusion_off_keeps_the_graph():
    m, feeds = _model(0)
    cm = pyge.compile(pyge.load_onnx(m), options={"ge.exec.enableFusion": "false"})
    assert "ChannelShuffle" not in [n.op_type for n in cm.plan.nodes]
    want = ort.InferenceSession(m.SerializeToString(), providers=["CPUExecutionProvider"]).run(
        None, feeds)
    np.testing.assert_allclose(cm.run(feeds)["y"], want[0], rtol=1e-4, atol=1e-4)
