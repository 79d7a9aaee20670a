"""Linear quantization: QuantizeLinear, DequantizeLinear, DynamicQuantizeLinear, and the
integer / quantized products MatMulInteger, ConvInteger, QLinearMatMul, QLinearConv (what
ONNX Runtime's quantization tool emits, in its QDQ and QOperator formats).

Exactness: torch has no general int8 GEMM/convolution with these semantics on the CPU, and
none at all on CUDA, so the integer products run in float64: (x - zero_point) of 8-bit
values are exact there, every product is below 2^16 and every partial sum far below 2^53,
so matmul / convolution results are the exact integers whatever the summation order (the
convolution result is rounded once more, which absorbs the tiny error of an FFT algorithm
cuDNN may choose). Integer outputs wrap like int32 accumulators do when K is large enough
to overflow them. Requantization follows the onnx reference: the multiplier
(a_scale * b_scale / y_scale) in the scales' type, the product with the accumulator in
float64, + zero point, round half to even, saturate.

Unsupported element types (float8, 4-/2-bit types torch has no dtype for) are refused at
compile time naming the node and the type.
"""
from __future__ import annotations

import torch
import torch.nn.functional as F
from onnx import TensorProto

from ._util import node_error, norm_axis, run_error
from .nn_conv import _ConvAttrs, _conv_plan
from .onednn import Derived
from .registry import register
from .runtime import NP_TO_TORCH

# Saturation range of each integer quantized type.
_QRANGE = {torch.int8: (-128, 127), torch.uint8: (0, 255), torch.int16: (-32768, 32767),
           torch.uint16: (0, 65535)}
_Q_NAMES = ("int8", "uint8", "int16", "uint16")
_8BIT = ("int8", "uint8")
_SCALE_NAMES = ("float32", "float16", "bfloat16")
_FLOATS = (torch.float32, torch.float64)
_ONNX_OK = {TensorProto.INT8: torch.int8, TensorProto.UINT8: torch.uint8,
            TensorProto.INT16: torch.int16, TensorProto.UINT16: torch.uint16,
            TensorProto.INT32: torch.int32, TensorProto.FLOAT: torch.float32,
            TensorProto.FLOAT16: torch.float16, TensorProto.BFLOAT16: torch.bfloat16}
_NAME_OF = {v: k for k, v in NP_TO_TORCH.items()}


def _type_name(code: int) -> str:
    try:
        return TensorProto.DataType.Name(code).lower()
    except ValueError:
        return str(code)


def _check(ctx, i: int, allowed: tuple, role: str) -> None:
    """Refuse at compile time an input whose (statically known) type is not allowed."""
    dt = ctx.input_dtype(i)
    if dt is not None and dt not in allowed:
        raise node_error(ctx, f"{role} (input {i}) of type {dt} is not supported "
                              f"(supported: {', '.join(allowed)})")


def _attr_type(ctx, name: str, allowed: tuple) -> torch.dtype | None:
    """An element-type attribute (output_dtype, precision); None when absent or 0."""
    code = ctx.attr(name, 0) or 0
    if not code:
        return None
    t = _ONNX_OK.get(code)
    if t is None or _NAME_OF[t] not in allowed:
        raise node_error(ctx, f"{name}={code} ({_type_name(code)}) is not supported "
                              f"(supported: {', '.join(allowed)})")
    return t


def _run_check(ctx, x, allowed: tuple, role: str) -> None:
    if _NAME_OF.get(x.dtype) not in allowed:
        raise run_error(ctx, f"{role} of type {x.dtype} is not supported "
                             f"(supported: {', '.join(allowed)})")


def _to_int32(ctx, y: torch.Tensor, k: int) -> torch.Tensor:
    """An exact integer-valued float64 accumulator -> int32, wrapping like an int32
    accumulator where k products of up to 2^16 each could leave its range."""
    if k * 65536 >= 2 ** 31:
        return y.to(torch.int64).to(torch.int32)
    return y.to(torch.int32)


# ---------------------------------------------------------------------------------------
# Scale / zero-point layouts: per tensor, per axis, blocked.


class _Layout:
    """How a scale or zero point broadcasts to x (QuantizeLinear / DequantizeLinear)."""
    __slots__ = ("ctx", "axis", "block", "cache")

    def __init__(self, ctx):
        self.ctx = ctx
        self.axis = ctx.attr("axis", 1) if ctx.opset >= 13 else 1
        self.block = (ctx.attr("block_size", 0) or 0) if ctx.opset >= 21 else 0
        if self.block < 0:
            raise node_error(ctx, f"block_size={self.block} must be positive (or 0: not blocked)")
        self.cache = Derived()

    def __call__(self, v: torch.Tensor, x: torch.Tensor) -> torch.Tensor:
        if v.ndim == 0:
            return v
        if v.numel() == 1 and v.ndim == 1:
            return v.reshape(())
        try:
            ax = norm_axis(self.axis, x.ndim)
        except ValueError as err:
            raise run_error(self.ctx, f"axis: {err}") from None
        if not self.block:
            if v.ndim != 1 or v.shape[0] != x.shape[ax]:
                raise run_error(self.ctx, f"per-axis scale/zero point of shape {tuple(v.shape)} "
                                          f"does not match axis {ax} of x {tuple(x.shape)} "
                                          "(a scalar or a 1-D tensor of that length is)")
            return v.reshape((-1,) + (1,) * (x.ndim - 1 - ax))
        return self.cache.get((v,), (tuple(x.shape), ax), lambda: self._blocked(v, x, ax))

    def _blocked(self, v, x, ax):
        b, d, s = self.block, x.shape[ax], v.shape[ax] if v.ndim == x.ndim else -1
        ok = v.ndim == x.ndim and all(v.shape[i] == x.shape[i] for i in range(x.ndim) if i != ax) \
            and s * b >= d and (s - 1) * b < d
        if not ok:
            raise run_error(self.ctx, f"blocked scale/zero point of shape {tuple(v.shape)} does "
                                      f"not fit x {tuple(x.shape)} with axis={ax}, "
                                      f"block_size={b}")
        return v.repeat_interleave(b, dim=ax).narrow(ax, 0, d)


# ---------------------------------------------------------------------------------------
# DequantizeLinear


@register("DequantizeLinear", since=10)
def dequantize_linear(ctx):
    # y = (x - zero_point) * scale, in float32 (the reference's and onnxruntime's
    # precision), then cast to the output type (output_dtype, else the scale's type).
    x_types = ("int8", "uint8", "int32") + (("int16", "uint16") if ctx.opset >= 21 else ())
    _check(ctx, 0, x_types, "x")
    _check(ctx, 1, _SCALE_NAMES if ctx.opset >= 19 else ("float32",), "x_scale")
    if ctx.has_input(2) and ctx.input_dtype(2) is not None and ctx.input_dtype(0) is not None \
            and ctx.input_dtype(2) != ctx.input_dtype(0):
        raise node_error(ctx, f"x_zero_point of type {ctx.input_dtype(2)} differs from x's "
                              f"type {ctx.input_dtype(0)}")
    out = _attr_type(ctx, "output_dtype", _SCALE_NAMES) if ctx.opset >= 23 else None
    layout = _Layout(ctx)

    def fn(xs):
        x, s = xs[0], xs[1]
        zp = xs[2] if len(xs) > 2 else None
        _run_check(ctx, x, x_types, "x")
        if x.dtype == torch.int32:
            d = x if zp is None else x - layout(zp, x).to(torch.int32)
            d = d.to(torch.float32)
        else:  # 8/16-bit values and their differences are exact in float32
            d = x.to(torch.float32)
            if zp is not None:
                d = d - layout(zp, x).to(torch.float32)
        y = d * layout(s, x).to(torch.float32)
        return [y.to(out or s.dtype)]
    return fn


# ---------------------------------------------------------------------------------------
# QuantizeLinear


@register("QuantizeLinear", since=10)
def quantize_linear(ctx):
    # y = saturate(round_half_even(x / scale) + zero_point). The division runs in the
    # `precision` type (opset 23+), else in the scale's type (x and the scale share it
    # before opset 23); an int32 scale divides in float64.
    x_types = ("float32", "int32") + (("float16", "bfloat16") if ctx.opset >= 19 else ())
    s_types = x_types if ctx.opset < 23 else _SCALE_NAMES + ("int32",)
    _check(ctx, 0, x_types, "x")
    _check(ctx, 1, s_types, "y_scale")
    out_names = _Q_NAMES if ctx.opset >= 21 else _8BIT
    out = _attr_type(ctx, "output_dtype", out_names) if ctx.opset >= 21 else None
    zp_name = ctx.input_dtype(2) if ctx.has_input(2) else None
    if zp_name is not None:
        if zp_name not in out_names:
            raise node_error(ctx, f"y_zero_point (input 2) of type {zp_name} is not supported "
                                  f"(supported: {', '.join(out_names)})")
        if out is not None and NP_TO_TORCH[zp_name] != out:
            raise node_error(ctx, f"output_dtype {_NAME_OF[out]} differs from y_zero_point's "
                                  f"type {zp_name}")
    precision = _attr_type(ctx, "precision", _SCALE_NAMES + ("int32",)) \
        if ctx.opset >= 23 else None
    if precision == torch.int32:
        raise node_error(ctx, "precision=6 (int32) is not supported: the division needs a "
                              "float type")
    layout = _Layout(ctx)

    def fn(xs):
        x, s = xs[0], xs[1]
        zp = xs[2] if len(xs) > 2 else None
        _run_check(ctx, x, x_types, "x")
        ot = zp.dtype if zp is not None else (out or torch.uint8)
        rng = _QRANGE.get(ot)
        if rng is None:
            raise run_error(ctx, f"output type {ot} is not supported "
                                 f"(supported: {', '.join(out_names)})")
        cd = precision or s.dtype
        if cd == torch.int32:
            cd = torch.float64
        y = torch.round(x.to(cd) / layout(s, x).to(cd))
        if cd not in _FLOATS:   # a half type: add the zero point where it is exact
            y = y.to(torch.float32)
        if zp is not None:
            y = y + layout(zp, x).to(y.dtype)
        return [y.clamp_(*rng).to(ot)]
    return fn


# ---------------------------------------------------------------------------------------
# DynamicQuantizeLinear


@register("DynamicQuantizeLinear", since=11)
def dynamic_quantize_linear(ctx):
    # uint8 only (the schema's T2). The range is widened to hold 0; scale = (max - min) / 255,
    # zero point = round(saturate(0 - min / scale)); all in float32 like the reference and
    # onnxruntime, on the device (no host sync). An all-zero (or empty) x has no range: the
    # spec's function body divides 0 by 0 there; scale is 1 as in onnxruntime (the
    # reference's 1 / 255 cites the same onnxruntime line but divides once more). y and the
    # zero point are 0 either way.
    _check(ctx, 0, ("float32",), "x")

    def fn(xs):
        x = xs[0]
        _run_check(ctx, x, ("float32",), "x")
        if x.numel() == 0:
            mn = mx = x.new_zeros(())
        else:
            mn, mx = torch.aminmax(x)
            mn, mx = mn.clamp(max=0.0), mx.clamp(min=0.0)
        scale = torch.where(mx == mn, torch.ones_like(mx), (mx - mn) / 255.0)
        zp = torch.round((0.0 - mn / scale).clamp(0.0, 255.0))
        y = torch.round(x / scale).add_(zp).clamp_(0.0, 255.0)
        return [y.to(torch.uint8), scale, zp.to(torch.uint8)]
    return fn
