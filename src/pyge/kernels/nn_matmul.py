"""MatMul and Gemm. On the CPU a float32 product with a constant 2-D weight runs on oneDNN
with the weight packed once (onednn.py) where that is faster; everything else is torch's
matmul / addmm.

Which path, by shape. oneDNN's packed call costs a floor of some 14 us a call on the CPU,
where torch.matmul on a small weight costs 2-6 us (MKL), and wins only once the weight is
large enough: from about 512x768 elements for one row of A (a GEMV, the batch-1 case), from
about 384x384 for 2 to 63 rows, and from 256x256 for 64 rows or more. `PACKED_MIN_WEIGHT`
holds these boundaries: the weight's element count K*N from which a product takes the
packed path; below it torch's call runs. The rows are counted per call, so one kernel serves
every batch size. `python benchmarks/bench_small_ops.py --gemm` measures the table on a
machine (docs/performance.md, "Small operators", has the figures it was read from).

Both kernels return new tensors (marked fresh, executors/into.py). A MatMul of two 2-D float
operands whose shapes the plan knows, where torch's path runs for its row count, also
writes into a buffer of the memory plan (torch.mm with out=: what matmul calls for 2-D);
so does a float Gemm (torch.addmm with out=) where its packed product does not run.
"""
from __future__ import annotations

import math

import numpy as np
import torch

from ._util import FLOAT_TYPES, direct
from .elementwise import broadcast
from .onednn import MKLDNN, PACKED_LINEAR_OK, Derived
from .registry import register


# Smallest weight (K*N elements) taking the packed path, for a product of 1 row, of 2-63
# rows and of 64 rows or more (non-increasing: a weight packed for fewer rows is for more).
PACKED_MIN_WEIGHT = (512 * 768, 384 * 384, 256 * 256)
MANY_ROWS = 64


def packed_wins(rows: int, k: int, n: int) -> bool:
    """Whether oneDNN's packed product beats torch's for `rows` x K times K x N (the table
    PACKED_MIN_WEIGHT above)."""
    return k * n >= PACKED_MIN_WEIGHT[0 if rows <= 1 else 1 if rows < MANY_ROWS else 2]


@register("MatMul")
def matmul(ctx):
    linear = _packed_linear(ctx, 1, False)
    if linear is None:
        fn = direct(lambda xs: [torch.matmul(xs[0], xs[1])], torch.matmul)
    else:
        def fn(xs):
            y = linear(xs[0], xs[1], None)
            return [y if y is not None else torch.matmul(xs[0], xs[1])]
    fn.fresh = True
    fn.into = _mm_into(linear is not None)
    return fn


def _mm_into(packs: bool):
    """MatMul's `into` (executors/into.py): torch.mm for 2-D operands of one float dtype,
    unless the packed product runs for this row count (`packs`: the kernel may pack)."""
    def into(ins, out):
        if out is None or len(ins) != 2 or None in ins:
            return None
        (da, sa), (db, sb) = ins
        if not da == db == out[0] in ("float32", "float64") or len(sa) != 2 or len(sb) != 2 \
                or sa[1] != sb[0] or out[1] != (sa[0], sb[1]):
            return None
        if packs and da == "float32" and packed_wins(sa[0], sb[0], sb[1]):
            return None
        return torch.mm
    return into


def _packed_linear(ctx, b_index: int, transposed: bool):
    """For a float32 matrix product on the CPU whose weight (input `b_index`) is a 2-D
    constant: fn(a, b, bias) -> a @ B (+ bias) by oneDNN on the packed weight, or None where
    that does not apply. `transposed`: B is given as (N, K), as Gemm's transB=1 has it."""
    w = ctx.const_input(b_index)
    if not PACKED_LINEAR_OK or torch.device(ctx.device).type != "cpu" or w is None \
            or w.ndim != 2 or w.dtype != np.float32:
        return None
    k, n = (w.shape[1], w.shape[0]) if transposed else w.shape
    wins = (packed_wins(1, k, n), packed_wins(2, k, n), packed_wins(MANY_ROWS, k, n))
    if not any(wins):
        return None                 # too small to pay for oneDNN's call at any batch size
    packed = Derived()

    def fn(a, b, bias):
        if a.dtype != torch.float32 or a.ndim < 2 or b.dtype != torch.float32 or b.requires_grad:
            return None
        rows = a.numel() // max(k, 1)
        if not wins[0 if rows <= 1 else 1 if rows < MANY_ROWS else 2]:
            return None
        # Packed once, for the first call's row count: a packing made for another batch
        # size still runs, on large weights still well ahead of torch.addmm
        # (bench_kernels_cpu.py's batch-8 rows reuse the batch-1 packing), while repacking
        # whenever the batch changes would reorder the whole weight per call.
        wp = packed.get((b,), None, lambda: MKLDNN._reorder_linear_weight(
            b if transposed else b.t().contiguous(), a.numel() // max(a.shape[-1], 1)))
        return MKLDNN._linear_pointwise(a, wp, bias, "none", [], "")
    return fn


@register("Gemm")
def gemm(ctx):
    alpha, beta = ctx.attr("alpha", 1.0), ctx.attr("beta", 1.0)
    ta, tb = ctx.attr("transA", 0), ctx.attr("transB", 0)
    has_c = ctx.has_input(2) and beta != 0.0
    linear = _packed_linear(ctx, 1, bool(tb)) if alpha == 1.0 and not ta \
        and (not has_c or beta == 1.0) else None

    def fn(xs):
        a, b = xs[0], xs[1]
        if linear is not None:
            c = xs[2] if has_c else None
            n = b.shape[0] if tb else b.shape[-1]
            # A bias oneDNN can take: one value per output column.
            if c is None or (c.dtype == torch.float32 and c.numel() == n
                             and (c.ndim == 1 or (c.ndim == 2 and c.shape[0] == 1))):
                y = linear(a, b, None if c is None else c.reshape(n))
                if y is not None:
                    return [y]
        a = a.T if ta else a
        b = b.T if tb else b
        if has_c and xs[2] is not None:
            if a.dtype in FLOAT_TYPES:
                # One fused BLAS call; addmm broadcasts C to (M, N).
                return [torch.addmm(xs[2], a, b, beta=beta, alpha=alpha)]
            if (alpha, beta) == (1, 1):
                return [a @ b + xs[2]]
            # Integer types: float alpha/beta must not promote the result (it stays T).
            return [((a @ b) * alpha + xs[2] * beta).to(a.dtype)]
        out = torch.mm(a, b) if a.dtype in FLOAT_TYPES else a @ b
        return [(out * alpha).to(out.dtype) if alpha != 1.0 else out]
    fn.fresh = True
    fn.into = _gemm_into(alpha, beta, ta, tb, has_c, linear is not None)
    return fn


def _gemm_into(alpha: float, beta: float, ta: int, tb: int, has_c: bool, packs: bool):
    """Gemm's `into` (executors/into.py): torch.addmm (torch.mm without C) with out=, for
    operands of one float dtype whose planned shapes give the output's, unless the kernel
    would take the packed product (`packs`: it may) for the planned rows and bias."""
    def into(ins, out):
        if out is None or len(ins) < 2 or None in ins:
            return None
        (da, sa), (db, sb) = ins[0], ins[1]
        if not da == db == out[0] in ("float32", "float64") or len(sa) != 2 or len(sb) != 2:
            return None
        (m, k), (k2, n) = (sa[::-1] if ta else sa), (sb[::-1] if tb else sb)
        c = ins[2] if has_c and len(ins) > 2 else None
        if k != k2 or out[1] != (m, n) or (c is not None and (
                c[0] != da or broadcast([c[1], (m, n)]) != (m, n))):
            return None
        bias_ok = c is None or (len(c[1]) == 1 or (len(c[1]) == 2 and c[1][0] == 1)) \
            and math.prod(c[1]) == n
        if packs and da == "float32" and bias_ok and packed_wins(m, k, n):
            return None
        if c is None:
            if alpha != 1.0:
                return None
            return lambda a, b, *_, out: torch.mm(a.T if ta else a, b.T if tb else b, out=out)
        return lambda a, b, c, out: torch.addmm(c, a.T if ta else a, b.T if tb else b,
                                                beta=beta, alpha=alpha, out=out)
    return into
