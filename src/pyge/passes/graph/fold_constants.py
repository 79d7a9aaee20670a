"""Constant folding: a node whose inputs are all initializers is evaluated at compile time.

The result becomes an initializer under the node's output name, so downstream nodes and
dumps still see the same value names; the folded node disappears (its name is kept in
`graph.metadata["folded"]` for reference). Nondeterministic ops and nodes with subgraphs
are never folded.

Size bound. A folded value becomes a weight of the compiled model (and of its .pgm file),
and computing it costs compile-time memory. A node is folded only when its outputs
together take at most MAX_FOLD_BYTES (64 MiB: above the largest weights of the models pyge
runs, so real weight preprocessing folds, yet small enough that a compile's peak stays
bounded), and this is decided *before* the kernel runs, from the output types: those ONNX
inference gives for the node with its constant inputs' values (ConstantOfShape reads its
shape input), else those already inferred for the graph. A node whose output size is
unknown is not folded: a 114-byte model asking ConstantOfShape for 1.5e9 x 1 floats would
otherwise allocate 6 GB at compile time; at run time the size is the user's to feed.
Shape and Size are constants too where the dims they read are known (feeds are checked
against the declared input shapes), so the scale that exporters compute as
1/sqrt(Shape(q)[-1]) folds to a number that fusions can read.
"""
from __future__ import annotations

import logging

import numpy as np

from ...ir.graph import Graph
from ...ir.node import holds_graph
from .fold_size import output_bytes

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
        if n.op_type in _NEVER or (n.attrs and holds_graph(n.attrs)) or n.domain not in ("", "ai.onnx"):
            continue
        known = _static_shape_of(n) if n.op_type in ("Shape", "Size") else None
        if known is not None:
            graph.fold_to_constants(n, [known])
            folded.append(n.name)
            continue
        if any(v is not None and v.const is None for v in n._inputs):
            continue
        if any(o.kind != "tensor" for o in n.outputs):
            continue
        size = output_bytes(n, graph.opset_imports)
        if size is None or size > MAX_FOLD_BYTES:
            log.debug("not folding %s: output size %s", n.name, "unknown" if size is None else size)
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
        if sum(a.nbytes for a in arrays) > MAX_FOLD_BYTES:   # the estimate was off
            continue
        # Now: later nodes of this sort read these values as constants and may fold too.
        graph.fold_to_constants(n, arrays)
        folded.append(n.name)
    if folded:
        graph.metadata["folded"] = ",".join(folded)
    return len(folded)


def _static_shape_of(n) -> np.ndarray | None:
    """The value of Shape(x) (with its start / end) or Size(x) when the dims it reads are all
    known ints (Shape(x, start=-1) of a (batch, seq, 64) tensor with a symbolic batch is 64)."""
    if n.op_type not in ("Shape", "Size") or len(n.inputs) != 1 or len(n.outputs) != 1:
        return None
    x = n.inputs[0]
    if x is None or x.kind != "tensor" or x.shape is None:
        return None
    dims = list(x.shape)
    if n.op_type == "Shape":
        end = n.attrs.get("end")
        dims = dims[int(n.attrs.get("start", 0)):None if end is None else int(end)]  # ONNX clamps too
    if not all(isinstance(d, int) for d in dims):
        return None
    if n.op_type == "Size":
        return np.asarray(int(np.prod(dims, dtype=np.int64)), dtype=np.int64)
    return np.asarray(dims, dtype=np.int64)
