"""GE's UpdateForSkippedEnginePass: skip-engine nodes take their neighbours' stream.

A node that does no device work (a view, a shape query, a constant) should not cost a
Send/Recv of its own. In order of preference it takes

  1. the one stream all its assigned neighbours (producers and consumers) share;
  2. its first producer's stream: the data is there, and consumers elsewhere need an
     event from that producer's stream anyway;
  3. its first consumer's stream (a node with no assigned producer, e.g. `Shape` of a
     graph input): its consumer then needs no event for it;
  4. the graph's default stream (a subgraph's parent stream, else the lowest stream used).

GE leaves a skip node without producers on no stream at all; pyge needs every node on a
stream (the plan launches it), so rules 3 and 4 are pyge's.
"""
from __future__ import annotations

import logging

from ...ir.graph import Graph, Node
from ..graph.engines import SKIP, kind_of
from ._graph import Topo
from .context import StreamContext

log = logging.getLogger(__name__)


def assign_skipped(graph: Graph, ctx: StreamContext, order: list[Node] | None = None,
                   topo: Topo | None = None) -> int:
    """Give every unassigned skip node of `graph` a stream; returns how many. `order` is a
    topological order of its nodes, when the caller has one; so is `topo`'s (the graph's
    Topo, whose integer edges then stand for Node.predecessors and Node.successors)."""
    if not any(n.stream_id < 0 and kind_of(n) == SKIP for n in graph._nodes):
        return 0
    if topo is not None:
        order = topo.order
    order = order if order is not None else graph.topological_sort()
    preds, succs = _neighbours(graph, topo)
    todo = [n for n in order if n.stream_id < 0 and kind_of(n) == SKIP]
    later = []
    for n in todo:                      # forward: producers are final before consumers look
        ps, cs = preds(n), succs(n)
        s = _single(ps, cs)
        if s is None:
            s = next((p.stream_id for p in ps if p.stream_id >= 0), None)
        if s is None:
            later.append(n)
        else:
            n.stream_id = s
    rest = []
    for n in reversed(later):           # backward: a chain of skip nodes feeding a kernel
        cs = succs(n)
        s = _single(preds(n), cs)
        if s is None:
            s = next((c.stream_id for c in cs if c.stream_id >= 0), None)
        if s is None:
            rest.append(n)
        else:
            n.stream_id = s
    if rest:
        used = [n.stream_id for n in order if n.stream_id >= 0]
        default = ctx.default_stream if ctx.default_stream is not None else (
            min(used) if used else ctx.new_stream())
        for n in rest:
            n.stream_id = default
    for n in todo:
        log.debug("skip node %s (%s) -> stream %d", n.name, n.op_type, n.stream_id)
    return len(todo)


def _neighbours(graph: Graph, topo: Topo | None):
    """(predecessors, successors) as functions of a node: Node.predecessors and
    Node.successors, or the same lists read off `topo` when its order is the graph's node
    list (then its successor lists are in the node list's order too, as successors_of's
    are; building those for the whole graph was most of this pass's cost)."""
    if topo is None or topo.order != graph._nodes:
        return (lambda n: n.predecessors), (lambda n: n.successors)
    order, pos, tp, ts = topo.order, topo.pos, topo.preds, topo.succs
    return ((lambda n: [order[j] for j in tp[pos[id(n)]]]),
            (lambda n: [order[j] for j in ts[pos[id(n)]]]))


def _single(preds: list[Node], succs: list[Node]) -> int | None:
    streams = {m.stream_id for m in (*preds, *succs) if m.stream_id >= 0}
    return streams.pop() if len(streams) == 1 else None
