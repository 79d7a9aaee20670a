"""Where a channel shuffle (pyge.ChannelShuffle, fuse_shuffle.py) runs: in the weights of the
convolution before it, or below the strided depthwise convolution after it.

ShuffleNet's unit is grouped 1x1 Conv [-> ReLU] -> shuffle -> depthwise Conv -> grouped 1x1
Conv, and a shuffle P is a permutation of the channels, so it can go two ways:

- Into the convolution that produces it: P Conv(x, W, B) == Conv(x, W[src], B[src]), and
  an activation fused into the convolution commutes with P. Free for a dense convolution
  of any kernel size. A grouped one whose output rows are permuted across groups is no
  longer grouped: its weight becomes the dense block-diagonal one, rows permuted (group
  count times the products). That pays only where oneDNN's grouped kernel is slow, with few
  input channels per group (shufflenet's first unit has 6; with 34 or more the dense call
  is the slower one: benchmarks/bench_conv_merge.py, docs/performance.md), so it is taken
  for 1x1 convolutions with fewer than DENSE_BELOW input channels per group. The
  convolution's only reader must be the shuffle and its weight and bias constant; the
  shuffle leaves the graph, its name goes to the convolution's fused names. The values are
  those of the grouped form up to the order of the sums (the added products are exact
  zeros).
- Below a depthwise convolution, which treats every channel alone, so that
      DwConv(P x, W, B) == P DwConv(x, W[inv P], B[inv P])
  and the shuffle permutes the convolution's output, a quarter of the pixels at stride 2.
  Each channel meets the same weights in the same order, so the values are the same bits.
  Conditions: the shuffle's output feeds only that convolution and is not a graph output;
  the convolution is a 2-D Conv (or a FusedConv with an activation and no added input)
  whose group count equals its input channels and its weight's first axis (multiplier 1),
  with constant weight and bias; its output has fewer pixels than its input (at stride 1
  the move buys nothing). Both nodes keep their names; the convolution's output value keeps
  its name and consumers, now produced by the shuffle.

`ge.exec.enableFusion=false` leaves the graph as it is.
"""
from __future__ import annotations

import math

import numpy as np

from ...ir.graph import Graph, Node
from ._match import (drop_unused_initializers, fresh_name, fusion_sites, is_static, mark_fused,
                     note_fused)

# A grouped 1x1 convolution with fewer input channels per group than this takes the shuffle
# into a dense weight (module doc).
DENSE_BELOW = 16
_SHUFFLE = frozenset({"ChannelShuffle"})


def _constant_conv(conv: Node) -> np.ndarray | None:
    """The 2-D weight of `conv` if it is a Conv, or a FusedConv with no added input, with
    constant weight and bias and one output; else None."""
    if len(conv.outputs) != 1 or len(conv.inputs) < 2 or conv.inputs[1] is None:
        return None
    if not ((conv.op_type == "Conv" and not conv.domain) or (
            conv.op_type == "FusedConv" and conv.domain == "com.microsoft" and len(conv.inputs) <= 3)):
        return None
    w = conv.inputs[1].const
    b = conv.inputs[2] if len(conv.inputs) > 2 else None
    if w is None or w.ndim != 4 or (b is not None and b.const is None):
        return None
    return w


def _shuffle(node: Node) -> bool:
    return node.op_type == "ChannelShuffle" and node.domain == "pyge" and len(node.inputs) == 1


def _source_channels(channels: int, groups: int) -> np.ndarray:
    """src[k]: the input channel that ChannelShuffle(groups) puts at output channel k."""
    return np.arange(channels).reshape(groups, channels // groups).T.reshape(-1)


def _set_const(graph: Graph, node: Node, i: int, what: str, array: np.ndarray) -> None:
    node.set_input(i, graph.add_initializer(fresh_name(graph, f"{node.name}_{what}"), array))


def _absorb_plan(shuffle: Node, graph: Graph):
    """The convolution whose weights can take `shuffle`, or None (module doc)."""
    if not _shuffle(shuffle):
        return None
    x = shuffle.inputs[0]
    conv = x.producer
    if conv is None or conv.graph is not graph or len(x.uses) != 1 or x in graph.outputs \
            or not is_static(x.shape):
        return None
    w = _constant_conv(conv)
    groups = int(conv.attrs.get("group", 1))
    if w is None or w.shape[0] % groups:
        return None
    if groups > 1 and (w.shape[2:] != (1, 1) or w.shape[1] >= DENSE_BELOW):
        return None
    return conv


def absorb_channel_shuffle(graph: Graph) -> int:
    """Fold every eligible shuffle of the root graph into the convolution before it (a
    grouped one made dense); returns how many."""
    fused = []
    for shuffle, conv in fusion_sites(graph, _absorb_plan, _SHUFFLE):
        w = conv.inputs[1].const
        groups = int(conv.attrs.get("group", 1))
        k, per = w.shape[0], w.shape[1]
        dense = np.zeros((k, per * groups) + w.shape[2:], dtype=w.dtype)
        for j in range(groups):
            rows = slice(j * (k // groups), (j + 1) * (k // groups))
            dense[rows, j * per:(j + 1) * per] = w[rows]
        src = _source_channels(k, int(shuffle.attrs["groups"]))
        _set_const(graph, conv, 1, "W_shuffled", dense[src])
        if len(conv.inputs) > 2 and conv.inputs[2] is not None:
            _set_const(graph, conv, 2, "B_shuffled", conv.inputs[2].const[src])
        conv.attrs.pop("group", None)
        name = shuffle.name
        graph.absorb(conv, shuffle)
        fused.append(mark_fused(conv, [conv.name, name]))
    if fused:
        drop_unused_initializers(graph)
    note_fused(graph, fused)
    return len(fused)


def _sink_plan(shuffle: Node, graph: Graph):
    """The depthwise convolution to move `shuffle` below, or None (module doc)."""
    if not _shuffle(shuffle):
        return None
    x, y = shuffle.inputs[0], shuffle.outputs[0]
    if len(y.uses) != 1 or y in graph.outputs or not is_static(x.shape) or len(x.shape) != 4:
        return None
    conv, slot = y.uses[0]
    w = _constant_conv(conv) if conv.graph is graph and slot == 0 else None
    channels = x.shape[1]
    if w is None or w.shape[:2] != (channels, 1) or int(conv.attrs.get("group", 1)) != channels:
        return None
    z = conv.outputs[0]
    if not is_static(z.shape) or len(z.shape) != 4 or math.prod(z.shape[2:]) >= math.prod(x.shape[2:]):
        return None
    return conv


def sink_channel_shuffle(graph: Graph) -> int:
    """Move every eligible shuffle of the root graph below its depthwise convolution; returns
    how many."""
    moved = 0
    for shuffle, conv in fusion_sites(graph, _sink_plan, _SHUFFLE):
        x, y, z = shuffle.inputs[0], shuffle.outputs[0], conv.outputs[0]
        src = _source_channels(x.shape[1], int(shuffle.attrs["groups"]))
        for i, what in ((1, "W"), (2, "B")):
            if i < len(conv.inputs) and conv.inputs[i] is not None:
                a = conv.inputs[i].const
                permuted = np.empty_like(a)
                permuted[src] = a              # x's channel src[k] meets the weights of y's k
                _set_const(graph, conv, i, f"{what}_unshuffled", permuted)
        # conv: x -> y (y now holds the convolution in x's channel order); shuffle: y -> z
        conv.set_input(0, x)
        shuffle.set_inputs([])
        for node in (shuffle, conv):
            for v in node._outputs:
                v.producer, v.index = None, -1
            node._outputs = []
        y.shape = z.shape
        conv.add_output(y)
        shuffle.add_output(z)
        shuffle.set_inputs([y])
        moved += 1
    if moved:
        drop_unused_initializers(graph)
        graph.sort()
        graph.invalidate()
    return moved


def place_channel_shuffle(graph: Graph) -> int:
    """Both moves of the module doc, absorbing first; returns how many shuffles went."""
    return absorb_channel_shuffle(graph) + sink_channel_shuffle(graph)
