"""Mul+Add(+Relu) with constant operands fused into pyge.MulAdd: same numbers, names kept."""
from __future__ import annotations

import numpy as np
import pytest

import pyge

RNG = np.random.default_rng(0)
FEEDS = {"x": RNG.standard_normal((1, 4, 5, 5)).astype(np.float32)}


def _graph(relu: bool, scale_shape=(4, 1, 1), extra_use=False):
    b = pyge.GraphBuilder("aff")
    x = b.input("x", "float32", (1, 4, 5, 5))
    s = b.initializer("s", RNG.uniform(0.5, 2, scale_shape).astype(np.float32))
    t = b.initializer("t", RNG.standard_normal((4, 1, 1)).astype(np.float32))
    m = b.op("Mul", [x, s], name="mul")
    y = b.op("Add", [t, m], name="add")        # constant first: the order must not matter
    if relu:
        y = b.op("Relu", [y], name="relu")
    b.output(y)
    if extra_use:
        b.output(m)
    return b.build()


@pytest.mark.parametrize("relu", [False, True])
def test_fused_matches_unfused(relu):
    g = _graph(relu)
    fused = pyge.compile(g)
    plain = pyge.compile(g, options={"ge.exec.enableFusion": "false"})
    assert [(n.name, n.op_type) for n in fused.plan.nodes] == [("mul", "MulAdd")]
    out = "relu_out" if relu else "add_out"
    np.testing.assert_allclose(fused.run(FEEDS)[out], plain.run(FEEDS)[out], rtol=1e-6, atol=1e-6)


def test_not_fused_when_the_constant_would_expand_x():
    m = pyge.compile(_graph(False, scale_shape=(2, 4, 1, 1)))
    assert "MulAdd" not in [n.op_type for n in m.plan.nodes]


def test_not_fused_when_the_product_is_read_twice():
    m = pyge.compile(_graph(True, extra_use=True))
    assert "MulAdd" not in [n.op_type for n in m.plan.nodes]
