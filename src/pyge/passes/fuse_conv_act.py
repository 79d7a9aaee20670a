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

from ..ir.graph import Graph, Node, Value

DOMAIN = "com.microsoft"


def _single_consumer(v: Value, graph: Graph) -> Node | None:
    if len(v.uses) != 1 or v in graph.outputs:
        return None
    n = v.uses[0][0]
    return n if n.graph is graph and not n.domain else None


def _static(shape) -> bool:
    return shape is not None and all(isinstance(d, int) for d in shape)


def _take_over_output(keep: Node, drop: Node, graph: Graph) -> None:
    """`keep` produces `drop`'s output value; `drop` leaves the graph."""
    y = drop.outputs[0]
    drop.set_inputs([])
    drop._outputs = []
    y.producer, y.index = None, -1
    graph.remove_node(drop)
    old = keep.outputs[0]
    keep._outputs = []
    old.producer = None
    keep.add_output(y)


def _plan(conv: Node, graph: Graph):
    """(add node or None, Z value or None, relu node or None), or None if nothing to fuse."""
    if conv.op_type != "Conv" or conv.domain or len(conv.outputs) != 1:
        return None
    c = conv.outputs[0]
    if c.dtype != "float32" or not _static(c.shape) or len(c.shape) != 4:
        return None
    nxt = _single_consumer(c, graph)
    add = z = None
    # Sum with two inputs is an Add (shufflenet's residuals are written as Sum).
    if nxt is not None and nxt.op_type in ("Add", "Sum") and len(nxt.inputs) == 2:
        other = nxt.inputs[1] if nxt.inputs[0] is c else nxt.inputs[0]
        if other is not None and other is not c and other.dtype == "float32" \
                and _static(other.shape) and tuple(other.shape) == tuple(c.shape):
            add, z = nxt, other
            nxt = _single_consumer(nxt.outputs[0], graph)
    relu = nxt if nxt is not None and nxt.op_type == "Relu" else None
    if add is None and relu is None:
        return None
    return add, z, relu


def fuse_conv_act(graph: Graph) -> int:
    """Fuse every eligible Conv(+Add)(+Relu) chain of the root graph; returns how many."""
    fused = []
    for conv in graph.topological_sort():
        if conv.graph is not graph:
            continue
        p = _plan(conv, graph)
        if p is None:
            continue
        add, z, relu = p
        names = [conv.name]
        ins = list(conv.inputs) + [None] * (3 - len(conv.inputs))
        if add is not None:
            ins = ins[:3] + [z]
            _take_over_output(conv, add, graph)
            names.append(add.name)
        if relu is not None:
            _take_over_output(conv, relu, graph)
            names.append(relu.name)
        conv.set_inputs(ins)
        conv.op_type, conv.domain = "FusedConv", DOMAIN
        conv.attrs["activation"] = "Relu" if relu is not None else "Identity"
        if relu is None:
            conv.attrs.pop("activation")
        conv.doc = (conv.doc + " " if conv.doc else "") + "fused " + "+".join(names[1:])
        fused.append("+".join(names))
    if fused:
        graph.opset_imports.setdefault(DOMAIN, 1)
        prev = graph.metadata.get("fused")
        graph.metadata["fused"] = ",".join(([prev] if prev else []) + fused)
        graph.invalidate()
    return len(fused)
