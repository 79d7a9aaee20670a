"""Move a channel shuffle below the strided depthwise convolution that reads it.

ShuffleNet's down-sampling units run pyge.ChannelShuffle (fuse_shuffle.py) on the full-size
map and then a depthwise convolution of stride 2. A depthwise convolution treats every
channel alone, so it commutes with any channel permutation P once its per-channel weights
and bias are permuted the same way:

    DwConv(P x, W, B)  ==  P DwConv(x, W[inv P], B[inv P])

Run in the second order, the shuffle permutes the convolution's output, a quarter of the
pixels at stride 2. The values are the same bits: each channel meets the same weights in the
same order. Conditions: the shuffle's output feeds only that convolution and is not a graph
output; the convolution is a 2-D Conv (or a FusedConv with an activation and no added
input) whose group count equals its input channels and its weight's first axis (multiplier
1), with constant weight and bias; its output has fewer pixels than its input (at stride 1
the move buys nothing). Both nodes keep their names; the convolution's output value keeps
its name and consumers, now produced by the shuffle. `ge.exec.enableFusion=false` leaves the
graph as it is.
"""
from __future__ import annotations

import math

import numpy as np

from ...ir.graph import Graph, Node
from ._match import drop_unused_initializers, fresh_name, fusion_sites, is_static


def _depthwise(conv: Node, channels: int) -> bool:
    """Whether `conv` is a depthwise convolution of `channels` channels, multiplier 1, with
    constant weight and bias, and no input added to its result."""
    if len(conv.outputs) != 1 or len(conv.inputs) < 2:
        return False
    if not ((conv.op_type == "Conv" and not conv.domain) or (
            conv.op_type == "FusedConv" and conv.domain == "com.microsoft" and len(conv.inputs) <= 3)):
        return False
    w = conv.inputs[1].const if conv.inputs[1] is not None else None
    b = conv.inputs[2] if len(conv.inputs) > 2 else None
    if w is None or w.ndim != 4 or w.shape[:2] != (channels, 1) or (b is not None and b.const is None):
        return False
    return int(conv.attrs.get("group", 1)) == channels


def _plan(shuffle: Node, graph: Graph):
    """The depthwise convolution to move `shuffle` below, or None (module doc)."""
    if shuffle.op_type != "ChannelShuffle" or shuffle.domain != "pyge" or len(shuffle.inputs) != 1:
        return None
    x, y = shuffle.inputs[0], shuffle.outputs[0]
    if len(y.uses) != 1 or y in graph.outputs:
        return None
    conv, slot = y.uses[0]
    if conv.graph is not graph or slot != 0 \
            or not is_static(x.shape) or len(x.shape) != 4:
        return None
    z = conv.outputs[0] if conv.outputs else None
    if z is None or not is_static(z.shape) or len(z.shape) != 4 or not _depthwise(conv, x.shape[1]) \
            or math.prod(z.shape[2:]) >= math.prod(x.shape[2:]):
        return None
    return conv


def _source_channels(channels: int, groups: int) -> np.ndarray:
    """src[k]: the input channel that ChannelShuffle(groups) puts at output channel k."""
    return np.arange(channels).reshape(groups, channels // groups).T.reshape(-1)


def sink_channel_shuffle(graph: Graph) -> int:
    """Move every eligible shuffle of the root graph below its depthwise convolution; returns
    how many."""
    moved = 0
    for shuffle, conv in fusion_sites(graph, _plan, frozenset({"ChannelShuffle"})):
        x, y, z = shuffle.inputs[0], shuffle.outputs[0], conv.outputs[0]
        src = _source_channels(x.shape[1], int(shuffle.attrs["groups"]))
        for i, what in ((1, "W"), (2, "B")):
            if i < len(conv.inputs) and conv.inputs[i] is not None:
                a = conv.inputs[i].const
                permuted = np.empty_like(a)
                permuted[src] = a              # x's channel src[k] meets the weights of y's k
                conv.set_input(i, graph.add_initializer(
                    fresh_name(graph, f"{conv.name}_{what}_unshuffled"), permuted))
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
