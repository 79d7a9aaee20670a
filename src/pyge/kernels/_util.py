"""Helpers shared by the kernel modules.

Conventions (see registry.py): run-time tensors are torch tensors, string tensors are numpy
object arrays; factories parse attributes once and return a lean closure.
"""
from __future__ import annotations

import threading
import weakref
from typing import Any, Callable

import numpy as np
import torch

from ..errors import ExecutionError, GraphError

# ONNX TensorProto.DataType -> torch dtype (None: a string tensor, kept in numpy).
ONNX_TO_TORCH: dict[int, Any] = {
    1: torch.float32, 2: torch.uint8, 3: torch.int8, 4: torch.uint16, 5: torch.int16,
    6: torch.int32, 7: torch.int64, 8: None, 9: torch.bool, 10: torch.float16,
    11: torch.float64, 12: torch.uint32, 13: torch.uint64, 14: torch.complex64,
    15: torch.complex128, 16: torch.bfloat16,
}
STRING = 8

FLOAT_TYPES = (torch.float16, torch.float32, torch.float64, torch.bfloat16)
HALF_TYPES = (torch.float16, torch.bfloat16)


def compute_dtype(dt):
    """The type to compute in for inputs of type `dt`: float32 for the half types (the
    result is rounded once at the end, as the onnx reference does), else `dt` itself."""
    return torch.float32 if dt in HALF_TYPES else dt


def describe(node) -> str:
    """How every kernel error names its node: ``node 'name' (OpType)``."""
    return f"node {node.name!r} ({node.op_type})"


def node_error(ctx, msg: str) -> GraphError:
    """A build-time error about a malformed node (bad attribute, unsupported mode...)."""
    return GraphError(f"{describe(ctx.node)}: {msg}")


def run_error(ctx, msg: str) -> ExecutionError:
    """A run-time error about a node's input values (wrong shape, out-of-range index...)."""
    return ExecutionError(describe(ctx.node), ValueError(msg))


def onnx_dtype(ctx, code: int):
    if code not in ONNX_TO_TORCH:
        raise node_error(ctx, f"unsupported element type {code}")
    return ONNX_TO_TORCH[code]


def const_tensor(arr: Any, device: Any) -> Any:
    """A compile-time numpy constant -> run-time value on `device` (strings stay numpy)."""
    a = np.asarray(arr)
    if a.dtype == object or a.dtype.kind in ("U", "S"):
        return a.astype(object)
    if str(a.dtype) == "bfloat16":
        t = torch.from_numpy(a.view(np.uint16).copy()).view(torch.bfloat16)
    else:
        t = torch.from_numpy(np.array(a, order="C", copy=True))  # (ascontiguousarray makes 0-d 1-d)
    return t.to(device) if str(device) != "cpu" else t


# Tensors a kernel keeps and returns run after run (a Constant node's value, a static
# ConstantOfShape, a body graph's initializers): storage address -> how many live there.
# Executors hand a graph output that lives in such a storage to the caller as a copy
# (executors/base.outputs_to_numpy): the caller may write into what it gets, and must not
# change what every later run returns or reads.
_HELD: dict[int, int] = {}
_HELD_LOCK = threading.Lock()


def held(t: Any) -> Any:
    """Mark t as a tensor a kernel returns on every run; returns t."""
    if isinstance(t, torch.Tensor) and t.numel() > 0:
        key = t.untyped_storage().data_ptr()
        with _HELD_LOCK:
            _HELD[key] = _HELD.get(key, 0) + 1
        weakref.finalize(t, _unheld, key)
    return t


def _unheld(key: int) -> None:
    with _HELD_LOCK:
        n = _HELD.get(key, 0) - 1
        if n > 0:
            _HELD[key] = n
        else:
            _HELD.pop(key, None)


def is_held(t: torch.Tensor) -> bool:
    """t's bytes belong to a tensor some kernel returns on every run (see held)."""
    return t.untyped_storage().data_ptr() in _HELD

def ints(x: Any) -> list[int]:
    """A 1-D (or 0-D) integer tensor / array / list -> list of Python ints."""
    if x is None:
        return []
    if isinstance(x, torch.Tensor):
        return [int(v) for v in x.reshape(-1).tolist()]
    return [int(v) for v in np.asarray(x).reshape(-1).tolist()]


def floats(x: Any) -> list[float]:
    if isinstance(x, torch.Tensor):
        return [float(v) for v in x.reshape(-1).tolist()]
    return [float(v) for v in np.asarray(x).reshape(-1).tolist()]


def scalar(x: Any) -> Any:
    """A one-element tensor -> Python number."""
    if isinstance(x, torch.Tensor):
        return x.reshape(-1)[0].item()
    return np.asarray(x).reshape(-1)[0].item()


def norm_axis(axis: int, rank: int) -> int:
    if not -rank <= axis < max(rank, 1):
        raise ValueError(f"axis {axis} is out of range for rank {rank}")
    return axis + rank if axis < 0 else axis


def int_input(ctx, i: int, attr: str | None = None, attr_until: int = 0
              ) -> tuple[list[int] | None, bool]:
    """Where an int list comes from: an attribute (opset <= attr_until), a constant input, or
    a run-time input. Returns (value, dynamic): value None + dynamic False = not given;
    dynamic True = read input i at run time."""
    if attr is not None and ctx.opset <= attr_until:
        v = ctx.attr(attr)
        if v is None:
            return None, False
        return ([int(v)] if isinstance(v, (int, float)) else [int(e) for e in v]), False
    if not ctx.has_input(i):
        return None, False
    c = ctx.const_input(i)
    if c is not None:
        return ints(c), False
    return None, True


def is_str(x: Any) -> bool:
    return isinstance(x, np.ndarray)


def np_of(x: Any) -> np.ndarray:
    """Any run-time tensor -> numpy (used on the rare string / host-only paths)."""
    if isinstance(x, torch.Tensor):
        return x.detach().cpu().numpy()
    return np.asarray(x)


def like(ref: Any, arr: np.ndarray) -> Any:
    """numpy result -> run-time value on the device of `ref` (strings stay numpy)."""
    if arr.dtype == object:
        return arr
    dev = ref.device if isinstance(ref, torch.Tensor) else "cpu"
    return const_tensor(arr, dev)


_HOST_ONLY = (torch.uint16, torch.uint32, torch.uint64)


def with_np_fallback(tfn: Callable, nfn: Callable) -> Callable:
    """A binary torch op that falls back to numpy for the unsigned types torch's CPU
    kernels lack (uint16/32/64 support comparisons and arithmetic only partially)."""
    def fn(a, b):
        if a.dtype in _HOST_ONLY:
            return like(a, np.asarray(nfn(np_of(a), np_of(b))))
        return tfn(a, b)
    return fn


def unary(fn: Callable) -> Callable[[Any], Callable[[list], list]]:
    """Factory for a one-input, one-output kernel with no attributes."""
    def factory(ctx):
        return direct(lambda xs: [fn(xs[0])], fn)
    return factory


def direct(kernel: Callable[[list], list], impl: Callable) -> Callable[[list], list]:
    """Mark `kernel` as computing exactly [impl(*xs)] on its node's inputs, where impl
    returns a torch tensor, so that the executors' generated code (executors/codegen.py) may
    call impl with the inputs as arguments, skipping the two lists and the check of the
    result that other kernels get; returns kernel."""
    kernel.direct = impl
    return kernel
