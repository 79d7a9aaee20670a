"""Pad (constant, reflect, edge and wrap modes; attribute form before opset 11, input form
after) and CenterCropPad (crop or zero-pad each axis about its centre)."""
from __future__ import annotations

import torch
import torch.nn.functional as F

from ._util import int_input, ints, is_str, node_error, norm_axis, run_error, scalar
from .registry import register

_MODES = ("constant", "reflect", "edge", "wrap")


def _source_index(mode: str, begin: int, end: int, dim: int, device) -> torch.Tensor:
    """For output positions -begin .. dim+end-1 along an axis, the input index each reads."""
    i = torch.arange(-begin, dim + end, device=device)
    if mode == "edge":
        return i.clamp(0, dim - 1)
    if mode == "wrap":
        return torch.remainder(i, dim)
    # reflect (mirror without repeating the edge element), periodic with period 2(dim-1)
    if dim == 1:
        return torch.zeros_like(i)
    period = 2 * (dim - 1)
    m = torch.remainder(i, period)
    return torch.where(m < dim, m, period - m)


def _pad(x, pads: list[int], mode: str, value, axes: list[int] | None):
    rank = x.ndim
    if axes is None:
        axes = list(range(rank))
    axes = [norm_axis(a, rank) for a in axes]
    n = len(axes)
    if len(pads) != 2 * n:
        raise ValueError(f"pads has {len(pads)} entries, expected {2 * n}")
    per_axis = {a: (pads[j], pads[j + n]) for j, a in enumerate(axes)}
    if is_str(x):
        raise ValueError("Pad on string tensors is not supported")
    if mode == "constant":
        # F.pad lists (begin, end) pairs from the last axis backwards; negative = crop.
        flat = []
        for a in range(rank - 1, -1, -1):
            flat.extend(per_axis.get(a, (0, 0)))
        while len(flat) > 2 and flat[-1] == 0 and flat[-2] == 0:
            flat = flat[:-2]
        return F.pad(x, flat, value=value) if any(flat) else x
    for a, (b, e) in per_axis.items():
        if b == 0 and e == 0:
            continue
        dim = x.shape[a]
        if dim == 0:
            raise ValueError(f"cannot {mode}-pad an empty axis {a}")
        x = x.index_select(a, _source_index(mode, b, e, dim, x.device))
    return x


@register("Pad", until=10)
def pad_attr(ctx):
    mode = ctx.attr("mode", "constant")
    if mode not in _MODES[:3]:
        raise node_error(ctx, f"mode={mode!r} is not one of {_MODES[:3]}")
    pads = ctx.attr("pads", ctx.attr("paddings"))
    value = ctx.attr("value", 0.0)
    return lambda xs: [_pad(xs[0], pads, mode, value, None)]


@register("Pad", since=11)
def pad(ctx):
    mode = ctx.attr("mode", "constant")
    if mode not in _MODES:
        raise node_error(ctx, f"mode={mode!r} is not one of {_MODES}")
    pads, pdyn = int_input(ctx, 1)
    axes, adyn = int_input(ctx, 3)
    cval = ctx.const_input(2)
    vdyn = cval is None and ctx.has_input(2)
    value = cval.item() if cval is not None and cval.size else 0

    def fn(xs):
        v = scalar(xs[2]) if vdyn else value
        return [_pad(xs[0], ints(xs[1]) if pdyn else pads, mode, v,
                     ints(xs[3]) if adyn else axes)]
    return fn


# ---------------------------------------------------------------------------------------
# CenterCropPad


@register("CenterCropPad", since=18)
def center_crop_pad(ctx):
    axes_attr = ctx.attr("axes")
    shape_c = ctx.const_input(1)
    shape_c = ints(shape_c) if shape_c is not None else None

    def fn(xs):
        x = xs[0]
        shape = shape_c if shape_c is not None else ints(xs[1])
        try:
            axes = [norm_axis(a, x.ndim) for a in axes_attr] if axes_attr is not None \
                else list(range(x.ndim))
        except ValueError as e:
            raise run_error(ctx, f"attribute 'axes': {e}") from None
        if len(axes) != len(shape):
            raise run_error(ctx, f"shape {shape} must have one entry per axis {axes}")
        out_shape = list(x.shape)
        src = [slice(None)] * x.ndim
        dst = [slice(None)] * x.ndim
        for a, s in zip(axes, shape):
            d = x.shape[a]
            out_shape[a] = s
            if s < d:
                src[a] = slice((d - s) // 2, (d - s) // 2 + s)
            elif s > d:
                dst[a] = slice((s - d) // 2, (s - d) // 2 + d)
        if out_shape == list(x.shape):
            return [x]
        y = torch.zeros(out_shape, dtype=x.dtype, device=x.device)
        y[tuple(dst)] = x[tuple(src)]
        return [y]
    return fn
