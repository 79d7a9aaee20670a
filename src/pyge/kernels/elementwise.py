"""Elementwise kernels: arithmetic, comparison, logic, unary math, Cast, CastLike, BitCast,
Where, Clip and the variadic Min/Max/Sum/Mean. Broadcasting is numpy's (torch's own).

Kernels whose results are always new memory are marked `fresh`, and those that can write
into a buffer the memory plan owns offer `into` (the protocol is executors/into.py's)."""
from __future__ import annotations

import functools

import numpy as np
import torch

from ._util import (FLOAT_TYPES, STRING, direct, is_str, node_error, np_of, onnx_dtype, run_error, scalar,
                    unary, with_np_fallback)
from .convert import torch_dtype
from .registry import register

# ---------------------------------------------------------------------------------------
# results into planned buffers (executors/into.py)

FLOAT_NAMES = frozenset({"float16", "bfloat16", "float32", "float64"})


def float_into(out_fn):
    """An `into` for an elementwise torch function taking out=: only where every input
    and the output have one float dtype (torch would otherwise promote or cast into the
    buffer) and the output's shape is the inputs' broadcast (else torch would resize it)."""
    def into(ins, out):
        if out is None or not ins or any(i is None for i in ins):
            return None
        if out[0] not in FLOAT_NAMES or any(i[0] != out[0] for i in ins):
            return None
        return out_fn if broadcast([i[1] for i in ins]) == out[1] else None
    return into


def broadcast(shapes: list[tuple]) -> tuple | None:
    """numpy's broadcast of static shapes (None: they do not broadcast); plain Python, as
    executors/into.py asks it once per node (torch.broadcast_shapes costs far more)."""
    first = shapes[0]
    if all(s == first for s in shapes):
        return first
    rank = max(len(s) for s in shapes)
    out = []
    for k in range(rank):
        dims = {s[k - rank + len(s)] for s in shapes if k - rank + len(s) >= 0} - {1}
        if len(dims) > 1:
            return None
        out.append(dims.pop() if dims else 1)
    return tuple(out)


def fresh(factory, into=None):
    """`factory` with its kernels marked fresh (a new tensor every result, no view of an
    input, no input kept), and given `into` if one is given."""
    @functools.wraps(factory)
    def make(ctx):
        kernel = factory(ctx)
        kernel.fresh = True
        if into is not None:
            kernel.into = into
        return kernel
    return make


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


def _binary(fn, out_fn=None):
    """A binary kernel of fn (fresh); `out_fn`: the torch function with out= it computes
    on float inputs (the `into` of nodes without legacy broadcasting)."""
    into = float_into(out_fn) if out_fn is not None else None

    def factory(ctx):
        fix = _legacy_broadcast(ctx)
        if fix is None:
            kernel = direct(lambda xs: [fn(xs[0], xs[1])], fn)
            if into is not None:
                kernel.into = into
        else:
            kernel = lambda xs: [fn(xs[0], fix(xs[0], xs[1]))]   # noqa: E731
        kernel.fresh = True
        return kernel
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


register("Add")(_binary(with_np_fallback(torch.add, np.add), torch.add))
register("Sub")(_binary(with_np_fallback(torch.sub, np.subtract), torch.sub))
register("Mul")(_binary(with_np_fallback(torch.mul, np.multiply), torch.mul))
# numpy's floor division equals truncation for the unsigned types it is used for.
register("Div")(_binary(with_np_fallback(_div, np.floor_divide), torch.div))
register("Pow")(_binary(_pow))


@register("Mod", since=10)
def mod(ctx):
    if ctx.attr("fmod", 0):
        # fmod: the result takes the dividend's sign (C fmod).
        f = with_np_fallback(torch.fmod, np.fmod)
    else:
        # Integer mod: the result takes the divisor's sign (Python %).
        f = with_np_fallback(torch.remainder, np.mod)
    return lambda xs: [f(xs[0], xs[1])]


@register("BitShift", since=11)
def bit_shift(ctx):
    direction = ctx.attr("direction", "")
    if direction not in ("LEFT", "RIGHT"):
        raise node_error(ctx, f"direction={direction!r} is not one of LEFT, RIGHT")
    f = with_np_fallback(torch.bitwise_left_shift, np.left_shift) if direction == "LEFT" else \
        with_np_fallback(torch.bitwise_right_shift, np.right_shift)
    return lambda xs: [f(xs[0], xs[1])]


register("BitwiseAnd", since=18)(_binary(with_np_fallback(torch.bitwise_and, np.bitwise_and)))
register("BitwiseOr", since=18)(_binary(with_np_fallback(torch.bitwise_or, np.bitwise_or)))
register("BitwiseXor", since=18)(_binary(with_np_fallback(torch.bitwise_xor, np.bitwise_xor)))
_bnot = with_np_fallback(lambda a, _: torch.bitwise_not(a), lambda a, _: np.invert(a))
register("BitwiseNot", since=18)(fresh(unary(lambda x: _bnot(x, x))))

# ---------------------------------------------------------------------------------------
# comparison and logic


def _compare(tfn, nfn):
    def fn(a, b):
        if is_str(a) or is_str(b):  # string tensors compare on the host
            return torch.from_numpy(np.asarray(nfn(np_of(a), np_of(b)), dtype=bool))
        return tfn(a, b)
    return _binary(with_np_fallback(fn, nfn))


register("Equal")(_compare(torch.eq, np.equal))
register("Less")(_compare(torch.lt, np.less))
register("Greater")(_compare(torch.gt, np.greater))
register("LessOrEqual", since=12)(_compare(torch.le, np.less_equal))
register("GreaterOrEqual", since=12)(_compare(torch.ge, np.greater_equal))
register("And")(_binary(torch.logical_and))
register("Or")(_binary(torch.logical_or))
register("Xor")(_binary(torch.logical_xor))
register("Not")(fresh(unary(torch.logical_not)))

# ---------------------------------------------------------------------------------------
# unary math

for _name, _fn in {
    "Abs": torch.abs, "Neg": torch.neg, "Exp": torch.exp, "Log": torch.log, "Sqrt": torch.sqrt,
    "Reciprocal": torch.reciprocal, "Floor": torch.floor, "Ceil": torch.ceil,
    # torch.round rounds half to even, as ONNX Round does.
    "Round": torch.round, "Sin": torch.sin, "Cos": torch.cos, "Tan": torch.tan,
    "Asin": torch.asin, "Acos": torch.acos, "Atan": torch.atan, "Sinh": torch.sinh,
    "Cosh": torch.cosh, "Asinh": torch.asinh, "Acosh": torch.acosh, "Atanh": torch.atanh,
    "Tanh": torch.tanh, "Sigmoid": torch.sigmoid, "Erf": torch.erf,
    "IsNaN": torch.isnan, "Det": torch.linalg.det,
}.items():
    # (IsNaN's bool result and Det's shape never pass float_into's test)
    register(_name)(fresh(unary(_fn), float_into(_fn)))


def _sign(x):
    y = torch.sign(x)
    # torch.sign(NaN) is 0; ONNX (numpy's sign, onnxruntime) keeps the NaN.
    return torch.where(torch.isnan(x), x, y) if x.is_floating_point() else y


register("Sign")(fresh(unary(_sign)))


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
# Cast / CastLike / BitCast


def _to_string(x) -> np.ndarray:
    a = np_of(x)
    if a.dtype == object:
        return a
    # numpy's shortest round-trip text for the element type (float32 0.1 -> "0.1"), with
    # ONNX's spelling of the special values.
    out = a.astype(str).astype(object)
    if a.dtype.kind == "f":
        special = {"nan": "NaN", "inf": "INF", "-inf": "-INF"}
        out = np.array([special.get(v, v) for v in out.reshape(-1)], dtype=object).reshape(a.shape)
    return out


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


@register("BitCast", since=26)
def bitcast(ctx):
    to = ctx.attr("to")
    if to is None:
        raise node_error(ctx, "attribute 'to' is required")
    if to == STRING:
        raise node_error(ctx, "attribute to=8 (string): strings cannot be bit-cast")
    dtype = onnx_dtype(ctx, to)
    size = torch.empty((), dtype=dtype).element_size()
    in_dt = torch_dtype(ctx.input_dtype(0))
    if in_dt is not None and in_dt.itemsize != size:
        raise node_error(ctx, f"attribute to={to} ({dtype}, {8 * size} bits) and the input "
                              f"({in_dt}, {8 * in_dt.itemsize} bits) differ in bit width")

    def fn(xs):
        x = xs[0]
        if not isinstance(x, torch.Tensor):
            raise run_error(ctx, "strings cannot be bit-cast")
        if x.element_size() != size:
            raise run_error(ctx, f"input {x.dtype} and output {dtype} differ in bit width")
        # Same width: a reinterpreting view (torch and ONNX both little endian here).
        return [x.view(dtype)]
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
    if ctx.opset >= 6:  # Clip-6's defaults are the float range, which -inf/inf do not pass
        lo = -3.4028234663852886e38 if lo is None else lo
        hi = 3.4028234663852886e38 if hi is None else hi
    return lambda xs: [torch.clamp(xs[0], lo, hi) if lo is not None or hi is not None else xs[0]]


@register("Clip", since=11)
def clip(ctx):
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
        # one input: Sum, Max and Min return it as it is (Mean divides: a new tensor)
        fn.fresh = ctx.num_inputs > 1 or finish is not None
        return fn
    return factory


register("Max")(_variadic(with_np_fallback(torch.maximum, np.maximum)))
register("Min")(_variadic(with_np_fallback(torch.minimum, np.minimum)))
register("Sum")(_variadic(with_np_fallback(torch.add, np.add)))
register("Mean")(_variadic(torch.add, lambda s, n: s / n if s.dtype in FLOAT_TYPES else s // n))
