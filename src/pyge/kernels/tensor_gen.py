"""Kernels that make tensors: Constant, ConstantOfShape, Range, EyeLike, Trilu, CumSum/CumProd,
DepthToSpace / SpaceToDepth."""
from __future__ import annotations

import numpy as np
import torch

from ._util import const_tensor, held, int_input, ints, node_error, norm_axis, onnx_dtype, scalar
from .registry import register


@register("Constant")
def constant(ctx):
    a = ctx.node.attrs
    if "value" in a:
        arr = np.asarray(a["value"])
    elif "value_float" in a:
        arr = np.array(a["value_float"], dtype=np.float32)
    elif "value_floats" in a:
        arr = np.array(a["value_floats"], dtype=np.float32)
    elif "value_int" in a:
        arr = np.array(a["value_int"], dtype=np.int64)
    elif "value_ints" in a:
        arr = np.array(a["value_ints"], dtype=np.int64)
    elif "value_string" in a:
        arr = np.array(a["value_string"], dtype=object)
    elif "value_strings" in a:
        arr = np.array(a["value_strings"], dtype=object)
    elif "sparse_value" in a:
        raise node_error(ctx, "sparse_value constants are not supported")
    else:
        raise node_error(ctx, "no value attribute")
    val = held(const_tensor(arr, ctx.device))
    # Built once; every run returns the same (never mutated) tensor.
    return lambda xs: [val]


@register("ConstantOfShape", since=9)
def constant_of_shape(ctx):
    v = ctx.attr("value")
    v = np.zeros(1, dtype=np.float32) if v is None else np.asarray(v).reshape(-1)
    fill = const_tensor(v, "cpu")
    dtype, item = fill.dtype, fill[0].item() if fill.numel() else 0
    dev = ctx.device
    shape, dyn = int_input(ctx, 0)
    if not dyn:
        # Constant shape: the output is a constant, built once (weights of the "light"
        # model zoo files are made this way).
        val = held(torch.full(shape, item, dtype=dtype, device=dev))
        return lambda xs: [val]
    return lambda xs: [torch.full(ints(xs[0]), item, dtype=dtype, device=dev)]


@register("Range", since=11)
def range_(ctx):
    def fn(xs):
        start, limit, delta = xs
        dtype = start.dtype
        s, l, d = scalar(start), scalar(limit), scalar(delta)
        n = max(int(np.ceil((l - s) / d)), 0)
        if dtype.is_floating_point:
            # start + i * delta, as the ONNX definition states (no accumulated rounding).
            out = torch.arange(n, dtype=torch.float64, device=start.device) * d + s
            return [out.to(dtype)]
        return [torch.arange(s, s + n * d, d, dtype=dtype, device=start.device)[:n]]
    return fn


@register("EyeLike", since=9)
def eye_like(ctx):
    k = ctx.attr("k", 0)
    dt = ctx.attr("dtype")
    dtype = onnx_dtype(ctx, dt) if dt is not None else None

    def fn(xs):
        x = xs[0]
        n, m = x.shape
        out = torch.zeros((n, m), dtype=dtype or x.dtype, device=x.device)
        if -n < k < m:
            out.diagonal(k).fill_(1)
        return [out]
    return fn


@register("Trilu", since=14)
def trilu(ctx):
    upper = ctx.attr("upper", 1)
    k, dyn = int_input(ctx, 1)
    op = torch.triu if upper else torch.tril

    def fn(xs):
        kk = ints(xs[1])[0] if dyn else (k[0] if k else 0)
        return [op(xs[0], kk)]
    return fn


def _cumulative(op, identity):
    def factory(ctx):
        exclusive, reverse = ctx.attr("exclusive", 0), ctx.attr("reverse", 0)
        axis, dyn = int_input(ctx, 1)

        def fn(xs):
            x = xs[0]
            ax = norm_axis(ints(xs[1])[0] if dyn else axis[0], x.ndim)
            if reverse:
                x = x.flip(ax)
            out = op(x, ax, dtype=x.dtype)  # torch would widen small ints to int64
            if exclusive:
                # Shift by one instead of undoing the last step (exact for floats too).
                n = out.shape[ax]
                first = torch.full_like(out.narrow(ax, 0, min(1, n)), identity)
                out = torch.cat([first, out.narrow(ax, 0, max(n - 1, 0))], dim=ax)
            return [out.flip(ax) if reverse else out]
        return fn
    return factory


register("CumSum", since=11)(_cumulative(torch.cumsum, 0))
register("CumProd", since=26)(_cumulative(torch.cumprod, 1))


@register("DepthToSpace")
def depth_to_space(ctx):
    bs = ctx.attr("blocksize")
    crd = ctx.attr("mode", "DCR") == "CRD"

    def fn(xs):
        x = xs[0]
        b, c, h, w = x.shape
        if crd:
            y = x.reshape(b, c // (bs * bs), bs, bs, h, w).permute(0, 1, 4, 2, 5, 3)
        else:
            y = x.reshape(b, bs, bs, c // (bs * bs), h, w).permute(0, 3, 4, 1, 5, 2)
        return [y.reshape(b, c // (bs * bs), h * bs, w * bs)]
    return fn


@register("SpaceToDepth")
def space_to_depth(ctx):
    bs = ctx.attr("blocksize")
    perm = (0, 1, 3, 5, 2, 4) if ctx.attr("mode", "DCR") == "CRD" else (0, 3, 5, 1, 2, 4)

    def fn(xs):
        x = xs[0]
        b, c, h, w = x.shape
        y = x.reshape(b, c, h // bs, bs, w // bs, bs).permute(perm)
        return [y.reshape(b, c * bs * bs, h // bs, w // bs)]
    return fn
