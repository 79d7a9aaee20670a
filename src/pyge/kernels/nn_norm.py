"""Normalisations: BatchNormalization, InstanceNormalization, LayerNormalization,
GroupNormalization, RMSNormalization, LpNormalization, MeanVarianceNormalization, and LRN
(local response normalisation across channels)."""
from __future__ import annotations

import math

import torch
import torch.nn.functional as F

from ._util import node_error, norm_axis
from .onednn import Derived
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


@register("BatchNormalization")
def batch_norm(ctx):
    eps = ctx.attr("epsilon", 1e-5)
    momentum = ctx.attr("momentum", 0.9)
    training = ctx.opset >= 14 and ctx.attr("training_mode", 0)
    spatial = ctx.attr("spatial", 1) if ctx.opset < 9 else 1
    n_out = ctx.num_outputs

    def params(x, xs):
        return [p if p.dtype == x.dtype else p.to(x.dtype) for p in xs[1:5]]

    if training:
        def fn_train(xs):
            x = xs[0]
            scale, bias, mean, var = params(x, xs)
            dims = [0] + list(range(2, x.ndim))
            bmean = x.mean(dims)
            bvar = x.var(dims, unbiased=False)
            shape = (1, -1) + (1,) * (x.ndim - 2)
            y = (x - bmean.reshape(shape)) / torch.sqrt(bvar.reshape(shape) + eps) \
                * scale.reshape(shape) + bias.reshape(shape)
            rm = mean * momentum + bmean * (1 - momentum)
            rv = var * momentum + bvar * (1 - momentum)
            return [y, rm, rv][:n_out]
        return fn_train

    # Inference with the usual constant parameters: y = x * a + b, with a and b computed
    # once per parameter set (kept while the same tensor objects come back, as initializers
    # do) and applied in one addcmul pass over x.
    affine = Derived()

    def fold(params, dtype):
        scale, bias, mean, var = (p.to(torch.float64) for p in params)
        a = scale / torch.sqrt(var + eps)
        return a.to(dtype), (bias - mean * a).to(dtype)

    def fn(xs):
        x = xs[0]
        if x.dtype in (torch.float32, torch.float64) and x.ndim >= 2 and xs[1].ndim == 1:
            a, b = affine.get(xs[1:5], x.dtype, lambda: fold(xs[1:5], x.dtype))
            shape = (1, -1) + (1,) * (x.ndim - 2)
            y = torch.addcmul(b.reshape(shape), x, a.reshape(shape))
            return [y, xs[3], xs[4], xs[3], xs[4]][:n_out]
        scale, bias, mean, var = params(x, xs)
        if spatial or scale.ndim == 1:
            y = F.batch_norm(x, mean, var, scale, bias, False, 0.0, eps)
        else:
            # spatial=0 (opset < 9): statistics per activation, broadcast over the batch.
            y = (x - mean) / torch.sqrt(var + eps) * scale + bias
        # Inference mode: optional statistics outputs echo the running ones.
        return [y, xs[3], xs[4], xs[3], xs[4]][:n_out]
    return fn


@register("InstanceNormalization", since=6)
def instance_norm(ctx):
    eps = ctx.attr("epsilon", 1e-5)

    def fn(xs):
        x = xs[0]
        if math.prod(x.shape[2:]) == 1:
            # One value per plane (torch's instance_norm refuses that): it is its own mean,
            # so the result is the bias (NaN/inf inputs still give NaN).
            shape = (1, -1) + (1,) * (x.ndim - 2)
            return [(x - x) / math.sqrt(eps) * xs[1].reshape(shape) + xs[2].reshape(shape)]
        return [F.instance_norm(x, weight=xs[1], bias=xs[2], eps=eps)]
    return fn


@register("LayerNormalization", since=17)
def layer_norm(ctx):
    axis = ctx.attr("axis", -1)
    eps = ctx.attr("epsilon", 1e-5)
    stash = ctx.attr("stash_type", 1)
    stat_dtype = {1: torch.float32, 16: torch.bfloat16}.get(stash)
    n_out = ctx.num_outputs

    def fn(xs):
        x, scale = xs[0], xs[1]
        bias = xs[2] if len(xs) > 2 else None
        ax = norm_axis(axis, x.ndim)
        nshape = tuple(x.shape[ax:])
        plain = tuple(scale.shape) == nshape and (bias is None or tuple(bias.shape) == nshape)
        if n_out == 1 and plain:
            return [F.layer_norm(x, nshape, scale, bias, eps)]
        # Statistics requested (or broadcasting params): compute them explicitly.
        xf = x.float() if stash == 1 and x.dtype in (torch.float16, torch.bfloat16) else x
        dims = tuple(range(ax, x.ndim))
        mean = xf.mean(dims, keepdim=True)
        inv = torch.rsqrt(xf.var(dims, unbiased=False, keepdim=True) + eps)
        y = ((xf - mean) * inv).to(x.dtype) * scale
        if bias is not None:
            y = y + bias
        if n_out > 1 and stat_dtype is not None and mean.dtype != stat_dtype:
            # Mean and InvStdDev have the stash type (float32 by default, also for double x).
            mean, inv = mean.to(stat_dtype), inv.to(stat_dtype)
        return [y, mean, inv][:n_out]
    return fn


@register("LRN")
def lrn(ctx):
    size = ctx.attr("size")
    if not size:
        raise node_error(ctx, "attribute 'size' is required")
    alpha, beta, bias = ctx.attr("alpha", 1e-4), ctx.attr("beta", 0.75), ctx.attr("bias", 1.0)
    # ONNX sums the squares of channels c - floor((size-1)/2) .. c + ceil((size-1)/2).
    # Summing shifted channel slices (size adds) is much faster on the CPU than torch's
    # local_response_norm (an avg_pool3d), and exact for even sizes too.
    offsets = [d for d in range(-((size - 1) // 2), size - (size - 1) // 2) if d != 0]

    def fn(xs):
        x = xs[0]
        c = x.shape[1]
        sq = x * x
        acc = sq.clone()
        for d in offsets:
            if abs(d) >= c:
                continue
            if d > 0:  # channel i also sums channel i + d
                acc[:, :c - d] += sq[:, d:]
            else:
                acc[:, -d:] += sq[:, :c + d]
        return [x / acc.mul_(alpha / size).add_(bias).pow_(beta)]
    return fn
