"""Elementwise kernels: arithmetic, comparison, logic, unary math, Cast, Where, Clip and
the variadic Min/Max/Sum/Mean. Broadcasting is numpy's (torch's own)."""
from __future__ import annotations

import functools
import math

import numpy as np
import torch

from ._util import FLOAT_TYPES, STRING, is_str, like, node_error, np_of, onnx_dtype, unary
from .registry import register

# ---------------------------------------------------------------------------------------
# binary arithmetic


def _legacy_broadcast(ctx):
    """Opset < 7 binary ops broadcast only with broadcast=1, aligning B at `axis` (default:
    the trailing axes, i.e. numpy's rule). Returns a B-reshaping function or None."""
    if ctx.opset >= 7 or not ctx.attr("broadcast", 0) or ctx.attr("axis") is None:
        return None
    axis = ctx.attr("axis")

    def fix(a, b):
        ax = axis + a.dim() if axis < 0 else axis
        extra = a.dim() - ax - b.dim()
        return b.reshape(tuple(b.shape) + (1,) * extra) if extra > 0 else b
    return fix


def _binary(fn):
    def factory(ctx):
        fix = _legacy_broadcast(ctx)
        if fix is None:
            return lambda xs: [fn(xs[0], xs[1])]
        return lambda xs: [fn(xs[0], fix(xs[0], xs[1]))]
    return factory


def _div(a, b):
    if a.is_floating_point() or a.is_complex():
        return torch.div(a, b)
    # ONNX integer division truncates toward zero (C semantics), unlike Python's floor.
    return torch.div(a, b, rounding_mode="trunc")


def _pow(a, b):
    out = torch.pow(a, b)
    # The result has the base's type (e.g. int base, float exponent -> int).
    return out if out.dtype == a.dtype else out.to(a.dtype)


register("Add")(_binary(torch.add))
register("Sub")(_binary(torch.sub))
register("Mul")(_binary(torch.mul))
register("Div")(_binary(_div))
register("Pow")(_binary(_pow))


@register("Mod", since=10)
def mod(ctx):
    if ctx.attr("fmod", 0):
        # fmod: the result takes the dividend's sign (C fmod).
        return lambda xs: [torch.fmod(xs[0], xs[1])]
    # Integer mod: the result takes the divisor's sign (Python %).
    return lambda xs: [torch.remainder(xs[0], xs[1])]


_NP_ONLY_SHIFT = (torch.uint16, torch.uint32, torch.uint64)


@register("BitShift", since=11)
def bit_shift(ctx):
    left = ctx.attr("direction", "") == "LEFT"
    tfn = torch.bitwise_left_shift if left else torch.bitwise_right_shift
    nfn = np.left_shift if left else np.right_shift

    def fn(xs):
        a, b = xs
        if a.dtype in _NP_ONLY_SHIFT:  # torch lacks shifts for these unsigned types
            return [like(a, nfn(np_of(a), np_of(b)))]
        return [tfn(a, b)]
    return fn


def _bitwise(tfn):
    return lambda ctx: (lambda xs: [tfn(xs[0], xs[1])])


register("BitwiseAnd", since=18)(_bitwise(torch.bitwise_and))
register("BitwiseOr", since=18)(_bitwise(torch.bitwise_or))
register("BitwiseXor", since=18)(_bitwise(torch.bitwise_xor))
register("BitwiseNot", since=18)(unary(torch.bitwise_not))

# ---------------------------------------------------------------------------------------
# comparison and logic


def _compare(tfn, nfn):
    def fn(a, b):
        if is_str(a) or is_str(b):  # string tensors compare on the host
            return torch.from_numpy(np.asarray(nfn(np_of(a), np_of(b)), dtype=bool))
        return tfn(a, b)
    return _binary(fn)


register("Equal")(_compare(torch.eq, np.equal))
register("Less")(_compare(torch.lt, np.less))
register("Greater")(_compare(torch.gt, np.greater))
register("LessOrEqual", since=12)(_compare(torch.le, np.less_equal))
register("GreaterOrEqual", since=12)(_compare(torch.ge, np.greater_equal))
register("And")(_binary(torch.logical_and))
register("Or")(_binary(torch.logical_or))
register("Xor")(_binary(torch.logical_xor))
register("Not")(unary(torch.logical_not))

# ---------------------------------------------------------------------------------------
# unary math

for _name, _fn in {
    "Abs": torch.abs, "Neg": torch.neg, "Exp": torch.exp, "Log": torch.log, "Sqrt": torch.sqrt,
    "Reciprocal": torch.reciprocal, "Floor": torch.floor, "Ceil": torch.ceil,
    # torch.round rounds half to even, as ONNX Round does.
    "Round": torch.round, "Sin": torch.sin, "Cos": torch.cos, "Tan": torch.tan,
    "Asin": torch.asin, "Acos": torch.acos, "Atan": torch.atan, "Sinh": torch.sinh,
    "Cosh": torch.cosh, "Asinh": torch.asinh, "Acosh": torch.acosh, "Atanh": torch.atanh,
    "Tanh": torch.tanh, "Sigmoid": torch.sigmoid, "Erf": torch.erf, "Sign": torch.sign,
    "IsNaN": torch.isnan, "Det": torch.linalg.det,
}.items():
    register(_name)(unary(_fn))


@register("IsInf", since=10)
def is_inf(ctx):
    pos, neg = ctx.attr("detect_positive", 1), ctx.attr("detect_negative", 1)
    if pos and neg:
        return lambda xs: [torch.isinf(xs[0])]
    if pos:
        return lambda xs: [torch.isposinf(xs[0])]
    if neg:
        return lambda xs: [torch.isneginf(xs[0])]
    return lambda xs: [torch.zeros(xs[0].shape, dtype=torch.bool, device=xs[0].device)]


# ---------------------------------------------------------------------------------------
# Cast / CastLike


def _to_string(x) -> np.ndarray:
    a = np_of(x)
    if a.dtype == object:
        return a
    if a.dtype.kind == "f":
        # Shortest round-trip repr, with ONNX's spelling of the specials.
        def fmt(v):
            if math.isnan(v):
                return "NaN"
            if math.isinf(v):
                return "INF" if v > 0 else "-INF"
            return np.format_float_positional(v, trim="-") if abs(v) < 1e16 and (v == 0 or abs(v) >= 1e-4) \
                else repr(v)
        return np.vectorize(lambda v: fmt(v.item()), otypes=[object])(a) if a.size else a.astype(object)
    return a.astype(str).astype(object)


def _from_string(a: np.ndarray, dtype) -> torch.Tensor:
    np_dtype = torch.empty(0, dtype=dtype).numpy().dtype
    flat = [str(s) for s in a.reshape(-1)]
    if np_dtype.kind == "f":
        vals = np.array([float(s) for s in flat], dtype=np.float64).astype(np_dtype)
    elif np_dtype.kind == "b":
        vals = np.array([s.strip().lower() not in ("0", "false", "") for s in flat], dtype=bool)
    else:
        vals = np.array([int(float(s)) if "." in s or "e" in s.lower() else int(s) for s in flat],
                        dtype=np_dtype)
    return torch.from_numpy(vals.reshape(a.shape))


def _cast_fn(dtype):
    """A cast to torch dtype `dtype` (None: to string)."""
    def fn(x):
        if dtype is None:
            return _to_string(x)
        if is_str(x):
            return _from_string(x, dtype)
        return x if x.dtype == dtype else x.to(dtype)
    return fn


@register("Cast")
def cast(ctx):
    to = ctx.attr("to")
    if isinstance(to, str):  # opset 1 spelled the type as a string
        to = {"FLOAT": 1, "UINT8": 2, "INT8": 3, "UINT16": 4, "INT16": 5, "INT32": 6,
              "INT64": 7, "STRING": 8, "BOOL": 9, "FLOAT16": 10, "DOUBLE": 11}.get(to.upper(), -1)
    if to is None:
        raise node_error(ctx, "attribute 'to' is required")
    fn = _cast_fn(None if to == STRING else onnx_dtype(ctx, to))
    return lambda xs: [fn(xs[0])]


@register("CastLike", since=15)
def cast_like(ctx):
    def fn(xs):
        x, ref = xs
        return [_cast_fn(None if is_str(ref) else ref.dtype)(x)]
    return fn


# ---------------------------------------------------------------------------------------
# Where, Clip, variadic


@register("Where", since=9)
def where(ctx):
    def fn(xs):
        c, a, b = xs
        if is_str(a) or is_str(b):
            return [np.where(np_of(c), np_of(a), np_of(b)).astype(object)]
        return [torch.where(c, a, b)]
    return fn


@register("Clip", until=10)
def clip_attr(ctx):
    lo, hi = ctx.attr("min"), ctx.attr("max")
    return lambda xs: [torch.clamp(xs[0], lo, hi) if lo is not None or hi is not None else xs[0]]


@register("Clip", since=11)
def clip(ctx):
    from ._util import scalar
    bounds = []
    for i in (1, 2):
        c = ctx.const_input(i)
        bounds.append(("const", c.item()) if c is not None else
                      ("dyn", i) if ctx.has_input(i) else ("none", None))
    if all(k != "dyn" for k, _ in bounds):
        lo, hi = bounds[0][1], bounds[1][1]
        if lo is None and hi is None:
            return lambda xs: [xs[0]]
        return lambda xs: [torch.clamp(xs[0], lo, hi)]

    def fn(xs):
        lo, hi = (scalar(xs[v]) if k == "dyn" else v for k, v in bounds)
        if lo is None and hi is None:
            return [xs[0]]
        return [torch.clamp(xs[0], lo, hi)]
    return fn


def _variadic(step, finish=None):
    def factory(ctx):
        def fn(xs):
            out = functools.reduce(step, xs)
            return [finish(out, len(xs)) if finish else out]
        return fn
    return factory


register("Max")(_variadic(torch.maximum))
register("Min")(_variadic(torch.minimum))
register("Sum")(_variadic(torch.add))
register("Mean")(_variadic(torch.add, lambda s, n: s / n if s.dtype in FLOAT_TYPES else s // n))
