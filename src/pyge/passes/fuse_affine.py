"""Fuse Mul(x, scale) -> Add(., shift) [-> Relu] into one pyge.MulAdd node.

Model files often carry inference BatchNormalization already split into a per-channel Mul and
Add (densenet121, inception_v2); each is a full pass over the activation. One addcmul does
both. Conditions: scale and shift are initializers, x is the only non-constant input, the
fused intermediates have one use each and are not graph outputs, the dtype is float, and the
result has x's static shape (the constants only broadcast, never expand x). The fused node
keeps the Mul's name and produces the last fused value; `ge.exec.enableFusion=false` keeps
the nodes as they are. x*scale+shift may differ from the two-step result in the last bit (a
fused multiply-add rounds once).
"""
from __future__ import annotations

from ..ir.graph import Graph, Node
from .fusion import is_static, note_fused, single_consumer

DOMAIN = "pyge"
_FLOATS = ("float16", "float32", "float64", "bfloat16")


def _split(n: Node):
    """(x, const) for a two-input node with exactly one initializer input, else None."""
    if len(n.inputs) != 2 or any(v is None for v in n.inputs):
        return None
    a, b = n.inputs
    if a.const is None and b.const is not None:
        return a, b
    if b.const is None and a.const is not None:
        return b, a
    return None


def _plan(mul: Node, graph: Graph):
    if mul.op_type != "Mul" or mul.domain or len(mul.outputs) != 1:
        return None
    xs = _split(mul)
    if xs is None:
        return None
    x, scale = xs
    m = mul.outputs[0]
    if x.dtype not in _FLOATS or not is_static(x.shape) or m.shape is None or tuple(m.shape) != tuple(x.shape):
        return None
    add = single_consumer(m, graph)
    if add is None or add.op_type != "Add":
        return None
    ys = _split(add)
    if ys is None or ys[0] is not m:
        return None
    shift = ys[1]
    out = add.outputs[0]
    if out.shape is None or tuple(out.shape) != tuple(x.shape) or scale.dtype != x.dtype or shift.dtype != x.dtype:
        return None
    nxt = single_consumer(out, graph)
    relu = nxt if nxt is not None and nxt.op_type == "Relu" else None
    return x, scale, add, shift, relu


def fuse_affine(graph: Graph) -> int:
    """Fuse every eligible Mul+Add(+Relu) chain of the root graph; returns how many."""
    fused = []
    for mul in graph.topological_sort():
        if mul.graph is not graph:
            continue
        p = _plan(mul, graph)
        if p is None:
            continue
        x, scale, add, shift, relu = p
        names = [mul.name, add.name]
        graph.absorb(mul, add)
        if relu is not None:
            graph.absorb(mul, relu)
            names.append(relu.name)
        mul.set_inputs([x, scale, shift])
        mul.op_type, mul.domain = "MulAdd", DOMAIN
        mul.attrs = {"relu": 1 if relu is not None else 0}
        mul.doc = (mul.doc + " " if mul.doc else "") + "fused " + "+".join(names[1:])
        fused.append("+".join(names))
    note_fused(graph, fused, DOMAIN)
    return len(fused)
