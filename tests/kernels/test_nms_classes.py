"""NonMaxSuppression in all classes at once (kernels/nn_nms_classes.py) against
onnxruntime, index for index: many classes over clustered and spread boxes, the word
boundaries (64 and 65 classes), ties in scores, degenerate, non-finite and center boxes,
small max_output_boxes_per_class, the rounds' pruning and their hand-over to greedy_keep on
chains, both sides of the switch (nn_nms.CLASS_SHARE, CLASS_REACH); float64 and NaN scores,
which onnxruntime does not take, against the per-class blocks."""
from __future__ import annotations

import numpy as np
import pytest

from pyge.kernels import nn_nms, nn_nms_classes, nn_nms_graph, nn_nms_sweep

from .nms_scenes import check_boxes as _check
from .nms_scenes import as_boxes, clustered_centres, spoil

ort = pytest.importorskip("onnxruntime")


@pytest.fixture
def spy(monkeypatch):
    """Counts of the calls to select_classes and to its helpers _prune and _finish."""
    seen = {"classes": 0, "prune": 0, "finish": 0}
    for mod, name, key in ((nn_nms, "select_classes", "classes"),
                           (nn_nms_classes, "_prune", "prune"),
                           (nn_nms_classes, "_finish", "finish")):
        def wrap(*a, _real=getattr(mod, name), _key=key, **k):
            seen[_key] += 1
            return _real(*a, **k)
        monkeypatch.setattr(mod, name, wrap)
    return seen


def _scene(rng, kind, b, n, center=0):
    """b batches of n boxes: clustered (20 jittered boxes per object) or uniform (spread);
    corners [y1, x1, y2, x2] in a random order, or [x_center, y_center, width, height]."""
    if kind == "clustered":
        xy, wh = clustered_centres(rng, b, n)
    else:
        xy = rng.uniform(0, 30 * np.sqrt(n), (b, n, 2))
        wh = rng.uniform(10, 60, (b, n, 2))
    return as_boxes(rng, xy, wh, center)


@pytest.mark.parametrize("nc", [2, 5, 64, 65, 80, 130])
@pytest.mark.parametrize("kind", ["clustered", "uniform"])
def test_many_classes_match_ort(nc, kind, spy, monkeypatch):
    """Random scenes taken by the all-classes path whatever the switch says: 2 batches,
    scores mostly low (some rounded: ties), random thresholds and max_output."""
    monkeypatch.setattr(nn_nms, "CLASS_SHARE", 0)
    rng = np.random.default_rng(nc + len(kind))
    for trial in range(3):
        n = int(rng.integers(20, 400))
        boxes = _scene(rng, kind, 2, n)
        scores = (rng.uniform(0, 1, (2, nc, n)) ** 3).astype(np.float32)
        scores[:, ::3] = np.round(scores[:, ::3], 2)
        max_out = int(rng.choice([1, 3, 20, n]))
        _check(boxes, scores, max_out, float(rng.choice([0.0, 0.3, 0.5, 0.7])),
               float(rng.choice([0.0, 0.05, 0.2])))
    assert spy["classes"] == 3


@pytest.mark.parametrize("n", [100, 300, 1000])
def test_detector_scene_takes_the_all_classes_path_and_matches_ort(n, spy):
    """benchmarks/bench_nms.py's 80-class scene, with the default switch."""
    rng = np.random.default_rng(n)
    boxes = _scene(rng, "clustered", 1, n)
    scores = (rng.uniform(0, 1, (1, 80, n)) ** 4).astype(np.float32)
    assert _check(boxes, scores, 100, 0.5, 0.05).shape[0] > 80
    assert spy["classes"] == 1


def test_degenerate_non_finite_and_center_boxes_match_ort(spy, monkeypatch):
    """Zero width or height, identical boxes, NaN and infinite corners, an area that
    overflows: they never suppress nor are suppressed; and center boxes with negative
    sizes."""
    monkeypatch.setattr(nn_nms, "CLASS_SHARE", 0)
    rng = np.random.default_rng(3)
    boxes = _scene(rng, "uniform", 1, 300)
    spoil(boxes)
    scores = rng.uniform(0, 1, (1, 20, 300)).astype(np.float32)
    for iou in (0.0, 0.5, 1.0):
        _check(boxes, scores, 300, iou)
    centers = _scene(rng, "clustered", 1, 300, center=1)
    centers[0, ::7, 2:] *= -1
    _check(centers, scores, 300, 0.4, 0.1, center=1)
    assert spy["classes"] == 4


def test_score_ties_and_signed_zeros_match_ort(spy, monkeypatch):
    """Equal scores keep box order, 0.0 and -0.0 included, in every class."""
    monkeypatch.setattr(nn_nms, "CLASS_SHARE", 0)
    rng = np.random.default_rng(5)
    boxes = _scene(rng, "clustered", 1, 400)
    scores = rng.choice(np.array([0.0, -0.0, 0.5, 1.0], np.float32), (1, 70, 400))
    _check(boxes, scores, 400, 0.3)
    _check(boxes, scores, 400, 0.3, -0.5)
    assert spy["classes"] == 2


def test_chain_of_overlaps_hands_over_to_greedy_keep(spy):
    """Each box overlaps the next one only, scores falling along the chain in some
    classes and rising in others: the rounds decide a couple of boxes each, so the rest
    goes to greedy_keep (and to its in-order pass)."""
    n = 600
    x = np.arange(n, dtype=np.float32) * 0.6
    boxes = np.stack([np.zeros(n), x, np.ones(n), x + 1], 1)[None].astype(np.float32)
    fall = np.linspace(1, 0.1, n, dtype=np.float32)
    scores = np.stack([fall, fall[::-1], fall, np.roll(fall, 7)] * 3)[None]
    exp = _check(boxes, scores, n, 0.1)
    assert spy["classes"] == 1 and spy["finish"] == 1
    assert exp.shape[0] >= 6 * (n // 2)


def test_pruned_rounds_match_ort(spy, monkeypatch):
    """Rounds that drop decided nodes and their pairs after every round, down to nodes
    left without a pair."""
    monkeypatch.setattr(nn_nms, "CLASS_SHARE", 0)
    monkeypatch.setattr(nn_nms_classes, "_PRUNE_PAIRS", 0)
    rng = np.random.default_rng(6)
    for kind in ("clustered", "uniform"):
        boxes = _scene(rng, kind, 2, 500)
        scores = (rng.uniform(0, 1, (2, 40, 500)) ** 2).astype(np.float32)
        _check(boxes, scores, 500, 0.5, 0.1)
    assert spy["classes"] == 2 and spy["prune"] >= 2


@pytest.mark.parametrize("share", [nn_nms.CLASS_SHARE - 1, nn_nms.CLASS_SHARE])
def test_switch_takes_the_all_classes_path_at_its_share(share, spy):
    """Every box a candidate in exactly `share` of 30 classes: at CLASS_SHARE the
    all-classes path, one below the per-class blocks; and with a max_output that caps the
    candidates the blocks would see (CLASS_REACH), the blocks again."""
    rng = np.random.default_rng(share)
    n, nc = 500, 30
    boxes = _scene(rng, "clustered", 1, n)
    scores = rng.uniform(0, 0.04, (1, nc, n)).astype(np.float32)
    pick = np.argsort(rng.uniform(size=(n, nc)), 1)[:, :share]
    scores[0, pick.T, np.arange(n)] = rng.uniform(0.1, 1, (share, n))
    _check(boxes, scores, n, 0.5, 0.05)
    assert spy["classes"] == (share >= nn_nms.CLASS_SHARE)
    cap = (share * n // nc) // nn_nms.CLASS_REACH // 2
    _check(boxes, scores, cap, 0.5, 0.05)
    assert spy["classes"] == (share >= nn_nms.CLASS_SHARE)


def test_float64_and_nan_scores_select_as_the_blocks(monkeypatch):
    """Scores onnxruntime does not take: float64 (keys of 64 bits, the output sorted by
    lexsort), and NaN scores without a threshold (NaN last, by box index among NaN), with
    float64 boxes; the all-classes path against the per-class blocks."""
    rng = np.random.default_rng(7)
    boxes = _scene(rng, "clustered", 2, 300).astype(np.float64)
    scores = np.round(rng.uniform(0, 1, (2, 12, 300)), 2)
    scores[:, :, ::11] = np.nan
    for s in (scores, scores.astype(np.float32)):
        for thr in (None, s.dtype.type(0.3)):
            got = []
            for share in (0, 10 ** 9):
                monkeypatch.setattr(nn_nms, "CLASS_SHARE", share)
                got.append(nn_nms.select(boxes, s, 300, np.float64(0.5), thr, False))
            np.testing.assert_array_equal(got[0], got[1])
            assert got[0].shape[0] > 24


@pytest.mark.parametrize("dtype", [np.float32, np.float64])
def test_descending_keys_order_as_a_stable_descending_sort(dtype):
    """Keys sort as a stable sort of the negated scores: equal scores by index, 0.0 equal
    to -0.0, infinities, denormals, NaN last."""
    rng = np.random.default_rng(8)
    pool = np.array([0.0, -0.0, 1.0, -1.0, 0.5, -0.5, np.nan, np.inf, -np.inf, 1e-40, -1e-40,
                     3.4e38], dtype)
    s = rng.choice(pool, (4, 300))
    keys = nn_nms_classes.descending_keys(s)
    np.testing.assert_array_equal(np.argsort(keys, axis=1, kind="stable"),
                                  np.argsort(-s, axis=1, kind="stable"))


@pytest.mark.parametrize("seed", range(6))
def test_x_sweep_finds_the_grid_joins_pairs(seed):
    """x_sweep_pairs against the grid join: random boxes in groups (in any order) and all in
    one, far from the origin for odd seeds, float64 boxes a few ulps wide for seeds 4 and 5
    (where the groups' shift on the float64 line rounds)."""
    rng = np.random.default_rng(seed)
    n = int(rng.integers(2, 300))
    if seed < 4:
        x0 = rng.uniform(0, 200, n) + (1e6 if seed % 2 else 0)
        w = rng.uniform(1, 40, n)
        dtype = np.float32
    else:
        x0 = 1e3 + rng.integers(0, 40, n) * 2.0 ** -40
        w = rng.integers(1, 30, n) * 2.0 ** -40
        dtype = np.float64
    y0, h = rng.uniform(0, 200, n), rng.uniform(1, 40, n)
    xmin, ymin = x0.astype(dtype), y0.astype(dtype)
    xmax, ymax = (x0 + w).astype(dtype), (y0 + h).astype(dtype)
    area = (xmax - xmin) * (ymax - ymin)
    group = rng.integers(0, int(rng.integers(1, 4)), n)
    for thr in (dtype(0), dtype(0.3)):
        want = nn_nms_graph.suppressing_pairs(xmin, xmax, ymin, ymax, area, group,
                                              np.zeros(n, bool), thr)
        got = nn_nms_sweep.x_sweep_pairs(xmin, xmax, ymin, ymax, area, group, thr)
        assert (got[0] < got[1]).all() and len(got[0]) == len(want[0])
        assert set(zip(*map(list, got))) == set(zip(*map(list, want)))
        one = nn_nms_graph.suppressing_pairs(xmin, xmax, ymin, ymax, area,
                                             np.zeros(n, np.int64), np.zeros(n, bool), thr)
        got = nn_nms_sweep.x_sweep_pairs(xmin, xmax, ymin, ymax, area, None, thr)
        assert set(zip(*map(list, got))) == set(zip(*map(list, one))) \
            and len(got[0]) == len(one[0])
    assert len(want[0]) > 0


def test_x_sweep_on_both_sides_of_its_switch(monkeypatch):
    """The all-classes path with X_SWEEP_N boxes in the largest batch (the sweep on x) and
    one more (the banded sweep), two batches, against onnxruntime."""
    seen = {"x": 0, "bands": 0}
    for name, key in (("x_sweep_pairs", "x"), ("sweep_pairs", "bands")):
        def wrap(*a, _real=getattr(nn_nms, name), _key=key, **k):
            seen[_key] += 1
            return _real(*a, **k)
        monkeypatch.setattr(nn_nms, name, wrap)
    rng = np.random.default_rng(9)
    for n, path in ((nn_nms.X_SWEEP_N, "x"), (nn_nms.X_SWEEP_N + 1, "bands")):
        boxes = _scene(rng, "clustered", 2, n)
        scores = (rng.uniform(0, 1, (2, 40, n)) ** 2).astype(np.float32)
        before = dict(seen)
        _check(boxes, scores, 100, 0.5, 0.05)
        assert seen[path] == before[path] + 1
        assert sum(seen.values()) == sum(before.values()) + 1


def test_rank_bits_in_chunks_match_ort(spy, monkeypatch):
    """_first in chunks of a few pairs (the keys of three boxes a chunk), against
    onnxruntime."""
    monkeypatch.setattr(nn_nms, "CLASS_SHARE", 0)
    monkeypatch.setattr(nn_nms_classes, "_CHUNK", 3 * 4 * 33)
    rng = np.random.default_rng(10)
    boxes = _scene(rng, "clustered", 2, 300)
    scores = (rng.uniform(0, 1, (2, 33, 300)) ** 2).astype(np.float32)
    scores[:, :, ::5] = np.round(scores[:, :, ::5], 1)
    _check(boxes, scores, 300, 0.5, 0.1)
    assert spy["classes"] == 1


@pytest.mark.parametrize("share", [0, 10 ** 9])
def test_int64_max_output_matches_ort(share, spy, monkeypatch):
    """max_output_boxes_per_class at the int64 limit, on either path (the switch's count
    of the candidates the blocks would see must not overflow)."""
    monkeypatch.setattr(nn_nms, "CLASS_SHARE", share)
    rng = np.random.default_rng(11)
    boxes = _scene(rng, "clustered", 1, 200)
    scores = (rng.uniform(0, 1, (1, 10, 200)) ** 2).astype(np.float32)
    assert _check(boxes, scores, 2 ** 63 - 1, 0.5, 0.1).shape[0] > 10
    assert spy["classes"] == (share == 0)
