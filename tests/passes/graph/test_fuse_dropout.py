"""Inference Dropout nodes leave the graph, their names kept by their producers
(passes/graph/fuse_dropout.py). Models run by onnxruntime as written (the oracle) and by
pyge; the Dropouts that must stay (training, a read mask, a shared or graph-input operand)
are compiled too."""
from __future__ import annotations

import numpy as np
import onnxruntime as ort
import pytest
from onnx import TensorProto as TP
from onnx import helper, numpy_helper

import pyge

RNG = np.random.default_rng(0)


def _model(opset=13, *, mask=True, mask_out=False, training=None, training_input=False,
           twice=False, from_input=False, as_output=False):
    """x -> Conv -> c -> Dropout [mask] -> d -> Relu -> y (d itself the output: as_output)."""
    inits = [numpy_helper.from_array(RNG.standard_normal((4, 3, 3, 3)).astype(np.float32), "w")]
    ins = [helper.make_tensor_value_info("x", TP.FLOAT, [1, 3, 6, 6])]
    nodes = [helper.make_node("Conv", ["x", "w"], ["c"], name="conv", pads=[1] * 4)]
    d_in = ["x" if from_input else "c"]
    if opset >= 12 and (training is not None or training_input):
        d_in += ["", "t"]
        if training_input:
            ins.append(helper.make_tensor_value_info("t", TP.BOOL, []))
        else:
            inits.append(numpy_helper.from_array(np.array(training), "t"))
    attrs = {"is_test": 1} if opset < 7 else {}
    nodes.append(helper.make_node("Dropout", d_in, ["d", "m"] if mask else ["d"], name="drop", **attrs))
    outs = []
    if as_output:
        outs.append(helper.make_tensor_value_info("d", TP.FLOAT, None))
    else:
        nodes.append(helper.make_node("Relu", ["d"], ["y"], name="relu"))
        outs.append(helper.make_tensor_value_info("y", TP.FLOAT, None))
    if mask_out:
        outs.append(helper.make_tensor_value_info("m", TP.BOOL if opset >= 10 else TP.FLOAT, None))
    if twice:
        nodes.append(helper.make_node("Tanh", ["c"], ["t2"], name="again"))
        outs.append(helper.make_tensor_value_info("t2", TP.FLOAT, None))
    g = helper.make_graph(nodes, "dropout", ins, outs, inits)
    m = helper.make_model(g, opset_imports=[helper.make_opsetid("", opset)], ir_version=8)
    feeds = {"x": RNG.standard_normal((1, 3, 6, 6)).astype(np.float32)}
    if training_input:
        feeds["t"] = np.array(False)
    return m, feeds


def _compile(m, options=None):
    cm = pyge.compile(pyge.load_onnx(m), options=options)
    return cm, "Dropout" in [n.op_type for n in cm.plan.nodes]


@pytest.mark.parametrize("kw", [dict(), dict(mask=False), dict(training=False), dict(opset=10),
                                dict(opset=7), dict(as_output=True)])
def test_removed_and_matches_onnxruntime(kw):
    m, feeds = _model(**kw)
    cm, kept = _compile(m)
    assert not kept
    assert "drop" in cm.graph.node("conv").attrs["_datadump_original_op_names"]
    assert cm.stream_of("drop") == cm.stream_of("conv")
    want = ort.InferenceSession(m.SerializeToString(), providers=["CPUExecutionProvider"]).run(
        None, feeds)
    got = cm.run(feeds)
    for o, w in zip(m.graph.output, want):
        np.testing.assert_allclose(got[o.name], w, rtol=1e-5, atol=1e-5, err_msg=o.name)


def test_opset_6_with_is_test():
    m, feeds = _model(opset=6)
    cm, kept = _compile(m)
    plain, _ = _compile(m, {"ge.exec.enableFusion": "false"})
    assert not kept
    np.testing.assert_array_equal(cm.run(feeds)["y"], plain.run(feeds)["y"])


@pytest.mark.parametrize("kw", [dict(mask_out=True), dict(training=True), dict(training_input=True),
                                dict(twice=True), dict(from_input=True)])
def test_kept(kw):
    m, feeds = _model(**kw)
    cm, kept = _compile(m)
    assert kept
    if not kw.get("training"):   # (training draws a random mask)
        want = ort.InferenceSession(m.SerializeToString(), providers=["CPUExecutionProvider"]).run(
            None, feeds)
        got = cm.run(feeds)
        for o, w in zip(m.graph.output, want):
            np.testing.assert_allclose(got[o.name], w, rtol=1e-5, atol=1e-5, err_msg=o.name)


def test_fusion_off_keeps_the_dropout():
    m, _ = _model()
    assert _compile(m, {"ge.exec.enableFusion": "false"})[1]
