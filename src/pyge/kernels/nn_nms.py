"""NonMaxSuppression (opset 10+): greedy selection of boxes per (batch, class).

The result is onnxruntime's, index for index: candidates above the score threshold taken by
score, the lower box index first among equal scores; a candidate kept unless a box kept
before it in its (batch, class) overlaps it by an IoU above the threshold, computed with
onnxruntime's float arithmetic; at most max_output_boxes_per_class kept per (batch, class),
listed by batch, class, then selection order. An iou_threshold outside [0, 1] is refused, as
onnxruntime refuses it. (NaN scores, whose order onnxruntime leaves to its heap, come last.)

Selection is vectorised on the host, in numpy (nn_nms_graph.py): the suppressing pairs come
from a spatial join and greedy selection is resolved over those pairs, all (batch, class)
groups at once. Candidates are taken in blocks by score rank, each joined with the boxes kept
so far; later candidates cannot change what was kept before them, so a group stops once it
has max_output_boxes_per_class. Two joins find the pairs: a grid (nn_nms_graph.py), whose
cost follows the overlapping pairs, and, where no group has more than SMALL_N candidates, a
sweep on x (nn_nms_sweep.py) with far fewer numpy calls but more pairs examined. Where the
boxes are candidates in many classes each (a detector's export: 80 classes, a low score
threshold), nn_nms_classes.py selects in all classes of a batch at once instead, over pairs
found once per batch: its boxes are the same in every class. Where one (batch, class)
group alone has candidates, and few, nn_nms_dense.py selects instead, a head of the ranking
at a time, with dense overlap tests and a greedy scan over bit rows; it hands back to the
blocks where the boxes are mostly kept. Data-dependent output: a HOST_OP.
"""
from __future__ import annotations

import numpy as np
import torch

from ._util import node_error, run_error
from .nn_nms_classes import descending_keys, select_classes
from .nn_nms_dense import select_group
from .nn_nms_graph import greedy_keep, suppressing_pairs
from .nn_nms_sweep import Line, sweep_pairs, x_sweep_pairs
from .registry import register

# Candidates in the first block by score rank (the blocks double from there).
BLOCK = 2048
# Up to this many candidates in the longest group, the pairs come from the sweep. Its first
# block holds about SMALL_BLOCK candidates over all groups (4 ranks of each at least), the
# blocks grow GROW-fold, and only a block of SMALL_JUMP ranks or more that kept most of its
# candidates brings the rest at once: a detector's best few boxes per class are mostly kept
# (one per object), and all the rest would then be joined among themselves.
SMALL_N = 5000
SMALL_BLOCK = 256
GROW = 4
SMALL_JUMP = 64
# With several classes, selection runs in all classes at once (nn_nms_classes.py) where the
# candidates the blocks would look at, about CLASS_REACH * max_output_boxes_per_class per
# (batch, class) at most, number CLASS_SHARE times the boxes that are a candidate in some
# class or more. (It joins all those boxes at once: where most of them are suppressed or
# fall past max_output_boxes_per_class, the blocks by rank cost less, unless the classes
# are many per box.)
CLASS_SHARE = 6
CLASS_REACH = 4
# Up to this many such boxes in a batch, its pairs come from a sweep on x alone.
X_SWEEP_N = 160
# Where one (batch, class) group alone has candidates, and at most this many boxes, heads
# of its ranking select (nn_nms_dense.py), unless it declines.
DENSE_N = 5000


def _corners(b: np.ndarray, center: bool):
    """(..., 4) boxes -> (xmin, xmax, ymin, ymax), computed as onnxruntime does: corners
    [y1, x1, y2, x2] in either order, or [x_center, y_center, width, height]."""
    if center:
        wh, hh = b[..., 2] / 2, b[..., 3] / 2
        return b[..., 0] - wh, b[..., 0] + wh, b[..., 1] - hh, b[..., 1] + hh
    return (np.minimum(b[..., 1], b[..., 3]), np.maximum(b[..., 1], b[..., 3]),
            np.minimum(b[..., 0], b[..., 2]), np.maximum(b[..., 0], b[..., 2]))


class _Boxes:
    """The flattened [batch * boxes] corners and areas, and which boxes can take part in a
    suppression at all (positive extents, finite positive area)."""
    __slots__ = ("xmin", "xmax", "ymin", "ymax", "area", "joinable", "line")

    def __init__(self, boxes: np.ndarray, center: bool, groups: int, sweep: bool):
        self.xmin, self.xmax, self.ymin, self.ymax = (t.reshape(-1) for t in
                                                      _corners(boxes, center))
        with np.errstate(all="ignore"):
            self.area = (self.xmax - self.xmin) * (self.ymax - self.ymin)
            self.joinable = (self.xmax > self.xmin) & (self.ymax > self.ymin) \
                & np.isfinite(self.area) & (self.area > 0)
        self.line = None
        if sweep and self.joinable.any():
            self.line = Line(self.xmin, self.xmax, self.ymin, self.ymax, groups, self.joinable)

    def pairs(self, at, group, fixed, thr, among_open=True):
        """The suppressing pairs among the boxes `at` (see suppressing_pairs)."""
        coords = (self.xmin[at], self.xmax[at], self.ymin[at], self.ymax[at], self.area[at])
        if self.line is None:
            return suppressing_pairs(*coords, group, fixed, thr, among_open)
        return sweep_pairs(*coords, group, fixed, thr, among_open, self.line, at)


class _Blocks:
    """Rank ranges [lo, hi) of the candidate blocks, each `grow` times the one before.
    Blocks keep the join small where most candidates end up suppressed: a block's
    candidates meet the boxes kept before it first, and only those that survive are joined
    among themselves. A small max_output_boxes_per_class starts them smaller, so that a group
    can stop early. Where a block kept most of its candidates, the rest comes in one block:
    few will be suppressed, and every block joins all the boxes kept so far again."""

    def __init__(self, longest: int, max_out: int, first: int = BLOCK, grow: int = 2):
        self.longest = longest
        self.step = first if max_out >= longest else min(first, max(2 * max_out, 256))
        self.lo = 0
        self.first = True
        self.grow = grow

    def next(self, kept_most: bool) -> tuple[int, int] | None:
        if self.lo >= self.longest and not self.first:
            return None
        self.first = False
        lo, hi = self.lo, min(self.lo + self.step, self.longest)
        self.lo, self.step = hi, self.longest if kept_most else self.grow * self.step
        return lo, hi


def _score_order(s: np.ndarray) -> np.ndarray:
    """Per row, the indices by descending score, the lower index first among equal scores
    (0.0 and -0.0 included), NaN last. A float32 score's key (descending_keys) and its index
    make one 64-bit integer, unique, so numpy's plain sort (vectorised) gives the order of a
    stable one; other dtypes take a stable argsort."""
    if s.dtype != np.float32 or s.shape[1] > 1 << 32:
        return np.argsort(-s, axis=1, kind="stable")
    key = (descending_keys(s).astype(np.uint64) << np.uint64(32)) \
        | np.arange(s.shape[1], dtype=np.uint64)
    return (np.sort(key, axis=1) & np.uint64(0xFFFFFFFF)).astype(np.int64)


def _candidates(scores: np.ndarray, score_thr):
    """Per (batch, class) group g = batch * classes + class, its candidates by score rank:
    the flat (group, rank, box) of every box above the threshold."""
    s = scores.reshape(-1, scores.shape[-1])
    order = _score_order(s)
    if score_thr is None:
        counts = np.full(s.shape[0], s.shape[1])
    else:
        with np.errstate(invalid="ignore"):
            counts = (s > score_thr).sum(1)     # the candidates: a prefix of the order
    g = np.arange(s.shape[0]).repeat(counts)
    r = np.arange(g.size) - (counts.cumsum() - counts).repeat(counts)
    return g, r, order[g, r], int(counts.max(initial=0))


def _block(bx: _Boxes, g, at, prev_g, prev_at, iou_thr):
    """Greedy selection of one block of candidates (group g, box at; in rank order) after
    the boxes kept so far (prev_*): the kept mask of the block. First the candidates that a
    kept box suppresses go; the rest are joined among themselves only then, so that where
    most candidates are suppressed their pairs with each other are never looked at."""
    join = bx.joinable[at].nonzero()[0]
    if prev_g.size and join.size:
        fixed = np.zeros(prev_g.size + join.size, bool)
        fixed[:prev_g.size] = True
        _, b = bx.pairs(np.concatenate([prev_at, at[join]]), np.concatenate([prev_g, g[join]]),
                        fixed, iou_thr, among_open=False)
        hit = np.zeros(join.size, bool)
        hit[b - prev_g.size] = True         # the fixed boxes come first: b is the candidate
        join = join[~hit]
    a, b = bx.pairs(at[join], g[join], np.zeros(join.size, bool), iou_thr)
    keep = ~bx.joinable[at]
    keep[join] = greedy_keep(join.size, a, b)
    return keep


def select(boxes: np.ndarray, scores: np.ndarray, max_out: int, iou_thr, score_thr,
           center: bool) -> np.ndarray:
    """The [k, 3] (batch, class, box) indices NMS selects; boxes [B, N, 4], scores
    [B, C, N], thresholds numpy scalars of the boxes' / scores' dtype (score_thr may be
    None)."""
    nb, nc, n = scores.shape
    if max_out <= 0 or n == 0 or nc == 0:
        return np.zeros((0, 3), np.int64)
    if nc > 1:
        shared = _shared_classes(boxes, scores, max_out, iou_thr, score_thr, center)
        if shared is not None:
            return shared
    if n <= DENSE_N:
        g = _one_group(scores, score_thr)
        if g is not None:
            done = _dense(boxes, scores, g, max_out, iou_thr, score_thr, center)
            if done is not None:
                return done
    g_all, r_all, box_all, longest = _candidates(scores, score_thr)
    return _select_blocks(boxes, nb, nc, n, g_all, r_all, box_all, longest, max_out, iou_thr,
                          center)


def _one_group(scores: np.ndarray, score_thr):
    """The one (batch, class) group that has candidates, as batch * classes + class; None
    where several have."""
    nb, nc, n = scores.shape
    if nb * nc == 1:
        return 0
    if score_thr is None:
        return None
    with np.errstate(invalid="ignore"):
        has = (scores.reshape(nb * nc, n) > score_thr).any(1)
    return int(has.argmax()) if np.count_nonzero(has) == 1 else None


def _dense(boxes, scores, g, max_out, iou_thr, score_thr, center):
    """select's result by nn_nms_dense for the one group g with candidates (the blocks
    finishing what it hands back), or None where it declines."""
    nb, nc, n = scores.shape
    got = select_group(boxes[g // nc], scores[g // nc, g % nc], max_out, iou_thr, score_thr,
                       center)
    if got is None:
        return None
    kept, rest = got
    if rest is not None:
        more = _select_blocks(boxes, nb, nc, n, np.full(rest.size, g), np.arange(rest.size),
                              rest, rest.size, max_out - kept.size, iou_thr, center)
        kept = np.concatenate([kept, more[:, 2]])
    out = np.empty((kept.size, 3), np.int64)
    out[:, 0], out[:, 1], out[:, 2] = g // nc, g % nc, kept
    return out


def _select_blocks(boxes, nb, nc, n, g_all, r_all, box_all, longest, max_out, iou_thr,
                   center):
    """select by blocks of score rank over the candidates (group g_all, rank r_all within
    it, box box_all), `longest` the most candidates a group has."""
    if g_all.size == 0:
        return np.zeros((0, 3), np.int64)
    small = longest <= SMALL_N
    bx = _Boxes(boxes, center, nb * nc, small)
    at_all = (g_all // nc) * n + box_all
    if small:
        groups = max(int(np.count_nonzero(np.bincount(g_all))), 1)
        blocks = _Blocks(longest, max_out, max(SMALL_BLOCK // groups, 4), GROW)
    else:
        blocks = _Blocks(longest, max_out)
    kept_g, kept_at = [], []
    kept_count = np.zeros(nb * nc, np.int64)
    prev_g = prev_at = np.zeros(0, np.int64)
    span = blocks.next(False)
    while span is not None:
        g, at = g_all, at_all
        if span != (0, longest):
            done = kept_count >= max_out
            sel = (r_all >= span[0]) & (r_all < span[1]) & ~done[g_all]
            g, at = g_all[sel], at_all[sel]
            live = ~done[prev_g]
            prev_g, prev_at = prev_g[live], prev_at[live]
        keep = _block(bx, g, at, prev_g, prev_at, iou_thr)
        kg, kat = g[keep], at[keep]
        kept_g.append(kg)
        kept_at.append(kat)
        kept_count += np.bincount(kg, minlength=nb * nc)
        if (kept_count >= max_out).all():
            break
        joined = bx.joinable[kat]
        prev_g = np.concatenate([prev_g, kg[joined]])
        prev_at = np.concatenate([prev_at, kat[joined]])
        span = blocks.next(2 * kg.size > g.size
                           and (not small or span[1] - span[0] >= SMALL_JUMP))
    g, at = np.concatenate(kept_g), np.concatenate(kept_at)
    if len(kept_g) > 1:     # blocks come by rank: a stable sort by group restores the order
        idx = g.argsort(kind="stable")
        g, at = g[idx], at[idx]
    take = np.arange(g.size) - (kept_count.cumsum() - kept_count).repeat(kept_count) \
        < max_out
    g, at = g[take], at[take]
    return np.stack([g // nc, g % nc, at % n], 1).astype(np.int64)


def _shared_classes(boxes, scores, max_out, iou_thr, score_thr, center):
    """select's result by nn_nms_classes where the boxes are candidates in many classes
    each (CLASS_SHARE), else None."""
    nb, nc, n = scores.shape
    if score_thr is None:
        cand = np.ones(scores.shape, bool)
    else:
        with np.errstate(invalid="ignore"):
            cand = scores > score_thr
    union = cand.any(1)
    per_batch = np.count_nonzero(union, axis=1)
    reach = np.minimum(np.count_nonzero(cand, axis=2), min(CLASS_REACH * max_out, n))
    if int(reach.sum()) < CLASS_SHARE * int(per_batch.sum()):
        return None
    s = scores.transpose(0, 2, 1).reshape(nb * n, nc)
    cand = cand.transpose(0, 2, 1).reshape(nb * n, nc)
    biggest = int(per_batch.max())
    bx = _Boxes(boxes, center, nb, X_SWEEP_N < biggest <= SMALL_N)

    def pairs(at):
        part = bx.joinable[at]
        if not part.all():
            sub = np.flatnonzero(part)
            a, b = pairs(at[sub])
            return sub[a], sub[b]
        if biggest <= X_SWEEP_N:
            return x_sweep_pairs(bx.xmin[at], bx.xmax[at], bx.ymin[at], bx.ymax[at],
                                 bx.area[at], at // n if nb > 1 else None, iou_thr)
        return bx.pairs(at, at // n, np.zeros(at.size, bool), iou_thr)
    return select_classes(s, cand, np.flatnonzero(union), nb, nc, n, max_out, pairs)


def _host(x, dtype) -> np.ndarray:
    """A run-time tensor as a numpy array of `dtype` (float32 for the half types): the
    tensor's own memory where it is a CPU tensor of that dtype (a few torch calls fewer: the
    node's fixed cost is a good part of its time on small inputs)."""
    if x.is_cpu and x.dtype == dtype:
        return x.detach().numpy()
    return x.detach().cpu().to(dtype).numpy()


def _threshold(x, dtype):
    if x is None:
        return None
    a = _host(x, dtype).reshape(-1)
    return a[0] if a.size else None


@register("NonMaxSuppression", since=10)
def non_max_suppression(ctx):
    center = int(ctx.attr("center_point_box", 0))
    if center not in (0, 1):
        raise node_error(ctx, f"attribute 'center_point_box' must be 0 or 1, got {center}")

    def fn(xs):
        xs = list(xs) + [None] * (5 - len(xs))
        boxes, scores = xs[0], xs[1]
        if boxes.ndim != 3 or boxes.shape[-1] != 4 or scores.ndim != 3 \
                or scores.shape[0] != boxes.shape[0] or scores.shape[2] != boxes.shape[1]:
            raise run_error(ctx, f"boxes {tuple(boxes.shape)} must be [batches, boxes, 4] and "
                                 f"scores {tuple(scores.shape)} [batches, classes, boxes]")
        bdt = torch.float32 if boxes.dtype in (torch.float16, torch.bfloat16) else boxes.dtype
        sdt = torch.float32 if scores.dtype in (torch.float16, torch.bfloat16) else scores.dtype
        m = None if xs[2] is None else xs[2].detach().cpu().numpy().reshape(-1)
        max_out = int(m[0]) if m is not None and m.size else 0
        iou = _threshold(xs[3], bdt)
        if iou is None:
            iou = _host(torch.zeros(1), bdt)[0]
        elif not 0 <= iou <= 1:
            raise run_error(ctx, f"iou_threshold must be in [0, 1], got {float(iou)}")
        res = torch.from_numpy(select(_host(boxes, bdt), _host(scores, sdt), max_out, iou,
                                      _threshold(xs[4], sdt), center == 1))
        return [res if boxes.is_cpu else res.to(boxes.device)]
    return fn
