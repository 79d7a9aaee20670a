"""ATen -> ONNX: convolution, pooling, normalisation, matrix products, softmax (see torch_ops)."""
from __future__ import annotations

import numpy as np

from ..ir.graph import Value
from .aten_table import Unsupported, aten, axis, op, rank


def _tup(v, n: int) -> list[int]:
    """An ATen int[n] argument: a bare int or a 1-element list means that value on every axis."""
    if isinstance(v, int):
        return [v] * n
    v = [int(x) for x in v]
    return v * n if len(v) == 1 else v


def _pads(padding, n: int) -> list[int]:
    # ATen pads each spatial axis symmetrically, one number per axis; ONNX `pads` lists every
    # axis' begin, then every axis' end: [h_begin, w_begin, h_end, w_end].
    p = _tup(padding, n)
    return p + p


def _static(v: Value, what: str) -> tuple:
    if v.shape is None or not all(isinstance(d, int) for d in v.shape):
        raise Unsupported(f"{what} needs a static shape")
    return v.shape


# ---------------------------------------------------------------------------------------
# convolution


def _conv(cx, x, w, b, stride, padding, dilation, groups, transposed=False, output_padding=None):
    if isinstance(padding, str):
        raise Unsupported(f"padding={padding!r}")
    n = len(_static(w, "convolution weight")) - 2
    attrs = dict(kernel_shape=list(w.shape[2:]), strides=_tup(stride, n), pads=_pads(padding, n),
                 dilations=_tup(dilation, n), group=int(groups))
    if transposed:
        attrs["output_padding"] = _tup(output_padding or 0, n)
        return cx.out("ConvTranspose", [x, w, b], **attrs)
    return cx.out("Conv", [x, w, b], **attrs)


@op(aten.convolution.default)
def _convolution(cx, a):
    return _conv(cx, a["input"], a["weight"], a["bias"], a["stride"], a["padding"], a["dilation"],
                 a["groups"], a["transposed"], a["output_padding"])


@op(aten.conv1d.default, aten.conv2d.default, aten.conv3d.default)
def _convnd(cx, a):
    return _conv(cx, a["input"], a["weight"], a["bias"], a["stride"], a["padding"], a["dilation"],
                 a["groups"])


# ---------------------------------------------------------------------------------------
# pooling


def _pool_attrs(x, kernel, stride, padding, ceil_mode):
    n = rank(x) - 2
    k = _tup(kernel, n)
    s = _tup(stride, n) if stride else k  # ATen's empty stride means "= kernel_size"
    return dict(kernel_shape=k, strides=s, pads=_pads(padding, n), ceil_mode=int(bool(ceil_mode)))


@op(aten.max_pool1d.default, aten.max_pool2d.default, aten.max_pool3d.default,
    aten.max_pool2d_with_indices.default, aten.max_pool3d_with_indices.default)
def _max_pool(cx, a):
    x = a["self"]
    attrs = _pool_attrs(x, a["kernel_size"], a["stride"], a["padding"], a["ceil_mode"])
    attrs["dilations"] = _tup(a["dilation"], rank(x) - 2)
    y = cx.out("MaxPool", [x], n=1, **attrs)
    # *_with_indices returns (values, indices); only the values exist here
    return [y, None] if "with_indices" in cx.fx.target.__name__ else y


@op(aten.avg_pool1d.default, aten.avg_pool2d.default, aten.avg_pool3d.default)
def _avg_pool(cx, a):
    if a.get("divisor_override") is not None:
        raise Unsupported("divisor_override")
    x = a["self"]
    attrs = _pool_attrs(x, a["kernel_size"], a["stride"], a["padding"], a["ceil_mode"])
    return cx.out("AveragePool", [x], count_include_pad=int(bool(a["count_include_pad"])), **attrs)


@op(aten.adaptive_avg_pool1d.default, aten.adaptive_avg_pool2d.default,
    aten._adaptive_avg_pool2d.default, aten.adaptive_avg_pool3d.default,
    aten._adaptive_avg_pool3d.default)
def _adaptive_avg_pool(cx, a):
    # Output 1x1 is a global average; an output that divides the input evenly is a plain
    # average pool with kernel = stride = in/out. Other sizes have overlapping, uneven windows.
    # Only the spatial dims matter: a dynamic batch (or channel) dim is fine.
    x = a["self"]
    spatial_out = tuple(cx.shape[2:]) if cx.shape is not None else None
    if spatial_out is None or not all(isinstance(o, int) for o in spatial_out):
        raise Unsupported("symbolic output size")
    if all(o == 1 for o in spatial_out):
        return cx.out("GlobalAveragePool", [x])
    spatial_in = tuple(x.shape[2:]) if x.shape is not None else None
    if spatial_in is None or not all(isinstance(i, int) for i in spatial_in):
        raise Unsupported("adaptive_avg_pool needs static spatial dims")
    if any(i % o for i, o in zip(spatial_in, spatial_out)):
        raise Unsupported(f"input size {spatial_in} not a multiple of output size {spatial_out}")
    k = [i // o for i, o in zip(spatial_in, spatial_out)]
    return cx.out("AveragePool", [x], kernel_shape=k, strides=k)


@op(aten.adaptive_max_pool2d.default, aten.adaptive_max_pool3d.default)
def _adaptive_max_pool(cx, a):
    # (values, indices); as adaptive_avg_pool: global, or windows that tile the input evenly.
    # Only the values exist here.
    x = a["self"]
    spatial_out = tuple(cx.shape[2:]) if cx.shape is not None else None
    spatial_in = tuple(x.shape[2:]) if x.shape is not None else None
    if spatial_out is None or not all(isinstance(o, int) for o in spatial_out):
        raise Unsupported("symbolic output size")
    if all(o == 1 for o in spatial_out):
        return [cx.out("GlobalMaxPool", [x], n=1), None]
    if spatial_in is None or not all(isinstance(i, int) for i in spatial_in):
        raise Unsupported("adaptive_max_pool needs static spatial dims")
    if any(i % o for i, o in zip(spatial_in, spatial_out)):
        raise Unsupported(f"input size {spatial_in} not a multiple of output size {spatial_out}")
    k = [i // o for i, o in zip(spatial_in, spatial_out)]
    return [cx.out("MaxPool", [x], n=1, kernel_shape=k, strides=k), None]


# ---------------------------------------------------------------------------------------
# normalisation


def _ones(cx, like: Value, shape, tag: str) -> Value:
    return cx.const(np.ones(shape, dtype=like.dtype), tag)


def _zeros(cx, like: Value, shape, tag: str) -> Value:
    return cx.const(np.zeros(shape, dtype=like.dtype), tag)


def _batch_norm(cx, a):
    # In eval mode batch norm uses the running statistics; ATen returns a tuple
    # (output, save_mean, save_invstd) whose statistics outputs are empty, and the graph picks
    # the output with getitem(…, 0).
    x, mean, var = a["input"], a["running_mean"], a["running_var"]
    if mean is None or var is None:
        raise Unsupported("batch norm without running statistics")
    c = _static(mean, "batch norm statistics")
    w = a["weight"] if a["weight"] is not None else _ones(cx, x, c, "scale")
    b = a["bias"] if a["bias"] is not None else _zeros(cx, x, c, "bias")
    y = cx.out("BatchNormalization", [x, w, b, mean, var], n=1, epsilon=float(a["eps"]))
    return [y, None, None]


op(aten._native_batch_norm_legit_no_training.default)(_batch_norm)


@op(aten.native_batch_norm.default, aten._native_batch_norm_legit.default)
def _native_batch_norm(cx, a):
    if a["training"]:
        raise Unsupported("batch norm in training mode")
    return _batch_norm(cx, a)


@op(aten._native_batch_norm_legit.no_stats)
def _batch_norm_no_stats(cx, a):
    # No running statistics (nn.InstanceNorm*, which folds the batch into the channels, and
    # BatchNorm with track_running_stats=False): normalise with the batch's own statistics
    # per channel (axis 1), the biased variance, as torch. (output, save_mean, save_rstd)
    x = a["input"]
    r = rank(x)
    axes = cx.ints([0] + list(range(2, r)))
    kept = tuple(s if i == 1 else 1 for i, s in enumerate(x.shape))
    mean = cx.tmp("ReduceMean", [x, axes], x.dtype, kept, keepdims=1)
    dev = cx.tmp("Sub", [x, mean], x.dtype, x.shape)
    var = cx.tmp("ReduceMean", [cx.tmp("Mul", [dev, dev], x.dtype, x.shape), axes], x.dtype,
                 kept, keepdims=1)
    std = cx.tmp("Sqrt", [cx.tmp("Add", [var, cx.scalar(float(a["eps"]), x.dtype)], x.dtype,
                                 kept)], x.dtype, kept)
    w, b = a["weight"], a["bias"]
    if w is None and b is None:
        return [cx.out("Div", [dev, std], n=1), None, None]
    y = cx.tmp("Div", [dev, std], x.dtype, x.shape)
    per_channel = cx.ints([-1] + [1] * (r - 2))
    if w is not None:
        wr = cx.tmp("Reshape", [w, per_channel], w.dtype, (w.shape[0],) + (1,) * (r - 2))
        y = cx.tmp("Mul", [y, wr], x.dtype, x.shape) if b is not None else cx.out(
            "Mul", [y, wr], n=1)
    if b is not None:
        br = cx.tmp("Reshape", [b, per_channel], b.dtype, (b.shape[0],) + (1,) * (r - 2))
        y = cx.out("Add", [y, br], n=1)
    return [y, None, None]


def _layer_norm(cx, a, multi: bool):
    x, shape = a["input"], [int(s) for s in a["normalized_shape"]]
    w = a["weight"] if a["weight"] is not None else _ones(cx, x, shape, "scale")
    inputs = [x, w] if a["bias"] is None else [x, w, a["bias"]]
    y = cx.out("LayerNormalization", inputs, n=1, axis=-len(shape), epsilon=float(a["eps"]))
    return [y, None, None] if multi else y  # native_layer_norm: (output, mean, rstd)


op(aten.layer_norm.default)(lambda cx, a: _layer_norm(cx, a, False))
op(aten.native_layer_norm.default)(lambda cx, a: _layer_norm(cx, a, True))


def _group_norm(cx, x: Value, groups: int, w, b, eps: float) -> Value:
    # Group norm = instance norm over (N, G, C/G * spatial), then the per-channel affine.
    # (ONNX GroupNormalization changed its scale's meaning in opset 21, so it is avoided.)
    shape = x.shape
    if shape is None or not all(isinstance(d, int) for d in shape[1:]):
        raise Unsupported("group norm needs static channel and spatial dims")
    # A dynamic batch: Reshape's 0 copies it, and the result takes the input's runtime shape.
    batch = shape[0] if isinstance(shape[0], int) else 0
    grouped = (batch, groups, int(np.prod(shape[1:])) // groups)
    y = cx.tmp("Reshape", [x, cx.ints(grouped)], x.dtype, (shape[0],) + grouped[1:])
    y = cx.tmp("InstanceNormalization", [y, _ones(cx, x, (groups,), "scale"),
                                         _zeros(cx, x, (groups,), "bias")], x.dtype, y.shape,
               epsilon=float(eps))
    back = cx.ints(shape) if batch else cx.tmp("Shape", [x], "int64", (len(shape),))
    if w is None and b is None:
        return cx.out("Reshape", [y, back])
    y = cx.tmp("Reshape", [y, back], x.dtype, shape)
    per_channel = (shape[1],) + (1,) * (len(shape) - 2)
    if w is not None:
        wr = cx.tmp("Reshape", [w, cx.ints(per_channel)], w.dtype, per_channel)
        y = cx.tmp("Mul", [y, wr], x.dtype, shape) if b is not None else cx.out("Mul", [y, wr])
    if b is not None:
        br = cx.tmp("Reshape", [b, cx.ints(per_channel)], b.dtype, per_channel)
        y = cx.out("Add", [y, br])
    return y


@op(aten.group_norm.default)
def _group_norm_op(cx, a):
    return _group_norm(cx, a["input"], a["num_groups"], a["weight"], a["bias"], a["eps"])


@op(aten.native_group_norm.default)
def _native_group_norm(cx, a):  # (output, mean, rstd)
    return [_group_norm(cx, a["input"], a["group"], a["weight"], a["bias"], a["eps"]), None, None]


# ---------------------------------------------------------------------------------------
# resizing

# torch's interpolation modes in ONNX Resize terms: (mode, coordinate transformation, nearest)
_RESIZE = {
    "nearest": ("nearest", "asymmetric", "floor"),            # src = floor(dst * in / out)
    "nearest_exact": ("nearest", "half_pixel", "round_prefer_ceil"),
    "linear": ("linear", "pytorch_half_pixel", None),
    "linear_align": ("linear", "align_corners", None),
}


def _resize(cx, kind: str, x: Value, scales) -> Value:
    mode, coord, nearest = _RESIZE[kind]
    attrs = dict(mode=mode, coordinate_transformation_mode=coord)
    if nearest:
        attrs["nearest_mode"] = nearest
    # align_corners maps (in - 1) onto (out - 1) whatever the scale, so it gets sizes.
    if scales and all(s is not None for s in scales) and coord != "align_corners":
        # torch maps coordinates with the given scale factor, not out/in: so does ONNX `scales`
        sc = cx.const(np.asarray([1.0, 1.0] + [float(s) for s in scales], np.float32), "scales")
        return cx.out("Resize", [x, None, sc], **attrs)
    shape = cx.static_shape()
    if shape is None:  # a dynamic batch or channel dim: give the spatial sizes only (axes)
        spatial = tuple(cx.shape[2:]) if cx.shape is not None else ()
        if not spatial or not all(isinstance(d, int) for d in spatial):
            raise Unsupported("symbolic output size")
        return cx.out("Resize", [x, None, None, cx.ints(spatial)],
                      axes=list(range(2, 2 + len(spatial))), **attrs)
    return cx.out("Resize", [x, None, None, cx.ints(shape)], **attrs)


@op(aten.upsample_nearest1d.vec, aten.upsample_nearest2d.vec, aten.upsample_nearest3d.vec)
def _upsample_nearest(cx, a):
    return _resize(cx, "nearest", a["input"], a["scale_factors"])


@op(aten._upsample_nearest_exact2d.vec)
def _upsample_nearest_exact(cx, a):
    return _resize(cx, "nearest_exact", a["input"], a["scale_factors"])


@op(aten.upsample_nearest2d.default)
def _upsample_nearest2d(cx, a):
    return _resize(cx, "nearest", a["self"], [a["scales_h"], a["scales_w"]])


@op(aten.upsample_bilinear2d.vec)
def _upsample_bilinear(cx, a):
    kind = "linear_align" if a["align_corners"] else "linear"
    return _resize(cx, kind, a["input"], a["scale_factors"])


@op(aten.upsample_bilinear2d.default)
def _upsample_bilinear2d(cx, a):
    kind = "linear_align" if a["align_corners"] else "linear"
    return _resize(cx, kind, a["self"], [a["scales_h"], a["scales_w"]])


# ---------------------------------------------------------------------------------------
# softmax and matrix products


@op(aten._softmax.default, aten.softmax.int, aten._log_softmax.default, aten.log_softmax.int)
def _softmax(cx, a):
    x = cx.cast(a["self"], cx.dtype)  # softmax.int's dtype= / _softmax's half_to_float
    onnx_op = "LogSoftmax" if "log" in cx.fx.target.__name__ else "Softmax"
    return cx.out(onnx_op, [x], axis=axis(a["dim"], rank(x)))  # opset >= 13: one axis


@op(aten.mm.default, aten.bmm.default, aten.matmul.default)
def _matmul(cx, a):
    return cx.out("MatMul", [a["self"], a["mat2"] if "mat2" in a else a["other"]])


@op(aten.addmm.default)
def _addmm(cx, a):
    return cx.out("Gemm", [a["mat1"], a["mat2"], a["self"]], alpha=float(a["alpha"]),
                  beta=float(a["beta"]))


def _transposed_weight(cx, w: Value) -> Value:
    if w.const is not None:  # a parameter: transpose once, here
        return cx.const(np.ascontiguousarray(w.const.T), "weight_T")
    shape = None if w.shape is None else tuple(reversed(w.shape))
    return cx.tmp("Transpose", [w], w.dtype, shape, perm=[1, 0])


@op(aten.linear.default)
def _linear(cx, a):
    x, w, b = a["input"], a["weight"], a["bias"]
    if rank(x) == 2:  # Gemm is 2-D only; it transposes the (out, in) weight itself
        return cx.out("Gemm", [x, w, b], transB=1)
    wt = _transposed_weight(cx, w)
    if b is None:
        return cx.out("MatMul", [x, wt])
    y = cx.tmp("MatMul", [x, wt], cx.dtype, cx.shape)
    return cx.out("Add", [y, b])


@op(aten._prelu_kernel.default, aten.prelu.default)
def _prelu(cx, a):
    x, w = a["self"], a["weight"]
    # ONNX PRelu broadcasts the slope numpy-style (trailing axes); torch's per-channel slope
    # belongs on axis 1, so give it shape (C, 1, ..., 1).
    if rank(x) > 2 and w.shape is not None and len(w.shape) == 1 and w.shape != (1,):
        shape = tuple(w.shape) + (1,) * (rank(x) - 2)
        w = cx.tmp("Reshape", [w, cx.ints(shape)], w.dtype, shape)
    return cx.out("PRelu", [x, w])
