"""Less common normalisations and activations: GroupNormalization, RMSNormalization,
LpNormalization, MeanVarianceNormalization, Swish."""
from __future__ import annotations

import torch
import torch.nn.functional as F

from ._util import norm_axis
from .registry import register


def _stash(x, stash_type):
    # stash_type=1: statistics in float32 even for half-precision inputs.
    return x.float() if stash_type == 1 and x.dtype in (torch.float16, torch.bfloat16) else x


@register("GroupNormalization", since=18)
def group_norm(ctx):
    groups = ctx.attr("num_groups")
    eps = ctx.attr("epsilon", 1e-5)
    per_group_params = ctx.opset < 21  # opset 18 scales per group, 21 per channel
    stash = ctx.attr("stash_type", 1)

    def fn(xs):
        x, scale, bias = xs
        c = x.shape[1]
        if per_group_params:
            scale = scale.repeat_interleave(c // groups)
            bias = bias.repeat_interleave(c // groups)
        xf = _stash(x, stash)
        y = F.group_norm(xf, groups, None, None, eps).to(x.dtype)
        shape = (1, c) + (1,) * (x.ndim - 2)
        return [y * scale.reshape(shape) + bias.reshape(shape)]
    return fn


@register("RMSNormalization", since=23)
def rms_norm(ctx):
    axis = ctx.attr("axis", -1)
    eps = ctx.attr("epsilon", 1e-5)
    stash = ctx.attr("stash_type", 1)

    def fn(xs):
        x, scale = xs
        ax = norm_axis(axis, x.ndim)
        xf = _stash(x, stash)
        ms = (xf * xf).mean(tuple(range(ax, x.ndim)), keepdim=True)
        return [(xf * torch.rsqrt(ms + eps)).to(x.dtype) * scale]
    return fn


@register("LpNormalization")
def lp_norm(ctx):
    axis, p = ctx.attr("axis", -1), ctx.attr("p", 2)

    def fn(xs):
        x = xs[0]
        norm = torch.linalg.vector_norm(x, p, dim=axis, keepdim=True)
        return [x / torch.where(norm == 0, 1, norm)]  # an all-zero slice stays zero
    return fn


@register("MeanVarianceNormalization", since=9)
def mvn(ctx):
    axes = tuple(ctx.attr("axes", [0, 2, 3]))

    def fn(xs):
        x = xs[0]
        mean = x.mean(axes, keepdim=True)
        var = (x * x).mean(axes, keepdim=True) - mean * mean
        return [(x - mean) / (torch.sqrt(var) + 1e-9)]
    return fn


@register("Swish", since=24)
def swish(ctx):
    alpha = ctx.attr("alpha", 1.0)
    if alpha == 1.0:
        return lambda xs: [F.silu(xs[0])]
    return lambda xs: [xs[0] * torch.sigmoid(xs[0] * alpha)]
