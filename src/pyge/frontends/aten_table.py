"""The ATen -> ONNX dispatch table used by ``torch_export``, and the helpers every emitter
module shares (see ``torch_ops`` for what an emitter is).

``OPS`` maps an ATen overload to its emitter; ``@op(overload, ...)`` registers one. The emitter
modules (``torch_ops``, ``torch_ops_shape``, ``torch_ops_nn``, ``torch_ops_attention``) import
this module and fill the table when they are imported; none of them imports another.
"""
from __future__ import annotations

from typing import Any, Callable

import torch

from ..ir.graph import Value

aten = torch.ops.aten
Emitter = Callable[[Any, dict], Any]
OPS: dict[Any, Emitter] = {}

# Ops that only check things at trace time; they produce nothing we need.
# Every overload counts (F.one_hot emits _assert_async.msg).
SKIP = {getattr(getattr(aten, n), o) for n in
        ("_assert_tensor_metadata", "_assert_scalar", "sym_constrain_range_for_size",
         "sym_constrain_range", "_assert_async") if hasattr(aten, n)
        for o in getattr(aten, n).overloads()}

_NP_NAMES = {
    torch.float32: "float32", torch.float64: "float64", torch.float16: "float16",
    torch.bfloat16: "bfloat16", torch.int8: "int8", torch.int16: "int16", torch.int32: "int32",
    torch.int64: "int64", torch.uint8: "uint8", torch.bool: "bool",
    torch.complex64: "complex64", torch.complex128: "complex128",
}
TORCH_DTYPES = {v: k for k, v in _NP_NAMES.items()}


class Unsupported(Exception):
    """Raised by an emitter for a configuration of a known op that it cannot express."""


def np_dtype(dt: torch.dtype) -> str | None:
    return _NP_NAMES.get(dt)


def op(*targets):
    """Decorator: register an emitter for one or more ATen overloads."""
    def deco(fn: Emitter) -> Emitter:
        for t in targets:
            OPS[t] = fn
        return fn
    return deco


def axis(d: int, rank: int) -> int:
    return d + rank if d < 0 else d


def rank(v: Value) -> int:
    if v.shape is None:
        raise Unsupported("unknown rank")
    return len(v.shape)


def promote(x: Any, y: Any) -> str:
    """torch's result dtype of a binary op on x and y (Values or Python scalars)."""
    def probe(v):
        if isinstance(v, Value):  # a 0-d tensor ranks below a dimensioned one in promotion
            return torch.zeros(() if v.shape == () else (1,), dtype=TORCH_DTYPES[v.dtype])
        return v
    return np_dtype(torch.result_type(probe(x), probe(y)))
