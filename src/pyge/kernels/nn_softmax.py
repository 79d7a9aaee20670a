"""Softmax, LogSoftmax and Hardmax: along one axis from opset 13, over the input coerced
to 2-D at `axis` before (the older schema)."""
from __future__ import annotations

import math

import torch

from ._util import norm_axis
from .registry import register


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
