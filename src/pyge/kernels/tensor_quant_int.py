"""Integer and quantized products: MatMulInteger, ConvInteger, QLinearMatMul, QLinearConv
(the QOperator format of ONNX Runtime's quantization tool).

Exactness: torch has no general int8 GEMM/convolution with these semantics on the CPU, and
none at all on CUDA, so the integer products run in float64: (x - zero_point) of 8-bit
values are exact there, every product is below 2^16 and every partial sum far below 2^53,
so matmul / convolution results are the exact integers whatever the summation order (the
convolution result is rounded once more, which absorbs the tiny error of an FFT algorithm
cuDNN may choose). Integer outputs wrap like int32 accumulators do when K is large enough
to overflow them. Requantization follows the onnx reference: the multiplier
(a_scale * b_scale / y_scale) in the scales' type, the product with the accumulator in
float64, + zero point, round half to even, saturate.
"""
from __future__ import annotations

import torch
import torch.nn.functional as F

from ._util import node_error, run_error
from .nn_conv import _ConvAttrs, _conv_plan
from .onednn import Derived
from .registry import register
from .tensor_quant import _8BIT, _QRANGE, _SCALE_NAMES, _check, _run_check


def _to_int32(ctx, y: torch.Tensor, k: int) -> torch.Tensor:
    """An exact integer-valued float64 accumulator -> int32, wrapping like an int32
    accumulator where k products of up to 2^16 each could leave its range."""
    if k * 65536 >= 2 ** 31:
        return y.to(torch.int64).to(torch.int32)
    return y.to(torch.int32)


# ---------------------------------------------------------------------------------------
# Integer products: the operands minus their zero points, exactly, in float64.


def _row_layout(v: torch.Tensor, x: torch.Tensor) -> torch.Tensor:
    """A's zero point / scale (MatMulInteger, QLinearMatMul): a scalar, one value per row
    of A (an M-vector), or an N-D tensor shaped like A with K -> 1 ([D1, D2, M, 1])."""
    if v.numel() == 1:
        return v.reshape(())
    if v.ndim == 1 and x.ndim >= 2:
        return v.reshape(-1, 1)
    return v


def _col_layout(v: torch.Tensor, x: torch.Tensor) -> torch.Tensor:
    """B's zero point / scale: a scalar, one value per column (an N-vector, which
    broadcasts as it is), or an N-D tensor ([D1, D2, 1, N])."""
    return v.reshape(()) if v.numel() == 1 else v


def _centered(ctx, role: str, x: torch.Tensor, zp, layout) -> torch.Tensor:
    """float64(x - zero_point), checked against the layouts the spec allows."""
    y = x.to(torch.float64)
    if zp is None:
        return y
    if zp.dtype != x.dtype:
        raise run_error(ctx, f"{role}'s zero point of type {zp.dtype} differs from {role}'s "
                             f"type {x.dtype}")
    z = layout(zp, x)
    try:
        return y - z.to(torch.float64)
    except RuntimeError:
        raise run_error(ctx, f"{role}'s zero point of shape {tuple(zp.shape)} does not fit "
                             f"{role} of shape {tuple(x.shape)}") from None


def _operand(ctx, i: int, zi: int | None, role: str, layout):
    """fn(x, zp) -> float64(x - zp); cached when both are constants (a weight)."""
    cache = Derived() if ctx.const_input(i) is not None and \
        (zi is None or not ctx.has_input(zi) or ctx.const_input(zi) is not None) else None

    def fn(x, zp):
        if cache is None:
            return _centered(ctx, role, x, zp, layout)
        src = (x,) if zp is None else (x, zp)
        return cache.get(src, None, lambda: _centered(ctx, role, x, zp, layout))
    return fn


def _int_types(ctx, pairs) -> None:
    for i, role in pairs:
        _check(ctx, i, _8BIT, role)


@register("MatMulInteger", since=10)
def matmul_integer(ctx):
    _int_types(ctx, [(0, "A"), (1, "B"), (2, "a_zero_point"), (3, "b_zero_point")])
    a_op = _operand(ctx, 0, 2, "A", _row_layout)
    b_op = _operand(ctx, 1, 3, "B", _col_layout)

    def fn(xs):
        a, b = xs[0], xs[1]
        za = xs[2] if len(xs) > 2 else None
        zb = xs[3] if len(xs) > 3 else None
        _run_check(ctx, a, _8BIT, "A")
        _run_check(ctx, b, _8BIT, "B")
        y = torch.matmul(a_op(a, za), b_op(b, zb))
        return [_to_int32(ctx, y, a.shape[-1])]
    return fn


# ---------------------------------------------------------------------------------------
# Integer convolutions


def _conv_w_layout(v: torch.Tensor, w: torch.Tensor) -> torch.Tensor:
    """w's zero point / scale: a scalar, or one value per output channel (M)."""
    if v.numel() == 1:
        return v.reshape(())
    return v.reshape((-1,) + (1,) * (w.ndim - 1))


class _IntConv:
    """float64 convolution of centered operands with ONNX's pads / auto_pad; the result is
    the exact integer accumulator (rounded: cuDNN may pick an inexact algorithm)."""

    def __init__(self, ctx, w_index: int, wz_index: int):
        self.ctx = ctx
        self.a = _ConvAttrs(ctx)
        self.plans: dict = {}
        self.w_op = _operand(ctx, w_index, wz_index, "w", _conv_w_layout)

    def __call__(self, x, xz, w, wz, bias=None) -> tuple[torch.Tensor, int]:
        ctx = self.ctx
        _run_check(ctx, x, _8BIT, "x")
        _run_check(ctx, w, _8BIT, "w")
        xc = _centered(ctx, "x", x, xz, _scalar_layout_checked(ctx))
        wc = self.w_op(w, wz)
        a = self.a
        key = tuple(x.shape[2:]) if a.auto_pad.startswith("SAME") else x.ndim
        p = self.plans.get(key)
        if p is None:
            try:
                p = self.plans[key] = _conv_plan(a, x, w)
            except ValueError as err:
                raise run_error(ctx, str(err)) from None
        op, s, sym, d, extra, sub = p
        if extra is not None:
            xc = F.pad(xc, extra)
        elif sub is not None:
            xc = xc[sub]
        y = op(xc, wc, bias, s, sym, d, a.group)
        if y.is_cuda:
            y = torch.round(y)
        return y, w[0].numel()


def _scalar_layout_checked(ctx):
    def layout(v, x):
        if v.numel() != 1:
            raise run_error(ctx, f"x's zero point must be a scalar, got shape {tuple(v.shape)}")
        return v.reshape(())
    return layout


@register("ConvInteger", since=10)
def conv_integer(ctx):
    _int_types(ctx, [(0, "x"), (1, "w"), (2, "x_zero_point"), (3, "w_zero_point")])
    conv = _IntConv(ctx, 1, 3)

    def fn(xs):
        x, w = xs[0], xs[1]
        xz = xs[2] if len(xs) > 2 else None
        wz = xs[3] if len(xs) > 3 else None
        y, k = conv(x, xz, w, wz)
        return [_to_int32(ctx, y, k)]
    return fn


# ---------------------------------------------------------------------------------------
# QLinearMatMul / QLinearConv: the integer product, requantized.


def _requantize(ctx, acc: torch.Tensor, mult: torch.Tensor, yz, out: torch.dtype):
    """saturate(round_half_even(acc * multiplier) + y_zero_point), as the reference: the
    product in float64, the multiplier as computed in the scales' type."""
    y = acc * mult.to(torch.float64)
    if yz is not None:
        if yz.numel() != 1:
            raise run_error(ctx, f"y_zero_point must be a scalar, got shape {tuple(yz.shape)}")
        y = y + yz.reshape(()).to(torch.float64)
    return torch.round(y).clamp_(*_QRANGE[out]).to(out)


def _multiplier(ctx, idx: tuple, make):
    """fn(s1, s2, s3, x, w) -> make(s1, s2, s3, x, w), the requantization multiplier, which
    depends on the operands' ranks only; cached when the scales are constants (they are,
    in models the quantization tools write)."""
    if not all(ctx.const_input(i) is not None for i in idx):
        return make
    cache = Derived()
    return lambda s1, s2, s3, x, w: cache.get((s1, s2, s3), (x.ndim, w.ndim, w.shape[0]),
                                              lambda: make(s1, s2, s3, x, w))


def _scales(ctx, idx: tuple, opset_half: bool) -> None:
    for i in idx:
        _check(ctx, i, _SCALE_NAMES if opset_half else ("float32",), "scale")
    types = {ctx.input_dtype(i) for i in idx} - {None}
    if len(types) > 1:
        raise node_error(ctx, f"the scales' types differ: {sorted(types)}")


@register("QLinearMatMul", since=10)
def qlinear_matmul(ctx):
    _int_types(ctx, [(0, "a"), (2, "a_zero_point"), (3, "b"), (5, "b_zero_point"),
                     (7, "y_zero_point")])
    _scales(ctx, (1, 4, 6), ctx.opset >= 21)
    a_op = _operand(ctx, 0, 2, "a", _row_layout)
    b_op = _operand(ctx, 3, 5, "b", _col_layout)

    def make(sa, sb, sy, a, b):
        try:
            return (_row_layout(sa, a) * _col_layout(sb, b)) / sy.reshape(())
        except RuntimeError:
            raise run_error(ctx, f"scales of shapes {tuple(sa.shape)}, {tuple(sb.shape)}, "
                                 f"{tuple(sy.shape)} do not fit a {tuple(a.shape)} and "
                                 f"b {tuple(b.shape)} (per tensor, per row of a, per column "
                                 "of b)") from None
    mult = _multiplier(ctx, (1, 4, 6), make)

    def fn(xs):
        a, sa, za, b, sb, zb, sy = xs[:7]
        yz = xs[7] if len(xs) > 7 else None
        _run_check(ctx, a, _8BIT, "a")
        _run_check(ctx, b, _8BIT, "b")
        if yz is not None:
            _run_check(ctx, yz, _8BIT, "y_zero_point")
        acc = torch.matmul(a_op(a, za), b_op(b, zb))
        m = mult(sa, sb, sy, a, b)
        return [_requantize(ctx, acc, m, yz, yz.dtype if yz is not None else a.dtype)]
    return fn


@register("QLinearConv", since=10)
def qlinear_conv(ctx):
    _int_types(ctx, [(0, "x"), (2, "x_zero_point"), (3, "w"), (5, "w_zero_point"),
                     (7, "y_zero_point")])
    _scales(ctx, (1, 4, 6), False)
    _check(ctx, 8, ("int32",), "B")
    conv = _IntConv(ctx, 3, 5)

    def make(sx, sw, sy, x, w):
        if sx.numel() != 1 or sy.numel() != 1 or sw.numel() not in (1, w.shape[0]):
            raise run_error(ctx, f"x_scale {tuple(sx.shape)} and y_scale {tuple(sy.shape)} "
                                 f"must be scalars, w_scale {tuple(sw.shape)} a scalar or "
                                 f"one per output channel ({w.shape[0]})")
        m = sx.reshape(()) * sw.reshape(-1) / sy.reshape(())
        return m.reshape(()) if sw.numel() == 1 else m.reshape((-1,) + (1,) * (x.ndim - 2))
    mult = _multiplier(ctx, (1, 4, 6), make)

    def fn(xs):
        x, sx, xz, w, sw, wz, sy = xs[:7]
        yz = xs[7] if len(xs) > 7 else None
        bias = xs[8] if len(xs) > 8 else None
        if yz is not None:
            _run_check(ctx, yz, _8BIT, "y_zero_point")
        if bias is not None:
            _run_check(ctx, bias, ("int32",), "B")
            bias = bias.to(torch.float64)
        acc, _ = conv(x, xz, w, wz, bias)
        m = mult(sx, sw, sy, x, w)
        return [_requantize(ctx, acc, m, yz, yz.dtype if yz is not None else x.dtype)]
    return fn
