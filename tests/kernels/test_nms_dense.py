"""NonMaxSuppression's heads of the ranking (kernels/nn_nms_dense.py) against onnxruntime,
index for index: random scenes of every kind at the head's boundaries (63-65, 127-129
candidates), ties and equal scores, thresholds, max_output_boxes_per_class cutting inside and
between heads, center boxes, degenerate and non-finite boxes, coarse quantisation, several
batches and classes with one group holding the candidates; both sides of each switch (the
size limit, the declining first head, the hand-back to the blocks); the score order."""
from __future__ import annotations

import numpy as np
import pytest

from pyge.kernels import nn_nms, nn_nms_dense

from .nms_scenes import check_boxes as _check
from .nms_scenes import as_boxes, clustered_centres, spoil

ort = pytest.importorskip("onnxruntime")


def _scene(rng, kind, b, n, center=0):
    """b batches of n boxes: clustered (20 jittered boxes an object), uniform (spread),
    dense (a small square); [y1, x1, y2, x2] with the corners in a random order, or
    [x_center, y_center, width, height]."""
    if kind == "clustered":
        xy, wh = clustered_centres(rng, b, n)
    else:
        side = 30 * np.sqrt(n) if kind == "uniform" else 150.0
        wh = rng.uniform(5, 60, (b, n, 2))
        xy = rng.uniform(0, side, (b, n, 2)) + wh / 2
    return as_boxes(rng, xy, wh, center)


@pytest.fixture
def spy(monkeypatch):
    """What nn_nms_dense.select_group answered, call by call: 'declined', 'handed back' or
    'selected'."""
    seen = []
    real = nn_nms_dense.select_group

    def wrapped(*a):
        got = real(*a)
        seen.append("declined" if got is None else "selected" if got[1] is None
                    else "handed back")
        return got
    monkeypatch.setattr(nn_nms, "select_group", wrapped)
    return seen


@pytest.fixture
def forced(monkeypatch):
    """The heads take every single-group scene to its end."""
    monkeypatch.setattr(nn_nms, "DENSE_N", 10 ** 9)
    monkeypatch.setattr(nn_nms_dense, "FEW_PAIRS", 0)
    monkeypatch.setattr(nn_nms_dense, "FEW_OUT", -1)


@pytest.mark.parametrize("n", [1, 2, 63, 64, 65, 127, 128, 129, 300, 1000, 2500])
@pytest.mark.parametrize("kind", ["clustered", "uniform", "dense"])
def test_random_scenes_match_ort(n, kind, forced, spy):
    rng = np.random.default_rng(n * 7 + len(kind))
    for trial in range(2):
        center = trial
        boxes = _scene(rng, kind, 1, n, center)
        scores = rng.uniform(0, 1, (1, 1, n)).astype(np.float32)
        if trial:
            scores[..., ::3] = np.round(scores[..., ::3], 1)   # ties: the lower index first
        iou = float(rng.choice([0.0, 0.3, 0.5, 0.7, 1.0]))
        _check(boxes, scores, n, iou, float(rng.uniform(0, 0.2)), center)
    assert spy == ["selected"] * 2


@pytest.mark.parametrize("max_out", [1, 5, 37, 63, 64, 65, 80, None])
def test_max_output_cuts_inside_and_between_heads(max_out, forced, spy):
    """Clustered 1,000 boxes keep about 70, over three heads: the cap falls in the first,
    at its end, in a later head, or nowhere."""
    rng = np.random.default_rng(0 if max_out is None else max_out)
    _check(_scene(rng, "clustered", 1, 1000), rng.uniform(0, 1, (1, 1, 1000)).astype(
        np.float32), max_out, 0.5)
    assert spy == ([] if max_out is None else ["selected"])


def test_equal_scores_signed_zeros_and_nan_scores_keep_the_order(forced, spy):
    """All scores equal (index order), 0.0 and -0.0 equal, a few score values only."""
    rng = np.random.default_rng(1)
    boxes = _scene(rng, "clustered", 1, 700)
    for scores in (np.full((1, 1, 700), 0.25, np.float32),
                   rng.choice(np.array([0.0, -0.0, 0.5, 1.0], np.float32), (1, 1, 700))):
        _check(boxes, scores, 700, 0.4)
        _check(boxes, scores, 700, 0.4, -0.5)
    assert spy == ["selected"] * 4


def test_degenerate_and_non_finite_boxes_match_ort(forced, spy):
    """Zero width or height, points, identical boxes, NaN and infinite corners, an area
    that overflows: they take part in no pair, and quantisation ignores them."""
    rng = np.random.default_rng(2)
    boxes = _scene(rng, "clustered", 1, 400)
    spoil(boxes)
    scores = rng.uniform(0, 1, (1, 1, 400)).astype(np.float32)
    for iou in (0.0, 0.5, 1.0):
        _check(boxes, scores, 400, iou)
    degenerate = np.zeros((1, 50, 4), np.float32)            # no box takes part: declined
    _check(degenerate, scores[..., :50], 50, 0.5)
    assert spy == ["selected"] * 3 + ["declined"]


def test_coarse_quantisation_and_boxes_that_touch(forced, spy):
    """A far box spreads the quantised range, so that the others share a few levels and
    the dense test passes many pairs the exact one refuses; boxes that touch without
    overlapping, and pairs whose IoU is the threshold exactly."""
    rng = np.random.default_rng(3)
    boxes = _scene(rng, "clustered", 1, 600)
    boxes[0, 0] = [1e7, 1e7, 1e7 + 5, 1e7 + 5]
    _check(boxes, rng.uniform(0, 1, (1, 1, 600)).astype(np.float32), 600, 0.5)
    x = np.arange(200, dtype=np.float32)
    touch = np.stack([np.zeros(200), 2 * x, np.ones(200), 2 * x + 2], 1)[None].astype(
        np.float32)
    _check(touch, rng.uniform(0, 1, (1, 1, 200)).astype(np.float32), 200, 0.0)
    half = np.stack([np.zeros(200), x, np.ones(200), x + 3], 1)[None].astype(np.float32)
    exp = _check(half, np.linspace(1, 0, 200, dtype=np.float32)[None, None], 200, 0.5)
    assert exp.shape[0] == 200                      # neighbours' IoU is 0.5: none suppressed
    assert spy == ["selected"] * 3


def test_one_group_among_several_takes_the_heads(forced, spy):
    """2 batches x 3 classes, a score threshold that only one (batch, class) group passes;
    with two such groups, the blocks."""
    rng = np.random.default_rng(4)
    boxes = _scene(rng, "clustered", 2, 500)
    scores = rng.uniform(0, 0.1, (2, 3, 500)).astype(np.float32)
    scores[1, 2] = rng.uniform(0, 1, 500)
    _check(boxes, scores, 500, 0.5, 0.2)
    scores[0, 1] = rng.uniform(0, 1, 500)
    _check(boxes, scores, 500, 0.5, 0.2)
    assert spy == ["selected"]


def test_float64_boxes_select_as_in_float64(forced):
    rng = np.random.default_rng(5)
    boxes = _scene(rng, "clustered", 1, 800).astype(np.float64)
    scores = rng.uniform(0, 1, (1, 1, 800)).astype(np.float32)
    got = nn_nms.select(boxes, scores, 800, np.float64(0.5), None, False)
    exp = nn_nms._select_blocks(boxes, 1, 1, 800, *nn_nms._candidates(scores, None), 800,
                                np.float64(0.5), False)
    np.testing.assert_array_equal(got, exp)


@pytest.mark.parametrize("n", [300, 301])
def test_both_sides_of_the_size_limit(n, monkeypatch, spy):
    """Up to DENSE_N boxes the heads select; one more, the blocks."""
    monkeypatch.setattr(nn_nms, "DENSE_N", 300)
    rng = np.random.default_rng(n)
    _check(_scene(rng, "clustered", 1, n), rng.uniform(0, 1, (1, 1, n)).astype(np.float32),
           n, 0.5)
    assert spy == (["selected"] if n == 300 else [])


@pytest.mark.parametrize("n", [nn_nms.DENSE_N, nn_nms.DENSE_N + 1])
def test_clustered_scene_at_the_default_size_limit(n, spy):
    """Some 100 jittered boxes an object (the first head then has pairs enough)."""
    rng = np.random.default_rng(n)
    xy, wh = clustered_centres(rng, 1, n // 5 + 1)
    xy = np.tile(xy, (1, 5, 1))[:, :n] + rng.normal(0, 3, (1, n, 2))
    wh = np.tile(wh, (1, 5, 1))[:, :n]
    boxes = np.concatenate([xy - wh / 2, xy + wh / 2], -1)[..., [1, 0, 3, 2]]
    _check(boxes.astype(np.float32), rng.uniform(0, 1, (1, 1, n)).astype(np.float32), n, 0.5)
    assert spy in ((["selected"], ["handed back"]) if n == nn_nms.DENSE_N else ([],))


def test_spread_boxes_decline_and_mostly_kept_heads_hand_back(spy):
    """With the default switches: boxes spread out (few pairs in the first head) go to the
    blocks at once; boxes in a row, each overlapping its neighbours by less than the
    threshold (many pairs, nearly all kept), are handed back after the first head."""
    rng = np.random.default_rng(6)
    _check(_scene(rng, "uniform", 1, 1000), rng.uniform(0, 1, (1, 1, 1000)).astype(
        np.float32), 1000, 0.5)
    x = np.arange(1000, dtype=np.float32)
    row = np.stack([np.zeros(1000), x, np.ones(1000) * 10, x + 3], 1)[None].astype(
        np.float32)
    _check(row, np.linspace(1, 0.1, 1000, dtype=np.float32)[None, None], 1000, 0.7)
    _check(_scene(rng, "clustered", 1, 1000), rng.uniform(0, 1, (1, 1, 1000)).astype(
        np.float32), 1000, 0.5)
    assert spy == ["declined", "handed back", "selected"]


def test_handing_back_with_a_cap_left(monkeypatch, spy):
    """Handed back after the first head, the blocks keep what is left of the cap."""
    monkeypatch.setattr(nn_nms_dense, "FEW_OUT", 10 ** 9)
    rng = np.random.default_rng(7)
    boxes = _scene(rng, "clustered", 1, 1500)
    scores = rng.uniform(0, 1, (1, 1, 1500)).astype(np.float32)
    for max_out in (45, 70, 1500):
        _check(boxes, scores, max_out, 0.5)
    assert set(spy) <= {"selected", "handed back"} and spy[-1] == "handed back"


def test_score_order_matches_the_blocks():
    """nn_nms_dense's candidate order is nn_nms._score_order's cut at the threshold: ties,
    signed zeros, infinities, denormals and NaN, in float32 and float64."""
    rng = np.random.default_rng(8)
    pool = np.array([0.0, -0.0, 1.0, -1.0, 0.5, np.nan, np.inf, -np.inf, 1e-40, 3.4e38],
                    np.float32)
    for s in (rng.choice(pool, 500), rng.uniform(0, 1, 500).astype(np.float32),
              rng.choice(pool, 500).astype(np.float64)):
        full = nn_nms._score_order(s[None])[0]
        np.testing.assert_array_equal(nn_nms_dense._order(s, None), full)
        cut = nn_nms_dense._order(s, s.dtype.type(0.5))
        with np.errstate(invalid="ignore"):
            np.testing.assert_array_equal(cut, full[:np.count_nonzero(s > 0.5)])
