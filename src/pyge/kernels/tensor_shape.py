"""Shape and layout kernels: Reshape, Transpose, Concat, Split, Slice, Squeeze/Unsqueeze,
Flatten, Expand, Tile, DepthToSpace/SpaceToDepth, Shape, Size, Identity.

Most return views (no copy) as torch's reshape/permute/split do; Expand materialises its
result because a zero-stride view handed to a user as numpy would alias its elements.
"""
from __future__ import annotations

import math

import numpy as np
import torch

from ._util import int_input, ints, is_str, node_error, norm_axis
from .registry import register


@register("Identity")
def identity(ctx):
    return lambda xs: [xs[0]]


# ---------------------------------------------------------------------------------------
# Reshape / Flatten / Squeeze / Unsqueeze


def _reshape(x, shape):
    """x.reshape(shape), except that a 4-D float result which needs a copy is written
    channels-last when x's unit-stride axis falls within the result's channels. The channel
    shuffle (Reshape -> Transpose -> Reshape) of a channels-last conv output then stays
    channels-last, so the next convolution reads its preferred layout instead of NCHW."""
    if not isinstance(x, torch.Tensor) or len(shape) != 4 or x.ndim < 2 \
            or not x.is_floating_point() or x.numel() < 4096 or x.is_contiguous():
        return x.reshape(shape)
    try:
        return x.view(shape)
    except RuntimeError:
        pass
    y_shape = list(shape)
    if -1 in y_shape:
        i = y_shape.index(-1)
        y_shape[i] = x.numel() // max(1, math.prod(d for d in y_shape if d != -1))
    if y_shape[1] == 1 or math.prod(y_shape) != x.numel():
        return x.reshape(shape)
    out = torch.empty(y_shape, dtype=x.dtype, device=x.device, memory_format=torch.channels_last)
    try:
        ov = out.view(x.shape)
    except RuntimeError:
        return x.reshape(shape)
    # Worth it only when x's unit-stride axis lies within the channels of the result: in
    # channels-last those are adjacent in memory (NCHW would scatter them H*W apart).
    xi = [i for i in range(x.ndim) if x.stride(i) == 1 and x.shape[i] > 1]
    if len(xi) != 1 or ov.stride(xi[0]) >= y_shape[1]:
        return x.reshape(shape)
    ov.copy_(x)
    return out


def _resolve_shape(x, shape, allowzero):
    if not allowzero and 0 in shape:
        # 0 copies the input's dimension at the same index (unless allowzero=1).
        shape = [x.shape[i] if s == 0 else s for i, s in enumerate(shape)]
    return _reshape(x, shape)


@register("Reshape")
def reshape(ctx):
    allowzero = ctx.attr("allowzero", 0)
    shape, dyn = int_input(ctx, 1, "shape", 4)
    if dyn:
        return lambda xs: [_resolve_shape(xs[0], ints(xs[1]), allowzero)]
    if shape is None:
        raise node_error(ctx, "the target shape is missing")
    if allowzero or 0 not in shape:
        return lambda xs: [_reshape(xs[0], shape)]
    return lambda xs: [_resolve_shape(xs[0], shape, allowzero)]


@register("Flatten")
def flatten(ctx):
    axis = ctx.attr("axis", 1)

    def fn(xs):
        x = xs[0]
        ax = axis + x.ndim if axis < 0 else axis
        outer = math.prod(x.shape[:ax])
        return [x.reshape(outer, math.prod(x.shape[ax:]))]
    return fn


@register("Squeeze")
def squeeze(ctx):
    axes, dyn = int_input(ctx, 1, "axes", 12)

    def do(x, ax):
        if not ax:
            ax = [i for i, d in enumerate(x.shape) if d == 1]
        ax = tuple(sorted(norm_axis(a, x.ndim) for a in ax))
        for a in ax:
            if x.shape[a] != 1:
                raise ValueError(f"cannot squeeze axis {a} of size {x.shape[a]}")
        if is_str(x):
            return np.squeeze(x, axis=ax)
        return torch.squeeze(x, ax) if ax else x

    if dyn:
        return lambda xs: [do(xs[0], ints(xs[1]))]
    return lambda xs: [do(xs[0], axes)]


@register("Unsqueeze")
def unsqueeze(ctx):
    axes, dyn = int_input(ctx, 1, "axes", 12)
    if not dyn and not axes:
        raise node_error(ctx, "axes are required")

    def do(x, ax):
        rank = x.ndim + len(ax)
        ax = sorted(norm_axis(a, rank) for a in ax)
        shape = list(x.shape)
        for a in ax:  # ascending, so each insert index is already final
            shape.insert(a, 1)
        return x.reshape(shape)

    if dyn:
        return lambda xs: [do(xs[0], ints(xs[1]))]
    return lambda xs: [do(xs[0], axes)]


# ---------------------------------------------------------------------------------------
# Transpose / Concat / Split


@register("Transpose")
def transpose(ctx):
    perm = ctx.attr("perm")

    def fn(xs):
        x = xs[0]
        p = perm if perm is not None else list(range(x.ndim - 1, -1, -1))
        return [x.transpose(p) if is_str(x) else x.permute(p)]
    return fn


@register("Concat")
def concat(ctx):
    axis = ctx.attr("axis", 1 if ctx.opset < 4 else None)
    if axis is None:
        raise node_error(ctx, "attribute 'axis' is required")

    def fn(xs):
        if is_str(xs[0]):
            return [np.concatenate(xs, axis=axis)]
        return [torch.cat(xs, dim=axis)]
    return fn


@register("Split")
def split(ctx):
    axis = ctx.attr("axis", 0)
    n = ctx.attr("num_outputs", ctx.num_outputs)
    sizes, dyn = int_input(ctx, 1, "split", 12)

    def do(x, s):
        ax = norm_axis(axis, x.ndim)
        if not s:
            # Equal parts; since opset 18 the last one may be smaller (ceil division).
            dim = x.shape[ax]
            chunk = -(-dim // n)
            s = [chunk] * (n - 1) + [dim - chunk * (n - 1)]
        if sum(s) != x.shape[ax] or min(s) < 0:
            raise ValueError(f"split sizes {s} do not add up to dimension {x.shape[ax]}")
        if is_str(x):
            return np.split(x, np.cumsum(s)[:-1], axis=ax)
        return list(torch.split(x, s, dim=ax))

    if dyn:
        return lambda xs: do(xs[0], ints(xs[1]))
    return lambda xs: do(xs[0], sizes)


# ---------------------------------------------------------------------------------------
# Slice

_BIG = 2 ** 62  # beyond any real dimension; keeps torch from warning about huge slices


def _clip(v: int) -> int:
    return max(-_BIG, min(_BIG, v))


def _slice(x, starts, ends, axes, steps):
    rank = x.ndim
    if axes is None:
        axes = range(len(starts))
    idx = [slice(None)] * rank
    flips = []
    for st, en, ax, sp in zip(starts, ends, axes, steps):
        ax = norm_axis(ax, rank)
        if sp == 0:
            raise ValueError("slice step cannot be 0")
        if sp > 0:
            # Python's slice clamping is ONNX's for positive steps.
            idx[ax] = slice(_clip(st), _clip(en), sp)
            continue
        # torch has no negative steps: take the covered range, flip it, then step.
        # ONNX clamps start to [0, dim-1] and end to [-1, dim-1] here (Python's slice would
        # clamp a start below -dim to -1: an empty range where ONNX takes element 0).
        dim = x.shape[ax]
        s = min(max(st + dim if st < 0 else st, 0), dim - 1)
        e = min(max(en + dim if en < 0 else en, -1), dim - 1)
        p = sp
        count = len(range(s, e, p))
        if count == 0:
            idx[ax] = slice(0, 0)
            continue
        last = s + (count - 1) * p
        idx[ax] = slice(last, s + 1)
        flips.append((ax, -sp))
    out = x[tuple(idx)]
    for ax, sp in flips:
        out = np.flip(out, ax) if is_str(out) else out.flip(ax)
        if sp != 1:
            sel = [slice(None)] * rank
            sel[ax] = slice(None, None, sp)
            out = out[tuple(sel)]
    return out


@register("Slice", until=9)
def slice_attr(ctx):
    starts, ends, axes = ctx.attr("starts"), ctx.attr("ends"), ctx.attr("axes")
    steps = [1] * len(starts)
    return lambda xs: [_slice(xs[0], starts, ends, axes, steps)]


@register("Slice", since=10)
def slice_(ctx):
    parts = [int_input(ctx, i) for i in range(1, 5)]
    if not any(dyn for _, dyn in parts):
        starts, ends, axes, steps = (v for v, _ in parts)
        steps = steps or [1] * len(starts)
        if min(steps, default=1) > 0 and (axes is None or min(axes, default=0) >= 0):
            # Fast path: one precomputed index tuple.
            axes = axes if axes is not None else list(range(len(starts)))
            idx = [slice(None)] * (max(axes, default=-1) + 1)
            for st, en, ax, sp in zip(starts, ends, axes, steps):
                idx[ax] = slice(_clip(st), _clip(en), sp)
            idx = tuple(idx)
            return lambda xs: [xs[0][idx]]
        return lambda xs: [_slice(xs[0], starts, ends, axes, steps)]

    def fn(xs):
        vals = [ints(xs[i + 1]) if dyn else v for i, (v, dyn) in enumerate(parts)]
        starts, ends, axes, steps = vals
        return [_slice(xs[0], starts, ends, axes, steps or [1] * len(starts))]
    return fn


# ---------------------------------------------------------------------------------------
# Expand / Tile


@register("Expand", since=8)
def expand(ctx):
    shape, dyn = int_input(ctx, 1)

    def do(x, s):
        out = torch.broadcast_shapes(tuple(x.shape), tuple(s))  # bidirectional, as numpy
        return x.expand(out).contiguous()

    if dyn:
        return lambda xs: [do(xs[0], ints(xs[1]))]
    return lambda xs: [do(xs[0], shape)]


@register("Tile", since=6)
def tile(ctx):
    reps, dyn = int_input(ctx, 1)

    def do(x, r):
        if len(r) != x.ndim:
            raise ValueError(f"repeats has {len(r)} entries for a rank-{x.ndim} input")
        return np.tile(x, r) if is_str(x) else x.repeat(r)

    if dyn:
        return lambda xs: [do(xs[0], ints(xs[1]))]
    return lambda xs: [do(xs[0], reps)]


# ---------------------------------------------------------------------------------------
# Shape / Size


@register("Shape")
def shape(ctx):
    start, end = ctx.attr("start", 0), ctx.attr("end")
    dev = ctx.device
    # Shape values feed shape arithmetic, which reads them on the host; ints on ctx.device.
    return lambda xs: [torch.tensor(list(xs[0].shape)[start:end], dtype=torch.int64, device=dev)]


@register("Size")
def size(ctx):
    dev = ctx.device
    return lambda xs: [torch.tensor(int(np.prod(xs[0].shape)), dtype=torch.int64, device=dev)]


# ---------------------------------------------------------------------------------------
# DepthToSpace / SpaceToDepth


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
