"""String kernels. Strings never leave the host: they are numpy ``object`` arrays of
Python ``str``; numeric results (bool masks, counts) are torch tensors on the model device."""
from __future__ import annotations

import re

import numpy as np
import torch

from ..errors import GraphError
from ._util import run_error
from .registry import KernelContext, register


def _strings(ctx: KernelContext, x) -> np.ndarray:
    if not isinstance(x, np.ndarray):
        raise run_error(ctx, f"expected a string tensor, got {type(x).__name__}")
    if x.dtype != object:
        x = x.astype(object)
    # Tensors read from protobufs may hold bytes; kernels work on str.
    return np.vectorize(lambda s: s.decode("utf-8") if isinstance(s, bytes) else s,
                        otypes=[object])(x) if x.size else x


@register("StringNormalizer", since=10)
def string_normalizer(ctx):
    action = ctx.attr("case_change_action", "NONE")
    if action not in ("NONE", "LOWER", "UPPER"):
        raise GraphError(f"node {ctx.node.name!r} (StringNormalizer): unknown "
                         f"case_change_action {action!r}")
    sensitive = bool(ctx.attr("is_case_sensitive", 0))
    stops = list(ctx.attr("stopwords", []) or [])
    # Stop words are whole elements (not words inside an element); case-insensitive matching
    # compares case-folded forms.
    stopset = set(stops) if sensitive else {w.casefold() for w in stops}
    change = {"NONE": lambda s: s, "LOWER": str.lower, "UPPER": str.upper}[action]

    def run(xs):
        x = _strings(ctx, xs[0])
        if x.ndim not in (1, 2) or (x.ndim == 2 and x.shape[0] != 1):
            raise run_error(ctx, f"input must have shape [C] or [1, C], got {list(x.shape)}")
        flat = x.reshape(-1).tolist()
        kept = [change(s) for s in flat if (s if sensitive else s.casefold()) not in stopset]
        if not kept:
            kept = [""]  # everything dropped: a single empty string, same rank as the input
        out = np.empty(len(kept), dtype=object)
        out[:] = kept
        return [out.reshape(1, -1) if x.ndim == 2 else out]
    return run


@register("StringConcat", since=20)
def string_concat(ctx):
    def run(xs):
        a, b = _strings(ctx, xs[0]), _strings(ctx, xs[1])
        out = np.asarray(a + b, dtype=object)  # elementwise, numpy broadcasting
        return [out]
    return run


@register("RegexFullMatch", since=20)
def regex_full_match(ctx):
    pattern = ctx.attr("pattern")
    if pattern is None:
        raise GraphError(f"node {ctx.node.name!r} (RegexFullMatch) needs attribute 'pattern'")
    try:
        rx = re.compile(pattern)  # RE2 syntax; Python's re accepts the common subset
    except re.error as err:
        raise GraphError(f"node {ctx.node.name!r} (RegexFullMatch): bad pattern {pattern!r}: {err}") from err
    dev = ctx.device

    def run(xs):
        x = _strings(ctx, xs[0])
        mask = np.array([rx.fullmatch(s) is not None for s in x.reshape(-1).tolist()], dtype=bool)
        return [torch.from_numpy(mask.reshape(x.shape)).to(dev)]
    return run


@register("StringSplit", since=20)
def string_split(ctx):
    delim = ctx.attr("delimiter", "") or None   # "" / absent: split on runs of whitespace
    maxsplit = ctx.attr("maxsplit", None)
    maxsplit = -1 if maxsplit is None else int(maxsplit)
    dev = ctx.device

    def run(xs):
        x = _strings(ctx, xs[0])
        parts = [s.split(delim, maxsplit) for s in x.reshape(-1).tolist()]
        width = max((len(p) for p in parts), default=0)
        y = np.full((len(parts), width), "", dtype=object)
        for i, p in enumerate(parts):
            y[i, :len(p)] = p
        counts = np.array([len(p) for p in parts], dtype=np.int64).reshape(x.shape)
        return [y.reshape(*x.shape, width), torch.from_numpy(counts).to(dev)]
    return run
