"""The two vectorised halves of NonMaxSuppression (nn_nms.py): which pairs of boxes suppress
each other, and which boxes greedy selection keeps given those pairs. numpy, on the host:
NMS is a host operator, and its many small array steps cost less there than torch calls.

Greedy NMS keeps a box when no box kept before it (higher score) overlaps it by more than the
threshold. Only boxes that intersect can suppress each other, so the pairs come from a spatial
join on a uniform grid instead of all n^2 comparisons. Each pair is examined in one cell only,
its owner: the cell holding the lower-left corner of the two boxes' intersection, which is the
first column of one box and the first row of one box (both boxes cover it). Entries are laid
out per cell so that every entry's partners in the owner rule form contiguous ranges.

Suppression is decided with onnxruntime's arithmetic (non_max_suppression_helper.h,
SuppressByIOU), operation for operation in the boxes' precision: intersection extents from
max/min of the corners, intersection area, union = area1 + area2 - intersection (the sum
commutes exactly), IoU = intersection / union, suppressed when IoU > threshold. A box whose
extent is not positive in both axes, or whose area is not a finite positive number, never
suppresses nor is suppressed there (no positive intersection, or a NaN/zero IoU, or the
explicit area test), so such boxes take no part in the join.
"""
from __future__ import annotations

import numpy as np
import torch

# Limits that keep the join's temporaries bounded: grid entries per box on average, cells per
# axis, and candidate pairs examined per chunk.
_ENTRIES_PER_BOX = 4
_MAX_CELLS = 1 << 20
_PAIR_CHUNK = 1 << 21

# An entry's code: bit 0 set where its cell is the box's first column, bit 1 its first row.
# Owner-cell pairs are (3, any) and (1, 2). Within a cell the boxes being decided come first,
# ordered by code 3, 2, 1, 0, then the fixed (already kept) ones ordered 1, 3, 2, 0: so the
# partners of an entry are, among the undecided, those after it (code 3) or the code-1 run
# (code 2); among the fixed, one run per code.
_RANK_OPEN = np.array([3, 2, 1, 0])            # code -> rank among the undecided
_RANK_FIXED = np.array([3, 0, 2, 1])           # code -> rank among the fixed
_FIXED_LO = np.array([1, 1, 0, 0]) + 4         # code -> first / past-last fixed rank (+4)
_FIXED_HI = np.array([2, 3, 2, 4]) + 4


def _grid(xmin, xmax, ymin, ymax, groups: int):
    """Each box's first and last cell per axis, on a grid whose cell side is the median box
    extent, doubled until the boxes cover few cells each. Computed in float64 from one
    origin: a monotone map, so a box holding a point also covers the point's cell."""
    x0, y0 = xmin.astype(np.float64), ymin.astype(np.float64)
    x1, y1 = xmax.astype(np.float64), ymax.astype(np.float64)
    ox, oy = x0.min(), y0.min()
    # Cells per axis bounded so that the cell keys (group, row, column, 8 ranks) fit in int64.
    most = min(_MAX_CELLS, int((2.0 ** 58 / groups) ** 0.5))
    side = max(float(np.median(np.maximum(x1 - x0, y1 - y0))),
               max(x1.max() - ox, y1.max() - oy) / most)
    x0, x1, y0, y1 = x0 - ox, x1 - ox, y0 - oy, y1 - oy
    budget = _ENTRIES_PER_BOX * xmin.size + 1024
    while True:
        cells = [np.floor(t / side).astype(np.int64) for t in (x0, x1, y0, y1)]
        cnt = (cells[1] - cells[0] + 1) * (cells[3] - cells[2] + 1)
        if int(cnt.sum()) <= budget:
            return cells, cnt
        side *= 2


def _entries(group, fixed, cells, cnt):
    """One grid entry per (box, covered cell), sorted by cell and, within a cell, by part
    and code rank (see _RANK_*). Returns the entries' boxes and codes, their sort keys, and
    their cells' key base (cell * 8)."""
    cxl, cxh, cyl, cyh = cells
    box = np.repeat(np.arange(group.size), cnt)
    k = np.arange(box.size) - np.repeat(np.cumsum(cnt) - cnt, cnt)
    nx = np.repeat(cxh - cxl + 1, cnt)
    dx, dy = k % nx, k // nx
    code = (dx == 0).astype(np.int64) | ((dy == 0).astype(np.int64) << 1)
    fx = fixed[box]
    wx, wy = int(cxh.max()) + 1, int(cyh.max()) + 1
    cell8 = ((group[box] * wy + cyl[box] + dy) * wx + cxl[box] + dx) * 8
    key = cell8 + np.where(fx, 4 + _RANK_FIXED[code], _RANK_OPEN[code])
    # torch's int64 sort is several times numpy's; the order among equal keys is free.
    key, perm = (t.numpy() for t in torch.sort(torch.from_numpy(key)))
    return box[perm], code[perm], key, cell8[perm]


def _ranges(code, key, cell8, among_open: bool, with_fixed: bool):
    """For each undecided entry, the position ranges of its partners: among the undecided
    entries of its cell, and among the fixed ones. Returns (src, lo, hi)."""
    # start[c * 8 + r]: the position of cell c's first entry of rank slot r (8: next cell).
    new = np.empty(key.size, bool)
    new[0] = True
    np.not_equal(cell8[1:], cell8[:-1], out=new[1:])
    cell = np.cumsum(new) - 1
    slot = key - cell8
    start = np.zeros(8 * (int(cell[-1]) + 1) + 1, np.int64)
    np.cumsum(np.bincount(cell * 8 + slot, minlength=start.size - 1), out=start[1:])
    p = np.flatnonzero(slot < 4)
    q, base = code[p], cell[p] * 8
    src, lo, hi = [], [], []
    if among_open:
        open_end = start[base + 4]
        src.append(p)
        lo.append(np.where(q == 3, p + 1, np.where(q == 2, start[base + 2], open_end)))
        hi.append(np.where(q == 3, open_end, np.where(q == 2, start[base + 3], open_end)))
    if with_fixed:
        src.append(p)
        lo.append(start[base + _FIXED_LO[q]])
        hi.append(start[base + _FIXED_HI[q]])
    return tuple(x[0] if len(x) == 1 else np.concatenate(x) for x in (src, lo, hi))


def suppressing_pairs(xmin, xmax, ymin, ymax, area, group, fixed, thr, among_open=True):
    """All pairs (a, b) of the given boxes, a < b, in one group, not both `fixed` (and with
    among_open False, one of them fixed), whose IoU exceeds `thr` (a scalar of the boxes'
    dtype). Every box must have a positive extent in both axes and a finite positive area."""
    empty = np.zeros(0, np.int64)
    with_fixed = bool(fixed.any())
    if group.size < 2 or fixed.all() or not (among_open or with_fixed):
        return empty, empty
    cells, cnt = _grid(xmin, xmax, ymin, ymax, int(group.max()) + 1)
    box, code, key, cell8 = _entries(group, fixed, cells, cnt)
    src, lo, hi = _ranges(code, key, cell8, among_open, with_fixed)
    n = hi - lo
    keep = n > 0
    src, lo, n = src[keep], lo[keep], n[keep]
    coords = [t[box] for t in (xmin, xmax, ymin, ymax, area)]
    total = np.cumsum(n)
    sa, sb = [], []
    start = 0
    while start < n.size:
        # Ranges [start, stop) hold at most _PAIR_CHUNK pairs (at least one range).
        base = int(total[start - 1]) if start else 0
        stop = max(int(np.searchsorted(total, base + _PAIR_CHUNK, side="right")), start + 1)
        m = n[start:stop]
        i = np.repeat(src[start:stop], m)
        j = np.repeat(lo[start:stop] - (np.cumsum(m) - m), m) + np.arange(i.size)
        hit = suppresses(coords, i, j, thr)
        a, b = box[i[hit]], box[j[hit]]
        sa.append(np.minimum(a, b))
        sb.append(np.maximum(a, b))
        start = stop
    if not sa:
        return empty, empty
    return np.concatenate(sa), np.concatenate(sb)


def suppresses(coords, i, j, thr):
    """onnxruntime's SuppressByIOU for the pairs (i[k], j[k]): the k that suppress. The
    pairs that do not overlap in x (most, on a grid) are dropped before the rest is read."""
    xmin, xmax, ymin, ymax, area = coords
    w = np.minimum(xmax[i], xmax[j])
    w -= np.maximum(xmin[i], xmin[j])
    k = (w > 0).nonzero()[0]
    i, j, w = i[k], j[k], w[k]
    h = np.minimum(ymax[i], ymax[j])
    h -= np.maximum(ymin[i], ymin[j])
    inter = w * h
    union = area[i] + area[j] - inter
    with np.errstate(all="ignore"):
        return k[(h > 0) & (inter > 0) & (union > 0) & (inter / union > thr)]


def greedy_keep(n: int, first, second):
    """Greedy selection over `n` boxes in priority order (index order within a group: every
    pair has first < second): a box is kept unless a kept box earlier in the order
    suppresses it. Returns the kept mask.

    Each round decides every undecided box whose suppressors are all decided: suppressed if
    one of them is kept, kept if none is. The earliest undecided box always qualifies, so
    the rounds end; pairs from suppressed boxes or into decided ones are dropped as they go.
    Chains of overlaps (box 1 suppresses 2, which would suppress 3...) decide few boxes a
    round: once a round after the first two (which decide the unopposed boxes, then those
    they suppress) decides less than an eighth of what is open, one pass in order finishes
    the rest."""
    state = np.ones(n, np.int8)                          # 0 suppressed, 1 undecided, 2 kept
    u, v = first, second
    open_count, rounds = n, 0
    while True:
        su = state[u]
        hit = np.zeros(n, bool)
        hit[v[su == 2]] = True
        wait = np.zeros(n, bool)
        wait[v[su == 1]] = True
        open_ = state == 1
        state[open_ & hit] = 0
        state[open_ & ~hit & ~wait] = 2
        if not u.size:
            return state == 2
        live = (state[v] == 1) & (state[u] != 0)
        u, v = u[live], v[live]
        left = int(np.count_nonzero(state == 1))
        rounds += 1
        if rounds >= 3 and 8 * (open_count - left) < open_count:
            return _in_order(state, u, v) == 2
        open_count = left


def _in_order(state, u, v):
    """Finish greedy selection one box at a time, in priority order. (u, v) holds every
    pair into an open box from a box not suppressed, and suppressors come first, so by the
    time a box is reached all of them are decided. An open box with no such pair is kept."""
    order = np.argsort(v, kind="stable")
    st = np.where(state == 1, 2, state).tolist()
    box, fate = -1, 2
    for a, b in zip(u[order].tolist(), v[order].tolist()):
        if b != box:
            if box >= 0:
                st[box] = fate
            box, fate = b, 2
        if st[a] == 2:
            fate = 0
    if box >= 0:
        st[box] = fate
    return np.array(st, np.int8)
