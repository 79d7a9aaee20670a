"""Fuse Conv -> [Add Z] -> [Relu] into one oneDNN call (onnxruntime's com.microsoft.FusedConv).

    Relu(Conv(x, W, B))            -> FusedConv(x, W, B)        activation="Relu"
    Conv(x, W, B) + Z              -> FusedConv(x, W, B, Z)     (Add, or Sum of two)
    Relu(Conv(x, W, B) + Z)        -> FusedConv(x, W, B, Z)     activation="Relu"

On the CPU the packed Conv kernel applies ReLU and the residual add as oneDNN post-ops, so
the intermediate tensors are never written and read back (resnet's Add+Relu after every
block). Conditions: the Conv is 2-D float32, each fused intermediate has exactly one use and
is not a graph output, and Z has the Conv output's static shape (no broadcasting). The fused
node keeps the Conv's name and produces the last fused node's output value, so consumers and
output names do not change; the fused nodes' names go to its doc string and to
`graph.metadata["fused"]`. Off with `ge.exec.enableFusion=false`.
"""
from __future__ import annotations

from ...ir.graph import Graph, Node
from ._match import fusion_sites, is_static, mark_fused, note_fused, single_consumer

DOMAIN = "com.microsoft"


def _plan(conv: Node, graph: Graph):
    """(add node or None, Z value or None, relu node or None), or None if nothing to fuse."""
    if conv.op_type != "Conv" or conv.domain or len(conv.outputs) != 1:
        return None
    c = conv.outputs[0]
    if c.dtype != "float32" or not is_static(c.shape) or len(c.shape) != 4:
        return None
    nxt = single_consumer(c, graph)
    add = z = None
    # Sum with two inputs is an Add (shufflenet's residuals are written as Sum).
    if nxt is not None and nxt.op_type in ("Add", "Sum") and len(nxt.inputs) == 2:
        other = nxt.inputs[1] if nxt.inputs[0] is c else nxt.inputs[0]
        if other is not None and other is not c and other.dtype == "float32" \
                and is_static(other.shape) and tuple(other.shape) == tuple(c.shape):
            add, z = nxt, other
            nxt = single_consumer(nxt.outputs[0], graph)
    relu = nxt if nxt is not None and nxt.op_type == "Relu" else None
    if add is None and relu is None:
        return None
    return add, z, relu


def fuse_conv_act(graph: Graph) -> int:
    """Fuse every eligible Conv(+Add)(+Relu) chain of the root graph; returns how many."""
    fused = []
    for conv, p in fusion_sites(graph, _plan, frozenset({"Conv"})):
        add, z, relu = p
        names = [conv.name]
        ins = list(conv.inputs) + [None] * (3 - len(conv.inputs))
        if add is not None:
            ins = ins[:3] + [z]
            graph.absorb(conv, add)
            names.append(add.name)
        if relu is not None:
            graph.absorb(conv, relu)
            names.append(relu.name)
        conv.set_inputs(ins)
        conv.op_type, conv.domain = "FusedConv", DOMAIN
        if relu is not None:
            conv.attrs["activation"] = "Relu"
        fused.append(mark_fused(conv, names))
    note_fused(graph, fused, DOMAIN)
    return len(fused)
