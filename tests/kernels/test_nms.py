"""NonMaxSuppression (kernels/nn_nms.py, nn_nms_graph.py, nn_nms_sweep.py, nn_nms_dense.py)
against onnxruntime, index for index, each test with each of the two pair finders and with
the heads of nn_nms_dense.py (alone, and handing back to the blocks): random scenes at
several sizes and densities, ties in scores, both box formats, flipped corners, degenerate
and non-finite boxes, small max_output_boxes_per_class (the block path), chains of overlaps
(the in-order finish), the grid's coarsening and chunking, and the refusals."""
from __future__ import annotations

import numpy as np
import pytest

from pyge.errors import ExecutionError
from pyge.kernels import nn_nms, nn_nms_dense, nn_nms_graph

from .nms_scenes import check_nms as _check
from .nms_scenes import nms_feeds as _feeds
from .nms_scenes import nms_runners, spoil

ort = pytest.importorskip("onnxruntime")


@pytest.fixture(autouse=True, params=["sweep", "grid", "dense", "handover"])
def pair_finder(request, monkeypatch):
    """Every test runs with each path: the blocks with the sweep for every size, then with
    the grid join for every size (the default picks by the longest group, nn_nms.SMALL_N);
    then heads of the ranking (nn_nms_dense.py) for every single-group scene, never
    declining nor handing back, and heads that hand back to the blocks after the first."""
    p = request.param
    monkeypatch.setattr(nn_nms, "SMALL_N", -1 if p == "grid" else 10 ** 9)
    monkeypatch.setattr(nn_nms, "DENSE_N", 10 ** 9 if p in ("dense", "handover") else -1)
    monkeypatch.setattr(nn_nms_dense, "FEW_PAIRS", 0)
    monkeypatch.setattr(nn_nms_dense, "FEW_OUT", 10 ** 9 if p == "handover" else -1)
    return p


def _scene(rng, b, n, side, lo, hi, center):
    """b batches of n boxes with corners in [0, side] and sizes in [lo, hi]; corner boxes
    as [y1, x1, y2, x2] with the corners in a random order."""
    xy = rng.uniform(0, side, (b, n, 2))
    wh = rng.uniform(lo, hi, (b, n, 2))
    if center:
        return np.concatenate([xy, wh], -1).astype(np.float32)
    p, q = xy, xy + wh
    swap = rng.uniform(size=(b, n, 1)) < 0.5
    p, q = np.where(swap, q, p), np.where(swap, p, q)
    return np.concatenate([p[..., ::-1], q[..., ::-1]], -1).astype(np.float32)


@pytest.mark.parametrize("n", [1, 2, 30, 300, 2000, 6000])
@pytest.mark.parametrize("density", ["sparse", "dense"])
def test_random_scenes_match_ort(n, density):
    rng = np.random.default_rng(n + (density == "dense"))
    for trial in range(3):
        center = trial % 2
        side = 30 * np.sqrt(n) if density == "sparse" else 150
        b, c = (1, 1) if n >= 2000 else (int(rng.integers(1, 3)), int(rng.integers(1, 4)))
        boxes = _scene(rng, b, n, side, 5, 40, center)
        scores = rng.uniform(0, 1, (b, c, n)).astype(np.float32)
        scores[..., ::3] = np.round(scores[..., ::3], 1)      # ties: the lower index first
        iou = float(rng.choice([0.0, 0.3, 0.5, 0.7]))
        _check(_feeds(boxes, scores, n, iou, rng.uniform(0, 0.3)), center)


@pytest.mark.parametrize("max_out", [1, 5, 100, 700])
def test_small_max_output_takes_blocks_and_matches_ort(max_out):
    """Fewer outputs than candidates: blocks by score rank, each group stopping at its
    fill; several groups of different fill speeds."""
    rng = np.random.default_rng(max_out)
    n = 5000
    boxes = _scene(rng, 2, n, 400, 5, 60, 0)
    scores = rng.uniform(0, 1, (2, 3, n)).astype(np.float32)
    scores[1, 2] = np.round(scores[1, 2], 2)
    exp = _check(_feeds(boxes, scores, max_out, 0.4, 0.1))
    assert exp.shape[0] > 0


def test_clustered_detections_match_ort():
    """A detector's output: many jittered boxes around each object, most suppressed."""
    rng = np.random.default_rng(7)
    centers = rng.uniform(0, 1000, (400, 2))
    size = rng.uniform(20, 120, (400, 1))
    k = rng.integers(0, 400, 8000)
    c = centers[k] + rng.normal(0, 4, (8000, 2))
    s = size[k] * rng.uniform(0.8, 1.25, (8000, 2))
    boxes = np.concatenate([c - s / 2, c + s / 2], 1)[None, :, [1, 0, 3, 2]].astype(np.float32)
    scores = rng.uniform(0, 1, (1, 2, 8000)).astype(np.float32)
    for iou in (0.3, 0.5, 0.8):
        _check(_feeds(boxes, scores, 8000, iou, 0.05))


def test_chain_of_overlaps_finishes_in_order(monkeypatch, pair_finder):
    """Each box overlaps the next one only, scores falling along the chain: greedy keeps
    every other box, and the rounds decide only a couple each, so the in-order pass ends
    the selection (on the blocks' paths; the heads need no rounds)."""
    calls = []
    real = nn_nms_graph._in_order
    monkeypatch.setattr(nn_nms_graph, "_in_order", lambda *a: calls.append(1) or real(*a))
    n = 3000
    x = np.arange(n, dtype=np.float32) * 0.6
    boxes = np.stack([np.zeros(n), x, np.ones(n), x + 1], 1)[None].astype(np.float32)
    scores = np.linspace(1, 0.1, n, dtype=np.float32)[None, None]
    exp = _check(_feeds(boxes, scores, n, 0.1))
    assert exp.shape[0] == n // 2 and bool(calls) == (pair_finder != "dense")


def test_degenerate_and_non_finite_boxes_match_ort():
    """Zero width or height, a point, identical boxes, NaN and infinite corners, huge
    coordinates whose area overflows: they never suppress nor are suppressed."""
    rng = np.random.default_rng(3)
    boxes = _scene(rng, 1, 400, 100, 1, 30, 0)
    spoil(boxes)
    scores = rng.uniform(0, 1, (1, 2, 400)).astype(np.float32)
    for iou in (0.0, 0.5, 1.0):
        _check(_feeds(boxes, scores, 400, iou))


def test_center_boxes_with_negative_sizes_match_ort():
    rng = np.random.default_rng(4)
    boxes = _scene(rng, 1, 500, 100, -10, 30, 1)
    scores = rng.uniform(0, 1, (1, 1, 500)).astype(np.float32)
    _check(_feeds(boxes, scores, 500, 0.2), center=1)


def test_scores_ties_and_signed_zeros_match_ort():
    """Equal scores keep index order, 0.0 and -0.0 included."""
    rng = np.random.default_rng(5)
    boxes = _scene(rng, 1, 600, 200, 5, 40, 0)
    scores = rng.choice(np.array([0.0, -0.0, 0.5, 1.0], np.float32), (1, 1, 600))
    _check(_feeds(boxes, scores, 600, 0.3))
    _check(_feeds(boxes, scores, 600, 0.3, -0.5))


def test_big_boxes_coarsen_the_grid_and_chunks_split_pairs(monkeypatch):
    """Many boxes far larger than the median widen the cells; a tiny pair chunk makes the
    join take its candidate pairs in many pieces. The result does not change."""
    rng = np.random.default_rng(6)
    small = _scene(rng, 1, 1500, 300, 2, 10, 0)
    big = _scene(rng, 1, 500, 300, 100, 250, 0)
    boxes = np.concatenate([small, big], 1)
    scores = rng.uniform(0, 1, (1, 1, 2000)).astype(np.float32)
    feeds = _feeds(boxes, scores, 2000, 0.3)
    exp = _check(feeds)
    monkeypatch.setattr(nn_nms_graph, "_PAIR_CHUNK", 1000)
    monkeypatch.setattr(nn_nms_graph, "_ENTRIES_PER_BOX", 1)
    got = nn_nms.select(boxes, scores, 2000, np.float32(0.3), None, False)
    np.testing.assert_array_equal(got, exp)


def test_empty_inputs_and_limits():
    rng = np.random.default_rng(8)
    boxes = _scene(rng, 2, 50, 100, 5, 30, 0)
    scores = rng.uniform(0, 1, (2, 3, 50)).astype(np.float32)
    assert _check(_feeds(boxes, scores, 0, 0.5)).shape == (0, 3)
    assert _check(_feeds(boxes, scores, -3, 0.5)).shape == (0, 3)
    assert _check(_feeds(boxes, scores, 10, 0.5, 2.0)).shape == (0, 3)     # all below
    _check(_feeds(boxes[:, :0], scores[:, :, :0], 10, 0.5))
    _check(_feeds(boxes, scores[:, :0], 10, 0.5))


@pytest.mark.parametrize("iou", [-0.1, 1.5, float("nan")])
def test_iou_threshold_out_of_range_is_refused_as_ort_does(iou):
    rng = np.random.default_rng(9)
    feeds = _feeds(_scene(rng, 1, 5, 10, 1, 5, 0), np.ones((1, 1, 5), np.float32), 5, iou)
    with pytest.raises(ExecutionError, match=r"NonMaxSuppression.*iou_threshold"):
        nms_runners(feeds)[0](feeds)
    with pytest.raises(Exception, match="iou_threshold"):
        nms_runners(feeds)[1](feeds)


def test_float64_boxes_select_as_in_float64():
    """onnxruntime takes float32 only; float64 boxes are compared in float64, and agree
    with the float32 result where the scene is far from any rounding tie."""
    rng = np.random.default_rng(10)
    boxes = _scene(rng, 1, 800, 300, 5, 40, 0).astype(np.float64)
    scores = rng.uniform(0, 1, (1, 1, 800)).astype(np.float32)
    got = nn_nms.select(boxes, scores, 800, np.float64(0.5), None, False)
    exp = nn_nms.select(boxes.astype(np.float32), scores, 800, np.float32(0.5), None, False)
    np.testing.assert_array_equal(got, exp)


def test_score_order_is_a_stable_descending_sort_with_nan_last():
    """float32 scores are sorted as unique integer keys: the same order as a stable sort of
    the negated floats (equal scores by index, 0.0 equal to -0.0, infinities, denormals, NaN
    last); float64 ones by a stable sort."""
    rng = np.random.default_rng(11)
    pool = np.array([0.0, -0.0, 1.0, -1.0, 0.5, -0.5, np.nan, np.inf, -np.inf, 1e-40, -1e-40,
                     3.4e38], np.float32)
    for shape in ((4, 300), (1, 70000)):
        s = rng.choice(pool, shape)
        np.testing.assert_array_equal(nn_nms._score_order(s),
                                      np.argsort(-s, axis=1, kind="stable"))
        s64 = s.astype(np.float64)
        np.testing.assert_array_equal(nn_nms._score_order(s64),
                                      np.argsort(-s64, axis=1, kind="stable"))
