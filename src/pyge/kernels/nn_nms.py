"""NonMaxSuppression (opset 10+): greedy selection of boxes per (batch, class).

It is inherently sequential and its output size depends on the data: it runs on the host
(numpy, in the boxes' precision, the same arithmetic as the reference) and is a HOST_OP.
"""
from __future__ import annotations

import numpy as np
import torch

from ._util import node_error, np_of, run_error, scalar
from .registry import register

def _corners(b: np.ndarray, center: bool):
    """(..., 4) boxes -> (xmin, xmax, ymin, ymax) arrays, computed as the reference does."""
    if center:
        wh, hh = b[..., 2] / 2, b[..., 3] / 2
        return b[..., 0] - wh, b[..., 0] + wh, b[..., 1] - hh, b[..., 1] + hh
    return (np.minimum(b[..., 1], b[..., 3]), np.maximum(b[..., 1], b[..., 3]),
            np.minimum(b[..., 0], b[..., 2]), np.maximum(b[..., 0], b[..., 2]))


def _nms_class(xmin, xmax, ymin, ymax, area, scores, max_out, iou_thr, score_thr):
    """Greedy NMS of one (batch, class): the selected box indices, in selection order."""
    cand = np.arange(scores.shape[0])
    if score_thr is not None:
        cand = cand[scores > score_thr]
    # Highest score first; among equal scores the lower index first (a stable sort).
    cand = cand[np.argsort(-scores[cand], kind="stable")]
    alive = np.ones(cand.shape[0], bool)
    selected: list[int] = []
    pos = 0
    while len(selected) < max_out:
        while pos < cand.shape[0] and not alive[pos]:
            pos += 1
        if pos >= cand.shape[0]:
            break
        i = cand[pos]
        selected.append(int(i))
        pos += 1
        rest = cand[pos:]
        if rest.size == 0:
            break
        with np.errstate(all="ignore"):
            ix0, ix1 = np.maximum(xmin[i], xmin[rest]), np.minimum(xmax[i], xmax[rest])
            iy0, iy1 = np.maximum(ymin[i], ymin[rest]), np.minimum(ymax[i], ymax[rest])
            inter = (ix1 - ix0) * (iy1 - iy0)
            union = area[i] + area[rest] - inter
            iou = inter / union
            sup = (ix1 > ix0) & (iy1 > iy0) & (inter > 0) & (area[i] > 0) & (area[rest] > 0) \
                & (union > 0) & (iou > iou_thr)
        alive[pos:] &= ~sup
    return selected


@register("NonMaxSuppression", since=10)
def non_max_suppression(ctx):
    center = int(ctx.attr("center_point_box", 0))
    if center not in (0, 1):
        raise node_error(ctx, f"attribute 'center_point_box' must be 0 or 1, got {center}")

    def opt(x, kind):
        if x is None or x.numel() == 0:
            return None
        return kind(scalar(x))

    def fn(xs):
        boxes, scores = xs[0], xs[1]
        xs = list(xs) + [None] * (5 - len(xs))
        max_out = opt(xs[2], int) or 0
        iou_thr = opt(xs[3], float)
        score_thr = xs[4]
        dev = boxes.device
        if boxes.ndim != 3 or boxes.shape[-1] != 4 or scores.ndim != 3 \
                or scores.shape[0] != boxes.shape[0] or scores.shape[2] != boxes.shape[1]:
            raise run_error(ctx, f"boxes {tuple(boxes.shape)} must be [batches, boxes, 4] and "
                                 f"scores {tuple(scores.shape)} [batches, classes, boxes]")
        out: list[tuple[int, int, int]] = []
        if max_out > 0 and boxes.numel():
            b = np_of(boxes.float() if boxes.dtype in (torch.float16, torch.bfloat16) else boxes)
            s = np_of(scores.float() if scores.dtype in (torch.float16, torch.bfloat16)
                      else scores)
            ft = b.dtype.type
            thr = ft(iou_thr if iou_thr is not None else 0.0)
            sthr = None if score_thr is None or score_thr.numel() == 0 \
                else np_of(score_thr.float() if score_thr.dtype in (torch.float16,
                           torch.bfloat16) else score_thr).reshape(-1)[0]
            xmin, xmax, ymin, ymax = _corners(b, center == 1)
            area = (xmax - xmin) * (ymax - ymin)
            for bi in range(b.shape[0]):
                for ci in range(s.shape[1]):
                    for k in _nms_class(xmin[bi], xmax[bi], ymin[bi], ymax[bi], area[bi],
                                        s[bi, ci], max_out, thr, sthr):
                        out.append((bi, ci, k))
        res = torch.tensor(out, dtype=torch.int64).reshape(-1, 3)
        return [res.to(dev) if dev.type != "cpu" else res]
    return fn
