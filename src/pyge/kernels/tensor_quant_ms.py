"""onnxruntime's quantized contrib operators (domain com.microsoft), the ones its
quantization tool writes in the QOperator format and its graph optimizer fuses to. This
file: QLinearAdd, QLinearMul, QLinearSigmoid, QLinearLeakyRelu, QLinearConcat,
QLinearSoftmax, QuantizeLinear, DequantizeLinear, and the helpers the family shares; the
pools are in tensor_quant_ms_pool.py, QGemm and the *MatMul* ops in tensor_quant_ms_gemm.py.

There is no spec beyond the contrib-op docs; onnxruntime (MLAS, x86) is the oracle, so
each kernel repeats its arithmetic in float32, operation for operation, to give the same
integers:
- element-wise ops: the scale ratios and a fixed part in float32, round half to even;
- lookup-table ops (Sigmoid, LeakyRelu, Concat of differently quantized inputs): the
  256-entry table onnxruntime builds: dequantize (scale * (q - zero_point), float32),
  transform (MLAS's rational logistic approximation for Sigmoid), quantize
  (round_half_even(v / y_scale) + zero_point, saturated);
- pools: the integer (global) or float32 (windowed, summed in onnxruntime's order) sums;
- products (QGemm, *MatMul*): the exact integer accumulator (float64, see
  tensor_quant_int.py), then onnxruntime's float32 output processing (acc * scale [+ bias]).
"""
from __future__ import annotations

import dataclasses

import torch

from ._util import node_error, norm_axis, run_error
from .onednn import Derived
from .registry import register
from .tensor_quant import _8BIT, _QRANGE, _check, _run_check, dequantize_linear, quantize_linear

MS = "com.microsoft"
_F32 = torch.float32


def _sc(ctx, v, role: str) -> torch.Tensor:
    """A per-tensor scale or zero point -> a 0-d tensor."""
    if v.numel() != 1:
        raise run_error(ctx, f"{role} must be a scalar (per-tensor), got shape {tuple(v.shape)}")
    return v.reshape(())


def _zp(ctx, v, role: str, like: torch.Tensor) -> torch.Tensor:
    """A zero point as a float32 0-d tensor (0 when absent), checked against its tensor."""
    if v is None:
        return torch.zeros((), dtype=_F32, device=like.device)
    if v.dtype != like.dtype:
        raise run_error(ctx, f"{role} of type {v.dtype} differs from its tensor's type {like.dtype}")
    return _sc(ctx, v, role).to(_F32)


def _sat(ctx, y: torch.Tensor, zy: torch.Tensor, out: torch.dtype) -> torch.Tensor:
    """MLAS's quantize tail: clamp to [lo - zp, hi - zp], round half to even, + zp."""
    lo, hi = _QRANGE[out]
    y = torch.maximum(y, lo - zy)
    y = torch.minimum(y, hi - zy)
    return (torch.round(y) + zy).to(out)


def _types(ctx, idx_roles) -> None:
    for i, role in idx_roles:
        if ctx.has_input(i):
            _check(ctx, i, _8BIT, role)


def _get(xs, i):
    return xs[i] if len(xs) > i else None


# ---------------------------------------------------------------------------------------
# QLinearAdd / QLinearMul


def _binary_operands(ctx, xs):
    """QLinearAdd / QLinearMul inputs: (A, A_scale, A_zp, B, B_scale, B_zp, C_scale, C_zp),
    the types checked and the zero points as float32 (0 where absent)."""
    a, sa, za, b, sb, zb, sc = xs[:7]
    _run_check(ctx, a, _8BIT, "A")
    if b.dtype != a.dtype:
        raise run_error(ctx, f"B of type {b.dtype} differs from A's type {a.dtype}")
    return (a, sa, _zp(ctx, za, "A_zero_point", a), b, sb, _zp(ctx, zb, "B_zero_point", a), sc,
            _zp(ctx, _get(xs, 7), "C_zero_point", a))


@register("QLinearAdd", domain=MS)
def qlinear_add(ctx):
    # MLAS (x86): C = round(fixed + a * (sA / sC) + b * (sB / sC)), fixed = zC - (zA *
    # sA/sC + zB * sB/sC), all float32.
    _types(ctx, [(0, "A"), (2, "A_zero_point"), (3, "B"), (5, "B_zero_point"),
                 (7, "C_zero_point")])

    def fn(xs):
        a, sa, za, b, sb, zb, sc, zc = _binary_operands(ctx, xs)
        sc = _sc(ctx, sc, "C_scale").to(_F32)
        rac = _sc(ctx, sa, "A_scale").to(_F32) / sc
        rbc = _sc(ctx, sb, "B_scale").to(_F32) / sc
        fixed = zc - (rac * za + rbc * zb)
        y = (fixed + a.to(_F32) * rac) + b.to(_F32) * rbc
        lo, hi = _QRANGE[a.dtype]
        return [torch.round(y).clamp_(lo, hi).to(a.dtype)]
    return fn


@register("QLinearMul", domain=MS)
def qlinear_mul(ctx):
    # MLAS (x86): C = round((a - zA) * (b - zB) * (sA * sB / sC)) + zC, float32.
    _types(ctx, [(0, "A"), (2, "A_zero_point"), (3, "B"), (5, "B_zero_point"),
                 (7, "C_zero_point")])

    def fn(xs):
        a, sa, za, b, sb, zb, sc, zc = _binary_operands(ctx, xs)
        m = _sc(ctx, sa, "A_scale").to(_F32) * _sc(ctx, sb, "B_scale").to(_F32) \
            / _sc(ctx, sc, "C_scale").to(_F32)
        y = (a.to(_F32) - za) * (b.to(_F32) - zb) * m
        return [_sat(ctx, y, zc, a.dtype)]
    return fn


# ---------------------------------------------------------------------------------------
# Lookup-table ops


def _table_values(dtype, device) -> torch.Tensor:
    """All 256 values of an 8-bit type, in the order of their uint8 bit patterns."""
    v = torch.arange(256, dtype=torch.int32, device=device)
    return v if dtype == torch.uint8 else torch.where(v >= 128, v - 256, v)


def _build_table(ctx, x_dtype, sx, zx, sy, zy, transform) -> torch.Tensor:
    """onnxruntime's QlinearBuildLookupTable: dequantize every 8-bit value (float32
    scale * (q - zp)), transform, quantize (round_half_even(v / y_scale) + zp)."""
    q = _table_values(x_dtype, sx.device)
    d = sx.to(_F32) * (q - zx.to(torch.int32)).to(_F32)
    y = transform(d) / sy.to(_F32)
    return _sat(ctx, y, zy.to(_F32), x_dtype)


def _lookup(table: torch.Tensor, x: torch.Tensor) -> torch.Tensor:
    idx = x.to(torch.int64) if x.dtype == torch.uint8 else x.view(torch.uint8).to(torch.int64)
    return table[idx]


def _table_op(ctx, transform, xi=0, si=1, zi=2, syi=3, zyi=4):
    """fn(x, sx, zx, sy, zy) -> table lookup; the table cached while the scales and zero
    points are the same constant tensors (as in every quantized model)."""
    cache = Derived()

    def make(x, sx, zx, sy, zy):
        sx, sy = _sc(ctx, sx, "x_scale"), _sc(ctx, sy, "y_scale")
        zx = torch.zeros((), dtype=torch.int32, device=x.device) if zx is None \
            else _sc(ctx, zx, "x_zero_point").to(torch.int32)
        zy = torch.zeros((), dtype=_F32, device=x.device) if zy is None \
            else _sc(ctx, zy, "y_zero_point").to(_F32)
        return _build_table(ctx, x.dtype, sx, zx, sy, zy, transform)

    def run(x, sx, zx, sy, zy):
        _run_check(ctx, x, _8BIT, "X")
        for z, r in ((zx, "X_zero_point"), (zy, "Y_zero_point")):
            if z is not None and z.dtype != x.dtype:
                raise run_error(ctx, f"{r} of type {z.dtype} differs from X's type {x.dtype}")
        src = tuple(t for t in (sx, zx, sy, zy) if t is not None)
        return _lookup(cache.get(src, x.dtype, lambda: make(x, sx, zx, sy, zy)), x)
    return run


# MLAS's logistic (MlasComputeLogistic): a rational approximation on [-18, 18], float32.
_LOGISTIC = (4.37031012579801e-11, 1.15627324459942e-07, 6.08574864600143e-05,
             8.51377133304701e-03, 2.48287947061529e-01)
_LOGISTIC_Q = (6.10247389755681e-13, 5.76102136993427e-09, 6.29106785017040e-06,
               1.70198817374094e-03, 1.16817656904453e-01, 9.93151921023180e-01)


def _fma(a: torch.Tensor, b: torch.Tensor, c: float) -> torch.Tensor:
    """float32 fused multiply-add: the product of two float32 values is exact in float64,
    the sum is rounded there and then to float32 (a double rounding, which differs from a
    single one only when the float64 sum lies exactly halfway between two float32s)."""
    return (a.to(torch.float64) * b.to(torch.float64)
            + torch.tensor(c, dtype=_F32).item()).to(_F32)


def _mlas_logistic(x: torch.Tensor) -> torch.Tensor:
    # The x86 FMA3 kernel's order: p = x * poly(x^2), q = poly(x^2), p / q + 0.5.
    x = x.clamp(-18.0, 18.0)
    x2 = x * x
    p = _fma(x2, torch.full_like(x2, _LOGISTIC[0]), _LOGISTIC[1])
    for c in _LOGISTIC[2:]:
        p = _fma(p, x2, c)
    p = p * x
    q = _fma(x2, torch.full_like(x2, _LOGISTIC_Q[0]), _LOGISTIC_Q[1])
    for c in _LOGISTIC_Q[2:]:
        q = _fma(q, x2, c)
    return (p / q + 0.5).clamp(0.0, 1.0)


@register("QLinearSigmoid", domain=MS)
def qlinear_sigmoid(ctx):
    _types(ctx, [(0, "X"), (2, "X_zero_point"), (4, "Y_zero_point")])
    op = _table_op(ctx, _mlas_logistic)
    return lambda xs: [op(xs[0], xs[1], _get(xs, 2), xs[3], _get(xs, 4))]


@register("QLinearLeakyRelu", domain=MS)
def qlinear_leaky_relu(ctx):
    _types(ctx, [(0, "X"), (2, "X_zero_point"), (4, "Y_zero_point")])
    alpha = torch.tensor(float(ctx.attr("alpha", 0.01)), dtype=_F32).item()
    op = _table_op(ctx, lambda d: torch.where(d >= 0, d, d * alpha))
    return lambda xs: [op(xs[0], xs[1], _get(xs, 2), xs[3], _get(xs, 4))]


@register("QLinearConcat", domain=MS)
def qlinear_concat(ctx):
    # Inputs: Y_scale, Y_zero_point, then (X, X_scale, X_zero_point) per input. An input
    # quantized like the output is copied; another goes through a requantization table.
    if (ctx.num_inputs - 2) % 3 or ctx.num_inputs < 5:
        raise node_error(ctx, f"{ctx.num_inputs} inputs: expected Y_scale, Y_zero_point and "
                              "(X, X_scale, X_zero_point) triples")
    axis = ctx.attr("axis")
    if axis is None:
        raise node_error(ctx, "attribute 'axis' is required")
    n = (ctx.num_inputs - 2) // 3
    ops = [_table_op(ctx, lambda d: d) for _ in range(n)]

    def fn(xs):
        sy, zy = xs[0], xs[1]
        parts = []
        for i in range(n):
            x, sx, zx = xs[2 + 3 * i: 5 + 3 * i]
            if zx is None or zy is None:
                raise run_error(ctx, "QLinearConcat needs every zero point")
            if torch.equal(sx.reshape(-1), sy.reshape(-1)) and torch.equal(zx.reshape(-1),
                                                                            zy.reshape(-1)):
                _run_check(ctx, x, _8BIT, "X")
                parts.append(x)
            else:
                parts.append(ops[i](x, sx, zx, sy, zy))
        try:
            ax = norm_axis(axis, parts[0].ndim)
            return [torch.cat(parts, dim=ax)]
        except (ValueError, RuntimeError) as err:
            raise run_error(ctx, str(err)) from None
    return fn


# ---------------------------------------------------------------------------------------
# QuantizeLinear / DequantizeLinear (com.microsoft): the default-domain kernels with the
# opset-21 features (axis, 16-bit types; no block_size, output_dtype or precision
# attributes in this domain). 4-bit types are refused there, naming the type.


@register("QuantizeLinear", domain=MS)
def ms_quantize_linear(ctx):
    return quantize_linear(dataclasses.replace(ctx, opset=21))


@register("DequantizeLinear", domain=MS)
def ms_dequantize_linear(ctx):
    return dequantize_linear(dataclasses.replace(ctx, opset=21))


# ---------------------------------------------------------------------------------------
# QLinearSoftmax


@register("QLinearSoftmax", domain=MS)
def qlinear_softmax(ctx):
    # onnxruntime's integer algorithm: t = lrint(qscale * exp((x - max) * x_scale)) from a
    # float64 table (qscale = min(2^32-1 / D, 2^23-1)), the uint32 sum S of a row, then
    # y = (t * uint32(1 / y_scale) + S / 2) / S + y_zero_point in uint32 arithmetic
    # (wrapping as onnxruntime's does), saturated (uint8 above at 255, int8 to its range).
    # `opset` (the Softmax opset it replaced) picks the axis semantics.
    _types(ctx, [(0, "X"), (2, "x_zero_point"), (4, "y_zero_point")])
    opset = ctx.attr("opset")
    if opset is None:
        raise node_error(ctx, "attribute 'opset' is required")
    axis = ctx.attr("axis", 1 if opset < 13 else -1)
    m32 = (1 << 32) - 1

    def fn(xs):
        x, sx, _zx, sy = xs[:4]
        zy = _get(xs, 4)
        _run_check(ctx, x, _8BIT, "X")
        try:
            ax = norm_axis(axis, x.ndim)
        except ValueError as err:
            raise run_error(ctx, f"axis: {err}") from None
        v = x.movedim(ax, -1) if opset >= 13 else x.reshape(x.shape[:ax] + (-1,))
        d = v.shape[-1]
        qscale = min(float(m32) / d, float(0x7FFFFF))
        xi = v.to(torch.int64)
        diff = xi.amax(dim=-1, keepdim=True) - xi            # 0..255
        i = torch.arange(256, dtype=torch.float64, device=x.device)
        table = torch.round(qscale * torch.exp((i - 255) * float(_sc(ctx, sx, "x_scale"))))
        t = table.to(torch.int64)[255 - diff]
        s = t.sum(dim=-1, keepdim=True) & m32
        ys = int(torch.tensor(1.0, dtype=_F32) / _sc(ctx, sy, "y_scale").to(_F32).cpu())
        zyv = 0 if zy is None else int(_sc(ctx, zy, "y_zero_point"))
        q = ((((t * ys) & m32) + (s >> 1)) & m32) // s.clamp(min=1)
        if x.dtype == torch.uint8:
            y = ((q + zyv) & m32).clamp(max=255).to(torch.uint8)
        else:   # onnxruntime 1.32 saturates the signed sum
            y = (q + zyv).clamp(-128, 127).to(torch.int8)
        return [y.movedim(-1, ax) if opset >= 13 else y.reshape(x.shape)]
    return fn
