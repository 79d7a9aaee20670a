"""Fuse the channel shuffle Reshape -> Transpose -> Reshape into one pyge.ChannelShuffle node.

ShuffleNet (and models exported from `torch.nn.ChannelShuffle`) write the shuffle as
Reshape(x, [N, g, C/g, H, W]) -> Transpose(perm=[0, 2, 1, 3, 4]) -> Reshape(., [N, C, H, W]).
Run as three kernels, the last Reshape is a strided copy that scatters single floats
(the convolution before it leaves x channels-last). torch's channel_shuffle kernel does the
same permutation with contiguous runs in either layout. `benchmarks/bench_fusion.py` (column
"no shuffle") times the whole model with and without this pass.

Conditions: x is 4-D with a static shape, the intermediates have one use each and are not
graph outputs, the first Reshape splits exactly the channel axis into (g, C/g), the
Transpose swaps exactly those two axes and the last Reshape gives x's shape back. The fused
node keeps the first Reshape's name and produces the last Reshape's output (same name);
the result is bit-identical (a permutation). `ge.exec.enableFusion=false` keeps the nodes.
"""
from __future__ import annotations

from ...ir.graph import Graph, Node
from ._match import fusion_sites, is_static, mark_fused, note_fused, single_consumer

DOMAIN = "pyge"


def _shape(v) -> tuple | None:
    return tuple(v.shape) if v is not None and is_static(v.shape) else None


def _plan(first: Node, graph: Graph):
    if first.op_type != "Reshape" or first.domain or len(first.outputs) != 1 or not first.inputs:
        return None
    x, split = first.inputs[0], first.outputs[0]
    xs, ss = _shape(x), _shape(split)
    if xs is None or ss is None or len(xs) != 4 or len(ss) != 5:
        return None
    n, c, h, w = xs
    g = ss[1]
    if g < 1 or c % g or ss != (n, g, c // g, h, w):
        return None
    tr = single_consumer(split, graph)
    if tr is None or tr.op_type != "Transpose" or len(tr.outputs) != 1 \
            or list(tr.attrs.get("perm") or []) != [0, 2, 1, 3, 4]:
        return None
    last = single_consumer(tr.outputs[0], graph)
    if last is None or last.op_type != "Reshape" or len(last.outputs) != 1 \
            or last.inputs[0] is not tr.outputs[0] or _shape(last.outputs[0]) != xs:
        return None
    return x, g, tr, last


def fuse_channel_shuffle(graph: Graph) -> int:
    """Fuse every channel shuffle of the root graph; returns how many."""
    fused = []
    for first, p in fusion_sites(graph, _plan, frozenset({"Reshape"})):
        x, g, tr, last = p
        names = [first.name, tr.name, last.name]
        graph.absorb(first, tr)
        graph.absorb(first, last)
        first.set_inputs([x])
        first.op_type, first.domain = "ChannelShuffle", DOMAIN
        first.attrs = {"groups": int(g)}
        fused.append(mark_fused(first, names))
    note_fused(graph, fused, DOMAIN)
    return len(fused)
