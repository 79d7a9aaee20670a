"""GE's OptimizeIneffectiveMultiStreamPass: undo multi-stream that cannot pay.

A node none of whose producers and consumers share its stream costs a Send/Recv on each
side. If some stream t holds one of its producers p and one of its consumers c with no
node of t between them (in topological order), the node can move onto t between them:
nothing on t could have run beside it anyway, and the events around it go away.

The rule exactly as GE applies it, node by node in topological order:

  * labelled nodes stay, and labelled streams (any stream holding a labelled node) take
    nobody new;
  * a node with a producer or consumer (data or control) on its own stream stays: moving
    it would not save an event;
  * per neighbouring stream t, p is the producer on t closest before the node and c the
    consumer on t closest after it; the node moves to t when c is the next node of t
    after p. Streams are tried in increasing id, and, as in GE, a later stream that also
    qualifies wins (the move is repeated).

Each test is two dictionary walks and one bisection, so the pass is O(E log N).
"""
from __future__ import annotations

import bisect
import logging

from ...ir.graph import Graph
from ._graph import Topo, label_of

log = logging.getLogger(__name__)


def undo_ineffective(graph: Graph, topo: Topo | None = None) -> int:
    """Move nodes of `graph` onto a stream where their concurrency was void; returns how many moved."""
    topo = topo or Topo(graph)
    order, preds, succs = topo.order, topo.preds, topo.succs
    stream = [n.stream_id for n in order]
    labelled = [label_of(n) is not None for n in order]
    members: dict[int, list[int]] = {}
    for i, s in enumerate(stream):
        if s >= 0:
            members.setdefault(s, []).append(i)
    label_streams = {s for i, s in enumerate(stream) if labelled[i] and s >= 0}
    moved = 0
    for i, n in enumerate(order):
        own = stream[i]
        if labelled[i] or own < 0:
            continue
        at = stream.__getitem__
        if own in map(at, preds[i]) or own in map(at, succs[i]):   # a neighbour on its stream
            continue
        closest_in: dict[int, int] = {}
        for q in preds[i]:
            t = stream[q]
            if t >= 0 and q > closest_in.get(t, -1):
                closest_in[t] = q
        closest_out: dict[int, int] = {}
        for q in succs[i]:
            t = stream[q]
            if t >= 0 and (t not in closest_out or q < closest_out[t]):
                closest_out[t] = q
        for t in sorted(closest_in.keys() & closest_out.keys()):
            if t in label_streams:
                continue
            pos = members[t]
            k = bisect.bisect_right(pos, closest_in[t])
            if k < len(pos) and pos[k] == closest_out[t]:
                old = stream[i]
                mem = members[old]
                del mem[bisect.bisect_left(mem, i)]
                bisect.insort(pos, i)
                stream[i] = n.stream_id = t
                log.debug("%s (%s) moves from stream %d onto stream %d: nothing there could overlap it",
                          n.name, n.op_type, old, t)
                moved += 1
    return moved
