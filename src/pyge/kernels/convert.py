"""Run-time values between numpy (the user's side) and torch (the kernels' side).

The conventions are the registry's (see registry.py): tensors are torch tensors, string
tensors numpy ``object`` arrays, sequences Python lists, an empty optional None.
"""
from __future__ import annotations

from typing import Any

import numpy as np
import torch

NP_TO_TORCH = {
    "float32": torch.float32, "float64": torch.float64, "float16": torch.float16,
    "bfloat16": torch.bfloat16, "int8": torch.int8, "int16": torch.int16, "int32": torch.int32,
    "int64": torch.int64, "uint8": torch.uint8, "bool": torch.bool, "uint16": torch.uint16,
    "uint32": torch.uint32, "uint64": torch.uint64, "complex64": torch.complex64,
    "complex128": torch.complex128,
}
TORCH_TO_NP = {v: k for k, v in NP_TO_TORCH.items()}


def torch_dtype(dtype: str | None) -> torch.dtype | None:
    """The torch dtype for a value's dtype name (numpy's spelling); None for none or unknown."""
    return NP_TO_TORCH.get(dtype) if dtype else None


def to_torch(x: Any, device: Any = "cpu") -> Any:
    """numpy / python value -> run-time value (see registry conventions)."""
    if x is None:
        return None
    if isinstance(x, torch.Tensor):
        return x.to(device)
    if isinstance(x, list):
        return [to_torch(e, device) for e in x]
    arr = np.asarray(x)
    if arr.dtype == object or arr.dtype.kind in ("U", "S"):
        return arr.astype(object)
    if str(arr.dtype) == "bfloat16":  # ml_dtypes
        return torch.from_numpy(arr.view(np.uint16).copy()).view(torch.bfloat16).to(device)
    if not arr.flags.writeable or not arr.flags.c_contiguous:
        arr = np.array(arr, order="C", copy=True)  # not ascontiguousarray: it makes 0-d arrays 1-d
    t = torch.from_numpy(arr)
    return t.to(device) if str(device) != "cpu" else t


def to_numpy(x: Any) -> Any:
    """run-time value -> numpy (lists stay lists, None stays None)."""
    if x is None:
        return None
    if isinstance(x, list):
        return [to_numpy(e) for e in x]
    if isinstance(x, torch.Tensor):
        t = x.detach()
        if t.device.type != "cpu":
            t = t.cpu()
        if t.dtype == torch.bfloat16:
            # numpy has no bfloat16; ml_dtypes (an onnx dependency) does. Same bits, no rounding.
            import ml_dtypes
            return t.contiguous().view(torch.uint16).numpy().view(ml_dtypes.bfloat16)
        if t.dtype in (torch.uint16, torch.uint32, torch.uint64):
            return t.numpy()
        return t.resolve_conj().resolve_neg().numpy()
    return np.asarray(x)
