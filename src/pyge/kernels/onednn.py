"""oneDNN entry points that torch exposes for its CPU inference compiler, and a cache for
the packed (blocked-layout) weights they take.

torch.ops.mkldnn._convolution_pointwise and _linear_pointwise run a convolution or a
matrix product with the activation fused, on a weight reordered once into oneDNN's
blocked layout. F.conv2d reorders the weight on every call; torch.addmm goes to MKL, whose
single-row products read the weight more slowly than oneDNN's
(benchmarks/bench_kernels_cpu.py compares them).
"""
from __future__ import annotations

import operator

import torch

MKLDNN = torch.ops.mkldnn if torch.backends.mkldnn.is_available() else None
PACKED_CONV_OK = MKLDNN is not None and hasattr(MKLDNN, "_convolution_pointwise") \
    and hasattr(MKLDNN, "_reorder_convolution_weight")
PACKED_LINEAR_OK = MKLDNN is not None and hasattr(MKLDNN, "_linear_pointwise") \
    and hasattr(MKLDNN, "_reorder_linear_weight")


class Derived:
    """A value derived from constant input tensors (a packed weight, BatchNorm's folded
    scale and shift), remade only when other tensor objects, or the same objects changed in
    place, come in. Initializers and constants come back as the same unchanged objects run
    after run; kernels never modify their inputs, and holding references keeps the ids from
    being recycled. But one object can come back with new contents: a planned value's fixed
    arena view (executors/base.Arena copies each run's result into it) or a torch tensor the
    caller feeds again after changing it in place; torch's version counter (bumped by every
    in-place write, views included) tells those apart. One tuple, replaced atomically, so
    concurrent runs never see a mismatched entry."""
    __slots__ = ("entry",)

    def __init__(self):
        self.entry = None

    def get(self, sources: tuple, key, make):
        e = self.entry
        if e is not None and e[1] == key and len(e[0]) == len(sources) \
                and all(map(operator.is_, e[0], sources)) \
                and e[3] == tuple(map(_version, sources)):      # per kernel call: no generator
            return e[2]
        e = self.entry = (tuple(sources), key, make(), tuple(map(_version, sources)))
        return e[2]


def _version(t) -> int:
    """t's in-place write count; -1 for an inference tensor (made under
    torch.inference_mode, which keeps none): identity alone decides for those."""
    try:
        return t._version
    except (AttributeError, RuntimeError):
        return -1
