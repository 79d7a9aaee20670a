"""Fold an inference BatchNormalization into the Conv that feeds it.

    y = BN(Conv(x, W, B))  ==  Conv(x, W * s, (B - mean) * s + beta),   s = gamma / sqrt(var + eps)

(s broadcast over W's output-channel axis 0). Conditions: W, B and the four BN parameters are
initializers, the Conv output feeds only this BN and is not a graph output, the BN is the
inference form (one output), and the dtype is a float type. The fused node keeps the Conv's
name and produces the BN's output value, so consumers and output names are unchanged; the BN's
name is recorded in the Conv's doc string and in `graph.metadata["fused"]`. Switched off with
`ge.exec.enableFusion=false`, like constant folding.
"""
from __future__ import annotations

import numpy as np

from ..ir.graph import Graph, Node
from .fusion import note_fused

_FLOATS = ("float16", "float32", "float64")


def _const(node: Node, i: int):
    ins = node.inputs
    if i < len(ins) and ins[i] is not None:
        return ins[i].const
    return None


def _fusable(bn: Node, graph: Graph) -> Node | None:
    if bn.op_type != "BatchNormalization" or len(bn.outputs) != 1 or len(bn.inputs) != 5:
        return None
    if bn.attrs.get("training_mode", 0) or bn.attrs.get("is_test", 1) == 0:
        return None
    x = bn.inputs[0]
    conv = x.producer if x is not None else None
    if conv is None or conv.op_type != "Conv" or conv.graph is not graph or conv.domain:
        return None
    if len(x.uses) != 1 or x in graph.outputs or len(conv.outputs) != 1:
        return None
    w = _const(conv, 1)
    if w is None or str(w.dtype) not in _FLOATS or (len(conv.inputs) > 2 and conv.inputs[2] is not None
                                                    and _const(conv, 2) is None):
        return None
    if any(_const(bn, i) is None for i in range(1, 5)):
        return None
    return conv


def _fold(conv: Node, bn: Node, graph: Graph) -> None:
    w = _const(conv, 1)
    dt = w.dtype
    gamma, beta, mean, var = (_const(bn, i).astype(np.float64) for i in range(1, 5))
    s = gamma / np.sqrt(var + float(bn.attrs.get("epsilon", 1e-5)))
    b = _const(conv, 2)
    b = np.zeros(w.shape[0]) if b is None else b.astype(np.float64)
    w2 = (w.astype(np.float64) * s.reshape((-1,) + (1,) * (w.ndim - 1))).astype(dt)
    b2 = ((b - mean) * s + beta).astype(dt)
    wv = graph.add_initializer(_fresh(graph, f"{conv.name}_W_bn"), w2)
    bv = graph.add_initializer(_fresh(graph, f"{conv.name}_B_bn"), b2)
    conv.set_input(1, wv)
    if len(conv.inputs) > 2:
        conv.set_input(2, bv)
    else:
        conv.append_input(bv)
    graph.absorb(conv, bn)   # consumers keep reading BN's output Value
    conv.doc = (conv.doc + " " if conv.doc else "") + f"fused BatchNormalization {bn.name}"


def _fresh(graph: Graph, base: str) -> str:
    taken = graph.values()
    name, i = base, 1
    while name in taken:
        name, i = f"{base}_{i}", i + 1
    return name


def fuse_conv_bn(graph: Graph) -> int:
    """Fuse every eligible Conv+BatchNormalization pair of the root graph; returns how many."""
    fused = []
    for bn in graph.topological_sort():
        conv = _fusable(bn, graph)
        if conv is not None:
            _fold(conv, bn, graph)
            fused.append(f"{conv.name}+{bn.name}")
    if fused:
        # Weights the fused Convs no longer read are dropped (they may be large).
        used = {id(v) for g in graph.all_graphs() for n in g.nodes for v in n.inputs if v is not None}
        used |= {id(v) for v in graph.outputs}
        for name in [k for k, v in graph.initializers.items() if id(v) not in used]:
            del graph.initializers[name]
    note_fused(graph, fused)
    return len(fused)
