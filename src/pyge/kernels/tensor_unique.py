"""Unique (opset 11/28): the unique elements (or slices along `axis`), their first
occurrences, the inverse map and the counts, sorted or in order of first occurrence.

The output size depends on the data (a HOST_OP). Numbers run on torch.unique on the input's
device; strings, complex numbers and float input holding NaN go through np.unique, whose
behaviour the reference defines (numpy 2 counts all NaNs of a flat input as one value;
torch.unique keeps each NaN apart and does not sort slices holding NaN).
"""
from __future__ import annotations

import numpy as np
import torch

from ._util import like, norm_axis, np_of, run_error
from .registry import register


def _first_order(y, idx, inv, cnt, take):
    """Sorted results -> results in order of first occurrence."""
    perm = np.argsort(idx, kind="stable") if isinstance(idx, np.ndarray) else torch.argsort(idx)
    if isinstance(idx, np.ndarray):
        rank = np.empty_like(perm)
        rank[perm] = np.arange(perm.shape[0])
    else:
        rank = torch.empty_like(perm)
        rank[perm] = torch.arange(perm.shape[0], device=perm.device)
    return take(y, perm), idx[perm], rank[inv], cnt[perm]


def _unique_np(x: np.ndarray, axis, sorted_: bool):
    if axis is None:
        y, idx, inv, cnt = np.unique(x, True, True, True)
        take = lambda a, p: a[p]  # noqa: E731
    else:
        y, idx, inv, cnt = np.unique(x, True, True, True, axis=axis)
        take = lambda a, p: np.take(a, p, axis=axis)  # noqa: E731
    inv = inv.reshape(-1)
    if not sorted_:
        y, idx, inv, cnt = _first_order(y, idx, inv, cnt, take)
    return y, idx.astype(np.int64), inv.astype(np.int64), cnt.astype(np.int64)


def _unique_torch(x: torch.Tensor, axis, sorted_: bool):
    src = x.reshape(-1) if axis is None else x
    dim = 0 if axis is None else axis
    y, inv, cnt = torch.unique(src, sorted=True, return_inverse=True, return_counts=True,
                               dim=axis)
    n = src.shape[dim]
    idx = torch.full((y.shape[dim],), n, dtype=torch.int64, device=x.device)
    idx.scatter_reduce_(0, inv, torch.arange(n, device=x.device), "amin")
    if not sorted_:
        y, idx, inv, cnt = _first_order(y, idx, inv, cnt,
                                        lambda a, p: a.index_select(dim, p))
    return y, idx, inv.reshape(-1), cnt


@register("Unique", since=11)
def unique(ctx):
    axis = ctx.attr("axis")
    sorted_ = bool(ctx.attr("sorted", 1))
    n_out = ctx.num_outputs

    def fn(xs):
        x = xs[0]
        ax = None
        if axis is not None:
            try:
                ax = norm_axis(int(axis), x.ndim)
            except ValueError as e:
                raise run_error(ctx, f"attribute 'axis': {e}") from None
        host = not isinstance(x, torch.Tensor) or x.is_complex() \
            or (x.is_floating_point() and bool(torch.isnan(x).any()))
        if host:
            bf16 = isinstance(x, torch.Tensor) and x.dtype == torch.bfloat16
            a = np_of(x.float() if bf16 else x)
            y, idx, inv, cnt = _unique_np(a, ax, sorted_)
            if isinstance(x, torch.Tensor):
                y = like(x, y).to(torch.bfloat16) if bf16 else like(x, y)
            res = [y, like(x, idx), like(x, inv), like(x, cnt)]
        else:
            res = list(_unique_torch(x, ax, sorted_))
        return res[:n_out]
    return fn
