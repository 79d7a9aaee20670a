"""Sequence and optional kernels.

Run-time representation (see registry): a sequence is a Python ``list`` of tensors (string
tensors are numpy object arrays), an optional is ``None`` or its value. Sequences are
values, never mutated in place: every kernel that "modifies" a sequence returns a new list,
because the input list may still be read by other nodes (or by the next Loop iteration).
"""
from __future__ import annotations

from typing import Any

import numpy as np
import torch

from ..errors import GraphError
from ._util import run_error
from .registry import KernelContext, register


def _seq(ctx: KernelContext, x: Any) -> list:
    if not isinstance(x, list):
        raise run_error(ctx, f"expected a sequence input, got {type(x).__name__}")
    return x


def _scalar_int(x: Any) -> int:
    if isinstance(x, torch.Tensor):
        return int(x.reshape(-1)[0].item())
    return int(np.asarray(x).reshape(-1)[0])


def _index(ctx: KernelContext, pos: int, n: int, allow_end: bool) -> int:
    """Normalise a (possibly negative) position; valid range [-n, n-1], or [-n, n] for insert."""
    hi = n if allow_end else n - 1
    if not -n <= pos <= hi:
        raise run_error(ctx, f"position {pos} out of range for a sequence of length {n}")
    return pos + n if pos < 0 else pos


# -- sequences ---------------------------------------------------------------------------


@register("SequenceEmpty", since=11)
def sequence_empty(ctx):
    return lambda xs: [[]]


@register("SequenceConstruct", since=11)
def sequence_construct(ctx):
    return lambda xs: [list(xs)]


@register("SequenceLength", since=11)
def sequence_length(ctx):
    dev = ctx.device

    def run(xs):
        return [torch.tensor(len(_seq(ctx, xs[0])), dtype=torch.int64, device=dev)]
    return run


@register("SequenceAt", since=11)
def sequence_at(ctx):
    def run(xs):
        s = _seq(ctx, xs[0])
        return [s[_index(ctx, _scalar_int(xs[1]), len(s), allow_end=False)]]
    return run


@register("SequenceInsert", since=11)
def sequence_insert(ctx):
    def run(xs):
        s = list(_seq(ctx, xs[0]))  # copy: the input sequence stays valid for other readers
        pos = len(s) if len(xs) < 3 or xs[2] is None else _index(ctx, _scalar_int(xs[2]), len(s), True)
        s.insert(pos, xs[1])
        return [s]
    return run


@register("SequenceErase", since=11)
def sequence_erase(ctx):
    def run(xs):
        s = list(_seq(ctx, xs[0]))
        if not s:
            raise run_error(ctx, "cannot erase from an empty sequence")
        pos = -1 if len(xs) < 2 or xs[1] is None else _scalar_int(xs[1])
        del s[_index(ctx, pos, len(s), allow_end=False)]
        return [s]
    return run


@register("SplitToSequence", since=11)
def split_to_sequence(ctx):
    axis = int(ctx.attr("axis", 0))
    keepdims = int(ctx.attr("keepdims", 1))

    def run(xs):
        x = xs[0]
        split = xs[1] if len(xs) > 1 else None
        rank = x.ndim
        if not -rank <= axis < rank:
            raise run_error(ctx, f"axis {axis} out of range for rank {rank}")
        ax = axis % rank
        dim = x.shape[ax]
        if split is None:
            sizes = [1] * dim
        else:
            sp = split.tolist() if isinstance(split, torch.Tensor) else np.asarray(split).tolist()
            if isinstance(sp, list):
                sizes = [int(v) for v in sp]
            else:  # a scalar: equal chunks, the last one may be smaller
                if sp <= 0:
                    raise run_error(ctx, f"split size must be positive, got {sp}")
                sizes = [sp] * (dim // sp) + ([dim % sp] if dim % sp else [])
            if sum(sizes) != dim or any(s < 0 for s in sizes):
                raise run_error(ctx, f"split sizes {sizes} do not add up to dimension {dim}")
        if isinstance(x, np.ndarray):  # strings
            parts = np.split(x, np.cumsum(sizes)[:-1].tolist(), axis=ax)
        else:
            parts = list(torch.split(x, sizes, dim=ax))
        # keepdims only applies when 'split' is absent (each part then has length 1).
        if split is None and not keepdims:
            parts = [p.squeeze(ax) if isinstance(p, torch.Tensor) else np.squeeze(p, ax) for p in parts]
        return [parts]
    return run


@register("ConcatFromSequence", since=11)
def concat_from_sequence(ctx):
    if "axis" not in ctx.node.attrs:
        raise GraphError(f"node {ctx.node.name!r} (ConcatFromSequence) needs attribute 'axis'")
    axis = int(ctx.attr("axis"))
    new_axis = int(ctx.attr("new_axis", 0))

    def run(xs):
        s = _seq(ctx, xs[0])
        if not s:
            raise run_error(ctx, "cannot concatenate an empty sequence")
        if isinstance(s[0], np.ndarray):
            return [np.stack(s, axis=axis) if new_axis else np.concatenate(s, axis=axis)]
        return [torch.stack(s, dim=axis) if new_axis else torch.cat(s, dim=axis)]
    return run


# -- optionals ---------------------------------------------------------------------------


@register("Optional", since=15)
def optional(ctx):
    # With no input, the node makes an empty optional of the type given by attribute 'type'.
    return lambda xs: [xs[0] if xs else None]


@register("OptionalHasElement", since=15)
def optional_has_element(ctx):
    dev = ctx.device

    def run(xs):
        has = bool(xs) and xs[0] is not None
        return [torch.tensor(has, dtype=torch.bool, device=dev)]
    return run


@register("OptionalGetElement", since=15)
def optional_get_element(ctx):
    def run(xs):
        # Since opset 18 a plain tensor/sequence is accepted too and passed through.
        if xs[0] is None:
            raise run_error(ctx, "the optional input is empty")
        return [xs[0]]
    return run
