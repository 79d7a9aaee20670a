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


def _bn_scale(after_bn=("Mul", "Add"), relu=True):
    """Pool -> BatchNormalization -> Mul -> Add -> Relu (densenet121's pre-activation)."""
    b = pyge.GraphBuilder("bnscale")
    x = b.input("x", "float32", (1, 4, 5, 5))
    y = b.op("MaxPool", [x], name="pool", kernel_shape=[1, 1])
    params = [b.initializer(n, RNG.uniform(0.5, 1.5, 4).astype(np.float32)) for n in ("g", "be", "m", "v")]
    y = b.op("BatchNormalization", [y, *params], name="bn", epsilon=1e-5)
    for i, op in enumerate(after_bn):
        c = b.initializer(f"c{i}", RNG.uniform(0.5, 2, (4, 1, 1)).astype(np.float32))
        y = b.op(op, [y, c], name=f"{op.lower()}{i}")
    if relu:
        y = b.op("Relu", [y], name="relu")
    b.output(y)
    return b.build()


@pytest.mark.parametrize("after_bn", [("Mul", "Add"), ("Mul",), ("Add", "Div")])
def test_batchnorm_and_scale_become_one_muladd(after_bn):
    g = _bn_scale(after_bn)
    fused = pyge.compile(g)
    plain = pyge.compile(g, options={"ge.exec.enableFusion": "false"})
    assert [(n.name, n.op_type) for n in fused.plan.nodes] == [("pool", "MaxPool"), ("bn", "MulAdd")]
    np.testing.assert_allclose(fused.run(FEEDS)["relu_out"], plain.run(FEEDS)["relu_out"], rtol=1e-5, atol=1e-5)


def test_lone_batchnorm_is_left_to_its_kernel():
    m = pyge.compile(_bn_scale(after_bn=(), relu=False))
    assert [n.op_type for n in m.plan.nodes] == ["MaxPool", "BatchNormalization"]
