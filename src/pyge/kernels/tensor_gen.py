"""Kernels that make tensors from attributes and shapes: Constant, ConstantOfShape, Range,
EyeLike, and Trilu (a matrix's upper or lower triangle)."""
from __future__ import annotations

import numpy as np
import torch

from ._util import const_tensor, held, int_input, ints, node_error, onnx_dtype, scalar
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
