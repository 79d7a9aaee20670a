"""NonMaxSuppression's small path (kernels/nn_nms_sweep.py and its use in nn_nms.py): the
sweep's pairs are the grid join's pairs, on random boxes, groups and fixed sets, with the
band count capped; scenes of every kind and many (batch, class) slices against onnxruntime
on both sides of the switch between the two pair finders; the thresholds' edges."""
from __future__ import annotations

import numpy as np
import pytest

from pyge.kernels import nn_nms, nn_nms_graph, nn_nms_sweep

from .nms_scenes import check_boxes as _check
from .nms_scenes import clustered_centres

ort = pytest.importorskip("onnxruntime")


def _scene(rng, kind, b, n):
    """b batches of n boxes [y1, x1, y2, x2]: uniform (spread, most kept), dense (a fixed
    square, many overlaps), clustered (20 jittered boxes per object, most suppressed)."""
    if kind == "clustered":
        xy, wh = clustered_centres(rng, b, n)
        lo, hi = xy - wh / 2, xy + wh / 2
    else:
        side = 30 * np.sqrt(n) if kind == "uniform" else 300.0
        lo = rng.uniform(0, side, (b, n, 2))
        hi = lo + rng.uniform(10, 60, (b, n, 2))
    return np.concatenate([lo[..., ::-1], hi[..., ::-1]], -1).astype(np.float32)


def _finders(monkeypatch):
    """Counts of the calls to each pair finder, while select runs."""
    seen = {"sweep": 0, "grid": 0}
    for name, mod, real in (("sweep", nn_nms, nn_nms.sweep_pairs),
                            ("grid", nn_nms, nn_nms.suppressing_pairs)):
        def spy(*a, _real=real, _name=name, **k):
            seen[_name] += 1
            return _real(*a, **k)
        monkeypatch.setattr(mod, "sweep_pairs" if name == "sweep" else "suppressing_pairs", spy)
    return seen


def _pair_set(a, b):
    return set(zip(a.tolist(), b.tolist()))


@pytest.mark.parametrize("seed", range(6))
def test_sweep_finds_the_grid_joins_pairs(seed, monkeypatch):
    """The same suppressing pairs as the grid join, for random boxes (some tall or wide
    outliers, a far origin), groups, fixed sets and thresholds; with seed >= 3 the band
    count is capped low, so that bands are coarser than the tallest box."""
    rng = np.random.default_rng(seed)
    n = int(rng.integers(2, 600))
    x0 = rng.uniform(0, 300, n) + (1e6 if seed % 2 else 0)
    y0 = rng.uniform(0, 300, n)
    w, h = rng.uniform(1, 40, n), rng.uniform(1, 40, n)
    w[::37] *= 8
    h[::41] *= 8
    xmin, ymin = x0.astype(np.float32), y0.astype(np.float32)
    xmax, ymax = (x0 + w).astype(np.float32), (y0 + h).astype(np.float32)
    area = (xmax - xmin) * (ymax - ymin)
    group = rng.integers(0, int(rng.integers(1, 5)), n)
    if seed >= 3:
        monkeypatch.setattr(nn_nms_sweep, "_MAX_BANDS", 3)
    for thr in (np.float32(0), np.float32(0.3)):
        for fixed, among in ((np.zeros(n, bool), True), (rng.uniform(size=n) < 0.3, False),
                             (rng.uniform(size=n) < 0.5, True)):
            args = (xmin, xmax, ymin, ymax, area, group, fixed, thr, among)
            want = _pair_set(*nn_nms_graph.suppressing_pairs(*args))
            got = nn_nms_sweep.sweep_pairs(*args)
            assert len(got[0]) == len(want) and _pair_set(*got) == want


@pytest.mark.parametrize("kind", ["uniform", "dense", "clustered"])
def test_scenes_match_ort_on_both_sides_of_the_switch(kind, monkeypatch):
    """Every kind of scene with the longest group at SMALL_N candidates (the sweep) and one
    more (the grid join), several batches and classes, ties in scores."""
    rng = np.random.default_rng(len(kind))
    monkeypatch.setattr(nn_nms, "SMALL_N", 300)
    seen = _finders(monkeypatch)
    for n, path in ((300, "sweep"), (301, "grid")):
        boxes = _scene(rng, kind, 2, n)
        scores = rng.uniform(0, 1, (2, 3, n)).astype(np.float32)
        scores[..., ::4] = np.round(scores[..., ::4], 1)
        before = dict(seen)
        _check(boxes, scores, n, float(rng.choice([0.3, 0.5, 0.7])))
        assert seen[path] > before[path]
        assert seen["grid" if path == "sweep" else "sweep"] == before["grid" if path ==
                                                                       "sweep" else "sweep"]


@pytest.mark.parametrize("n", [nn_nms.SMALL_N, nn_nms.SMALL_N + 1])
def test_clustered_scene_at_the_default_switch_matches_ort(n):
    rng = np.random.default_rng(n)
    _check(_scene(rng, "clustered", 1, n), rng.uniform(0, 1, (1, 1, n)).astype(np.float32), n)


@pytest.mark.parametrize("max_out", [None, 0, 1, 7, 100, 10 ** 6])
def test_many_classes_match_ort(max_out):
    """A detector's output: 2 images x 30 classes of one clustered scene each, scores
    mostly low and a score threshold; all slices go through one pass."""
    rng = np.random.default_rng(0 if max_out is None else max_out % 97)
    n = 400
    boxes = _scene(rng, "clustered", 2, n)
    scores = (rng.uniform(0, 1, (2, 30, n)) ** 3).astype(np.float32)
    scores[1, 3] = np.round(scores[1, 3], 1)
    exp = _check(boxes, scores, max_out, 0.5, 0.05 if max_out != 7 else None)
    assert (exp.shape[0] > 0) == (max_out not in (None, 0))


def test_first_blocks_stay_small_with_many_groups(monkeypatch):
    """With many groups the first block holds a few ranks of each, and the blocks grow
    from there (the rest does not come at once after a block that kept most). Every box is
    a candidate in every class here, which nn_nms_classes would take: kept off it."""
    monkeypatch.setattr(nn_nms, "CLASS_SHARE", 10 ** 9)
    spans = []
    real = nn_nms._Blocks.next

    def spy(self, kept_most):
        span = real(self, kept_most)
        spans.append(span)
        return span
    monkeypatch.setattr(nn_nms._Blocks, "next", spy)
    rng = np.random.default_rng(1)
    boxes = _scene(rng, "clustered", 1, 1000)
    scores = rng.uniform(0, 1, (1, 80, 1000)).astype(np.float32)
    _check(boxes, scores, 1000)
    first = max(nn_nms.SMALL_BLOCK // 80, 4)
    assert spans[0] == (0, first) and spans[1] == (first, first * (1 + nn_nms.GROW))


def test_iou_at_the_threshold_and_degenerate_boxes_on_the_small_path():
    """An IoU exactly at the threshold does not suppress; zero-area boxes, identical boxes
    and a box inside another; center_point_box=1 is covered by test_nms.py."""
    base = [[0, 0, 1, 2], [0, 0, 1, 1], [0, 0, 1, 2], [5, 5, 5, 9], [5, 5, 5, 9],
            [0, 0, 2, 4], [10, 10, 11, 11], [10, 10, 11, 11]]
    boxes = np.array([base], np.float32)
    scores = np.array([[[0.9, 0.8, 0.7, 0.6, 0.5, 0.4, 0.3, 0.3]]], np.float32)
    for iou in (0.0, 0.25, 0.5, 1.0):
        _check(boxes, scores, 8, iou)
    _check(boxes, scores, 8, 0.5, 0.35)
    _check(boxes[:, :0], scores[:, :, :0], 8, 0.5)


def test_sweep_finds_the_pairs_of_float64_boxes_a_few_ulps_wide():
    """float64 boxes a few ulps wide far from the origin, over two or three bands, where the
    reach into the band above is of the order of its rounding."""
    rng = np.random.default_rng(12)
    n = 200
    x0 = 1e3 + rng.integers(0, 40, n) * 2.0 ** -40
    y0 = rng.uniform(0, 2, n)
    xmin, xmax = x0, x0 + rng.integers(1, 30, n) * 2.0 ** -40
    ymin, ymax = y0, y0 + rng.uniform(0.5, 1, n)
    area = (xmax - xmin) * (ymax - ymin)
    group, fixed = np.zeros(n, np.int64), np.zeros(n, bool)
    args = (xmin, xmax, ymin, ymax, area, group, fixed, np.float64(0.0), True)
    want = _pair_set(*nn_nms_graph.suppressing_pairs(*args))
    got = nn_nms_sweep.sweep_pairs(*args)
    assert len(want) > 100 and len(got[0]) == len(want) and _pair_set(*got) == want
