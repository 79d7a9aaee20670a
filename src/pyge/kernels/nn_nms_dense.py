"""NonMaxSuppression for one (batch, class) group of a few thousand candidates at most
(nn_nms.py): heads of the ranking, dense overlap tests and a greedy scan over bit rows.

The blocks of nn_nms.py find suppressing pairs with a join of some forty numpy calls and
resolve greedy selection in vectorised rounds; where a group has few candidates, those fixed
costs are most of its time. Here the candidates, by score rank, are taken a head of HEAD at
a time from those still undecided:

- among the head, which pairs may overlap is one dense test of integer boxes (below), the
  pairs that do are tested exactly, and greedy selection is a scan over bit rows (Python
  integers): the next kept box is the lowest bit not yet removed, and keeping it removes its
  row, so the scan costs a few integer operations per kept box, not per candidate;
- every undecided candidate after the head is then tested against the head's kept boxes
  alone (one dense test, the pairs that may overlap tested exactly), and those suppressed
  leave. The rest are undecided still, and none of them is suppressed by a kept box: the next
  head is the first HEAD of them.

Every kept box ranks before every undecided candidate, so each head's greedy selection is
the whole greedy selection's, as onnxruntime's loop would make it. Where the candidates are
mostly kept (few overlaps: boxes spread out), each head decides little more than itself, the
kept-against-rest tests grow as the square of the candidates, and the blocks of nn_nms.py
cost less: a first head with few overlapping pairs declines the path, and a head whose kept
boxes suppress fewer candidates than they number hands the undecided ones back.

The dense test compares boxes quantised to int16 by a monotone map (floor of (x - origin) *
scale, the upper corners plus one), so that two boxes that overlap in floats overlap in
integers; it may pass a few pairs that do not, which the exact test then refuses. The exact
test is onnxruntime's SuppressByIOU (nn_nms_graph.py), operation for operation in the boxes'
precision, for boxes with positive extents and a finite positive area (the others take part
in no pair, as there): the intersection's extents clamped at 0, so that a pair that does not
overlap has an IoU of 0, below any threshold in [0, 1].
"""
from __future__ import annotations

import numpy as np

from .nn_nms_classes import descending_keys

# Candidates a head (at most 64: a head's bit rows are then 64-bit words).
HEAD = 64
# A first head with fewer pairs that may overlap than FEW_PAIRS times its candidates
# declines the path; a head whose kept boxes suppress fewer candidates (in the head and
# after it) than FEW_OUT times their number hands the undecided ones back.
FEW_PAIRS = 0.75
FEW_OUT = 1.0

_LEVELS = 30000                         # quantised coordinates: 0 .. _LEVELS
_NEVER_LO, _NEVER_HI = 32767, -32768    # the lower / upper corners of boxes that take no part
_UPPER = np.triu(np.ones((HEAD, HEAD), bool), 1)


def _order(s: np.ndarray, score_thr) -> np.ndarray:
    """The candidates by descending score, the lower index first among equal scores, NaN
    last (nn_nms._score_order's order): an unstable argsort where the scores are distinct,
    which its sorted scores show."""
    o = np.argsort(-s)
    ss = s.take(o)
    if not (ss[:-1] > ss[1:]).all():    # ties, NaN, or signed zeros: a stable order
        if s.dtype == np.float32:
            key = (descending_keys(s).astype(np.uint64) << np.uint64(32)) \
                | np.arange(s.size, dtype=np.uint64)
            o = (np.sort(key) & np.uint64(0xFFFFFFFF)).astype(np.int64)
        else:
            o = np.argsort(-s, kind="stable")
        ss = s.take(o)
    if score_thr is not None:
        with np.errstate(invalid="ignore"):
            o = o[:int(np.count_nonzero(ss > score_thr))]
    return o


def _corners(b: np.ndarray, center: bool, out: np.ndarray) -> np.ndarray:
    """out[:4] = xmin, ymin, xmax, ymax of the boxes b [c, 4], computed as onnxruntime does:
    corners [y1, x1, y2, x2] in either order, or [x_center, y_center, width, height]."""
    if center:
        wh, hh = b[:, 2] / 2, b[:, 3] / 2
        np.subtract(b[:, 0], wh, out=out[0])
        np.subtract(b[:, 1], hh, out=out[1])
        np.add(b[:, 0], wh, out=out[2])
        np.add(b[:, 1], hh, out=out[3])
    else:
        np.minimum(b[:, 1], b[:, 3], out=out[0])
        np.minimum(b[:, 0], b[:, 2], out=out[1])
        np.maximum(b[:, 1], b[:, 3], out=out[2])
        np.maximum(b[:, 0], b[:, 2], out=out[3])
    return out


def _few_pairs(boxes: np.ndarray, head: np.ndarray, center: bool) -> bool:
    """Whether the boxes `head` (about the first head) overlap in fewer than FEW_PAIRS pairs
    a box: tested on their floats, before anything else is made for the path."""
    R = _corners(boxes.take(head, 0), center, np.empty((4, head.size), boxes.dtype))
    with np.errstate(invalid="ignore"):
        o = _may_overlap(R, R)
    o &= _UPPER[:head.size, :head.size]
    return np.count_nonzero(o) < FEW_PAIRS * head.size


def _boxes(boxes: np.ndarray, order: np.ndarray, center: bool):
    """C [5, c]: xmin, ymin, xmax, ymax and area of the candidates in rank order, computed as
    onnxruntime does; Q [4, c] the same corners quantised to int16 (the boxes that take part
    in no pair get corners that overlap nothing). None where no box takes part or the
    coordinates span more than floats hold."""
    C = np.empty((5, order.size), boxes.dtype)
    _corners(boxes.take(order, 0), center, C)
    with np.errstate(all="ignore"):
        d = C[2:4] - C[:2]
        np.multiply(d[0], d[1], out=C[4])
        P, bad = C[:4], None
        if not (d.min() > 0 and 0 < C[4].min() and C[4].max() < np.inf):
            ok = (d > 0).all(0) & np.isfinite(C[4]) & (C[4] > 0)
            if not ok.any():
                return None
            bad = ~ok
            P = np.where(ok, P, P[:, int(ok.argmax())][:, None])
        lo = P[:2].min()
        span = float(P[2:].max() - lo)
        if not 0 < span < np.inf:
            return None
        f = P - lo
    f *= (_LEVELS - 2) / span
    Q = f.astype(np.int16)
    Q[2:] += 1
    if bad is not None:
        Q[:2, bad] = _NEVER_LO
        Q[2:, bad] = _NEVER_HI
    return C, Q


def _may_overlap(R, K):
    """[len(R), len(K)] bool: the quantised boxes R[:, i] and K[:, j] overlap in both axes."""
    o = np.less(K[0], R[2][:, None])
    o &= np.less(R[0][:, None], K[2])
    o &= np.less(K[1], R[3][:, None])
    o &= np.less(R[1][:, None], K[3])
    return o


def _suppresses(C, i, j, thr):
    """onnxruntime's SuppressByIOU for the candidate pairs (i[k], j[k]) (see the module)."""
    a, b = C.take(i, 1), C.take(j, 1)
    d = np.minimum(a[2:4], b[2:4])
    d -= np.maximum(a[:2], b[:2])
    np.maximum(d, 0, out=d)
    inter = d[0] * d[1]
    union = a[4] + b[4]
    union -= inter
    inter /= union
    return inter > thr


def _head(C, Q, at, m: int, thr):
    """Greedy selection among the m candidates `at` (rank order; None: the first m): the
    positions kept."""
    R = Q[:, :m] if at is None else Q.take(at, 1)
    o = _may_overlap(R, R)
    o &= _UPPER[:m, :m]
    flat = np.flatnonzero(o)
    i, j = np.divmod(flat, m)
    if at is not None:
        i, j = at.take(i), at.take(j)
    o.reshape(-1)[flat[~_suppresses(C, i, j, thr)]] = False
    if m < 64:
        o = np.concatenate([o, np.zeros((m, 64 - m), bool)], 1)
    rows = np.packbits(o, axis=1, bitorder="little").view("<u8").ravel().tolist()
    avail, kept = (1 << m) - 1, []
    while avail:
        low = avail & -avail
        k = low.bit_length() - 1
        kept.append(k)
        avail &= ~(rows[k] | low)
    return kept


def select_group(boxes: np.ndarray, scores: np.ndarray, max_out: int, thr, score_thr,
                 center: bool):
    """Greedy selection in one group: boxes [N, 4], scores [N]. Returns (kept, rest): the box
    indices kept, in selection order, and None, or the box indices still undecided (in rank
    order, after every kept box, none suppressed by one) for the blocks to finish; or None
    where the path declines (see the module)."""
    if FEW_PAIRS > 0 and scores.size > 1:
        # the probe's head: some HEAD best boxes (a partition; their order does not matter)
        top = np.argpartition(-scores, min(HEAD, scores.size) - 1)[:HEAD]
        if _few_pairs(boxes, top, center):
            return None
    order = _order(scores, score_thr)
    c = order.size
    if c == 0:
        return order, None
    made = _boxes(boxes, order, center)
    if made is None:
        return None
    C, Q = made
    kept, total = [], 0
    at = None                            # the undecided candidates (None: all, in order)
    while True:
        left = c if at is None else at.size
        m = min(HEAD, left)
        pos = _head(C, Q, None if at is None else at[:m], m, thr)
        kh = np.array(pos, np.int64) if at is None else at.take(pos)
        kept.append(kh)
        total += kh.size
        if left == m or total >= max_out:
            break
        rest = np.arange(m, c) if at is None else at[m:]
        o = _may_overlap(Q.take(kh, 1), Q[:, m:] if at is None else Q.take(rest, 1))
        flat = np.flatnonzero(o)
        i, j = np.divmod(flat, rest.size)
        out = np.zeros(rest.size, bool)
        out[j[_suppresses(C, kh.take(i), rest.take(j), thr)]] = True
        at = rest[~out]
        if not at.size:
            break
        if m - kh.size + rest.size - at.size < FEW_OUT * kh.size:
            return order.take(np.concatenate(kept)), order.take(at)
    return order.take(np.concatenate(kept)[:max_out]), None
