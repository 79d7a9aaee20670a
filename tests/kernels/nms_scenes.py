"""Box scenes shared by the NonMaxSuppression tests."""
from __future__ import annotations

import numpy as np


def clustered_centres(rng, b: int, n: int):
    """A detector's output, as (centre xy, width-height) arrays of shape [b, n, 2]: 20
    jittered boxes around each of n // 20 objects, so most of them overlap a better one."""
    k = max(n // 20, 1)
    c = rng.uniform(0, 60 * np.sqrt(k), (b, k, 2))
    size = rng.uniform(20, 80, (b, k, 1))
    pick = rng.integers(0, k, (b, n))
    xy = np.take_along_axis(c, pick[..., None], 1) + rng.normal(0, 3, (b, n, 2))
    wh = np.take_along_axis(size, pick[..., None], 1) * rng.uniform(0.8, 1.25, (b, n, 2))
    return xy, wh


def spoil(boxes: np.ndarray) -> np.ndarray:
    """Boxes 0-99 of batch 0 of corner boxes [b, n >= 100, 4], in place: zero height, zero
    width, identical pairs, NaN and infinite corners, an area that overflows to inf. Such
    boxes never suppress nor are suppressed."""
    boxes[0, 0:20, 2] = boxes[0, 0:20, 0]                  # zero height
    boxes[0, 20:40, 3] = boxes[0, 20:40, 1]                # zero width
    boxes[0, 40:60] = boxes[0, 60:80]                      # identical pairs
    boxes[0, 80:85, 0] = np.nan
    boxes[0, 85:90, 3] = np.inf
    boxes[0, 90:95] = [[-np.inf, -np.inf, np.inf, np.inf]]
    boxes[0, 95:100] = [[0, 0, 3e19, 3e19]]                # area overflows to inf
    return boxes


_RUNNERS: dict = {}


def nms_runners(feeds: dict, center: int = 0):
    """(pyge, onnxruntime) runners of one NonMaxSuppression node taking inputs like `feeds`
    (boxes, scores, m, iou, st in that order; None or missing: absent), for any number of
    batches, classes and boxes; made once per center_point_box, inputs given and dtypes.
    Each runner takes such feeds and passes on the inputs given."""
    import onnxruntime as ort

    import pyge
    from pyge.testing import one_node_model
    key = (center,) + tuple((k, v.dtype.str) for k, v in feeds.items() if v is not None)
    if key not in _RUNNERS:
        m = one_node_model("NonMaxSuppression", feeds, {"center_point_box": center}, opset=11,
                           trim=True)
        for v in m.graph.input[:2]:
            for d in v.type.tensor_type.shape.dim:
                d.dim_param = "n"
        so = ort.SessionOptions()
        so.log_severity_level = 3
        cm = pyge.compile(pyge.load_onnx(m), device="cpu")
        sess = ort.InferenceSession(m.SerializeToString(), so, providers=["CPUExecutionProvider"])
        given = [k for k, v in feeds.items() if v is not None]
        _RUNNERS[key] = (lambda f: cm.run({k: f[k] for k in given})["y0"],
                         lambda f: sess.run(None, {k: f[k] for k in given})[0])
    return _RUNNERS[key]


def check_nms(feeds: dict, center: int = 0) -> np.ndarray:
    """pyge's selected indices for `feeds` (None entries: absent inputs) are onnxruntime's,
    index for index; returns them."""
    got, exp = (run(feeds) for run in nms_runners(feeds, center))
    assert got.dtype == np.int64 and got.shape == exp.shape, (got.shape, exp.shape)
    np.testing.assert_array_equal(got, exp)
    return exp


def nms_feeds(boxes, scores, max_out=None, iou=0.5, thr=None) -> dict:
    """The node's feeds: max_output_boxes_per_class and score_threshold absent where None."""
    return {"boxes": boxes, "scores": scores,
            "m": None if max_out is None else np.array([max_out], np.int64),
            "iou": np.array([iou], np.float32),
            "st": None if thr is None else np.array([thr], np.float32)}


def check_boxes(boxes, scores, max_out=None, iou=0.5, thr=None, center=0) -> np.ndarray:
    """check_nms of nms_feeds(boxes, scores, max_out, iou, thr)."""
    return check_nms(nms_feeds(boxes, scores, max_out, iou, thr), center)


def as_boxes(rng, xy: np.ndarray, wh: np.ndarray, center: int = 0) -> np.ndarray:
    """float32 boxes [b, n, 4] of centres and sizes [b, n, 2]: [x_center, y_center, width,
    height] with center, else corners [y1, x1, y2, x2], each box's two corners in a random
    order (one draw of rng per box)."""
    if center:
        return np.concatenate([xy, wh], -1).astype(np.float32)
    p, q = xy - wh / 2, xy + wh / 2
    swap = rng.uniform(size=xy.shape[:-1] + (1,)) < 0.5
    p, q = np.where(swap, q, p), np.where(swap, p, q)
    return np.concatenate([p[..., ::-1], q[..., ::-1]], -1).astype(np.float32)
