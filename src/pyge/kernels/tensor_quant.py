"""Linear quantization: QuantizeLinear, DequantizeLinear, DynamicQuantizeLinear (the QDQ
format of ONNX Runtime's quantization tool), and the type checks and saturation ranges the
other quantized kernels share (tensor_quant_int.py, tensor_quant_ms*.py).

Unsupported element types (float8, 4-/2-bit types torch has no dtype for) are refused at
compile time naming the node and the type.
"""
from __future__ import annotations

import torch
from onnx import TensorProto

from ._util import node_error, norm_axis, run_error
from .convert import NP_TO_TORCH, TORCH_TO_NP
from .onednn import Derived
from .registry import register

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
    if t is None or TORCH_TO_NP[t] not in allowed:
        raise node_error(ctx, f"{name}={code} ({_type_name(code)}) is not supported "
                              f"(supported: {', '.join(allowed)})")
    return t


def _run_check(ctx, x, allowed: tuple, role: str) -> None:
    if TORCH_TO_NP.get(x.dtype) not in allowed:
        raise run_error(ctx, f"{role} of type {x.dtype} is not supported "
                             f"(supported: {', '.join(allowed)})")


# ---------------------------------------------------------------------------------------
# Scale / zero-point layouts: per tensor, per axis, blocked.


class _Layout:
    """How a scale or zero point broadcasts to x (QuantizeLinear / DequantizeLinear); one
    per input (a blocked layout caches its expansion)."""
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
    s_layout, z_layout = _Layout(ctx), _Layout(ctx)

    def fn(xs):
        x, s = xs[0], xs[1]
        zp = xs[2] if len(xs) > 2 else None
        _run_check(ctx, x, x_types, "x")
        if x.dtype == torch.int32:
            d = x if zp is None else x - z_layout(zp, x).to(torch.int32)
            d = d.to(torch.float32)
        else:  # 8/16-bit values and their differences are exact in float32
            d = x.to(torch.float32)
            if zp is not None:
                d = d - z_layout(zp, x).to(torch.float32)
        y = d * s_layout(s, x).to(torch.float32)
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
            raise node_error(ctx, f"output_dtype {TORCH_TO_NP[out]} differs from y_zero_point's "
                                  f"type {zp_name}")
    precision = _attr_type(ctx, "precision", _SCALE_NAMES + ("int32",)) \
        if ctx.opset >= 23 else None
    if precision == torch.int32:
        raise node_error(ctx, "precision=6 (int32) is not supported: the division needs a "
                              "float type")
    s_layout, z_layout = _Layout(ctx), _Layout(ctx)

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
        y = torch.round(x.to(cd) / s_layout(s, x).to(cd))
        if cd not in _FLOATS:   # a half type: add the zero point where it is exact
            y = y.to(torch.float32)
        if zp is not None:
            y = y.add_(z_layout(zp, x).to(y.dtype)) if y.shape == x.shape \
                else y + z_layout(zp, x).to(y.dtype)
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
        y, scale, zp = dyn_quant_u8(x)
        return [y.to(torch.uint8), scale, zp.to(torch.uint8)]
    return fn


def dyn_quant_u8(x: torch.Tensor):
    """DynamicQuantizeLinear's uint8 quantization of x on its device (no host sync), as
    float tensors: (q, scale, zero point). Also what onnxruntime's DynamicQuantizeMatMul
    does to its A (tensor_quant_ms.py)."""
    if x.numel() == 0:
        mn = mx = x.new_zeros(())
    else:
        mn, mx = torch.aminmax(x)
        mn, mx = mn.clamp(max=0.0), mx.clamp(min=0.0)
    scale = torch.where(mx == mn, torch.ones_like(mx), (mx - mn) / 255.0)
    zp = torch.round((0.0 - mn / scale).clamp(0.0, 255.0))
    return torch.round(x / scale).add_(zp).clamp_(0.0, 255.0), scale, zp
