"""Fuse a chain of constant affine nodes [-> Relu] into one pyge.MulAdd node (one addcmul).

Model files often carry an inference BatchNormalization split into a per-channel Mul and Add,
or (converted from Caffe) as BatchNormalization followed by a "Scale" Mul and Add: densenet121
runs three full passes over each pre-activation tensor for what is one affine map. Each node
of the chain computes s * x + t from x alone (_match.affine_of: BatchNormalization, and Mul /
Add / Sub / Div by a constant), so a chain of two or more composes to one (S, T), computed in
float64 and rounded once.
Conditions: the constants are initializers, x is the only non-constant input, the fused
intermediates have one use each and are not graph outputs, the dtype is float, and S and T
only broadcast against x, never expand it. Chains that follow a Conv were already folded into
its weights (fuse_conv_bn). The fused node keeps the first node's name and produces the last
fused value; `ge.exec.enableFusion=false` keeps the nodes as they are. The result may differ
from the step-by-step one in the last bits (one rounding instead of several).
"""
from __future__ import annotations

import numpy as np

from ...ir.graph import Graph, Node
from ._match import (FLOATS, affine_of, drop_unused_initializers, fresh_name, fusion_sites,
                     is_static, mark_fused, note_fused, single_consumer)

DOMAIN = "pyge"
_AFFINE_OPS = frozenset({"BatchNormalization", "Mul", "Add", "Sub", "Div"})   # _match.affine_of's


def _plan(first: Node, graph: Graph):
    """(x, S, T, chain nodes after `first`, relu or None) for a fusable chain from `first`."""
    ins = first._inputs
    if first.domain or not ins or ins[0] is None:
        return None
    if first.op_type != "BatchNormalization" and all(v is None or v.const is None for v in ins):
        return None              # Mul/Add/Sub/Div by no constant: affine_of would refuse it
    x = first.inputs[0] if first.op_type == "BatchNormalization" else \
        next((v for v in first.inputs if v is not None and v.const is None), None)
    if x is None or x.dtype not in FLOATS or not is_static(x.shape):
        return None
    xshape = tuple(x.shape)
    aff = affine_of(first, x, len(xshape))
    if aff is None:
        return None
    scale, shift = aff
    rest: list[Node] = []
    y = first.outputs[0]
    while True:
        nxt = single_consumer(y, graph)
        aff = affine_of(nxt, y, len(xshape)) if nxt is not None else None
        if aff is None:
            break
        s, t = aff
        try:
            if np.broadcast_shapes(np.shape(scale * s), np.shape(shift * s + t), xshape) != xshape:
                break
        except ValueError:
            break
        scale, shift = scale * s, shift * s + t
        rest.append(nxt)
        y = nxt.outputs[0]
    if not rest:
        return None
    if y.shape is None or tuple(y.shape) != xshape:
        return None
    nxt = single_consumer(y, graph)
    relu = nxt if nxt is not None and nxt.op_type == "Relu" else None
    return x, scale, shift, rest, relu


def fuse_affine(graph: Graph) -> int:
    """Fuse every eligible affine chain (+Relu) of the root graph; returns how many."""
    fused = []
    for first, p in fusion_sites(graph, _plan, _AFFINE_OPS):
        x, scale, shift, rest, relu = p
        dt = x.dtype
        names = [first.name] + [n.name for n in rest]
        for n in rest:
            graph.absorb(first, n)
        if relu is not None:
            graph.absorb(first, relu)
            names.append(relu.name)
        sv = graph.add_initializer(fresh_name(graph, f"{first.name}_scale"), scale.astype(dt))
        tv = graph.add_initializer(fresh_name(graph, f"{first.name}_shift"), shift.astype(dt))
        first.set_inputs([x, sv, tv])
        first.op_type, first.domain = "MulAdd", DOMAIN
        first.attrs = {"relu": 1 if relu is not None else 0}
        fused.append(mark_fused(first, names))
    if fused:
        drop_unused_initializers(graph)
    note_fused(graph, fused, DOMAIN)
    return len(fused)
