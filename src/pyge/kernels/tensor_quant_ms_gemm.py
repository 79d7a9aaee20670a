"""onnxruntime's quantized products (domain com.microsoft): QGemm, DynamicQuantizeMatMul,
MatMulIntegerToFloat. The integer accumulator is exact (float64, see tensor_quant_int.py);
onnxruntime's float32 output processing follows (acc * scale [+ bias], or requantized).
Shared helpers: tensor_quant_ms.py.
"""
from __future__ import annotations

import torch

from ._util import run_error
from .registry import register
from .tensor_quant import _8BIT, _check, _run_check, dyn_quant_u8
from .tensor_quant_int import _col_layout, _operand, _row_layout
from .tensor_quant_ms import _F32, MS, _get, _sat, _sc, _types


# ---------------------------------------------------------------------------------------
# Integer products with onnxruntime's float32 output processing


def _f32_scalar(v: float) -> torch.Tensor:
    return torch.tensor(v, dtype=_F32)


@register("QGemm", domain=MS)
def qgemm(ctx):
    # Y = alpha * a_scale * b_scale * (C + (A - a_zp) @ (B - b_zp)): C is an int32 bias added
    # to the exact accumulator; with y_scale the result is requantized (the multiplier
    # alpha * a_scale * b_scale / y_scale in float32, times float32(acc), round half to
    # even, + y_zero_point), else returned as float32.
    _types(ctx, [(0, "A"), (2, "a_zero_point"), (3, "B"), (5, "b_zero_point"),
                 (8, "y_zero_point")])
    if ctx.has_input(6):
        _check(ctx, 6, ("int32",), "C")
    ta, tb = bool(ctx.attr("transA", 0)), bool(ctx.attr("transB", 0))
    alpha = _f32_scalar(float(ctx.attr("alpha", 1.0)))
    a_op = _operand(ctx, 0, 2, "A", lambda v, x: _sc(ctx, v, "a_zero_point"))
    # B's zero point / scale: a scalar or one per column (N).
    b_op = _operand(ctx, 3, 5, "B", lambda v, x: v.reshape(()) if v.numel() == 1
                    else v.reshape((1, -1) if tb is False else (-1, 1)))

    def fn(xs):
        a, sa, za, b, sb, zb = xs[:6]
        c, sy, zy = _get(xs, 6), _get(xs, 7), _get(xs, 8)
        _run_check(ctx, a, _8BIT, "A")
        _run_check(ctx, b, _8BIT, "B")
        if a.ndim != 2 or b.ndim != 2:
            raise run_error(ctx, f"A {tuple(a.shape)} and B {tuple(b.shape)} must be 2-D")
        ac, bc = a_op(a, za), b_op(b, zb)
        acc = torch.matmul(ac.t() if ta else ac, bc.t() if tb else bc)
        if c is not None:
            _run_check(ctx, c, ("int32",), "C")
            acc = acc + c.to(torch.float64)
        n = acc.shape[1]
        sb = sb.to(_F32).reshape(-1)
        if sb.numel() not in (1, n):
            raise run_error(ctx, f"b_scale of shape {tuple(sb.shape)}: a scalar or {n} values")
        scale = alpha.to(sb.device) * _sc(ctx, sa, "a_scale").to(_F32) * sb
        acc = acc.to(torch.int64).to(torch.int32).to(_F32)   # the int32 accumulator
        if sy is None:
            return [acc * scale]
        if zy is not None and zy.dtype not in (torch.uint8, torch.int8):
            raise run_error(ctx, f"y_zero_point of type {zy.dtype} is not supported")
        out = zy.dtype if zy is not None else a.dtype
        zyf = torch.zeros((), dtype=_F32, device=a.device) if zy is None \
            else _sc(ctx, zy, "y_zero_point").to(_F32)
        m = scale / _sc(ctx, sy, "y_scale").to(_F32)
        return [_sat(ctx, acc * m, zyf, out)]
    return fn


def _float_out(ctx, acc, scale, bias):
    """float32(int32 accumulator) * scale [+ bias], onnxruntime's output processor."""
    y = acc.to(torch.int64).to(torch.int32).to(_F32) * scale
    if bias is not None:
        if bias.dtype != _F32:
            raise run_error(ctx, f"bias of type {bias.dtype} is not supported (float32 is)")
        y = y + bias
    return y


@register("DynamicQuantizeMatMul", domain=MS)
def dynamic_quantize_matmul(ctx):
    # A (float32) quantized to uint8 like DynamicQuantizeLinear, times (B - b_zp) exactly,
    # then * (a_scale * b_scale) + bias in float32.
    _check(ctx, 0, ("float32",), "A")
    _types(ctx, [(1, "B"), (3, "b_zero_point")])
    b_op = _operand(ctx, 1, 3, "B", _col_layout)

    def fn(xs):
        a, b, sb = xs[:3]
        zb, bias = _get(xs, 3), _get(xs, 4)
        _run_check(ctx, a, ("float32",), "A")
        _run_check(ctx, b, _8BIT, "B")
        q, sa, za = dyn_quant_u8(a)
        acc = torch.matmul((q - za).to(torch.float64), b_op(b, zb))
        return [_float_out(ctx, acc, sa * _col_layout(sb, b).to(_F32), bias)]
    return fn


@register("MatMulIntegerToFloat", domain=MS)
def matmul_integer_to_float(ctx):
    # (A - a_zp) @ (B - b_zp) exactly, then * (a_scale * b_scale) + bias in float32.
    _types(ctx, [(0, "A"), (1, "B"), (4, "a_zero_point"), (5, "b_zero_point")])
    a_op = _operand(ctx, 0, 4, "A", _row_layout)
    b_op = _operand(ctx, 1, 5, "B", _col_layout)

    def fn(xs):
        a, b, sa, sb = xs[:4]
        za, zb, bias = _get(xs, 4), _get(xs, 5), _get(xs, 6)
        _run_check(ctx, a, _8BIT, "A")
        _run_check(ctx, b, _8BIT, "B")
        acc = torch.matmul(a_op(a, za), b_op(b, zb))
        scale = _row_layout(sa, a).to(_F32) * _col_layout(sb, b).to(_F32)
        return [_float_out(ctx, acc, scale, bias)]
    return fn
