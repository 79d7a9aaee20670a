"""Windowed pooling: MaxPool (with Indices), AveragePool, LpPool.

ONNX pads may be asymmetric and larger than torch allows, and its ceil_mode output size
differs from torch's in corner cases. So the output geometry is computed the ONNX way
first; torch's pooling with its own padding/ceil_mode is used when it yields exactly that
geometry (the common case, and the fast one), otherwise the input is padded explicitly.
"""
from __future__ import annotations

import math

import torch
import torch.nn.functional as F

from ._util import node_error
from .registry import register

_MAX = {1: F.max_pool1d, 2: F.max_pool2d, 3: F.max_pool3d}
_AVG = {1: F.avg_pool1d, 2: F.avg_pool2d, 3: F.avg_pool3d}
_CONV = {1: F.conv1d, 2: F.conv2d, 3: F.conv3d}


class _Attrs:
    __slots__ = ("k", "s", "d", "pads", "auto_pad", "ceil")

    def __init__(self, ctx, dilations=True):
        self.k = list(ctx.attr("kernel_shape") or [])
        if not self.k:
            raise node_error(ctx, "attribute 'kernel_shape' is required")
        n = len(self.k)
        if n not in _MAX:
            raise node_error(ctx, f"{n}-D pooling is not supported (1-D to 3-D are)")
        self.s = list(ctx.attr("strides") or [1] * n)
        self.d = list(ctx.attr("dilations") or [1] * n) if dilations else [1] * n
        self.pads = list(ctx.attr("pads") or [0] * (2 * n))
        self.auto_pad = ctx.attr("auto_pad", "NOTSET") or "NOTSET"
        self.ceil = bool(ctx.attr("ceil_mode", 0))


def _geometry(a: _Attrs, in_sp):
    """ONNX output sizes and (begin, end) pads for input spatial sizes `in_sp`."""
    out, pb, pe = [], [], []
    n = len(a.k)
    for i, size in enumerate(in_sp):
        ek = (a.k[i] - 1) * a.d[i] + 1
        s = a.s[i]
        if a.auto_pad in ("SAME_UPPER", "SAME_LOWER"):
            o = -(-size // s)
            total = max((o - 1) * s + ek - size, 0)
            small, big = total // 2, total - total // 2
            b, e = (small, big) if a.auto_pad == "SAME_UPPER" else (big, small)
        elif a.auto_pad == "VALID":
            o, b, e = (size - ek) // s + 1, 0, 0
        else:
            b, e = a.pads[i], a.pads[i + n]
            num = size + b + e - ek
            if a.ceil:
                o = -(-num // s) + 1
                if (o - 1) * s >= size + b:  # the last window must start inside
                    o -= 1
            else:
                o = num // s + 1
        out.append(o)
        pb.append(b)
        pe.append(e)
    return out, pb, pe


def _torch_mode(a: _Attrs, in_sp, out, pb, pe, symmetric_only: bool):
    """ceil_mode for torch's own pooling with padding=pb if that gives `out`, else None."""
    if any(p > k // 2 for p, k in zip(pb, a.k)) or (symmetric_only and pb != pe):
        return None
    for ceil in (False, True):
        ok = True
        for i, size in enumerate(in_sp):
            ek = (a.k[i] - 1) * a.d[i] + 1
            num = size + 2 * pb[i] - ek
            o = (-(-num // a.s[i]) if ceil else num // a.s[i]) + 1
            if ceil and (o - 1) * a.s[i] >= size + pb[i]:
                o -= 1
            if o != out[i]:
                ok = False
                break
        if ok:
            return ceil
    return None


def _fpad(pairs) -> list[int]:
    """Per-axis (begin, end) pairs, first spatial axis first -> F.pad's list (last axis first)."""
    return [v for b, e in reversed(list(pairs)) for v in (b, e)]


def _explicit_pads(a: _Attrs, in_sp, out, pb):
    """Per-axis (begin, end) pads (end may be negative: a crop) so that a padding-0,
    floor-mode pool yields exactly `out` windows starting at -pb."""
    pairs = []
    for i, size in enumerate(in_sp):
        ek = (a.k[i] - 1) * a.d[i] + 1
        pairs.append((pb[i], (out[i] - 1) * a.s[i] + ek - size - pb[i]))
    return pairs


def _flat_index(idx, padded_sp, in_sp, pb, nc_shape, storage_order):
    """torch's per-plane indices (into the possibly padded plane) -> ONNX's indices into the
    whole input, flattened row-major (storage_order=0) or with the spatial axes reversed."""
    n = len(in_sp)
    if padded_sp != in_sp or any(pb) or storage_order:
        coords, rem = [], idx
        for size in reversed(padded_sp):
            coords.append(rem % size)
            rem = rem // size
        coords = [c - b for c, b in zip(reversed(coords), pb)]
        idx = torch.zeros_like(idx)
        for j in (range(n) if storage_order == 0 else reversed(range(n))):
            idx = idx * in_sp[j] + coords[j]
    # Offset each (n, c) plane: ONNX indexes the flattened tensor, torch each plane.
    offs = torch.arange(nc_shape[0] * nc_shape[1], device=idx.device) * math.prod(in_sp)
    return idx + offs.reshape(tuple(nc_shape) + (1,) * n)


@register("MaxPool")
def max_pool(ctx):
    a = _Attrs(ctx)
    want_idx = ctx.num_outputs > 1
    order = ctx.attr("storage_order", 0)
    cache: dict = {}

    def plan(in_sp):
        out, pb, pe = _geometry(a, in_sp)
        ceil = _torch_mode(a, in_sp, out, pb, pe, symmetric_only=False)
        if ceil is not None:
            return pb, ceil, None
        return [0] * len(pb), False, (_fpad(_explicit_pads(a, in_sp, out, pb)), pb)

    def fn(xs):
        x = xs[0]
        in_sp = tuple(x.shape[2:])
        p = cache.get(in_sp)
        if p is None:
            p = cache[in_sp] = plan(in_sp)
        padding, ceil, explicit = p
        dtype = x.dtype
        if not x.is_floating_point():  # torch pools floats only; int8/uint8 are exact in float
            x = x.to(torch.float64 if dtype in (torch.int32, torch.int64) else torch.float32)
        if explicit is not None:
            x = F.pad(x, explicit[0], value=-math.inf)
        pool = _MAX[len(in_sp)]
        if not want_idx:
            y = pool(x, a.k, a.s, padding, a.d, ceil)
            return [y if y.dtype == dtype else y.to(dtype)]
        y, idx = pool(x, a.k, a.s, padding, a.d, ceil, return_indices=True)
        pb = explicit[1] if explicit is not None else [0] * len(in_sp)
        idx = _flat_index(idx, tuple(x.shape[2:]), in_sp, pb, tuple(x.shape[:2]), order)
        return [y if y.dtype == dtype else y.to(dtype), idx]
    return fn


def _sum_pool(x, a: _Attrs):
    """Window sums (padding 0, floor mode, dilation allowed) as a depthwise conv of ones."""
    n = x.ndim - 2
    nc = x.shape[0] * x.shape[1]
    xr = x.reshape((nc, 1) + tuple(x.shape[2:]))
    w = torch.ones((1, 1) + tuple(a.k), dtype=x.dtype, device=x.device)
    y = _CONV[n](xr, w, None, a.s, 0, a.d)
    return y.reshape(tuple(x.shape[:2]) + tuple(y.shape[2:]))


@register("AveragePool")
def average_pool(ctx):
    a = _Attrs(ctx, dilations=ctx.opset >= 19)
    include = bool(ctx.attr("count_include_pad", 0))
    cache: dict = {}

    def plan(x):
        in_sp = tuple(x.shape[2:])
        out, pb, pe = _geometry(a, in_sp)
        if a.d == [1] * len(in_sp):
            ceil = _torch_mode(a, in_sp, out, pb, pe, symmetric_only=include)
            if ceil is not None:
                return ("torch", pb, ceil)
        pairs = _explicit_pads(a, in_sp, out, pb)
        # Divisors: the window's elements inside the input, plus those in the explicit pads
        # with count_include_pad; the ceil-mode overhang beyond the pads never counts.
        ones = torch.ones((1, 1) + in_sp, dtype=x.dtype, device=x.device)
        if include:
            ones = F.pad(ones, _fpad(zip(pb, pe)), value=1.0)
            ones = F.pad(ones, _fpad((0, e - e_onnx) for (_, e), e_onnx in zip(pairs, pe)))
        else:
            ones = F.pad(ones, _fpad(pairs))
        return ("sum", _fpad(pairs), _sum_pool(ones, a))

    def fn(xs):
        x = xs[0]
        key = (tuple(x.shape[2:]), x.dtype)
        p = cache.get(key)
        if p is None:
            p = cache[key] = plan(x)
        if p[0] == "torch":
            return [_AVG[x.ndim - 2](x, a.k, a.s, p[1], p[2], include)]
        return [_sum_pool(F.pad(x, p[1]), a) / p[2]]
    return fn


@register("LpPool", since=2)
def lp_pool(ctx):
    a = _Attrs(ctx, dilations=ctx.opset >= 18)
    p = ctx.attr("p", 2)

    def fn(xs):
        x = xs[0]
        in_sp = tuple(x.shape[2:])
        out, pb, _ = _geometry(a, in_sp)
        xp = F.pad(torch.abs(x) ** p, _fpad(_explicit_pads(a, in_sp, out, pb)))
        return [_sum_pool(xp, a) ** (1.0 / p)]
    return fn
