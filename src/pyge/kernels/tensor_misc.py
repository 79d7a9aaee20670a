"""Miscellaneous tensor kernels: BitCast, TfIdfVectorizer."""
from __future__ import annotations

import numpy as np
import torch

from ._util import STRING, node_error, np_of, onnx_dtype, run_error
from .registry import register
from .convert import torch_dtype


@register("BitCast", since=26)
def bitcast(ctx):
    to = ctx.attr("to")
    if to is None:
        raise node_error(ctx, "attribute 'to' is required")
    if to == STRING:
        raise node_error(ctx, "attribute to=8 (string): strings cannot be bit-cast")
    dtype = onnx_dtype(ctx, to)
    size = torch.empty((), dtype=dtype).element_size()
    in_dt = torch_dtype(ctx.input_dtype(0))
    if in_dt is not None and in_dt.itemsize != size:
        raise node_error(ctx, f"attribute to={to} ({dtype}, {8 * size} bits) and the input "
                              f"({in_dt}, {8 * in_dt.itemsize} bits) differ in bit width")

    def fn(xs):
        x = xs[0]
        if not isinstance(x, torch.Tensor):
            raise run_error(ctx, "strings cannot be bit-cast")
        if x.element_size() != size:
            raise run_error(ctx, f"input {x.dtype} and output {dtype} differ in bit width")
        # Same width: a reinterpreting view (torch and ONNX both little endian here).
        return [x.view(dtype)]
    return fn


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
