"""Conv+BatchNormalization fusion: same numbers, fewer nodes, names kept, switch honoured."""
from __future__ import annotations

import os

import numpy as np
import onnx
import pytest

import pyge

LIGHT = os.path.join(os.path.dirname(onnx.__file__), "backend", "test", "data", "light")


def _conv_bn(conv_out_used_twice: bool = False):
    rng = np.random.default_rng(0)
    b = pyge.GraphBuilder("cbn")
    x = b.input("x", "float32", (1, 3, 8, 8))
    w = b.initializer("w", rng.standard_normal((4, 3, 3, 3)).astype(np.float32))
    c = b.op("Conv", [x, w], name="conv", pads=[1, 1, 1, 1])
    params = [b.initializer(n, rng.uniform(0.5, 1.5, 4).astype(np.float32)) for n in ("g", "be", "m", "v")]
    y = b.op("BatchNormalization", [c, *params], name="bn", epsilon=1e-3)
    r = b.op("Relu", [y], name="relu")
    b.output(r)
    if conv_out_used_twice:
        b.output(c)
    return b.build()


def _feeds():
    return {"x": np.random.default_rng(1).standard_normal((1, 3, 8, 8)).astype(np.float32)}


def test_fused_matches_unfused_and_keeps_conv_name():
    g = _conv_bn()
    fused = pyge.compile(g)
    plain = pyge.compile(g, options={"ge.exec.enableFusion": "false"})
    assert [n.name for n in fused.plan.nodes] == ["conv"]   # BN folded, then Relu fused too
    assert [n.name for n in plain.plan.nodes] == ["conv", "bn", "relu"]
    a, b = fused.run(_feeds()), plain.run(_feeds())
    np.testing.assert_allclose(a["relu_out"], b["relu_out"], rtol=1e-5, atol=1e-5)
    assert "conv+bn" in fused.graph.metadata["fused"]


def test_not_fused_when_conv_output_is_also_read_elsewhere():
    m = pyge.compile(_conv_bn(conv_out_used_twice=True))
    assert "bn" in [n.name for n in m.plan.nodes]


@pytest.mark.parametrize("name", ["resnet50", "shufflenet"])
def test_light_models_same_outputs(name):
    """The final softmax of a light model is input-independent (constant weights), so the
    pooling and Concat outputs, which are not, are compared too (they are no fusion's
    intermediate, so exposing them blocks no fusion)."""
    g = pyge.load_onnx(os.path.join(LIGHT, f"light_{name}.onnx"))
    g.outputs.extend(n.outputs[0] for n in g.nodes if n.op_type in ("MaxPool", "AveragePool", "Concat"))
    feeds = {v.name: np.random.default_rng(0).standard_normal(v.shape).astype(np.float32) for v in g.inputs}
    fused = pyge.compile(g)
    plain = pyge.compile(g, options={"ge.exec.enableFusion": "false"})
    assert len(fused.plan.nodes) < len(plain.plan.nodes)
    out_f, out_p = fused.run(feeds), plain.run(feeds)
    assert len(out_p) > 2
    for k in out_p:
        np.testing.assert_allclose(out_f[k], out_p[k], rtol=1e-4, atol=1e-5)


def _conv_chain(ops, const_shape=(4, 1, 1), with_bn=True):
    """Conv -> [BN] -> ops (each (op_type, constant first?)) -> Relu, as Caffe exports write
    BatchNormalization + Scale."""
    rng = np.random.default_rng(2)
    b = pyge.GraphBuilder("chain")
    x = b.input("x", "float32", (1, 3, 8, 8))
    w = b.initializer("w", rng.standard_normal((4, 3, 3, 3)).astype(np.float32))
    bias = b.initializer("bias", rng.standard_normal(4).astype(np.float32))
    y = b.op("Conv", [x, w, bias], name="conv", pads=[1, 1, 1, 1])
    if with_bn:
        params = [b.initializer(n, rng.uniform(0.5, 1.5, 4).astype(np.float32)) for n in ("g", "be", "m", "v")]
        y = b.op("BatchNormalization", [y, *params], name="bn", epsilon=1e-3)
    for i, (op, const_first) in enumerate(ops):
        c = b.initializer(f"c{i}", rng.uniform(0.5, 1.5, const_shape).astype(np.float32))
        y = b.op(op, [c, y] if const_first else [y, c], name=f"{op.lower()}{i}")
    b.output(b.op("Relu", [y], name="relu"))
    return b.build()


@pytest.mark.parametrize("ops,shape", [
    ([("Mul", False), ("Add", True)], (4, 1, 1)),          # Caffe's Scale layer
    ([("Mul", True), ("Add", False)], (1, 4, 1, 1)),
    ([("Div", False), ("Sub", False)], (4, 1, 1)),
    ([("Mul", False)], ()),                                   # a scalar
])
def test_affine_chain_folds_into_conv(ops, shape):
    g = _conv_chain(ops, shape)
    fused = pyge.compile(g)
    plain = pyge.compile(g, options={"ge.exec.enableFusion": "false"})
    assert [n.name for n in fused.plan.nodes] == ["conv"]    # chain folded, Relu fused
    np.testing.assert_allclose(fused.run(_feeds())["relu_out"], plain.run(_feeds())["relu_out"],
                               rtol=1e-5, atol=1e-5)
    assert "conv+bn+" in fused.graph.metadata["fused"]
    assert set(fused.graph.initializers) == {"conv_W_folded", "conv_B_folded"}


@pytest.mark.parametrize("ops,shape", [
    ([("Sub", True)], (4, 1, 1)),           # c - x: not folded
    ([("Mul", False)], (4, 8, 1)),          # varies along H: not per channel
    ([("Add", False)], (2, 4, 1, 1)),       # would expand the batch
])
def test_chain_stops_at_what_is_not_a_per_channel_affine(ops, shape):
    g = _conv_chain(ops, shape)
    fused = pyge.compile(g)
    plain = pyge.compile(g, options={"ge.exec.enableFusion": "false"})
    assert [n.op_type for n in fused.plan.nodes][:1] == ["Conv"] and len(fused.plan.nodes) >= 2
    for k, v in plain.run(_feeds()).items():
        np.testing.assert_allclose(fused.run(_feeds())[k], v, rtol=1e-5, atol=1e-5)
