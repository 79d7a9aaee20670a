"""Relu(Concat(a, b, ...)) with the ReLU taken by the convolutions that make the parts.

A ReLU acts on each element alone, so Relu(Concat(a, b)) == Concat(Relu(a), Relu(b)) on any
axis. ShuffleNet's down-sampling unit ends in Relu(Concat(conv branch, AveragePool(x))):
the conv branch's ReLU becomes a oneDNN post-op of its convolution (FusedConv, as
fuse_conv_act makes), and the pooled branch needs none, as x is already the output of a ReLU
(the pool of values >= 0 is >= 0). The ReLU node, a pass over the whole result, leaves the
graph.

Conditions: the Concat's result feeds only the Relu and is not a graph output; every part is
either known to be >= 0 (the output of a Relu, Sigmoid or Abs, of a convolution with a fused
ReLU or sigmoid, or of a pool, Concat, ChannelShuffle, Reshape, Flatten, Transpose or
Identity of such values, followed back at most _DEPTH nodes), or the one output of a Conv
(or a FusedConv without an activation) that the Concat alone reads, float32 and 4-D of a
static shape, whose convolution then applies the ReLU. Otherwise nothing changes. The Concat keeps its name and
produces the Relu's output value; the Relu's name goes to its fused names, the convolutions
that took the ReLU keep theirs. `ge.exec.enableFusion=false` leaves the graph as it is.
"""
from __future__ import annotations

from ...ir.graph import Graph, Node, Value
from ._match import fusion_sites, is_static, mark_fused, note_fused

_DEPTH = 8
_NONNEGATIVE = {"Relu", "Sigmoid", "Abs"}
_KEEPS_SIGN = {"MaxPool", "AveragePool", "GlobalAveragePool", "GlobalMaxPool", "Concat", "Reshape",
               "Flatten", "Transpose", "Identity"}


def _nonnegative(v: Value | None, depth: int = _DEPTH) -> bool:
    """Whether every element of v is provably >= 0 (or NaN) from the nodes that made it."""
    p = v.producer if v is not None else None
    if p is None or depth == 0:
        return False
    if p.op_type == "FusedConv" and p.domain == "com.microsoft":
        return p.attrs.get("activation") in ("Relu", "Sigmoid")
    if p.op_type == "ChannelShuffle" and p.domain == "pyge":
        return _nonnegative(p.inputs[0], depth - 1)
    if p.domain:
        return False
    if p.op_type in _NONNEGATIVE:
        return True
    if p.op_type not in _KEEPS_SIGN or v is not p.outputs[0] or not p.inputs:
        return False
    ins = p.inputs if p.op_type == "Concat" else p.inputs[:1]
    return all(_nonnegative(x, depth - 1) for x in ins)


def _takes_relu(v: Value, concat: Node, graph: Graph) -> Node | None:
    """The convolution making v that can apply the ReLU itself, or None."""
    conv = v.producer
    if conv is None or conv.graph is not graph or len(conv.outputs) != 1 or v in graph.outputs \
            or len(v.uses) != 1 or v.uses[0][0] is not concat:
        return None
    if v.dtype != "float32" or not is_static(v.shape) or len(v.shape) != 4:
        return None
    if conv.op_type == "Conv" and not conv.domain:
        return conv
    if conv.op_type == "FusedConv" and conv.domain == "com.microsoft" \
            and not conv.attrs.get("activation"):
        return conv
    return None


def _plan(relu: Node, graph: Graph):
    if relu.op_type != "Relu" or relu.domain or len(relu.inputs) != 1 or len(relu.outputs) != 1:
        return None
    c = relu.inputs[0]
    concat = c.producer if c is not None else None
    if concat is None or concat.op_type != "Concat" or concat.domain or concat.graph is not graph \
            or len(c.uses) != 1 or c in graph.outputs:
        return None
    convs = []
    for v in concat.inputs:
        if v is None:
            return None
        if _nonnegative(v):
            continue
        conv = _takes_relu(v, concat, graph)
        if conv is None:
            return None
        convs.append(conv)
    return concat, convs


def fuse_concat_relu(graph: Graph) -> int:
    """Take every eligible Relu after a Concat into the Concat's parts; returns how many."""
    fused = []
    if not any(n.op_type == "Concat" for n in graph._nodes):
        return 0                  # _plan takes only a Relu of a Concat: none to look at
    for relu, (concat, convs) in fusion_sites(graph, _plan, frozenset({"Relu"})):
        for conv in convs:
            if conv.op_type == "Conv":
                conv.set_inputs(list(conv.inputs) + [None] * (3 - len(conv.inputs)))
                conv.op_type, conv.domain = "FusedConv", "com.microsoft"
            conv.attrs["activation"] = "Relu"
        name = relu.name
        graph.absorb(concat, relu)
        fused.append(mark_fused(concat, [concat.name, name]))
    note_fused(graph, fused, "com.microsoft" if fused else None)
    return len(fused)
