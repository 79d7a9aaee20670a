"""Pool(Concat(parts)) on the channel axis run as Concat(Pool(part), ...)
(passes/graph/pool_concat.py). Models run by onnxruntime as written (the oracle) and by
pyge; the patterns that must stay (another axis, a Concat read twice or a graph output, a
pool that keeps the map's size, MaxPool with Indices) are compiled too."""
from __future__ import annotations

import numpy as np
import onnxruntime as ort
import pytest
from onnx import TensorProto as TP
from onnx import helper, numpy_helper

import pyge
from pyge.passes.graph import pool_concat

SINGLE = {"ge.enableSingleStream": "true"}


def _model(seed=0, *, pool="MaxPool", parts=2, axis=1, stride=2, pad=0, k=3, twice=False,
           concat_out=False, indices=False, side=False):
    """x -> Conv_i -> Relu (parts of 3+i channels) -> Concat -> pool -> Tanh -> y."""
    rng = np.random.default_rng(seed)
    n, cin, h, w = 1 + seed % 2, 3, 11 + seed, 9 + seed
    inits, nodes, names = [], [], []
    for i in range(parts):
        c = 3 + i if axis == 1 else 4
        inits.append(numpy_helper.from_array(rng.standard_normal((c, cin, 3, 3)).astype(np.float32),
                                             f"w{i}"))
        nodes += [helper.make_node("Conv", ["x", f"w{i}"], [f"c{i}"], name=f"conv{i}", pads=[1] * 4),
                  helper.make_node("Relu", [f"c{i}"], [f"r{i}"], name=f"relu{i}")]
        names.append(f"r{i}")
    nodes.append(helper.make_node("Concat", names, ["cat"], name="cat", axis=axis))
    outs = ["p", "idx"] if indices else ["p"]
    if pool in ("MaxPool", "AveragePool"):
        nodes.append(helper.make_node(pool, ["cat"], outs, name="pool", kernel_shape=[k, k],
                                      strides=[stride, stride], pads=[pad] * 4))
    else:
        nodes.append(helper.make_node(pool, ["cat"], ["p"], name="pool"))
    nodes.append(helper.make_node("Tanh", ["p"], ["y"], name="tanh"))
    g_outs = [helper.make_tensor_value_info("y", TP.FLOAT, None)]
    if indices:
        g_outs.append(helper.make_tensor_value_info("idx", TP.INT64, None))
    if twice:
        nodes.append(helper.make_node("Sigmoid", ["cat"], ["s"], name="again"))
        g_outs.append(helper.make_tensor_value_info("s", TP.FLOAT, None))
    if concat_out:
        g_outs.append(helper.make_tensor_value_info("cat", TP.FLOAT, None))
    if side:
        nodes.append(helper.make_node("Sigmoid", ["x"], ["sx"], name="side"))
        g_outs.append(helper.make_tensor_value_info("sx", TP.FLOAT, None))
    graph = helper.make_graph(nodes, "pool_concat",
                              [helper.make_tensor_value_info("x", TP.FLOAT, [n, cin, h, w])],
                              g_outs, inits)
    m = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 13)], ir_version=8)
    return m, {"x": rng.standard_normal((n, cin, h, w)).astype(np.float32)}


def _compare(m, feeds, moved, options=None):
    cm = pyge.compile(pyge.load_onnx(m), options=options)
    order = [n.name for n in cm.plan.nodes]
    assert (order.index("cat") > order.index("pool")) is moved, order
    want = ort.InferenceSession(m.SerializeToString(), providers=["CPUExecutionProvider"]).run(
        None, feeds)
    got = cm.run(feeds)
    for o, w in zip(m.graph.output, want):
        np.testing.assert_allclose(got[o.name], w, rtol=1e-5, atol=1e-5, err_msg=o.name)
    return cm, got


@pytest.mark.parametrize("seed", range(3))
@pytest.mark.parametrize("kw", [dict(), dict(parts=3), dict(pad=1), dict(pool="AveragePool"),
                                dict(pool="AveragePool", pad=1, k=2), dict(pool="GlobalAveragePool"),
                                dict(pool="GlobalMaxPool"), dict(axis=-3)])
def test_pooled_parts_match_onnxruntime(seed, kw):
    m, feeds = _model(seed, **kw)
    cm, _ = _compare(m, feeds, moved=True)
    parts = [n for n in cm.plan.nodes if n.name.startswith("pool")]
    assert len(parts) == kw.get("parts", 2)
    assert all("pool" in cm.graph.node(n.name).attrs.get("_datadump_original_op_names", ["pool"])
               for n in parts)
    assert cm.stream_of("pool") >= 0


def test_the_same_bits(monkeypatch):
    m, feeds = _model(1, parts=3, pad=1)
    moved = pyge.compile(pyge.load_onnx(m), options=SINGLE)
    monkeypatch.setattr(pool_concat, "pool_before_concat", lambda graph: 0)
    kept = pyge.compile(pyge.load_onnx(m), options=SINGLE)
    np.testing.assert_array_equal(moved.run(feeds)["y"], kept.run(feeds)["y"])


@pytest.mark.parametrize("kw", [dict(axis=2), dict(twice=True), dict(concat_out=True),
                                dict(stride=1, pad=1), dict(indices=True)])
def test_left_alone(kw):
    m, feeds = _model(2, **kw)
    _compare(m, feeds, moved=False)


def test_multi_stream_equals_single_stream():
    m, feeds = _model(0, parts=3, side=True)
    _, single = _compare(m, feeds, True, options=SINGLE)
    for opts in ({}, {"ge.autoMultistreamParallelMode": "LoadBalance:2"}):
        _, got = _compare(m, feeds, True, options=opts)
        for k, v in single.items():
            np.testing.assert_allclose(got[k], v, rtol=1e-6, atol=1e-6, err_msg=k)


def test_fusion_off_keeps_the_order():
    m, feeds = _model(0)
    _compare(m, feeds, moved=False, options={"ge.exec.enableFusion": "false"})
