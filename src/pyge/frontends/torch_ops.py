"""ATen -> ONNX emitters for ``torch_export``: elementwise ops and reductions.

``OPS`` maps an ATen overload (``torch.ops.aten.add.Tensor``) to an emitter
``fn(cx, a) -> Value | list[Value | None]``: ``cx`` is a ``torch_export.NodeCtx`` and ``a`` the
node's arguments by schema name (``a["self"]``, ``a["other"]``, defaults filled in), with FX
nodes already replaced by their IR Values. An emitter adds its final node with ``cx.out`` (named
after the FX node), helpers with ``cx.tmp``, or returns an existing Value when the op is a no-op.
It raises ``Unsupported(reason)`` for a configuration it cannot express.

The table itself and the shared helpers are in ``aten_table``. Shape and indexing ops live in
``torch_ops_shape``, NN ops in ``torch_ops_nn``, attention in ``torch_ops_attention``; they
add to the same table. Every ATen op in the table that torch.export would decompose is
preserved instead.
"""
from __future__ import annotations

from typing import Any

import numpy as np

from ..ir.graph import Value
from .aten_table import Unsupported, aten, axis, op, promote, rank
from .onnx_proto import dtype_to_onnx

# ---------------------------------------------------------------------------------------
# binary arithmetic and comparisons


def _arith(onnx_op: str):
    def emit(cx, a):
        # The FX node's output dtype is torch's promoted dtype (true division of ints is
        # float): compute in it, so int/float and 0-d/scalar mixes behave as in eager mode.
        dt = cx.dtype
        x = cx.as_value(a["self"], dt)
        y = a["other"] if "other" in a else a["exponent"]  # pow calls it exponent
        alpha = a.get("alpha", 1)
        if alpha != 1:  # add/sub: self + alpha * other
            y = y * alpha if not isinstance(y, Value) else cx.tmp(
                "Mul", [cx.cast(y, dt), cx.scalar(alpha, dt)], dt, y.shape)
        return cx.out(onnx_op, [x, cx.as_value(y, dt)])
    return emit


for _name, _onnx in [("add", "Add"), ("sub", "Sub"), ("mul", "Mul"), ("div", "Div")]:
    op(getattr(aten, _name).Tensor, getattr(aten, _name).Scalar)(_arith(_onnx))
op(aten.pow.Tensor_Tensor, aten.pow.Tensor_Scalar)(_arith("Pow"))
op(aten.maximum.default)(lambda cx, a: cx.out("Max", [cx.cast(a["self"], cx.dtype),
                                                     cx.cast(a["other"], cx.dtype)]))
op(aten.minimum.default)(lambda cx, a: cx.out("Min", [cx.cast(a["self"], cx.dtype),
                                                     cx.cast(a["other"], cx.dtype)]))


@op(aten.pow.Scalar)
def _pow_scalar(cx, a):
    return cx.out("Pow", [cx.as_value(a["self"], cx.dtype), cx.cast(a["exponent"], cx.dtype)])


@op(aten.div.Tensor_mode, aten.div.Scalar_mode)
def _div_mode(cx, a):
    mode = a["rounding_mode"]
    if mode is None:
        return _arith("Div")(cx, a)
    # Divide in float64, then round: floor by Floor, trunc by the cast to an integer type
    # (which truncates) or Sign(q) * Floor(|q|) for a float result.
    x, y = cx.as_value(a["self"], "float64"), cx.as_value(a["other"], "float64")
    q = cx.tmp("Div", [x, y], "float64", cx.shape)
    if mode == "floor":
        q = cx.tmp("Floor", [q], "float64", cx.shape)
    elif cx.dtype.startswith("float") or cx.dtype == "bfloat16":
        fl = cx.tmp("Floor", [cx.tmp("Abs", [q], "float64", cx.shape)], "float64", cx.shape)
        q = cx.tmp("Mul", [cx.tmp("Sign", [q], "float64", cx.shape), fl], "float64", cx.shape)
    return cx.out("Cast", [q], to=dtype_to_onnx(cx.dtype))


@op(aten.remainder.Tensor, aten.remainder.Scalar)
def _remainder(cx, a):
    dt = cx.dtype
    x, y = cx.as_value(a["self"], dt), cx.as_value(a["other"], dt)
    if not dt.startswith(("float", "bfloat")):
        return cx.out("Mod", [x, y], fmod=0)  # integer Mod takes the divisor's sign, as torch
    # ONNX Mod on floats must be C fmod; torch.remainder is x - floor(x / y) * y.
    fl = cx.tmp("Floor", [cx.tmp("Div", [x, y], dt, cx.shape)], dt, cx.shape)
    return cx.out("Sub", [x, cx.tmp("Mul", [fl, y], dt, cx.shape)])


def _compare(onnx_op: str, negate: bool = False):
    def emit(cx, a):
        dt = promote(a["self"], a["other"])
        x, y = cx.as_value(a["self"], dt), cx.as_value(a["other"], dt)
        if negate:
            return cx.out("Not", [cx.tmp(onnx_op, [x, y], "bool", cx.shape)])
        return cx.out(onnx_op, [x, y])
    return emit


for _name, _onnx, _neg in [("eq", "Equal", False), ("ne", "Equal", True), ("lt", "Less", False),
                           ("le", "LessOrEqual", False), ("gt", "Greater", False),
                           ("ge", "GreaterOrEqual", False)]:
    op(getattr(aten, _name).Tensor, getattr(aten, _name).Scalar)(_compare(_onnx, _neg))


def _logical(onnx_op: str):
    def emit(cx, a):
        return cx.out(onnx_op, [cx.as_value(a["self"], "bool"), cx.as_value(a["other"], "bool")])
    return emit


for _name, _onnx in [("and", "And"), ("or", "Or"), ("xor", "Xor")]:
    op(getattr(aten, f"logical_{_name}").default)(_logical(_onnx))


def _bitwise(onnx_op: str):
    def emit(cx, a):
        if cx.dtype == "bool":
            return _logical(onnx_op)(cx, a)
        dt = cx.dtype
        x, y = cx.as_value(a["self"], dt), cx.as_value(a["other"], dt)
        return cx.out(f"Bitwise{onnx_op}", [x, y])
    return emit


for _name, _onnx in [("and", "And"), ("or", "Or"), ("xor", "Xor")]:
    _packet = getattr(aten, f"bitwise_{_name}")
    op(_packet.Tensor, _packet.Scalar)(_bitwise(_onnx))


@op(aten.logical_not.default)
def _logical_not(cx, a):
    return cx.out("Not", [cx.cast(a["self"], "bool")])


@op(aten.bitwise_not.default)
def _bitwise_not(cx, a):
    return cx.out("Not" if cx.dtype == "bool" else "BitwiseNot", [a["self"]])


# ---------------------------------------------------------------------------------------
# unary math and activations


def _unary(onnx_op: str, **attrs):
    def emit(cx, a):
        # Cast first: torch computes e.g. sqrt of an int tensor in float.
        return cx.out(onnx_op, [cx.cast(a["self"], cx.dtype)], **attrs)
    return emit


for _name, _onnx in [("relu", "Relu"), ("sigmoid", "Sigmoid"), ("tanh", "Tanh"), ("exp", "Exp"),
                     ("log", "Log"), ("sqrt", "Sqrt"), ("neg", "Neg"), ("abs", "Abs"),
                     ("reciprocal", "Reciprocal"), ("erf", "Erf"), ("sin", "Sin"), ("cos", "Cos"),
                     ("floor", "Floor"), ("ceil", "Ceil"), ("round", "Round"), ("sign", "Sign"),
                     ("hardswish", "HardSwish"), ("mish", "Mish"), ("tan", "Tan"),
                     ("asin", "Asin"), ("acos", "Acos"), ("atan", "Atan"), ("sinh", "Sinh"),
                     ("cosh", "Cosh"), ("asinh", "Asinh"), ("acosh", "Acosh"),
                     ("atanh", "Atanh")]:
    op(getattr(aten, _name).default)(_unary(_onnx))
op(aten.hardsigmoid.default)(_unary("HardSigmoid", alpha=1.0 / 6, beta=0.5))
op(aten.isnan.default)(lambda cx, a: cx.out("IsNaN", [a["self"]]))
op(aten.isinf.default)(lambda cx, a: cx.out("IsInf", [a["self"]]))


@op(aten.log1p.default, aten.expm1.default)
def _log1p_expm1(cx, a):
    # log(1 + x) / exp(x) - 1 in float64 and back: exact to float32 precision near 0 too
    # (BCE-with-logits and softplus-style code use them on tiny values).
    dt = cx.dtype
    x = cx.cast(a["self"], "float64")
    one = cx.scalar(1.0, "float64")
    if cx.fx.target is aten.log1p.default:
        y = cx.tmp("Log", [cx.tmp("Add", [x, one], "float64", cx.shape)], "float64", cx.shape)
    else:
        y = cx.tmp("Sub", [cx.tmp("Exp", [x], "float64", cx.shape), one], "float64", cx.shape)
    return cx.out("Cast", [y], to=dtype_to_onnx(dt))


@op(aten.log2.default, aten.log10.default)
def _log_base(cx, a):
    dt = cx.dtype
    ln = cx.tmp("Log", [cx.cast(a["self"], dt)], dt, cx.shape)
    base = 2.0 if cx.fx.target is aten.log2.default else 10.0
    return cx.out("Div", [ln, cx.scalar(np.log(base), dt)])


@op(aten.trunc.default)
def _trunc(cx, a):
    x = a["self"]
    if not x.dtype.startswith(("float", "bfloat")):
        return x  # integers are already whole
    fl = cx.tmp("Floor", [cx.tmp("Abs", [x], x.dtype, x.shape)], x.dtype, x.shape)
    return cx.out("Mul", [cx.tmp("Sign", [x], x.dtype, x.shape), fl])


@op(aten.fmod.Tensor, aten.fmod.Scalar)
def _fmod(cx, a):
    dt = cx.dtype  # C fmod: the result takes the dividend's sign
    return cx.out("Mod", [cx.as_value(a["self"], dt), cx.as_value(a["other"], dt)], fmod=1)


@op(aten.rsqrt.default)
def _rsqrt(cx, a):
    x = cx.cast(a["self"], cx.dtype)
    return cx.out("Reciprocal", [cx.tmp("Sqrt", [x], cx.dtype, cx.shape)])


@op(aten.gelu.default)
def _gelu(cx, a):
    return cx.out("Gelu", [a["self"]], approximate=a["approximate"])  # "none" or "tanh"


@op(aten.silu.default)
def _silu(cx, a):
    x = a["self"]
    return cx.out("Mul", [x, cx.tmp("Sigmoid", [x], x.dtype, x.shape)])


@op(aten.leaky_relu.default)
def _leaky_relu(cx, a):
    return cx.out("LeakyRelu", [a["self"]], alpha=float(a["negative_slope"]))


@op(aten.elu.default)
def _elu(cx, a):
    x, scale, in_scale, alpha = a["self"], a["scale"], a["input_scale"], float(a["alpha"])
    if scale == 1 and in_scale == 1:
        return cx.out("Elu", [x], alpha=alpha)
    # F.selu / F.celu: scale * (x > 0 ? x : alpha * (exp(input_scale * x) - 1))
    dt, shape = x.dtype, x.shape
    e = cx.tmp("Exp", [cx.tmp("Mul", [x, cx.scalar(in_scale, dt)], dt, shape)], dt, shape)
    neg = cx.tmp("Mul", [cx.tmp("Sub", [e, cx.scalar(1.0, dt)], dt, shape),
                         cx.scalar(alpha, dt)], dt, shape)
    pos = cx.tmp("Greater", [x, cx.scalar(0.0, dt)], "bool", shape)
    y = cx.tmp("Where", [pos, x, neg], dt, shape)
    return cx.out("Mul", [y, cx.scalar(scale, dt)])


@op(aten.softplus.default)
def _softplus(cx, a):
    # ONNX Softplus has no threshold: above it (beta * x > threshold) torch returns x. At the
    # default threshold 20, log(1 + e^t) - t = log(1 + e^-t) < 3e-9 is below float rounding,
    # so the threshold is dropped; a smaller one (nn.Softplus(threshold=3)) is a visible kink
    # and gets a Where.
    x, beta, thr = a["self"], a["beta"], float(a["threshold"])
    dt, shape = x.dtype, x.shape
    bx = x if beta == 1 else cx.tmp("Mul", [x, cx.scalar(beta, dt)], dt, shape)
    if thr >= 15:
        if beta == 1:
            return cx.out("Softplus", [x])
        return cx.out("Div", [cx.tmp("Softplus", [bx], dt, shape), cx.scalar(beta, dt)])
    sp = cx.tmp("Softplus", [bx], dt, shape)
    if beta != 1:
        sp = cx.tmp("Div", [sp, cx.scalar(beta, dt)], dt, shape)
    above = cx.tmp("Greater", [bx, cx.scalar(thr, dt)], "bool", shape)
    return cx.out("Where", [above, x, sp])


def _clip_bound(cx, v, dt):
    return None if v is None else cx.as_value(v, dt)


@op(aten.clamp.default, aten.clamp.Tensor)
def _clamp(cx, a):
    x, lo, hi = cx.cast(a["self"], cx.dtype), a["min"], a["max"]
    if isinstance(lo, Value) or isinstance(hi, Value):  # tensor bounds broadcast: Max/Min
        if lo is not None:
            x = cx.tmp("Max", [x, cx.as_value(lo, cx.dtype)], cx.dtype, cx.shape)
        return x if hi is None else cx.out("Min", [x, cx.as_value(hi, cx.dtype)])
    return cx.out("Clip", [x, _clip_bound(cx, lo, cx.dtype), _clip_bound(cx, hi, cx.dtype)])


@op(aten.clamp_min.default)
def _clamp_min(cx, a):
    return cx.out("Clip", [cx.cast(a["self"], cx.dtype), cx.as_value(a["min"], cx.dtype)])


@op(aten.clamp_max.default)
def _clamp_max(cx, a):
    return cx.out("Clip", [cx.cast(a["self"], cx.dtype), None, cx.as_value(a["max"], cx.dtype)])


@op(aten.hardtanh.default, aten.relu6.default)
def _hardtanh(cx, a):
    x = a["self"]
    lo, hi = a.get("min_val", 0), a.get("max_val", 6)  # relu6 has neither argument
    return cx.out("Clip", [x, cx.scalar(lo, x.dtype), cx.scalar(hi, x.dtype)])


@op(aten.where.self, aten.where.ScalarSelf, aten.where.ScalarOther, aten.where.Scalar)
def _where(cx, a):
    cond = cx.cast(a["condition"], "bool")
    x, y = cx.as_value(a["self"], cx.dtype), cx.as_value(a["other"], cx.dtype)
    return cx.out("Where", [cond, x, y])


@op(aten.masked_fill.Scalar, aten.masked_fill.Tensor)
def _masked_fill(cx, a):
    x = a["self"]
    return cx.out("Where", [cx.cast(a["mask"], "bool"), cx.as_value(a["value"], x.dtype), x])


# ---------------------------------------------------------------------------------------
# reductions


def _dims(d: Any) -> list[int] | None:
    if d is None or (isinstance(d, (list, tuple)) and not d):
        return None  # every axis
    return [int(x) for x in (d if isinstance(d, (list, tuple)) else [d])]


def _reduce(cx, onnx_op: str, x: Value, dims: list[int] | None, keepdim: bool, **attrs):
    # Opset >= 18 (13 for ReduceSum) takes the axes as an input; no axes input = all axes.
    axes = None if dims is None else cx.ints([axis(d, rank(x)) for d in dims])
    return cx.out(onnx_op, [x, axes], keepdims=int(bool(keepdim)), **attrs)


def _reduction(onnx_op: str, cast: bool):
    def emit(cx, a):
        x = cx.cast(a["self"], cx.dtype) if cast else a["self"]  # mean/sum honour `dtype=`
        return _reduce(cx, onnx_op, x, _dims(a.get("dim")), a.get("keepdim", False))
    return emit


op(aten.mean.dim, aten.mean.default)(_reduction("ReduceMean", True))
op(aten.sum.dim_IntList, aten.sum.default)(_reduction("ReduceSum", True))
op(aten.amax.default, aten.max.default)(_reduction("ReduceMax", False))
op(aten.amin.default, aten.min.default)(_reduction("ReduceMin", False))
op(aten.prod.dim_int, aten.prod.default)(_reduction("ReduceProd", True))


def _minmax_dim(onnx_reduce: str, onnx_arg: str):
    def emit(cx, a):  # max.dim / min.dim return (values, indices)
        x, d, keep = a["self"], axis(a["dim"], rank(a["self"])), int(bool(a["keepdim"]))
        vals = cx.out(onnx_reduce, [x, cx.ints([d])], n=1, keepdims=keep)
        meta_i = cx.val[1]
        idx = cx.tmp(onnx_arg, [x], "int64", tuple(int(s) for s in meta_i.shape)
                     if all(isinstance(s, int) for s in meta_i.shape) else None,
                     axis=d, keepdims=keep)
        return [vals, idx]
    return emit


op(aten.max.dim)(_minmax_dim("ReduceMax", "ArgMax"))
op(aten.min.dim)(_minmax_dim("ReduceMin", "ArgMin"))


def _arg(onnx_op: str):
    def emit(cx, a):
        x, d = a["self"], a["dim"]
        if d is None:  # over the flattened tensor
            numel = int(np.prod(x.shape)) if all(isinstance(s, int) for s in x.shape) else None
            x, d = cx.tmp("Reshape", [x, cx.ints([-1])], x.dtype, (numel,)), 0
        return cx.out(onnx_op, [x], axis=axis(d, rank(x)), keepdims=int(bool(a["keepdim"])))
    return emit


op(aten.argmax.default)(_arg("ArgMax"))
op(aten.argmin.default)(_arg("ArgMin"))


@op(aten.any.dim, aten.any.dims, aten.any.default, aten.all.dim, aten.all.dims, aten.all.default)
def _any_all(cx, a):
    # ReduceMax/ReduceMin take no bool before opset 20 in every runtime: reduce 0/1 floats.
    x = a["self"]
    f = cx.tmp("Cast", [cx.cast(x, "bool")], "float32", x.shape, to=dtype_to_onnx("float32"))
    onnx_op = "ReduceMax" if "any" in cx.fx.target.__name__ else "ReduceMin"
    dims = _dims(a.get("dim"))
    axes = None if dims is None else cx.ints([axis(d, rank(x)) for d in dims])
    r = cx.tmp(onnx_op, [f, axes], "float32", cx.shape, keepdims=int(bool(a.get("keepdim", False))))
    return cx.out("Cast", [r], to=dtype_to_onnx("bool"))


@op(aten.linalg_vector_norm.default)
def _vector_norm(cx, a):
    # x.norm(), F.normalize, cosine_similarity. ord 1 / 2 are ReduceL1 / ReduceL2, +-inf the
    # max / min of |x|; any other p is (sum |x|^p)^(1/p).
    x, p = cx.cast(a["self"], cx.dtype), float(a["ord"])
    dims = _dims(a["dim"])
    axes = None if dims is None else cx.ints([axis(d, rank(x)) for d in dims])
    keep = int(bool(a["keepdim"]))
    if p in (1.0, 2.0):
        return cx.out("ReduceL1" if p == 1 else "ReduceL2", [x, axes], keepdims=keep)
    ax = cx.tmp("Abs", [x], x.dtype, x.shape)
    if p in (float("inf"), float("-inf")):
        return cx.out("ReduceMax" if p > 0 else "ReduceMin", [ax, axes], keepdims=keep)
    if p == 0:
        raise Unsupported("ord=0")
    pw = cx.tmp("Pow", [ax, cx.scalar(p, x.dtype)], x.dtype, x.shape)
    sm = cx.tmp("ReduceSum", [pw, axes], x.dtype, cx.shape, keepdims=keep)
    return cx.out("Pow", [sm, cx.scalar(1.0 / p, x.dtype)])


@op(aten.var.correction)
def _var(cx, a):
    x, dims = a["self"], _dims(a["dim"]) or list(range(rank(a["self"])))
    axes = [axis(d, rank(x)) for d in dims]
    if any(not isinstance(x.shape[d], int) for d in axes):
        raise Unsupported("symbolic reduced dims")
    n = 1
    for d in axes:
        n *= x.shape[d]
    corr = 1 if a["correction"] is None else a["correction"]
    kept = tuple(1 if i in axes else s for i, s in enumerate(x.shape))
    mean = cx.tmp("ReduceMean", [x, cx.ints(axes)], x.dtype, kept, keepdims=1)
    dev = cx.tmp("Sub", [x, mean], x.dtype, x.shape)
    sq = cx.tmp("Mul", [dev, dev], x.dtype, x.shape)
    ss = cx.tmp("ReduceSum", [sq, cx.ints(axes)], x.dtype, cx.shape, keepdims=int(a["keepdim"]))
    return cx.out("Div", [ss, cx.scalar(max(n - corr, 0), x.dtype)])


from . import torch_ops_attention, torch_ops_dist, torch_ops_nn, torch_ops_shape  # noqa: E402,F401 - they add to OPS
