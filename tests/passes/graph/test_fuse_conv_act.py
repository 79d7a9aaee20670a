"""Conv(+Add)(+Relu) fusion into FusedConv: same numbers, names kept, only where safe."""
from __future__ import annotations

import numpy as np
import pytest

import pyge


def _graph(add: bool, relu: bool, extra_use: bool = False, add_op: str = "Add"):
    rng = np.random.default_rng(0)
    b = pyge.GraphBuilder("car")
    x = b.input("x", "float32", (1, 4, 8, 8))
    w = b.initializer("w", rng.standard_normal((4, 4, 3, 3)).astype(np.float32))
    bias = b.initializer("b", rng.standard_normal(4).astype(np.float32))
    y = b.op("Conv", [x, w, bias], name="conv", pads=[1, 1, 1, 1])
    if add:
        y = b.op(add_op, [y, x], name="add")
    if relu:
        y = b.op("Relu", [y], name="relu")
    b.output(y)
    if extra_use:
        b.output(b.graph.node("conv").outputs[0])
    return b.build()


FEEDS = {"x": np.random.default_rng(1).standard_normal((1, 4, 8, 8)).astype(np.float32)}


@pytest.mark.parametrize("add, relu, nodes", [(True, True, ["conv"]), (True, False, ["conv"]),
                                              (False, True, ["conv"])])
def test_fused_matches_unfused(add, relu, nodes):
    g = _graph(add, relu)
    fused = pyge.compile(g)
    plain = pyge.compile(g, options={"ge.exec.enableFusion": "false"})
    assert [n.name for n in fused.plan.nodes] == nodes
    assert fused.plan.nodes[0].op_type == "FusedConv"
    assert fused.stream_of("conv") == 0
    out_f, out_p = fused.run(FEEDS), plain.run(FEEDS)
    assert out_f.keys() == out_p.keys()
    for k in out_p:
        np.testing.assert_allclose(out_f[k], out_p[k], rtol=1e-5, atol=1e-5)


def test_two_input_sum_fuses_like_add():
    g = _graph(True, True, add_op="Sum")
    fused = pyge.compile(g)
    plain = pyge.compile(g, options={"ge.exec.enableFusion": "false"})
    assert [n.op_type for n in fused.plan.nodes] == ["FusedConv"]
    np.testing.assert_allclose(fused.run(FEEDS)["relu_out"], plain.run(FEEDS)["relu_out"], rtol=1e-5, atol=1e-5)


def test_not_fused_when_the_conv_output_is_read_twice():
    m = pyge.compile(_graph(True, True, extra_use=True))
    assert "FusedConv" not in [n.op_type for n in m.plan.nodes]


def test_fused_graph_dumps_and_saves(tmp_path):
    m = pyge.compile(_graph(True, True))
    m.save(tmp_path / "m.pgm")
    m2 = pyge.load_model(tmp_path / "m.pgm")
    np.testing.assert_array_equal(m2.run(FEEDS)["relu_out"], m.run(FEEDS)["relu_out"])
