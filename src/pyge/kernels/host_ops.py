"""Which operators a device model cannot hold: their kernels run logic on the host.

One list, read by two layers: the CUDA executor (a plan holding one of these runs eagerly,
never captured into a CUDA graph: executors/cuda_memory.graph_blocker) and the dynamic-shape
partition (on cuda such a node is *unknown* and runs in the dynamic part, as GE sends
host-engine nodes to its dynamic executor: passes/partition/unknown.py). It lives with the
kernels because it is a fact about them.
"""
from __future__ import annotations

# Ops whose kernels run host-side control flow, produce data-dependent shapes, read device
# values on the host or draw random numbers: capture would fail on their device-to-host
# syncs (or replay the same draws). (Other kernels that sync, e.g. reading a computed shape,
# make the capture fail; the CUDA executor then falls back to eager mode and says why.)
HOST_OPS = frozenset({
    # control flow and data-dependent output shapes
    "If", "Loop", "Scan", "NonZero", "Unique", "Compress", "NonMaxSuppression",
    # kernels that read device values on the host (sizes, index ranges, rois, targets)
    "RoiAlign", "MaxRoiPool", "MaxUnpool", "NegativeLogLikelihoodLoss",
    "SoftmaxCrossEntropyLoss", "TfIdfVectorizer", "GroupQueryAttention", "SVMClassifier",
    # random draws: a replay would repeat the captured ones
    "RandomNormal", "RandomUniform", "RandomNormalLike", "RandomUniformLike", "Bernoulli",
    "Multinomial",
})

# Ops whose output shapes depend on input *values*, whatever shape inference says about
# them: NonZero, Unique, Compress and NonMaxSuppression keep as many rows as the data has.
DATA_DEPENDENT_OPS = frozenset({"NonZero", "Unique", "Compress", "NonMaxSuppression"})

__all__ = ["HOST_OPS", "DATA_DEPENDENT_OPS"]
