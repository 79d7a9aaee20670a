"""Reductions (Reduce*), ArgMax/ArgMin, Einsum, and the running reductions CumSum/CumProd.

ReduceSum takes its axes as an input from opset 13, the other Reduce* ops from opset 18;
before that they are an attribute. Without axes a reduction covers every axis, unless
noop_with_empty_axes=1, which makes it the identity.
"""
from __future__ import annotations

import math

import torch

from ._util import FLOAT_TYPES, int_input, ints, norm_axis
from .registry import register


def _empty_fill(x, dims, keep, value):
    shape = [1 if i in dims else d for i, d in enumerate(x.shape)] if keep else \
        [d for i, d in enumerate(x.shape) if i not in dims]
    return torch.full(shape, value, dtype=x.dtype, device=x.device)


class _BoolInfo:
    min, max = False, True


def _iinfo(dtype):
    return _BoolInfo if dtype == torch.bool else torch.iinfo(dtype)


def _max(x, dims, keep):
    if x.numel() == 0:  # max over nothing: the type's lowest value
        low = -math.inf if x.dtype in FLOAT_TYPES else _iinfo(x.dtype).min
        return _empty_fill(x, dims, keep, low)
    return torch.amax(x, dims, keep)


def _min(x, dims, keep):
    if x.numel() == 0:
        high = math.inf if x.dtype in FLOAT_TYPES else _iinfo(x.dtype).max
        return _empty_fill(x, dims, keep, high)
    return torch.amin(x, dims, keep)


def _prod(x, dims, keep):
    for d in sorted(dims, reverse=True):  # torch.prod takes one axis at a time
        x = torch.prod(x, d, keepdim=keep, dtype=x.dtype)  # no widening of int32 to int64
    return x


def _sum(x, dims, keep):
    return torch.sum(x, dims, keep, dtype=x.dtype)  # no widening of small ints


def _mean(x, dims, keep):
    if x.is_floating_point():
        return torch.mean(x, dims, keep)
    n = math.prod(x.shape[d] for d in dims)
    return torch.div(torch.sum(x, dims, keep), n, rounding_mode="trunc").to(x.dtype)


def _l1(x, dims, keep):
    return _sum(torch.abs(x), dims, keep)


def _l2(x, dims, keep):
    if x.is_floating_point():
        return torch.sqrt(torch.sum(x * x, dims, keep))
    return torch.sqrt(torch.sum(x * x, dims, keep).double()).to(x.dtype)


def _sum_square(x, dims, keep):
    return _sum(x * x, dims, keep)


def _log_sum(x, dims, keep):
    if x.is_floating_point():
        return torch.log(torch.sum(x, dims, keep))
    # Integer input: the result keeps the input's type (computed in double, truncated).
    return torch.log(torch.sum(x, dims, keep, dtype=torch.float64)).to(x.dtype)


def _log_sum_exp(x, dims, keep):
    if x.numel() == 0:
        return _empty_fill(x, dims, keep, -math.inf)
    if x.is_floating_point():
        return torch.logsumexp(x, dims, keep)
    return torch.logsumexp(x.double(), dims, keep).to(x.dtype)


# Reducing over no axis (noop_with_empty_axes=1 with no axes, or a 0-d input) is the
# identity for these; the composite reductions still apply their elementwise steps
# (ReduceL1 -> Abs, ReduceSumSquare -> Square, ReduceLogSum -> Log...).
_PLAIN = {_sum, _mean, _max, _min, _prod, _log_sum_exp}

_OPS = {
    "ReduceSum": (_sum, 13), "ReduceMean": (_mean, 18), "ReduceMax": (_max, 18),
    "ReduceMin": (_min, 18), "ReduceProd": (_prod, 18), "ReduceL1": (_l1, 18),
    "ReduceL2": (_l2, 18), "ReduceSumSquare": (_sum_square, 18),
    "ReduceLogSum": (_log_sum, 18), "ReduceLogSumExp": (_log_sum_exp, 18),
}


def _factory(op, axes_input_since):
    def factory(ctx):
        keep = bool(ctx.attr("keepdims", 1))
        noop = bool(ctx.attr("noop_with_empty_axes", 0))
        axes, dyn = int_input(ctx, 1, "axes", axes_input_since - 1)
        plain = op in _PLAIN

        def run(x, ax):
            if not ax:
                dims = () if noop else tuple(range(x.ndim))
            else:
                dims = tuple(sorted({norm_axis(a, x.ndim) for a in ax}))
            if not dims:  # nothing to reduce
                # A reduction over one size-1 axis: the composites' elementwise steps.
                return x if plain else op(x.unsqueeze(-1), (x.ndim,), False)
            return op(x, dims, keep)

        if dyn:
            return lambda xs: [run(xs[0], ints(xs[1]) if xs[1] is not None else None)]
        return lambda xs: [run(xs[0], axes)]
    return factory


for _name, (_op, _since) in _OPS.items():
    register(_name)(_factory(_op, _since))


def _arg(find):
    def factory(ctx):
        axis = ctx.attr("axis", 0)
        keep = bool(ctx.attr("keepdims", 1))
        last = bool(ctx.attr("select_last_index", 0))

        def fn(xs):
            x = xs[0]
            ax = norm_axis(axis, x.ndim)
            if last:
                # The last of equal extremes = the first one in the flipped tensor.
                i = find(x.flip(ax), ax, keepdim=keep)
                return [x.shape[ax] - 1 - i]
            # torch returns the first index among equal extremes, as ONNX does by default.
            return [find(x, ax, keepdim=keep)]
        return fn
    return factory


register("ArgMax")(_arg(torch.argmax))
register("ArgMin")(_arg(torch.argmin))


@register("Einsum", since=12)
def einsum(ctx):
    eq = ctx.attr("equation", "").replace(" ", "")
    return lambda xs: [torch.einsum(eq, *xs)]


# ---------------------------------------------------------------------------------------
# CumSum / CumProd: running sums and products along an axis


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
