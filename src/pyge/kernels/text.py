"""Text kernels: the string operators (StringNormalizer, StringConcat, RegexFullMatch,
StringSplit) and TfIdfVectorizer (n-gram counts of rows of int or string tokens).

Strings never leave the host: they are numpy ``object`` arrays of Python ``str``; numeric
results (bool masks, counts) are torch tensors on the model device. (This file is not
named string.py: run from this folder, that name would hide the standard library's.)"""
from __future__ import annotations

import re

import numpy as np
import torch

from ..errors import GraphError
from ._util import node_error, np_of, run_error
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


# ---------------------------------------------------------------------------------------
# TfIdfVectorizer


@register("TfIdfVectorizer", since=9)
def tfidf_vectorizer(ctx):
    """Counts the pool's n-grams (sizes min_gram_length..max_gram_length, items up to
    max_skip_count apart) in each row of a 1-D [C] or 2-D [B, C] int or string input, as
    the ONNX reference does; host-side (a dictionary of n-gram tuples), output float32."""
    mode = ctx.attr("mode")
    if isinstance(mode, bytes):
        mode = mode.decode()
    if mode not in ("TF", "IDF", "TFIDF"):
        raise node_error(ctx, f"attribute mode={mode!r} is not one of TF, IDF, TFIDF")
    lo, hi = int(ctx.attr("min_gram_length", 0)), int(ctx.attr("max_gram_length", 0))
    skip = int(ctx.attr("max_skip_count", 0))
    if not 1 <= lo <= hi or skip < 0:
        raise node_error(ctx, f"attributes min_gram_length={lo}, max_gram_length={hi}, "
                              f"max_skip_count={skip}: need 1 <= min <= max and skip >= 0")
    counts = [int(c) for c in ctx.attr("ngram_counts", [])]
    indexes = [int(i) for i in ctx.attr("ngram_indexes", [])]
    pool_i, pool_s = ctx.attr("pool_int64s"), ctx.attr("pool_strings")
    if (pool_i is None) == (pool_s is None):
        raise node_error(ctx, "exactly one of the attributes pool_int64s, pool_strings is needed")
    pool = [int(v) for v in pool_i] if pool_i is not None else \
        [v.decode() if isinstance(v, bytes) else str(v) for v in pool_s]
    if not counts or not indexes:
        raise node_error(ctx, "attributes ngram_counts and ngram_indexes are required")
    out_size = max(indexes) + 1
    weights = ctx.attr("weights")
    if weights is not None and len(weights):
        # The i-th weight belongs to the pool's i-th n-gram (the spec; onnxruntime), which
        # lands in column ngram_indexes[i]. (The ONNX reference indexes weights by column,
        # the same only when ngram_indexes is 0, 1, 2...)
        if len(weights) != len(indexes):
            raise node_error(ctx, f"attribute weights has {len(weights)} values, ngram_indexes "
                                  f"{len(indexes)}")
        col_w = np.zeros(out_size, np.float32)
        col_w[np.asarray(indexes)] = np.asarray(weights, np.float32)
        weights = col_w
    else:
        weights = None
    # n-gram tuple -> output column. Pool n-grams are numbered across all sizes, in order.
    table: dict[tuple, int] = {}
    gram_id = 0
    for size, start in enumerate(counts, 1):
        end = counts[size] if size < len(counts) else len(pool)
        for k in range(start, end, size):
            if gram_id >= len(indexes):
                raise node_error(ctx, f"attribute ngram_indexes has {len(indexes)} values, fewer "
                                      f"than the pool's n-grams")
            if lo <= size <= hi:
                table[tuple(pool[k:k + size])] = indexes[gram_id]
            gram_id += 1
    strings = pool_s is not None

    def row_counts(row, freq):
        c = len(row)
        first = lo
        for dist in range(1, skip + 2):
            for start in range(c):
                if start + dist * (first - 1) >= c:
                    break
                for n in range(first, hi + 1):
                    last = start + dist * (n - 1)
                    if last >= c:
                        break
                    col = table.get(tuple(row[start:last + 1:dist]))
                    if col is not None:
                        freq[col] += 1
            if first == 1:  # unigrams do not depend on the skip distance: count them once
                first = 2
                if first > hi:
                    break

    def fn(xs):
        x = xs[0]
        arr = np_of(x)
        if arr.ndim > 2 or (arr.ndim == 2 and arr.shape[0] < 1):
            raise run_error(ctx, f"input must be [C] or [B, C] with B > 0; got shape {arr.shape}")
        rows = arr.reshape(1, -1) if arr.ndim < 2 else arr
        rows = [[str(v) for v in r] if strings else [int(v) for v in r] for r in rows.tolist()]
        freq = np.zeros((len(rows), out_size), np.int64)
        if table:
            for r, f in zip(rows, freq):
                row_counts(r, f)
        if mode == "TF":
            y = freq.astype(np.float32)
        elif mode == "IDF":
            y = (freq > 0) * (weights if weights is not None else np.float32(1))
        else:
            y = freq * weights if weights is not None else freq
        y = np.asarray(y, np.float32).reshape((out_size,) if arr.ndim < 2 else freq.shape)
        dev = x.device if isinstance(x, torch.Tensor) else ctx.device
        return [torch.from_numpy(y).to(dev)]
    return fn
