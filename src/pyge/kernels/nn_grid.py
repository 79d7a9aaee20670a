"""Sampling grids: GridSample (bilinear, nearest or bicubic samples of the input at grid
positions, 2-D and 3-D) and AffineGrid (the grid an affine transform makes). Both are torch
ops on the input's device.
"""
from __future__ import annotations

import itertools
import math

import torch
import torch.nn.functional as F

from ._util import ints, node_error, run_error
from .registry import register


# ---------------------------------------------------------------------------------------
# GridSample


def _reflect(v, lo: float, hi: float):
    """The reference's _gs_reflect, elementwise: fold v into [lo, hi] by the near border."""
    rng = hi - lo
    if rng <= 0:
        return torch.full_like(v, lo)
    below, above = v < lo, v > hi
    dx = torch.where(below, lo - v, v - hi)
    n = torch.floor(dx / rng)
    r = dx - n * rng
    even = torch.remainder(n, 2) == 0
    fb = torch.where(even, lo + r, hi - r)
    fa = torch.where(even, hi - r, lo + r)
    return torch.where(below, fb, torch.where(above, fa, v))


def _cubic_coeffs(t):
    """Keys' cubic convolution weights (alpha -0.75) of the taps at -1, 0, 1, 2 from t."""
    a = -0.75
    t1, t2, t3 = t + 1, 1 - t, 2 - t
    return [((a * t1 - 5 * a) * t1 + 8 * a) * t1 - 4 * a,
            ((a + 2) * t - (a + 3)) * t * t + 1,
            ((a + 2) * t2 - (a + 3)) * t2 * t2 + 1,
            ((a * t3 - 5 * a) * t3 + 8 * a) * t3 - 4 * a]


def _grid_taps(v, d: int, mode: str, pad: str, align: bool):
    """One spatial axis of GridSample, as the reference does it: unnormalized coordinates
    v -> list of (index, weight, in_range) taps."""
    lo, hi = (0.0, d - 1.0) if align else (-0.5, d - 0.5)
    if mode == "nearest":
        v = torch.round(v)                              # half to even, as np.rint
    out = (v < lo) | (v > hi)
    if pad == "border":
        v = torch.where(out, v.clamp(0, d - 1), v)
    elif pad == "reflection":
        v = torch.where(out, _reflect(v, lo, hi), v)
    if mode == "nearest":
        base = v.trunc().long()
        offs, ws = [0], [None]
    else:
        f = torch.floor(v)
        t = v - f
        base = f.long()
        if mode == "linear":
            offs, ws = [0, 1], [1 - t, t]
        else:
            offs, ws = [-1, 0, 1, 2], _cubic_coeffs(t)
    taps = []
    for o, w in zip(offs, ws):
        i = base + o
        if pad == "zeros":
            ok = (i >= 0) & (i < d)
            i = i.clamp(0, d - 1)
        else:
            ok = None
            if pad == "border":
                i = i.clamp(0, d - 1)
            else:
                i = _reflect(i.to(v.dtype), lo, hi).trunc().long().clamp(0, d - 1)
        taps.append((i, w, ok))
    return taps


@register("GridSample", since=16)
def grid_sample(ctx):
    mode = ctx.attr("mode", "bilinear" if ctx.opset < 20 else "linear")
    mode = mode.decode() if isinstance(mode, bytes) else mode
    mode = {"bilinear": "linear", "bicubic": "cubic"}.get(mode, mode)
    if mode not in ("linear", "nearest", "cubic"):
        raise node_error(ctx, f"attribute 'mode' {mode!r} is not one of "
                              "linear/bilinear, nearest, cubic/bicubic")
    pad = ctx.attr("padding_mode", "zeros")
    pad = pad.decode() if isinstance(pad, bytes) else pad
    if pad not in ("zeros", "border", "reflection"):
        raise node_error(ctx, f"attribute 'padding_mode' {pad!r} is not one of "
                              "zeros, border, reflection")
    align = bool(ctx.attr("align_corners", 0))

    def fn(xs):
        x, grid = xs[0], xs[1]
        D = x.ndim - 2
        if D < 1 or grid.ndim != x.ndim or grid.shape[-1] != D or grid.shape[0] != x.shape[0]:
            raise run_error(ctx, f"grid {tuple(grid.shape)} must be [N, *out, {D}] for X "
                                 f"{tuple(x.shape)}")
        N, C, dims = x.shape[0], x.shape[1], list(x.shape[2:])
        out_sp = list(grid.shape[1:-1])
        if mode == "linear" and D in (2, 3) and x.is_floating_point():
            return [F.grid_sample(x, grid.to(x.dtype), mode="bilinear", padding_mode=pad,
                                  align_corners=align)]
        dt = torch.float64 if torch.float64 in (x.dtype, grid.dtype) else torch.float32
        if x.numel() == 0 or math.prod(out_sp) == 0:
            return [torch.zeros([N, C] + out_sp, dtype=x.dtype, device=x.device)]
        g = grid.to(dt).reshape(N, -1, D)
        axes = []
        for i, d in enumerate(dims):
            n_ = g[..., D - 1 - i]                      # the grid lists x (last axis) first
            v = (n_ + 1) / 2.0 * (d - 1) if align else ((n_ + 1) * d - 1) / 2.0
            axes.append(_grid_taps(v, d, mode, pad, align))
        strides = [math.prod(dims[i + 1:]) for i in range(D)]
        xf = x.reshape(N, C, -1).to(dt)
        P = g.shape[1]
        acc = None
        for combo in itertools.product(*axes):
            idx, w, ok = None, None, None
            for (i, wi, oki), st in zip(combo, strides):
                idx = i * st if idx is None else idx + i * st
                if wi is not None:
                    w = wi if w is None else w * wi
                if oki is not None:
                    ok = oki if ok is None else ok & oki
            v = torch.gather(xf, 2, idx.unsqueeze(1).expand(N, C, P))
            if ok is not None:
                v = torch.where(ok.unsqueeze(1), v, torch.zeros((), dtype=dt, device=v.device))
            if w is not None:
                v = v * w.unsqueeze(1)
            acc = v if acc is None else acc + v
        return [acc.reshape([N, C] + out_sp).to(x.dtype)]
    return fn


# ---------------------------------------------------------------------------------------
# AffineGrid


@register("AffineGrid", since=20)
def affine_grid(ctx):
    align = bool(ctx.attr("align_corners", 0))
    size_c = ctx.const_input(1)
    size_c = ints(size_c) if size_c is not None else None

    def fn(xs):
        theta = xs[0]
        size = size_c if size_c is not None else ints(xs[1])
        nd = len(size) - 2
        if nd not in (2, 3) or tuple(theta.shape) != (size[0], nd, nd + 1):
            raise run_error(ctx, f"theta {tuple(theta.shape)} and size {size}: expected "
                                 "theta [N, 2, 3] with size [N, C, H, W] or theta [N, 3, 4] "
                                 "with size [N, C, D, H, W]")
        t = theta if theta.dtype in (torch.float32, torch.float64) else theta.float()
        return [F.affine_grid(t, size, align_corners=align).to(theta.dtype)]
    return fn
