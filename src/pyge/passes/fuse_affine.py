"""Fuse a chain of constant affine nodes [-> Relu] into one pyge.MulAdd node (one addcmul).

Model files often carry an inference BatchNormalization split into a per-channel Mul and Add,
or (converted from Caffe) as BatchNormalization followed by a "Scale" Mul and Add: densenet121
runs three full passes over each pre-activation tensor for what is one affine map. Every
node of the chain computes s * x + t from x alone:
    BatchNormalization   s = gamma / sqrt(var + eps),  t = beta - mean * s   (per channel)
    Mul(x, c) / Div(x, c) s = c / 1 / c,  t = 0
    Add(x, c) / Sub(x, c) s = 1,  t = c / -c
so a chain of two or more composes to one (S, T), computed in float64 and rounded once.
Conditions: the constants are initializers, x is the only non-constant input, the fused
intermediates have one use each and are not graph outputs, the dtype is float, and S and T
only broadcast against x, never expand it. Chains that follow a Conv were already folded into
its weights (fuse_conv_bn). The fused node keeps the first node's name and produces the last
fused value; `ge.exec.enableFusion=false` keeps the nodes as they are. The result may differ
from the step-by-step one in the last bits (one rounding instead of several).
"""
from __future__ import annotations

import numpy as np

from ..ir.graph import Graph, Node, Value
from .fusion import (drop_unused_initializers, fresh_name, fusion_sites, is_static, note_fused,
                     single_consumer)

DOMAIN = "pyge"
_FLOATS = ("float16", "float32", "float64")


def _const_of(v: Value | None):
    return None if v is None else v.const


def _affine(node: Node, x: Value):
    """(s, t) as arrays broadcastable against x if `node` is s * x + t, else None."""
    if node.domain or len(node.outputs) != 1:
        return None
    op, ins = node.op_type, node.inputs
    rank = len(x.shape)
    if op == "BatchNormalization":
        if len(ins) != 5 or ins[0] is not x or rank < 2 or node.attrs.get("training_mode", 0) \
                or node.attrs.get("is_test", 1) == 0 or node.attrs.get("spatial", 1) == 0:
            return None
        ps = [_const_of(v) for v in ins[1:]]
        if any(p is None or np.asarray(p).ndim != 1 for p in ps):
            return None
        gamma, beta, mean, var = (np.asarray(p, dtype=np.float64) for p in ps)
        s = gamma / np.sqrt(var + float(node.attrs.get("epsilon", 1e-5)))
        shape = (-1,) + (1,) * (rank - 2)
        return s.reshape(shape), (beta - mean * s).reshape(shape)
    if op not in ("Mul", "Add", "Sub", "Div") or len(ins) != 2 or x not in ins:
        return None
    other = ins[1] if ins[0] is x else ins[0]
    if other is x or other is None or other.const is None or other.dtype != x.dtype:
        return None
    if op in ("Sub", "Div") and ins[0] is not x:
        return None
    c = np.asarray(other.const, dtype=np.float64)
    if op == "Mul":
        return c, np.zeros(())
    if op == "Div":
        return (None if np.any(c == 0) else 1.0 / c), np.zeros(())
    return np.ones(()), (c if op == "Add" else -c)


def _plan(first: Node, graph: Graph):
    """(x, S, T, chain nodes after `first`, relu or None) for a fusable chain from `first`."""
    if first.domain or not first.inputs or first.inputs[0] is None:
        return None
    x = first.inputs[0] if first.op_type == "BatchNormalization" else \
        next((v for v in first.inputs if v is not None and v.const is None), None)
    if x is None or x.dtype not in _FLOATS or not is_static(x.shape):
        return None
    xshape = tuple(x.shape)
    aff = _affine(first, x)
    if aff is None or aff[0] is None:
        return None
    scale, shift = aff
    rest: list[Node] = []
    y = first.outputs[0]
    while True:
        nxt = single_consumer(y, graph)
        aff = _affine(nxt, y) if nxt is not None and y.shape is not None else None
        if aff is None or aff[0] is None:
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


def _trim(a: np.ndarray, rank: int) -> np.ndarray:
    """Drop leading size-1 axes (broadcasting adds them back): (1, C, 1, 1) -> (C, 1, 1)."""
    a = np.asarray(a)
    while a.ndim > 0 and a.shape[0] == 1 and a.ndim > 1:
        a = a.reshape(a.shape[1:])
    return a


def fuse_affine(graph: Graph) -> int:
    """Fuse every eligible affine chain (+Relu) of the root graph; returns how many."""
    fused = []
    for first, p in fusion_sites(graph, _plan):
        x, scale, shift, rest, relu = p
        dt = x.dtype
        rank = len(x.shape)
        names = [first.name] + [n.name for n in rest]
        for n in rest:
            graph.absorb(first, n)
        if relu is not None:
            graph.absorb(first, relu)
            names.append(relu.name)
        sv = graph.add_initializer(fresh_name(graph, f"{first.name}_scale"), _trim(scale, rank).astype(dt))
        tv = graph.add_initializer(fresh_name(graph, f"{first.name}_shift"), _trim(shift, rank).astype(dt))
        first.set_inputs([x, sv, tv])
        first.op_type, first.domain = "MulAdd", DOMAIN
        first.attrs = {"relu": 1 if relu is not None else 0}
        first.doc = (first.doc + " " if first.doc else "") + "fused " + "+".join(names[1:])
        fused.append("+".join(names))
    if fused:
        drop_unused_initializers(graph)
    note_fused(graph, fused, DOMAIN)
    return len(fused)
