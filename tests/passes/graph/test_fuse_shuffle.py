"""Reshape -> Transpose -> Reshape channel shuffles fused into pyge.ChannelShuffle."""
from __future__ import annotations

import numpy as np
import pytest
import torch

import pyge
from pyge.passes.graph import place_shuffle

RNG = np.random.default_rng(0)
N, C, H, W, G = 2, 12, 5, 4, 3


def _graph(perm=(0, 2, 1, 3, 4), split=(N, G, C // G, H, W), extra_use=False, conv=False):
    b = pyge.GraphBuilder("shuffle")
    x = b.input("x", "float32", (N, C, H, W))
    if conv:   # a channels-last producer, as in shufflenet
        wt = b.initializer("w", RNG.standard_normal((C, C, 1, 1)).astype(np.float32))
        x = b.op("Conv", [x, wt], name="conv")
    s1 = b.initializer("s1", np.array(split, dtype=np.int64))
    s2 = b.initializer("s2", np.array([N, -1, H, W], dtype=np.int64))
    r1 = b.op("Reshape", [x, s1], name="split")
    t = b.op("Transpose", [r1], name="swap", perm=list(perm))
    r2 = b.op("Reshape", [t, s2], name="merge")
    b.output(b.op("Relu", [r2], name="after"))
    if extra_use:
        b.output(t)
    return b.build()


def _feeds():
    return {"x": RNG.standard_normal((N, C, H, W)).astype(np.float32)}


@pytest.mark.parametrize("conv", [False, True])
def test_fused_shuffle_is_bit_identical(conv, monkeypatch):
    # place_shuffle would fold the shuffle into the convolution's weights
    monkeypatch.setattr(place_shuffle, "place_channel_shuffle", lambda graph: 0)
    g = _graph(conv=conv)
    fused = pyge.compile(g)
    plain = pyge.compile(g, options={"ge.exec.enableFusion": "false"})
    ops = [(n.name, n.op_type) for n in fused.plan.nodes]
    assert ("split", "ChannelShuffle") in ops and not any(t in ("Reshape", "Transpose") for _, t in ops)
    feeds = _feeds()
    a, b = fused.run(feeds)["after_out"], plain.run(feeds)["after_out"]
    np.testing.assert_array_equal(a, b)
    if not conv:   # and it is the permutation the ONNX graph describes
        x = feeds["x"]
        want = np.maximum(x.reshape(N, G, C // G, H, W).transpose(0, 2, 1, 3, 4).reshape(N, C, H, W), 0)
        np.testing.assert_array_equal(a, want)
    assert "split+swap+merge" in fused.graph.metadata["fused"]


@pytest.mark.parametrize("kw", [dict(perm=(0, 1, 2, 4, 3)), dict(extra_use=True),
                                dict(split=(N, C // G, G, W, H))])
def test_other_patterns_are_left_alone(kw):
    g = _graph(**kw)
    m = pyge.compile(g)
    assert "ChannelShuffle" not in [n.op_type for n in m.plan.nodes]
    plain = pyge.compile(g, options={"ge.exec.enableFusion": "false"})
    feeds = _feeds()
    for k, v in plain.run(feeds).items():
        np.testing.assert_array_equal(m.run(feeds)[k], v)


def test_kernel_keeps_channels_last():
    from pyge.kernels.fused import channel_shuffle
    from pyge.kernels.registry import KernelContext
    b = pyge.GraphBuilder("k")
    x = b.input("x", "float32", (1, 8, 3, 3))
    b.output(b.op("ChannelShuffle", [x], name="cs", domain="pyge", groups=2))
    node = b.build().nodes[0]
    fn = channel_shuffle(KernelContext(node=node, opset=1, device="cpu", compile_subgraph=None,
                                       implicit_names=[]))
    t = torch.arange(72, dtype=torch.float32).reshape(1, 8, 3, 3).contiguous(memory_format=torch.channels_last)
    y = fn([t])[0]
    assert y.is_contiguous(memory_format=torch.channels_last)
    assert y[0, :, 0, 0].tolist() == [t[0, c, 0, 0].item() for c in (0, 4, 1, 5, 2, 6, 3, 7)]
