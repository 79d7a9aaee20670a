"""NonMaxSuppression's pair finder for few candidates per group (nn_nms.py): a sweep.

The grid join of nn_nms_graph.py pays some hundred numpy calls whatever the number of boxes;
under a few thousand candidates per group that fixed cost is most of the time. This sweep
finds the same pairs (the suppressing pairs, each once) in a few dozen calls. The boxes lie
in horizontal bands a little taller than the tallest box, so that boxes overlapping in y lie
in the same band or in adjacent ones; sorted once by (group, band, left edge), a box's
partners are the boxes of its band that start within its x extent, and the boxes of the band
above that start within reach of it in x: two contiguous ranges of the sorted order, found
by searchsorted. The pairs it examines overlap in x, or nearly, and lie within two band
heights in y; they grow as the square of the boxes per band, which is why it serves only
small groups.

All (batch, class) groups are swept at once on one line of float64 keys, (x - origin) +
(group * bands + band) * stride, the stride more than twice any x extent: monotone in x
within a band, so a range holds every box that can overlap (and maybe a few that touch),
and never reaches another band or group. The IoU test, in the boxes' own precision, decides:
nn_nms_graph's, with the axes swapped (y first, since nearly every pair overlaps in x; the
intersection's product commutes, so the arithmetic is the same).
"""
from __future__ import annotations

import numpy as np

from .nn_nms_graph import suppresses


# Bands per group at most: (group, band) pairs, one float64 key stride each, stay below 2**40,
# so that a key keeps its x offset (and a gap between bands) to some 2**-12 of the stride.
_MAX_BANDS = 1 << 20


class Line:
    """The boxes on the common line (float64). A box lies in the band of its bottom edge,
    bands at least a little taller than the tallest box, so boxes that overlap in y lie in
    the same band or in adjacent ones. Keys run by group, band, then x; a band's keys span at
    most half its stride, so ranges never reach another band. Made once for all the boxes
    that take part (finite, positive extents: the others are never asked for)."""
    __slots__ = ("x0", "x1", "x0w", "band", "bands", "stride")

    def __init__(self, xmin, xmax, ymin, ymax, groups: int, part=None):
        x0, x1 = xmin.astype(np.float64), xmax.astype(np.float64)
        y0, y1 = ymin.astype(np.float64), ymax.astype(np.float64)
        sub = (lambda t: t) if part is None else (lambda t: t[part])
        ox, oy = float(sub(x0).min()), float(sub(y0).min())
        x0 -= ox
        x1 -= ox
        y0 -= oy
        y1 -= oy
        # The reach left into the band above: the widest box, with room for the rounding of
        # x0 - wide (float64 boxes can be narrower than that rounding).
        span = float(sub(x1).max())
        wide = float(sub(x1 - x0).max()) * 1.01 + 64 * float(np.spacing(span))
        top = float(sub(y1).max())
        most = max(min(_MAX_BANDS, (1 << 40) // max(groups, 1)) - 2, 1)
        tall = max(float(sub(y1 - y0).max()) * 1.01, top / most)
        self.bands = int(top // tall) + 2
        self.stride = 2 * (span + wide) + 1
        with np.errstate(invalid="ignore"):
            self.band = np.floor(y0 / tall)
        self.x0, self.x1, self.x0w = x0, x1, x0 - wide

    def keys(self, at, group) -> tuple:
        """For the boxes `at` in groups `group`: k0 / k1 a box's left / right edge in its own
        band; n0 / n1 its left edge less the widest box's width / its right edge in the band
        above, the range where a box there must start to overlap it in x."""
        base = (group * self.bands + self.band[at]) * self.stride
        k0, k1 = self.x0[at] + base, self.x1[at] + base
        base += self.stride
        return k0, k1, self.x0w[at] + base, self.x1[at] + base


class _Keys:
    """One join's keys (Line.keys): k0, k1, n0, n1 by name."""
    __slots__ = ("k0", "k1", "n0", "n1")

    def __init__(self, k0, k1, n0, n1):
        self.k0, self.k1, self.n0, self.n1 = k0, k1, n0, n1


def _expand(src, lo, hi):
    """Every (src[k], p) with lo[k] <= p < hi[k]: the ranges laid out one after the other."""
    n = np.maximum(hi - lo, 0)
    total = int(n.sum())
    if total == 0:
        return np.zeros(0, np.int64), np.zeros(0, np.int64)
    pos = np.arange(total) + (lo - (n.cumsum() - n)).repeat(n)
    return src.repeat(n), pos


def sweep_pairs(xmin, xmax, ymin, ymax, area, group, fixed, thr, among_open=True,
                line: Line | None = None, at=None):
    """suppressing_pairs (nn_nms_graph.py) for few boxes, with its contract: all pairs (a, b),
    a < b, in one group, not both `fixed` (and with among_open False, one of them fixed),
    whose IoU exceeds `thr`. Every box must have a positive extent in both axes and a finite
    positive area. `line` made for all boxes, the given ones being its boxes `at`, saves
    making one for these."""
    empty = np.zeros(0, np.int64)
    if group.size < 2:
        return empty, empty
    if line is None:
        line, at = Line(xmin, xmax, ymin, ymax, int(group.max()) + 1), np.arange(group.size)
    ks = _Keys(*line.keys(at, group))
    f, o = fixed.nonzero()[0], (~fixed).nonzero()[0]
    i, j = [], []
    if among_open and o.size > 1:
        # Sorted by key, box p's partners in its band are those after it that start by its
        # right edge; in the band above, those that start within its n0..n1 range.
        order = o[ks.k0[o].argsort(kind="stable")]
        sk = ks.k0[order]
        m = order.size
        src, pos = _expand(np.concatenate([order, order]),
                           np.concatenate([np.arange(1, m + 1),
                                           sk.searchsorted(ks.n0[order], side="left")]),
                           sk.searchsorted(np.concatenate([ks.k1[order], ks.n1[order]]),
                                           side="right"))
        i.append(src)
        j.append(order[pos])
    if f.size and o.size:
        # A fixed box f and an open box q that may overlap: in one band, f starts within q
        # (from q's left edge on) or q within f (strictly after f's left edge), exactly one
        # of the two; in adjacent bands, the upper one starts in the lower one's n0..n1.
        fo = f[ks.k0[f].argsort(kind="stable")]
        oo = o[ks.k0[o].argsort(kind="stable")]
        sf, so = ks.k0[fo], ks.k0[oo]
        src, pos = _expand(
            np.concatenate([oo, oo, fo, fo]),
            np.concatenate([sf.searchsorted(ks.k0[oo], side="left"),
                            sf.searchsorted(ks.n0[oo], side="left"),
                            so.searchsorted(ks.k0[fo], side="right") + fo.size,
                            so.searchsorted(ks.n0[fo], side="left") + fo.size]),
            np.concatenate([sf.searchsorted(np.concatenate([ks.k1[oo], ks.n1[oo]]),
                                            side="right"),
                            so.searchsorted(np.concatenate([ks.k1[fo], ks.n1[fo]]),
                                            side="right") + fo.size]))
        i.append(src)
        j.append(np.concatenate([fo, oo])[pos])
    if not i:
        return empty, empty
    i, j = (x[0] if len(x) == 1 else np.concatenate(x) for x in (i, j))
    hit = suppresses((ymin, ymax, xmin, xmax, area), i, j, thr)
    a, b = i[hit], j[hit]
    return np.minimum(a, b), np.maximum(a, b)


def x_sweep_pairs(xmin, xmax, ymin, ymax, area, group, thr):
    """suppressing_pairs' contract with nothing fixed, for a few hundred boxes at most: the
    boxes sorted once by left edge, each box's partners those after it that start by its
    right edge (every pair that overlaps in x, once), decided by the IoU test. No bands:
    fewer numpy calls than sweep_pairs where the pairs examined stay few. group None: all in
    one; else the groups lie apart on one float64 line, where rounding is monotone, so no
    overlapping pair is lost."""
    empty = np.zeros(0, np.int64)
    if xmin.size < 2:
        return empty, empty
    x0, x1 = xmin, xmax
    if group is not None and group.min() != group.max():
        x0, x1 = xmin.astype(np.float64), xmax.astype(np.float64)
        ox = x0.min()
        shift = group * (2 * (float(x1.max()) - ox) + 1) - ox
        x0, x1 = x0 + shift, x1 + shift
    order = x0.argsort(kind="stable")
    start = x0.take(order)
    hi = start.searchsorted(x1.take(order), side="right")
    src, pos = _expand(order, np.arange(1, order.size + 1), hi)
    j = order.take(pos)
    hit = suppresses((xmin, xmax, ymin, ymax, area), src, j, thr)
    a, b = src.take(hit), j.take(hit)
    return np.minimum(a, b), np.maximum(a, b)
