"""Pooling: MaxPool (with Indices), AveragePool, LpPool, their global forms, and MaxUnpool.

ONNX pads may be asymmetric and larger than torch allows, and its ceil_mode output size
differs from torch's in corner cases. So the output geometry is computed the ONNX way
first; torch's pooling with its own padding/ceil_mode is used when it yields exactly that
geometry (the common case, and the fast one), otherwise the input is padded explicitly.

On the CPU, 2-D MaxPool without indices can also run separably (_separable_max): a max over
each axis in turn, as a few torch.maximum calls on strided views, windows clipped at the
borders instead of padded. The values are the same (max is exact, and both propagate NaN).
It is taken where it is the faster form (_use_separable: NCHW input, and channels-last
input with many output pixels); benchmarks/bench_kernels_cpu.py compares the two.
"""
from __future__ import annotations

import math

import torch
import torch.nn.functional as F

from ._util import ints, node_error, run_error
from .registry import register

_MAX = {1: F.max_pool1d, 2: F.max_pool2d, 3: F.max_pool3d}
_AVG = {1: F.avg_pool1d, 2: F.avg_pool2d, 3: F.avg_pool3d}
_CONV = {1: F.conv1d, 2: F.conv2d, 3: F.conv3d}
_HALF = (torch.float16, torch.bfloat16)


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


# Channels-last input: torch's kernel loops over output pixels (vectorised over channels)
# and wins below about this many output pixels; the separable form's ~5 calls win above.
_SEPARABLE_MIN_PIXELS = 2000


def _axis_max(x, axis: int, k: int, s: int, d: int, pb: int, o: int):
    """Max over the `o` windows along `axis`: out[i] = max over j < k of x[i*s - pb + j*d],
    taking only the j that land inside the input (ONNX pads count as -inf). Keeps the
    input's layout."""
    size = x.shape[axis]
    full, part = [], []
    for j in range(k):
        off = j * d - pb
        lo = -(off // s) if off < 0 else 0          # first window whose tap j is inside
        hi = min(o, (size - 1 - off) // s + 1)      # one past the last such window
        if hi > lo:
            (full if lo == 0 and hi == o else part).append((lo, hi, lo * s + off))

    def taps(lo, hi, start):
        idx = [slice(None)] * x.ndim
        idx[axis] = slice(start, start + (hi - lo - 1) * s + 1, s)
        return x[tuple(idx)]

    if len(full) >= 2:
        y = torch.maximum(taps(*full[0]), taps(*full[1]))
        rest = full[2:] + part
    else:
        shape = list(x.shape)
        shape[axis] = o
        fmt = torch.channels_last if x.ndim == 4 and not x.is_contiguous() \
            and x.is_contiguous(memory_format=torch.channels_last) else torch.contiguous_format
        y = torch.empty(shape, dtype=x.dtype, device=x.device, memory_format=fmt)
        if full:
            y.copy_(taps(*full[0]))
        else:
            y.fill_(-math.inf)
        rest = full[1:] + part
    for lo, hi, start in rest:
        v = y.narrow(axis, lo, hi - lo)
        torch.maximum(v, taps(lo, hi, start), out=v)
    return y


def _separable_max(x, a: _Attrs, out, pb):
    for i in range(len(out)):
        x = _axis_max(x, 2 + i, a.k[i], a.s[i], a.d[i], pb[i], out[i])
    return x


def _use_separable(x, out, explicit) -> bool:
    # CPU only: on a GPU torch's kernel is one launch, the separable form four or more.
    if x.ndim != 4 or not x.is_floating_point() or x.device.type != "cpu":
        return False
    if x.is_contiguous() or explicit is not None:   # NCHW, or a padded copy avoided
        return True
    return x.is_contiguous(memory_format=torch.channels_last) \
        and out[0] * out[1] >= _SEPARABLE_MIN_PIXELS


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
            return pb, ceil, None, (out, pb)
        return [0] * len(pb), False, (_fpad(_explicit_pads(a, in_sp, out, pb)), pb), (out, pb)

    def fn(xs):
        x = xs[0]
        in_sp = tuple(x.shape[2:])
        p = cache.get(in_sp)
        if p is None:
            p = cache[in_sp] = plan(in_sp)
        padding, ceil, explicit, (out, pb) = p
        dtype = x.dtype
        if not x.is_floating_point():  # torch pools floats only; int8/uint8 are exact in float
            x = x.to(torch.float64 if dtype in (torch.int32, torch.int64) else torch.float32)
        if not want_idx and _use_separable(x, out, explicit):
            y = _separable_max(x, a, out, pb)
            return [y if y.dtype == dtype else y.to(dtype)]
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
        pads = _fpad(pairs)
        if len(in_sp) in (2, 3) and a.d == [1] * len(in_sp):
            # Window sums by torch's pooling (divisor 1) on the padded input: the same
            # numbers as the conv of ones below at a fraction of its cost (inception_v1's
            # last 7x7 pool, padded on one side: benchmarks/bench_kernels_cpu.py).
            return ("pooled_sum", pads if any(pads) else None, _sum_pool(ones, a))
        return ("sum", pads, _sum_pool(ones, a))

    def fn(xs):
        x = xs[0]
        if x.dtype in _HALF and x.ndim == 5 and x.device.type == "cpu":
            # torch's CPU avg_pool3d has no half-precision kernel: pool in float32.
            return [fn([x.float()])[0].to(x.dtype)]
        key = (tuple(x.shape[2:]), x.dtype)
        p = cache.get(key)
        if p is None:
            p = cache[key] = plan(x)
        if p[0] == "torch":
            return [_AVG[x.ndim - 2](x, a.k, a.s, p[1], p[2], include)]
        if p[0] == "pooled_sum":
            xp = F.pad(x, p[1]) if p[1] is not None else x
            return [_AVG[x.ndim - 2](xp, a.k, a.s, 0, False, True, 1) / p[2]]
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


# ---------------------------------------------------------------------------------------
# MaxUnpool: MaxPool's values scattered back to the positions its indices name


@register("MaxUnpool", since=9)
def max_unpool(ctx):
    k = list(ctx.attr("kernel_shape") or [])
    if not k:
        raise node_error(ctx, "attribute 'kernel_shape' is required")
    n = len(k)
    st = list(ctx.attr("strides") or [1] * n)
    pads = list(ctx.attr("pads") or [0] * (2 * n))
    if len(st) != n or len(pads) != 2 * n:
        raise node_error(ctx, f"strides {st} / pads {pads} do not match kernel_shape {k}")

    def fn(xs):
        x, ind = xs[0], xs[1]
        out_shape = ints(xs[2]) if len(xs) > 2 and xs[2] is not None else None
        if x.ndim != n + 2:
            raise run_error(ctx, f"X {tuple(x.shape)} must have {n} spatial axes")
        inferred = list(x.shape[:2]) + [(x.shape[2 + d] - 1) * st[d] - (pads[d] + pads[n + d])
                                        + k[d] for d in range(n)]
        # The indices address the tensor MaxPool ran on, flattened: output_shape when
        # given (the spec, onnxruntime and torch's max_unpool; the onnx reference scatters
        # into the inferred shape and pads that instead), else the inferred shape.
        shape = inferred
        if out_shape is not None:
            if len(out_shape) != len(inferred):
                raise run_error(ctx, f"output_shape {out_shape} must have rank {x.ndim}")
            shape = out_shape
        total = math.prod(shape)
        flat = ind.reshape(-1).long()
        if flat.numel() and bool(((flat < 0) | (flat >= total)).any()):
            raise run_error(ctx, f"indices must lie in [0, {total}) for output shape {shape}")
        y = torch.zeros(total, dtype=x.dtype, device=x.device)
        y.index_put_((flat,), x.reshape(-1))
        y = y.reshape(shape)
        return [y]
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
                # copy to NCHW first would cost far more than the pool itself.
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
