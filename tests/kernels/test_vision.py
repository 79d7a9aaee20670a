"""Vision / detection kernels (kernels/nn_nms.py, nn_roi.py, nn_grid.py, tensor_unique.py,
and Col2Im, MaxUnpool, CenterCropPad) beyond the
onnx node cases: seeded random cases against onnxruntime and onnx's ReferenceEvaluator,
and the compile-time refusals."""
from __future__ import annotations

import numpy as np
import pytest
from onnx.reference import ReferenceEvaluator

from pyge.errors import GraphError
from pyge.frontends import load_onnx
from pyge.executors.interpreter import run_reference
from pyge.testing import one_node_model

ort = pytest.importorskip("onnxruntime")


def _model(op, inputs, attrs=None, opset=17, n_out=1, consts=()):
    return one_node_model(op, inputs, attrs, opset=opset, n_out=n_out, consts=consts, trim=True)


def _feeds(inputs, consts=()):
    return {n: np.asarray(a) for n, a in inputs.items() if a is not None and n not in consts}


def _pyge(m, feeds):
    g = load_onnx(m)
    out = run_reference(g, feeds)
    return [out[v.name] for v in g.outputs]


def _ort(m, feeds):
    so = ort.SessionOptions()
    so.log_severity_level = 3
    s = ort.InferenceSession(m.SerializeToString(), so, providers=["CPUExecutionProvider"])
    return s.run(None, feeds)


def _close(got, exp, exact=False, rtol=1e-5, atol=1e-5):
    assert len(got) == len(exp)
    for a, b in zip(got, exp):
        b = np.asarray(b)
        assert a.shape == b.shape, (a.shape, b.shape)
        assert a.dtype == b.dtype, (a.dtype, b.dtype)
        if exact or b.dtype.kind in "iubO":
            np.testing.assert_array_equal(a, b)
        else:
            np.testing.assert_allclose(a, b, rtol=rtol, atol=atol)


# ---------------------------------------------------------------------------------------
# NonMaxSuppression


def _boxes(rng, b, n, center):
    if center:
        xy = rng.uniform(0, 10, (b, n, 2))
        wh = rng.uniform(0.5, 4, (b, n, 2))
        return np.concatenate([xy, wh], -1).astype(np.float32)
    p = rng.uniform(0, 10, (b, n, 2, 2))
    return np.concatenate([p[..., 0, :], p[..., 0, :] + rng.uniform(-3, 3, (b, n, 2))],
                          -1).astype(np.float32)  # some flipped corners


@pytest.mark.parametrize("seed", range(12))
def test_nms_random_matches_ort_and_reference(seed):
    rng = np.random.default_rng(seed)
    b, c, n = int(rng.integers(1, 3)), int(rng.integers(1, 4)), int(rng.integers(1, 40))
    center = int(seed % 2)
    scores = rng.uniform(0, 1, (b, c, n)).astype(np.float32)
    scores[..., ::5] = 0.5                      # ties: the lower index goes first
    inputs = {"boxes": _boxes(rng, b, n, center), "scores": scores,
              "m": np.array([int(rng.integers(1, 12))], np.int64),
              "iou": np.array([rng.uniform(0, 0.7)], np.float32),
              "st": np.array([rng.uniform(0, 0.6)], np.float32) if seed % 3 else None}
    m = _model("NonMaxSuppression", inputs, {"center_point_box": center}, 11)
    feeds = _feeds(inputs)
    got = _pyge(m, feeds)
    _close(got, _ort(m, feeds), exact=True)
    _close(got, ReferenceEvaluator(m).run(None, feeds), exact=True)


def test_nms_absent_limit_selects_nothing():
    rng = np.random.default_rng(0)
    inputs = {"boxes": _boxes(rng, 1, 5, 0), "scores": rng.uniform(0, 1, (1, 2, 5))
              .astype(np.float32)}
    got = _pyge(_model("NonMaxSuppression", inputs, {}, 11), _feeds(inputs))[0]
    assert got.shape == (0, 3) and got.dtype == np.int64


def test_nms_refuses_bad_center_point_box():
    inputs = {"boxes": np.zeros((1, 1, 4), np.float32), "scores": np.zeros((1, 1, 1), np.float32)}
    m = _model("NonMaxSuppression", inputs, {"center_point_box": 2}, 11)
    with pytest.raises(GraphError, match=r"NonMaxSuppression.*center_point_box"):
        _pyge(m, _feeds(inputs))


# ---------------------------------------------------------------------------------------
# RoiAlign


@pytest.mark.parametrize("seed", range(16))
def test_roi_align_random_matches_ort_and_reference(seed):
    rng = np.random.default_rng(seed)
    b, c, h, w = int(rng.integers(1, 3)), int(rng.integers(1, 4)), int(rng.integers(3, 12)), \
        int(rng.integers(3, 12))
    n = int(rng.integers(1, 6))
    x = rng.standard_normal((b, c, h, w)).astype(np.float32)
    p = rng.uniform(-3, 14, (n, 2, 2)).astype(np.float32)
    rois = np.concatenate([p.min(1), p.max(1)], -1)          # some past the borders
    if seed % 4 == 0:
        rois[0, 2:] = rois[0, :2] + 0.3                      # a tiny roi
    bidx = rng.integers(0, b, n).astype(np.int64)
    opset = 10 if seed % 3 == 0 else 16
    attrs = {"mode": "max" if seed % 2 else "avg", "output_height": int(rng.integers(1, 4)),
             "output_width": int(rng.integers(1, 4)), "sampling_ratio": int(seed % 3),
             "spatial_scale": float(rng.choice([1.0, 0.5, 2.0]))}
    if opset == 16:
        attrs["coordinate_transformation_mode"] = ["half_pixel", "output_half_pixel"][seed % 2]
    inputs = {"x": x, "rois": rois, "bi": bidx}
    m = _model("RoiAlign", inputs, attrs, opset)
    got = _pyge(m, inputs)
    _close(got, _ort(m, inputs))
    if opset >= 16:  # the reference applies opset 16's half_pixel default to opset 10 too
        _close(got, ReferenceEvaluator(m).run(None, inputs))


@pytest.mark.parametrize("layout", ["csr", "coo"])
@pytest.mark.parametrize("ratio", [0, 1, 3])
def test_roi_align_avg_sparse_product_layouts(layout, ratio, monkeypatch):
    """avg is one sparse product whose rows repeat columns (samples sharing pixels, corners
    clamped at the border): the CPU's CSR product and the COO one used on other devices
    both equal onnxruntime, on rois inside, across and outside the map, several images."""
    from pyge.kernels import nn_roi
    if layout == "coo":
        monkeypatch.setattr(nn_roi, "_CSR_DEVICES", ())
    rng = np.random.default_rng(ratio)
    x = rng.standard_normal((2, 5, 13, 9)).astype(np.float32)
    p = rng.uniform(-4, 16, (12, 2, 2)).astype(np.float32)
    rois = np.concatenate([p.min(1), p.max(1)], -1)
    inputs = {"x": x, "rois": rois, "bi": rng.integers(0, 2, 12).astype(np.int64)}
    attrs = {"output_height": 3, "output_width": 4, "sampling_ratio": ratio, "spatial_scale": 0.7}
    m = _model("RoiAlign", inputs, attrs, 16)
    _close(_pyge(m, inputs), _ort(m, inputs))


def test_roi_align_refuses_unknown_mode():
    inputs = {"x": np.zeros((1, 1, 2, 2), np.float32), "rois": np.zeros((1, 4), np.float32),
              "bi": np.zeros(1, np.int64)}
    m = _model("RoiAlign", inputs, {"mode": "median"}, 16)
    with pytest.raises(GraphError, match=r"RoiAlign.*'mode'"):
        _pyge(m, inputs)


# ---------------------------------------------------------------------------------------
# GridSample


_GS_CASES = [(mode, pad, align, nd) for mode in ("linear", "nearest", "cubic")
             for pad in ("zeros", "border", "reflection") for align in (0, 1)
             for nd in (1, 2, 3) if not (mode == "cubic" and nd == 3)]


@pytest.mark.parametrize("mode,pad,align,nd", _GS_CASES)
def test_grid_sample_matches_reference(mode, pad, align, nd):
    rng = np.random.default_rng(len(mode) * 100 + len(pad) * 10 + align + nd)
    sp = [int(v) for v in rng.integers(2, 5, nd)] if nd != 2 else [3, 4]
    x = rng.standard_normal([2, 2] + sp).astype(np.float32)
    out = [3] * nd if nd < 3 else [2, 3, 2]
    grid = rng.uniform(-1.8, 1.8, [2] + out + [nd]).astype(np.float32)
    grid.reshape(-1)[:6] = [-1, 1, 0, 0.5, -0.25, 1 / 3]       # on and between the pixels
    inputs = {"x": x, "grid": grid}
    m = _model("GridSample", inputs, {"mode": mode, "padding_mode": pad,
                                      "align_corners": align}, 20)
    got = _pyge(m, inputs)
    _close(got, ReferenceEvaluator(m).run(None, inputs))
    if nd == 2 and not (mode == "cubic" and pad == "border"):
        # onnxruntime's bicubic/border does not clamp an outside coordinate before taking
        # the 4x4 taps (as torch's); the reference (and pyge) clamp it first.
        m16 = _model("GridSample", inputs, {"mode": {"linear": "bilinear", "cubic": "bicubic"}
                                            .get(mode, mode), "padding_mode": pad,
                                            "align_corners": align}, 16)
        _close(_pyge(m16, inputs), _ort(m16, inputs))


def test_grid_sample_nearest_rounds_half_to_even():
    # x = 0.5 and 2.5 (align_corners=1 on 4 pixels: n = -2/3 and 2/3) go to 0 and 2.
    x = np.arange(4, dtype=np.float32).reshape(1, 1, 1, 4)
    grid = np.array([[[[-2 / 3, 0], [2 / 3, 0], [-1 / 3, 0]]]], np.float32)
    m = _model("GridSample", {"x": x, "grid": grid}, {"mode": "nearest", "align_corners": 1}, 20)
    got = _pyge(m, {"x": x, "grid": grid})[0]
    exp = ReferenceEvaluator(m).run(None, {"x": x, "grid": grid})[0]
    np.testing.assert_array_equal(got, exp)


def test_grid_sample_refuses_unknown_padding():
    inputs = {"x": np.zeros((1, 1, 2, 2), np.float32), "grid": np.zeros((1, 1, 1, 2), np.float32)}
    m = _model("GridSample", inputs, {"padding_mode": "wrap"}, 16)
    with pytest.raises(GraphError, match=r"GridSample.*padding_mode"):
        _pyge(m, inputs)


# ---------------------------------------------------------------------------------------
# Unique


@pytest.mark.parametrize("sorted_", [0, 1])
@pytest.mark.parametrize("axis", [None, 0, 1, -1])
@pytest.mark.parametrize("dtype", [np.float32, np.int64, np.int8])
def test_unique_random_matches_ort(dtype, axis, sorted_):
    rng = np.random.default_rng(np.dtype(dtype).itemsize * 10 + (axis or 0) * 2 + sorted_)
    x = rng.integers(-2, 3, (5, 3, 4) if axis is None else (6, 2)).astype(dtype)
    if axis is not None:
        x = np.concatenate([x, x[::2]], 0) if axis == 0 else np.concatenate([x, x[:, :1]], 1)
    attrs = {"sorted": sorted_} | ({} if axis is None else {"axis": axis})
    m = _model("Unique", {"x": x}, attrs, 11, n_out=4)
    got = _pyge(m, {"x": x})
    if dtype != np.int8:  # onnxruntime's Unique has no int8 kernel with an axis
        _close(got, _ort(m, {"x": x}), exact=True)
    if axis == 0 or sorted_:  # unsorted, the reference takes along axis 0 of the input
        _close(got, ReferenceEvaluator(m).run(None, {"x": x}), exact=True)


def test_unique_unsorted_along_axis_1_follows_the_spec():
    x = np.array([[2, 1, 2, 0], [5, 4, 5, 3]], np.int64)
    y, idx, inv, cnt = _pyge(_model("Unique", {"x": x}, {"sorted": 0, "axis": 1}, 11, 4),
                             {"x": x})
    np.testing.assert_array_equal(y, [[2, 1, 0], [5, 4, 3]])
    np.testing.assert_array_equal(idx, [0, 1, 3])
    np.testing.assert_array_equal(inv, [0, 1, 0, 2])
    np.testing.assert_array_equal(cnt, [2, 1, 1])


@pytest.mark.parametrize("sorted_", [0, 1])
def test_unique_strings_and_nan(sorted_):
    s = np.array(["b", "a", "b", "c", "a"], dtype=object)
    m = _model("Unique", {"x": s}, {"sorted": sorted_}, 11, 4)
    got = _pyge(m, {"x": s})
    _close(got, _ort(m, {"x": s}), exact=True)
    f = np.array([np.nan, 1.0, np.nan, -1.0, 1.0], np.float32)
    m = _model("Unique", {"x": f}, {"sorted": sorted_}, 11, 4)
    got = _pyge(m, {"x": f})
    exp = ReferenceEvaluator(m).run(None, {"x": f})
    for a, b in zip(got, exp):
        np.testing.assert_array_equal(a, b)


# ---------------------------------------------------------------------------------------
# AffineGrid, CenterCropPad


@pytest.mark.parametrize("align", [0, 1])
@pytest.mark.parametrize("size", [[2, 3, 4, 5], [1, 2, 3, 4, 2], [2, 1, 1, 3]])
def test_affine_grid_matches_ort_and_reference(size, align):
    rng = np.random.default_rng(len(size) * 2 + align)
    nd = len(size) - 2
    theta = rng.standard_normal((size[0], nd, nd + 1)).astype(np.float32)
    inputs = {"theta": theta, "size": np.array(size, np.int64)}
    for consts in ((), ("size",)):
        m = _model("AffineGrid", inputs, {"align_corners": align}, 20, consts=consts)
        feeds = _feeds(inputs, consts)
        got = _pyge(m, feeds)
        if align and 1 in size[2:]:
            # A size-1 axis with align_corners=1 divides by size - 1 = 0: the reference
            # gives -1, onnxruntime +1, pyge (torch) 0, the centre.
            continue
        _close(got, _ort(m, feeds))
        _close(got, ReferenceEvaluator(m).run(None, feeds))


@pytest.mark.parametrize("shape,axes", [([3, 7, 2], None), ([9, 2], [1, -1]),
                                        ([1, 10], [0, 2]), ([5], [-2])])
def test_center_crop_pad_matches_ort(shape, axes):
    x = np.arange(4 * 5 * 6, dtype=np.float32).reshape(4, 5, 6)
    inputs = {"x": x, "s": np.array(shape, np.int64)}
    m = _model("CenterCropPad", inputs, {} if axes is None else {"axes": axes}, 18)
    got = _pyge(m, inputs)
    _close(got, _ort(m, inputs), exact=True)
    _close(got, ReferenceEvaluator(m).run(None, inputs), exact=True)


# ---------------------------------------------------------------------------------------
# Col2Im, MaxUnpool, MaxRoiPool


@pytest.mark.parametrize("img,blk,attrs", [
    ([5, 5], [2, 3], {}),
    ([6, 7], [3, 2], {"strides": [2, 1], "dilations": [1, 2], "pads": [1, 0, 2, 1]}),
    ([4, 5, 3], [2, 2, 1], {"strides": [1, 2, 1], "pads": [0, 1, 0, 1, 0, 0]}),
    ([8], [3], {"strides": [2], "dilations": [2], "pads": [2, 1]}),
])
def test_col2im_matches_reference(img, blk, attrs):
    n = len(img)
    dil, st = attrs.get("dilations", [1] * n), attrs.get("strides", [1] * n)
    pads = attrs.get("pads", [0] * 2 * n)
    nb = [(img[d] + pads[d] + pads[d + n] - dil[d] * (blk[d] - 1) - 1) // st[d] + 1
          for d in range(n)]
    x = np.random.default_rng(n).standard_normal(
        (2, 3 * int(np.prod(blk)), int(np.prod(nb)))).astype(np.float32)
    inputs = {"x": x, "i": np.array(img, np.int64), "b": np.array(blk, np.int64)}
    m = _model("Col2Im", inputs, attrs, 18, consts=("i", "b"))
    got = _pyge(m, {"x": x})
    _close(got, ReferenceEvaluator(m).run(None, {"x": x}))
    if n == 2:
        _close(got, _ort(m, {"x": x}))


@pytest.mark.parametrize("with_shape", [False, True])
@pytest.mark.parametrize("k,s,p", [([2, 2], [2, 2], [0, 0, 0, 0]), ([3, 3], [2, 2], [1, 1, 1, 1]),
                                   ([2], [1], [0, 1])])
def test_max_unpool_after_max_pool_matches_reference(k, s, p, with_shape):
    rng = np.random.default_rng(len(k) * 10 + k[0])
    shape = [1, 2] + [7] * len(k)
    if not with_shape:  # the inferred shape must hold every index: pool a tight input
        shape = [1, 2] + [(7 - k[d] + p[d] + p[d + len(k)]) // s[d] * s[d] + k[d]
                          - p[d] - p[d + len(k)] for d in range(len(k))]
    x = np.abs(rng.standard_normal(shape)).astype(np.float32) + 0.1
    pool = _model("MaxPool", {"x": x}, {"kernel_shape": k, "strides": s, "pads": p}, 12, 2)
    v, ind = _ort(pool, {"x": x})
    inputs = {"v": v, "i": ind, "s": np.array(shape, np.int64) if with_shape else None}
    m = _model("MaxUnpool", inputs, {"kernel_shape": k, "strides": s, "pads": p}, 11)
    got = _pyge(m, _feeds(inputs))
    _close(got, _ort(m, _feeds(inputs)))
    # Unpooling then pooling again gives back the pooled values (positive input).
    np.testing.assert_array_equal(_ort(pool, {"x": got[0]})[0], v)


def test_max_roi_pool_matches_ort():
    rng = np.random.default_rng(3)
    x = rng.standard_normal((2, 3, 9, 11)).astype(np.float32)
    rois = np.array([[0, 1, 1, 6, 5], [1, 0, 0, 10, 8], [1, 3.4, 2.5, 4.6, 2.5],
                     [0, -4, -3, 30, 2], [1, 12, 10, 14, 12], [0, 6, 6, 3, 2]], np.float32)
    for scale in (1.0, 0.5, 1.7):
        inputs = {"x": x, "r": rois}
        m = _model("MaxRoiPool", inputs, {"pooled_shape": [3, 2], "spatial_scale": scale}, 1)
        _close(_pyge(m, inputs), _ort(m, inputs), exact=True)


def test_max_roi_pool_refuses_bad_pooled_shape():
    inputs = {"x": np.zeros((1, 1, 2, 2), np.float32), "r": np.zeros((1, 5), np.float32)}
    m = _model("MaxRoiPool", inputs, {"pooled_shape": [2]}, 1)
    with pytest.raises(GraphError, match=r"MaxRoiPool.*pooled_shape"):
        _pyge(m, inputs)
