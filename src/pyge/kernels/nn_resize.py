"""Resize (opsets 10..19+) and Upsample (7..9).

Interpolation is separable, so each resized axis is handled on its own: for every output
position the source coordinate is computed (coordinate_transformation_mode), then either
the nearest source index (nearest_mode) or a small set of taps with weights (linear and
cubic, antialiased when downsampling if asked) is gathered and summed. Index/weight
tables depend only on sizes and attributes, so they are cached per input shape.
"""
from __future__ import annotations

import math

import numpy as np
import torch

from ._util import floats, ints, node_error
from .registry import register

_COORD_MODES = ("half_pixel", "half_pixel_symmetric", "pytorch_half_pixel", "align_corners",
                "asymmetric", "tf_crop_and_resize")
_NEAREST = {
    "round_prefer_floor": lambda x: np.ceil(x - 0.5),
    "round_prefer_ceil": lambda x: np.floor(x + 0.5),
    "floor": np.floor,
    "ceil": np.ceil,
}


class _Cfg:
    __slots__ = ("mode", "coord", "nearest", "a", "exclude", "extrap", "antialias", "axes",
                 "policy")

    def __init__(self, ctx, legacy: bool):
        self.mode = ctx.attr("mode", "nearest")
        if self.mode == "bilinear":
            self.mode = "linear"
        if self.mode not in ("nearest", "linear", "cubic"):
            raise node_error(ctx, f"mode={self.mode!r} is not one of nearest, linear, cubic")
        # Upsample and Resize-10 use x_out / scale and floor for nearest.
        self.coord = "asymmetric" if legacy else ctx.attr("coordinate_transformation_mode",
                                                           "half_pixel")
        if self.coord not in _COORD_MODES:
            raise node_error(ctx, f"coordinate_transformation_mode={self.coord!r} is not one of "
                                  f"{_COORD_MODES}")
        self.nearest = "floor" if legacy else ctx.attr("nearest_mode", "round_prefer_floor")
        if self.nearest not in _NEAREST:
            raise node_error(ctx, f"nearest_mode={self.nearest!r} is not one of {tuple(_NEAREST)}")
        self.a = ctx.attr("cubic_coeff_a", -0.75)
        self.exclude = bool(ctx.attr("exclude_outside", 0))
        self.extrap = ctx.attr("extrapolation_value", 0.0)
        self.antialias = bool(ctx.attr("antialias", 0))
        self.axes = ctx.attr("axes")
        self.policy = ctx.attr("keep_aspect_ratio_policy", "stretch")


def _source_coords(cfg: _Cfg, out: int, size: int, scale: float, roi) -> np.ndarray:
    y = np.arange(out, dtype=np.float64)
    length = scale * size  # the un-rounded output length
    c = cfg.coord
    if c == "asymmetric":
        return y / scale
    if c == "align_corners":
        return np.zeros(out) if length == 1 else y * (size - 1) / (length - 1)
    if c == "pytorch_half_pixel":
        return np.full(out, -0.5) if length == 1 else (y + 0.5) / scale - 0.5
    if c == "half_pixel":
        return (y + 0.5) / scale - 0.5
    if c == "half_pixel_symmetric":
        offset = size / 2 * (1 - out / length)
        return offset + (y + 0.5) / scale - 0.5
    # tf_crop_and_resize
    start, end = roi
    if length == 1:
        x = np.full(out, (end - start) * (size - 1) / 2)
    else:
        x = y * (end - start) * (size - 1) / (length - 1)
    return x + start * (size - 1)


def _cubic(t: np.ndarray, a: float) -> np.ndarray:
    t = np.abs(t)
    near = ((a + 2) * t - (a + 3)) * t * t + 1
    far = ((a * t - 5 * a) * t + 8 * a) * t - 4 * a
    return np.where(t <= 1, near, np.where(t < 2, far, 0.0))


def _axis_table(cfg: _Cfg, size: int, out: int, scale: float, roi):
    """(indices (out, taps) int64, weights (out, taps) float64 or None, outside mask or None)."""
    x = _source_coords(cfg, out, size, scale, roi)
    outside = None
    if cfg.coord == "tf_crop_and_resize":
        outside = (x < 0) | (x > size - 1)
    if cfg.mode == "nearest":
        idx = _NEAREST[cfg.nearest](x).astype(np.int64)
        return np.clip(idx, 0, size - 1)[:, None], None, outside
    # Taps j at positions i0 + j around x = i0 + r, with r in (0, 1] (an exact integer x
    # takes r = 1, i.e. the left neighbour convention of the ONNX definition).
    i0 = np.floor(x)
    r = x - i0
    exact = r == 0
    i0 = np.where(exact, i0 - 1, i0).astype(np.int64)
    r = np.where(exact, 1.0, r)
    s = min(scale, 1.0) if cfg.antialias else 1.0
    support = 1 if cfg.mode == "linear" else 2
    start = int(math.floor(-support / s)) + 1
    j = np.arange(start, 2 - start)  # 2 taps (linear) / 4 (cubic), more when antialiased
    t = (j[None, :] - r[:, None]) * s
    w = np.clip(1 - np.abs(t), 0, 1) if cfg.mode == "linear" else _cubic(t, cfg.a)
    if cfg.antialias:
        w = w / w.sum(axis=1, keepdims=True)
    pos = i0[:, None] + j[None, :]
    if cfg.exclude:
        w = np.where((pos < 0) | (pos >= size), 0.0, w)
        tot = w.sum(axis=1, keepdims=True)
        w = w / np.where(tot == 0, 1.0, tot)
    return np.clip(pos, 0, size - 1), w, outside


def _resize(x, cfg: _Cfg, axes, out_sizes, scales, rois, cache):
    key = (tuple(x.shape), tuple(out_sizes), tuple(scales), tuple(map(tuple, rois)), x.dtype)
    plan = cache.get(key)
    if plan is None:
        plan = []
        for ax, o, sc, roi in zip(axes, out_sizes, scales, rois):
            size = x.shape[ax]
            if o == size and sc == 1.0 and cfg.coord != "tf_crop_and_resize":
                continue  # identity along this axis
            idx, w, outside = _axis_table(cfg, size, o, sc, roi)
            wdt = x.dtype if x.is_floating_point() else torch.float32
            plan.append((ax, o, torch.from_numpy(idx).to(x.device),
                         None if w is None else torch.from_numpy(w).to(wdt).to(x.device),
                         None if outside is None or not outside.any()
                         else torch.from_numpy(outside).to(x.device)))
        cache[key] = plan
    dtype = x.dtype
    y = x
    for ax, o, idx, w, outside in plan:
        taps = idx.shape[1]
        g = y.index_select(ax, idx.reshape(-1))
        if w is not None:
            g = g if g.is_floating_point() else g.float()
            shape = list(y.shape)
            shape[ax:ax + 1] = [o, taps]
            g = g.reshape(shape)
            wshape = [1] * len(shape)
            wshape[ax], wshape[ax + 1] = o, taps
            g = (g * w.reshape(wshape)).sum(ax + 1)
        if outside is not None:
            mshape = [1] * g.ndim
            mshape[ax] = o
            g = torch.where(outside.reshape(mshape), torch.tensor(cfg.extrap, dtype=g.dtype), g)
        y = g
    if y.dtype != dtype:
        info = torch.iinfo(dtype)
        y = torch.round(y).clamp(info.min, info.max).to(dtype)  # saturate into the int type
    return y


def _sizes_and_scales(cfg: _Cfg, x, axes, scales, sizes):
    """Output sizes and the per-axis scales used by the coordinate transform."""
    shape = [x.shape[a] for a in axes]
    if sizes:
        sc = [o / s for o, s in zip(sizes, shape)]
        if cfg.policy in ("not_larger", "not_smaller"):
            s = min(sc) if cfg.policy == "not_larger" else max(sc)
            sc = [s] * len(shape)
            sizes = [int(s * d + 0.5) for d in shape]
        return list(sizes), sc
    if not scales:
        raise ValueError("Resize needs either scales or sizes")
    return [int(math.floor(s * d)) for s, d in zip(scales, shape)], list(scales)


def _opt(xs, i, conv):
    """Optional input i as a list ([] when absent or empty)."""
    return conv(xs[i]) if i is not None and i < len(xs) and xs[i] is not None else []


@register("Resize", since=10)
def resize(ctx):
    legacy = ctx.opset < 11
    cfg = _Cfg(ctx, legacy)
    cache: dict = {}
    i_roi, i_scales, i_sizes = (None, 1, None) if legacy else (1, 2, 3)

    def fn(xs):
        x = xs[0]
        r = x.ndim
        axes = [a + r if a < 0 else a for a in cfg.axes] if cfg.axes else list(range(r))
        scales = _opt(xs, i_scales, floats)
        sizes = _opt(xs, i_sizes, ints)
        if scales and len(scales) != len(axes) or sizes and len(sizes) != len(axes):
            raise ValueError(f"Resize: scales/sizes must have {len(axes)} entries")
        roi_v = _opt(xs, i_roi, floats)
        n = len(axes)
        if len(roi_v) == 2 * n:
            rois = [(roi_v[i], roi_v[n + i]) for i in range(n)]
        elif len(roi_v) == 2 * r:
            rois = [(roi_v[a], roi_v[r + a]) for a in axes]
        else:
            rois = [(0.0, 1.0)] * n
        out_sizes, sc = _sizes_and_scales(cfg, x, axes, scales, sizes)
        return [_resize(x, cfg, axes, out_sizes, sc, rois, cache)]
    return fn


@register("Upsample", since=7)  # deprecated at 10, same semantics
def upsample(ctx):
    cfg = _Cfg(ctx, legacy=True)
    attr_scales = ctx.attr("scales") if ctx.opset < 9 else None
    cache: dict = {}

    def fn(xs):
        x = xs[0]
        scales = attr_scales or floats(xs[1])
        axes = list(range(x.ndim))
        out_sizes, sc = _sizes_and_scales(cfg, x, axes, scales, [])
        return [_resize(x, cfg, axes, out_sizes, sc, [(0.0, 1.0)] * x.ndim, cache)]
    return fn
