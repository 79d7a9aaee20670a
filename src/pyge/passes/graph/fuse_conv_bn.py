"""Fold per-channel affine nodes (inference BatchNormalization, and Mul / Add / Sub / Div by a
per-channel constant) into the Conv that feeds them.

Each such node computes y = s * x + t per output channel (_match.affine_of),
and a chain of them composes to one (S, T). Then

    y = chain(Conv(x, W, B))  ==  Conv(x, W * S, B * S + T)      (S over W's axis 0)

Models converted from Caffe write an inference BN as BatchNormalization + "Scale" (Mul, Add),
so densenet121 carries three affine passes per convolution; all of them fold, and the Relu
after them then fuses into the convolution as well (fuse_conv_act). Conditions: W and B are
initializers, every folded value feeds only the next node of the chain and is not a graph
output, the constant varies only along the channel axis (a scalar or shape (C,1,..), (1,C,1,..))
so the result has the Conv's shape, the BN is the inference form (one output), and the dtype is
a float type. The arithmetic is done in float64 and rounded once. The fused node keeps the
Conv's name and produces the last folded node's output value, so consumers and output names
are unchanged; the folded names are recorded in the Conv's doc string and in
`graph.metadata["fused"]`. Switched off with `ge.exec.enableFusion=false`, like constant folding.
"""
from __future__ import annotations

import numpy as np

from ...ir.graph import Graph, Node
from ._match import (FLOATS, affine_of, drop_unused_initializers, fresh_name, mark_fused,
                     note_fused, single_consumer)


def _const(node: Node, i: int):
    ins = node.inputs
    if i < len(ins) and ins[i] is not None:
        return ins[i].const
    return None


def _per_channel(a: np.ndarray, rank: int, channels: int) -> np.ndarray | None:
    """`a` as a vector of `channels` entries if, broadcast against a tensor of `rank` dims
    with `channels` on axis 1, it varies along that axis only; else None."""
    if a.ndim > rank:
        return None
    shape = (1,) * (rank - a.ndim) + a.shape
    if any(d != 1 for i, d in enumerate(shape) if i != 1) or shape[1] not in (1, channels):
        return None
    return np.broadcast_to(a.reshape(-1), (channels,))


def _conv(conv: Node, graph: Graph) -> bool:
    if conv.op_type != "Conv" or conv.domain or conv.graph is not graph or len(conv.outputs) != 1:
        return False
    w = _const(conv, 1)
    if w is None or str(w.dtype) not in FLOATS or w.ndim < 3:
        return False
    return not (len(conv.inputs) > 2 and conv.inputs[2] is not None and _const(conv, 2) is None)


def _fold_chain(conv: Node, graph: Graph) -> list[str]:
    """Absorb the affine chain after `conv` into its weights; returns the folded names."""
    w = _const(conv, 1)
    channels, rank = w.shape[0], w.ndim
    scale, shift = np.ones(channels), np.zeros(channels)
    names: list[str] = []
    while True:
        y = conv.outputs[0]
        nxt = single_consumer(y, graph)
        aff = affine_of(nxt, y, rank) if nxt is not None else None
        s, t = (_per_channel(a, rank, channels) for a in aff) if aff is not None else (None, None)
        if s is None or t is None:
            break
        scale, shift = scale * s, shift * s + t
        graph.absorb(conv, nxt)   # consumers keep reading the folded node's output Value
        names.append(nxt.name)
    if not names:
        return names
    dt = w.dtype
    b = _const(conv, 2)
    b = np.zeros(channels) if b is None else b.astype(np.float64)
    w2 = (w.astype(np.float64) * scale.reshape((-1,) + (1,) * (w.ndim - 1))).astype(dt)
    b2 = (b * scale + shift).astype(dt)
    wv = graph.add_initializer(fresh_name(graph, f"{conv.name}_W_folded"), w2)
    bv = graph.add_initializer(fresh_name(graph, f"{conv.name}_B_folded"), b2)
    conv.set_input(1, wv)
    if len(conv.inputs) > 2:
        conv.set_input(2, bv)
    else:
        conv.append_input(bv)
    return names


def fuse_conv_bn(graph: Graph) -> int:
    """Fold every eligible affine chain into its Conv in the root graph; returns how many
    Convs took one."""
    fused = []
    has_conv = any(n.op_type == "Conv" for n in graph._nodes)   # else _conv refuses them all
    for conv in graph.topological_sort() if has_conv else ():
        if _conv(conv, graph):
            names = _fold_chain(conv, graph)
            if names:
                fused.append(mark_fused(conv, [conv.name, *names]))
    if fused:
        drop_unused_initializers(graph)
    note_fused(graph, fused)
    return len(fused)
