"""Neural-network kernels: Softmax family, MatMul, Gemm, normalisations, LRN, Dropout and
the global pools. Convolutions are in nn_conv.py, windowed pools in nn_pool.py."""
from __future__ import annotations

import math

import numpy as np
import torch
import torch.nn.functional as F

from ._util import FLOAT_TYPES, node_error, norm_axis, scalar
from .onednn import MKLDNN, PACKED_LINEAR_OK, Derived
from .registry import register

# ---------------------------------------------------------------------------------------
# Softmax / LogSoftmax / Hardmax


def _softmax_family(op):
    def factory(ctx):
        if ctx.opset >= 13:
            axis = ctx.attr("axis", -1)
            return lambda xs: [op(xs[0], axis)]
        # Opset < 13: coerce to 2-D at `axis` (default 1) and normalise each row.
        axis = ctx.attr("axis", 1)

        def fn(xs):
            x = xs[0]
            ax = norm_axis(axis, x.ndim) if x.ndim else 0
            if ax >= x.ndim - 1:  # rows are the last axis already: no reshape needed
                return [op(x, -1)]
            rows = x.reshape(math.prod(x.shape[:ax]), math.prod(x.shape[ax:]))
            return [op(rows, 1).reshape(x.shape)]
        return fn
    return factory


def _hardmax(x, axis):
    ax = norm_axis(axis, x.ndim)
    if x.numel() == 0:  # (argmax refuses an empty axis)
        return torch.zeros_like(x)
    idx = torch.argmax(x, ax, keepdim=True)  # first index among ties
    return torch.zeros_like(x).scatter_(ax, idx, 1)


register("Softmax")(_softmax_family(torch.softmax))
register("LogSoftmax")(_softmax_family(torch.log_softmax))
register("Hardmax")(_softmax_family(_hardmax))

# ---------------------------------------------------------------------------------------
# MatMul / Gemm


@register("MatMul")
def matmul(ctx):
    linear = _packed_linear(ctx, 1, False)
    if linear is None:
        return lambda xs: [torch.matmul(xs[0], xs[1])]

    def fn(xs):
        y = linear(xs[0], xs[1], None)
        return [y if y is not None else torch.matmul(xs[0], xs[1])]
    return fn


def _packed_linear(ctx, b_index: int, transposed: bool):
    """For a float32 matrix product on the CPU whose weight (input `b_index`) is a 2-D
    constant: fn(a, b, bias) -> a @ B (+ bias) by oneDNN on the packed weight, or None where
    that does not apply. `transposed`: B is given as (N, K), as Gemm's transB=1 has it."""
    w = ctx.const_input(b_index)
    if not PACKED_LINEAR_OK or torch.device(ctx.device).type != "cpu" or w is None \
            or w.ndim != 2 or w.dtype != np.float32:
        return None
    packed = Derived()

    def fn(a, b, bias):
        if a.dtype != torch.float32 or a.ndim < 2 or b.dtype != torch.float32 or b.requires_grad:
            return None
        # Packed once, for the first call's row count: a packing made for another batch
        # size still runs, on large weights still well ahead of torch.addmm
        # (bench_kernels_cpu.py's batch-8 rows reuse the batch-1 packing), while repacking
        # whenever the batch changes would reorder the whole weight per call.
        wp = packed.get((b,), None, lambda: MKLDNN._reorder_linear_weight(
            b if transposed else b.t().contiguous(), a.numel() // max(a.shape[-1], 1)))
        return MKLDNN._linear_pointwise(a, wp, bias, "none", [], "")
    return fn


@register("Gemm")
def gemm(ctx):
    alpha, beta = ctx.attr("alpha", 1.0), ctx.attr("beta", 1.0)
    ta, tb = ctx.attr("transA", 0), ctx.attr("transB", 0)
    has_c = ctx.has_input(2) and beta != 0.0
    linear = _packed_linear(ctx, 1, bool(tb)) if alpha == 1.0 and not ta \
        and (not has_c or beta == 1.0) else None

    def fn(xs):
        a, b = xs[0], xs[1]
        if linear is not None:
            c = xs[2] if has_c else None
            n = b.shape[0] if tb else b.shape[-1]
            # A bias oneDNN can take: one value per output column.
            if c is None or (c.dtype == torch.float32 and c.numel() == n
                             and (c.ndim == 1 or (c.ndim == 2 and c.shape[0] == 1))):
                y = linear(a, b, None if c is None else c.reshape(n))
                if y is not None:
                    return [y]
        a = a.T if ta else a
        b = b.T if tb else b
        if has_c and xs[2] is not None:
            if a.dtype in FLOAT_TYPES:
                # One fused BLAS call; addmm broadcasts C to (M, N).
                return [torch.addmm(xs[2], a, b, beta=beta, alpha=alpha)]
            if (alpha, beta) == (1, 1):
                return [a @ b + xs[2]]
            # Integer types: float alpha/beta must not promote the result (it stays T).
            return [((a @ b) * alpha + xs[2] * beta).to(a.dtype)]
        out = torch.mm(a, b) if a.dtype in FLOAT_TYPES else a @ b
        return [(out * alpha).to(out.dtype) if alpha != 1.0 else out]
    return fn


# ---------------------------------------------------------------------------------------
# Normalisations


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


@register("Dropout")
def dropout(ctx):
    n_out = ctx.num_outputs
    # The mask is bool from opset 10, the data's type before.
    bool_mask = ctx.opset >= 10
    ratio_attr = ctx.attr("ratio", 0.5)
    train_attr = ctx.opset < 7 and not ctx.attr("is_test", 0)
    inputs_form = ctx.opset >= 12  # ratio and training_mode became inputs
    # Inference (training_mode absent, or a constant false) never reads the ratio: no host
    # read of a device value, which a CUDA graph capture would refuse.
    training_const = ctx.const_input(2) if inputs_form else None
    inference = inputs_form and (not ctx.has_input(2) or (
        training_const is not None and training_const.size > 0 and not training_const.reshape(-1)[0]))

    def fn(xs):
        x = xs[0]
        training = train_attr
        ratio = ratio_attr
        if inference:
            training = False
        elif inputs_form:
            training = len(xs) > 2 and xs[2] is not None and bool(scalar(xs[2]))
            ratio = scalar(xs[1]) if training and len(xs) > 1 and xs[1] is not None else 0.5
        if not training or ratio == 0:
            if n_out == 1:
                return [x]
            mask = torch.ones(x.shape, dtype=torch.bool if bool_mask else x.dtype, device=x.device)
            return [x, mask]
        keep = torch.rand(x.shape, device=x.device) >= ratio
        y = x * keep / (1.0 - ratio)
        return [y, keep if bool_mask else keep.to(x.dtype)][:n_out]
    return fn


# ---------------------------------------------------------------------------------------
# Global pools


@register("GlobalAveragePool")
def global_avg_pool(ctx):
    def fn(xs):
        x = xs[0]
        if x.ndim == 4:
            if x.is_floating_point() and not x.is_contiguous() \
                    and x.is_contiguous(memory_format=torch.channels_last):
                # Channels-last (the CPU convolutions' output): avg_pool2d over the whole
                # plane sums each channel in one order. adaptive_avg_pool2d would not (vector
                # lanes and the tail differ: identical channels, different means), and a
                # copy to NCHW first costs 10-30x the pool.
                return [F.avg_pool2d(x, tuple(x.shape[2:]))]
            return [F.adaptive_avg_pool2d(x, 1)]
        return [x.mean(tuple(range(2, x.ndim)), keepdim=True)]
    return fn


@register("GlobalMaxPool")
def global_max_pool(ctx):
    return lambda xs: [torch.amax(xs[0], tuple(range(2, xs[0].ndim)), keepdim=True)]


@register("GlobalLpPool", since=2)
def global_lp_pool(ctx):
    p = ctx.attr("p", 2)

    def fn(xs):
        x = xs[0]
        dims = tuple(range(2, x.ndim))
        return [torch.sum(torch.abs(x) ** p, dims, keepdim=True) ** (1.0 / p)]
    return fn
