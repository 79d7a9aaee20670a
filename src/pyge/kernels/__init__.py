"""Kernels written with torch operations; one code path for CPU and CUDA tensors."""
from .registry import KernelContext, is_supported, lookup, register, registered_ops

__all__ = ["KernelContext", "register", "lookup", "is_supported", "registered_ops"]
