"""Kernels for nodes that pyge's own fusion passes create (domain "pyge")."""
from __future__ import annotations

import torch

from .registry import register


@register("MulAdd", domain="pyge")
def mul_add(ctx):
    """y = x * scale + shift [then ReLU] in one pass over x (a BatchNormalization that the
    model file already split into Mul and Add). Inputs: x, scale, shift; attribute relu."""
    relu = bool(ctx.attr("relu", 0))

    def fn(xs):
        y = torch.addcmul(xs[2], xs[0], xs[1])
        return [torch.relu_(y) if relu else y]
    return fn


@register("ChannelShuffle", domain="pyge")
def channel_shuffle(ctx):
    """Channel shuffle of an NCHW tensor (passes/graph/fuse_shuffle.py): output channel i*g + j is
    input channel j*(C/g) + i. torch's kernel keeps a channels-last input channels-last."""
    groups = int(ctx.attr("groups", 1))

    def fn(xs):
        return [torch.native_channel_shuffle(xs[0], groups)]
    return fn
