"""Fold per-channel affine nodes (inference BatchNormalization, and Mul / Add / Sub / Div by a
per-channel constant) into the Conv that feeds them.

Each such node computes y = s * x + t per output channel:
    BatchNormalization   s = gamma / sqrt(var + eps),  t = beta - mean * s
    Mul(x, c) / Div(x, c) s = c / 1 / c,  t = 0
    Add(x, c) / Sub(x, c) s = 1,  t = c / -c
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

from ..ir.graph import Graph, Node, Value
from .fusion import drop_unused_initializers, fresh_name, note_fused, single_consumer

_FLOATS = ("float16", "float32", "float64")


def _const(node: Node, i: int):
    ins = node.inputs
    if i < len(ins) and ins[i] is not None:
        return ins[i].const
    return None


def _per_channel(c, rank: int, channels: int) -> np.ndarray | None:
    """c as a float64 vector of `channels` entries if, broadcast against a tensor of `rank`
    dims with `channels` on axis 1, it varies along that axis only; else None."""
    c = np.asarray(c)
    if c.dtype.kind not in "fiu" or c.ndim > rank:
        return None
    shape = (1,) * (rank - c.ndim) + c.shape
    if any(d != 1 for i, d in enumerate(shape) if i != 1) or shape[1] not in (1, channels):
        return None
    return np.broadcast_to(c.astype(np.float64).reshape(-1), (channels,)) if c.size > 1 \
        else np.full(channels, float(c.reshape(-1)[0]) if c.size else 0.0)


def _conv(conv: Node, graph: Graph) -> bool:
    if conv.op_type != "Conv" or conv.domain or conv.graph is not graph or len(conv.outputs) != 1:
        return False
    w = _const(conv, 1)
    if w is None or str(w.dtype) not in _FLOATS or w.ndim < 3:
        return False
    return not (len(conv.inputs) > 2 and conv.inputs[2] is not None and _const(conv, 2) is None)


def _affine(node: Node, x: Value, channels: int, rank: int):
    """(s, t) if `node` computes s * x + t per channel from x alone, else None."""
    if node.domain or len(node.outputs) != 1:
        return None
    op, ins = node.op_type, node.inputs
    if op == "BatchNormalization":
        if len(ins) != 5 or ins[0] is not x or node.attrs.get("training_mode", 0) \
                or node.attrs.get("is_test", 1) == 0 or node.attrs.get("spatial", 1) == 0 or any(_const(node, i) is None for i in range(1, 5)):
            return None
        gamma, beta, mean, var = (_per_channel(_const(node, i), 2, channels) for i in range(1, 5))
        if any(v is None for v in (gamma, beta, mean, var)):
            return None
        s = gamma / np.sqrt(var + float(node.attrs.get("epsilon", 1e-5)))
        return s, beta - mean * s
    if op not in ("Mul", "Add", "Sub", "Div") or len(ins) != 2 or x not in ins:
        return None
    other = ins[1] if ins[0] is x else ins[0]
    if other is x or other is None or other.const is None:
        return None
    if op in ("Sub", "Div") and ins[0] is not x:      # c - x, c / x are not affine in x this way
        return None
    c = _per_channel(other.const, rank, channels)
    if c is None or str(np.asarray(other.const).dtype) != x.dtype:
        return None
    if op == "Mul":
        return c, np.zeros(channels)
    if op == "Div":
        return (None if np.any(c == 0) else 1.0 / c), np.zeros(channels)
    return np.ones(channels), (c if op == "Add" else -c)


def _fold_chain(conv: Node, graph: Graph) -> list[str]:
    """Absorb the affine chain after `conv` into its weights; returns the folded names."""
    w = _const(conv, 1)
    channels, rank = w.shape[0], w.ndim
    scale, shift = np.ones(channels), np.zeros(channels)
    names: list[str] = []
    while True:
        y = conv.outputs[0]
        nxt = single_consumer(y, graph)
        aff = _affine(nxt, y, channels, rank) if nxt is not None else None
        if aff is None or aff[0] is None:
            break
        s, t = aff
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
    conv.doc = (conv.doc + " " if conv.doc else "") + "fused " + "+".join(names)
    return names


def fuse_conv_bn(graph: Graph) -> int:
    """Fold every eligible affine chain into its Conv in the root graph; returns how many
    Convs took one."""
    fused = []
    for conv in graph.topological_sort():
        if _conv(conv, graph):
            names = _fold_chain(conv, graph)
            if names:
                fused.append("+".join([conv.name, *names]))
    if fused:
        drop_unused_initializers(graph)
    note_fused(graph, fused)
    return len(fused)
