"""Constant folding: a node whose inputs are all initializers is evaluated at compile time.

The result becomes an initializer under the node's output name, so downstream nodes and
dumps still see the same value names; the folded node disappears (its name is kept in
`graph.metadata["folded"]` for reference). Nondeterministic ops and nodes with subgraphs
are never folded; nor are outputs larger than MAX_FOLD_BYTES (folding would bloat weights).
"""
from __future__ import annotations

import logging

import numpy as np

from ...ir.graph import Graph

log = logging.getLogger(__name__)

MAX_FOLD_BYTES = 64 << 20
_NEVER = {"RandomNormal", "RandomUniform", "RandomNormalLike", "RandomUniformLike", "Multinomial",
          "Bernoulli", "If", "Loop", "Scan", "SequenceMap", "Gradient"}


def fold_constants(graph: Graph) -> int:
    """Fold constant nodes of the root graph in topological order; returns how many."""
    # Deferred on purpose: the kernels load torch, and importing the compiler should not.
    from ...kernels.build import build_kernel
    from ...kernels.convert import to_numpy, to_torch
    folded = []
    for n in graph.topological_sort():
        if n.op_type in _NEVER or n.subgraphs or n.domain not in ("", "ai.onnx"):
            continue
        if any(v is not None and v.const is None for v in n.inputs):
            continue
        if any(o.kind != "tensor" for o in n.outputs):
            continue
        try:
            fn = build_kernel(n, "cpu")
            outs = fn([to_torch(v.const) if v is not None else None for v in n.inputs])
        except Exception as err:  # noqa: BLE001 - leave it to run time, where errors name the node
            log.debug("not folding %s: %s", n.name, err)
            continue
        arrays = [to_numpy(o) for o in outs]
        if any(not isinstance(a, np.ndarray) or a.dtype == object for a in arrays):
            continue
        if sum(a.nbytes for a in arrays) > MAX_FOLD_BYTES:
            continue
        # Now: later nodes of this sort read these values as constants and may fold too.
        graph.fold_to_constants(n, arrays)
        folded.append(n.name)
    if folded:
        graph.metadata["folded"] = ",".join(folded)
    return len(folded)
