"""Kernels written with torch operations; one code path for CPU and CUDA tensors.

Each module holds one operator family (its name says which: ``nn_*``, ``tensor_*``,
``elementwise*``, ...) and registers its kernels when imported (registry.py). build.py
turns a node into its run-time function, convert.py moves values between numpy and torch.
Kernels import only ``errors``, ``ir`` and each other; how a control-flow body runs is the
executor layer's choice (``KernelContext.compile_subgraph``).
"""
from .registry import KernelContext, is_supported, lookup, register, registered_ops

__all__ = ["KernelContext", "register", "lookup", "is_supported", "registered_ops"]
