"""Relu(Concat(...)) taken by the convolutions that make the parts, the other parts known to
be >= 0 (passes/graph/fuse_concat_relu.py).

Every model is an ONNX file run by onnxruntime as written (the oracle) and by pyge; shapes
come from a seed per case. The patterns that must keep their Relu (a part that may be
negative, a convolution result read twice, a Concat result read twice) are compiled too.
"""
from __future__ import annotations

import numpy as np
import onnxruntime as ort
import pytest
from onnx import TensorProto as TP
from onnx import helper, numpy_helper

import pyge

SINGLE = {"ge.enableSingleStream": "true"}


def _model(seed=0, *, other="avgpool", first="conv", axis=1, conv_twice=False, concat_twice=False,
           side=False):
    """x -> Relu -> r; a = a Conv of r of stride 2 (then a Sigmoid: first='sigmoid');
    b = other of r (of x: other='..._of_x'); y = Relu(Concat(a, b) on `axis`); axis=-1:
    Concat(b, a) on axis 1."""
    rng = np.random.default_rng(seed)
    n, c, h, w = 1 + seed % 2, 4 + seed, 8 + seed, 9
    k = c if axis != 1 else 3 + seed
    inits = {"wa": rng.standard_normal((k, c, 3, 3)), "ba": rng.standard_normal(k),
             "wb": rng.standard_normal((c, c, 3, 3)), "bb": rng.standard_normal(c)}
    nodes = [helper.make_node("Relu", ["x"], ["r"], name="r")]
    if first == "conv":
        nodes.append(helper.make_node("Conv", ["r", "wa", "ba"], ["a"], name="a", strides=[2, 2],
                                      pads=[1] * 4))
    else:                                                 # a sigmoid after the conv: >= 0
        nodes += [helper.make_node("Conv", ["r", "wa", "ba"], ["a0"], name="a", strides=[2, 2],
                                   pads=[1] * 4),
                  helper.make_node("Sigmoid", ["a0"], ["a"], name="a_sig")]
    src = "x" if other.endswith("_of_x") else "r"
    kind = other.replace("_of_x", "")
    if kind == "avgpool":
        nodes.append(helper.make_node("AveragePool", [src], ["b"], name="b", kernel_shape=[3, 3],
                                      strides=[2, 2], pads=[1] * 4))
    elif kind == "maxpool":
        nodes.append(helper.make_node("MaxPool", [src], ["b"], name="b", kernel_shape=[3, 3],
                                      strides=[2, 2], pads=[1] * 4))
    elif kind == "conv":
        nodes.append(helper.make_node("Conv", [src, "wb", "bb"], ["b"], name="b", strides=[2, 2],
                                      pads=[1] * 4))
    parts = ["a", "b"] if axis >= 0 else ["b", "a"]
    nodes += [helper.make_node("Concat", parts, ["cat"], name="cat", axis=abs(axis)),
              helper.make_node("Relu", ["cat"], ["y"], name="final")]
    outs = [helper.make_tensor_value_info("y", TP.FLOAT, None)]
    if conv_twice:
        nodes.append(helper.make_node("Tanh", ["a"], ["t"], name="again"))
        outs.append(helper.make_tensor_value_info("t", TP.FLOAT, None))
    if concat_twice:
        outs.append(helper.make_tensor_value_info("cat", TP.FLOAT, None))
    if side:
        nodes += [helper.make_node("Conv", ["x", "wb", "bb"], ["s0"], name="side", pads=[1] * 4),
                  helper.make_node("Tanh", ["s0"], ["s"], name="side_tanh")]
        outs.append(helper.make_tensor_value_info("s", TP.FLOAT, None))
    g = helper.make_graph(nodes, "concat_relu",
                          [helper.make_tensor_value_info("x", TP.FLOAT, [n, c, h, w])], outs,
                          [numpy_helper.from_array(v.astype(np.float32), k_) for k_, v in inits.items()])
    m = helper.make_model(g, opset_imports=[helper.make_opsetid("", 13)], ir_version=8)
    return m, {"x": rng.standard_normal((n, c, h, w)).astype(np.float32)}


def _compare(m, feeds, fused, options=None):
    cm = pyge.compile(pyge.load_onnx(m), options=options)
    ops = {n.name: n.op_type for n in cm.plan.nodes}
    assert ("final" not in ops) is fused, ops
    want = ort.InferenceSession(m.SerializeToString(), providers=["CPUExecutionProvider"]).run(
        None, feeds)
    got = cm.run(feeds)
    for o, w in zip(m.graph.output, want):
        np.testing.assert_allclose(got[o.name], w, rtol=1e-4, atol=1e-4, err_msg=o.name)
    return cm, got


@pytest.mark.parametrize("seed", range(3))
@pytest.mark.parametrize("kw", [dict(), dict(other="maxpool"), dict(other="conv"), dict(axis=-1),
                                dict(axis=3), dict(first="sigmoid")])
def test_relu_taken_by_the_parts_matches_onnxruntime(seed, kw):
    m, feeds = _model(seed, **kw)
    cm, _ = _compare(m, feeds, fused=True)
    assert "final" in cm.graph.node("cat").attrs["_datadump_original_op_names"]
    assert cm.stream_of("final") == cm.stream_of("cat")
    if kw.get("first", "conv") == "conv":
        a = cm.graph.node("a")
        assert (a.op_type, a.attrs.get("activation")) == ("FusedConv", "Relu")


@pytest.mark.parametrize("kw", [dict(other="avgpool_of_x"), dict(other="maxpool_of_x"),
                                dict(conv_twice=True), dict(concat_twice=True)])
def test_relu_kept(kw):
    m, feeds = _model(1, **kw)
    _compare(m, feeds, fused=False)


def test_multi_stream_equals_single_stream():
    m, feeds = _model(2, other="conv", side=True)
    _, single = _compare(m, feeds, True, options=SINGLE)
    for opts in ({}, {"ge.autoMultistreamParallelMode": "LoadBalance:2"}):
        _, got = _compare(m, feeds, True, options=opts)
        for k, v in single.items():
            np.testing.assert_allclose(got[k], v, rtol=1e-6, atol=1e-6, err_msg=k)


def test_fusion_off_keeps_the_relu():
    m, feeds = _model(0)
    _compare(m, feeds, fused=False, options={"ge.exec.enableFusion": "false"})
