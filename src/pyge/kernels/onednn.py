"""oneDNN entry points that torch exposes for its CPU inference compiler, and the packed
(blocked-layout) weights they take.

torch.ops.mkldnn._convolution_pointwise and _linear_pointwise run a convolution or a
matrix product with the activation fused, on a weight reordered once into oneDNN's
blocked layout. F.conv2d reorders the weight on every call; torch.addmm goes to MKL, whose
single-row products on these machines read the weight at half to two thirds of the
memory bandwidth oneDNN reaches (benchmarks/bench_kernels_cpu.py).
"""
from __future__ import annotations

import torch

MKLDNN = torch.ops.mkldnn if torch.backends.mkldnn.is_available() else None
PACKED_CONV_OK = MKLDNN is not None and hasattr(MKLDNN, "_convolution_pointwise") \
    and hasattr(MKLDNN, "_reorder_convolution_weight")
PACKED_LINEAR_OK = MKLDNN is not None and hasattr(MKLDNN, "_linear_pointwise") \
    and hasattr(MKLDNN, "_reorder_linear_weight")


class PackedWeight:
    """The packed form of the last weight tensor seen. Reused while the same tensor object
    comes back (an initializer or a constant: the common case); kernels never modify
    their inputs, and holding a reference keeps the id from being recycled. One tuple,
    replaced atomically, so concurrent runs never see a mismatched pair."""
    __slots__ = ("entry",)

    def __init__(self):
        self.entry = None

    def get(self, w, key, make):
        e = self.entry
        if e is None or e[0] is not w or e[1] != key:
            e = self.entry = (w, key, make())
        return e[2]
