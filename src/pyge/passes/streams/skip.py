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
from .context import StreamContext

log = logging.getLogger(__name__)


def assign_skipped(graph: Graph, ctx: StreamContext, order: list[Node] | None = None) -> int:
    """Give every unassigned skip node of `graph` a stream; returns how many. `order` is a
    topological order of its nodes, when the caller has one."""
    if not any(n.stream_id < 0 and kind_of(n) == SKIP for n in graph._nodes):
        return 0
    order = order if order is not None else graph.topological_sort()
    todo = [n for n in order if n.stream_id < 0 and kind_of(n) == SKIP]
    later = []
    for n in todo:                      # forward: producers are final before consumers look
        s = _single(n)
        if s is None:
            s = next((p.stream_id for p in n.predecessors if p.stream_id >= 0), None)
        if s is None:
            later.append(n)
        else:
            n.stream_id = s
    rest = []
    for n in reversed(later):           # backward: a chain of skip nodes feeding a kernel
        s = _single(n)
        if s is None:
            s = next((c.stream_id for c in n.successors if c.stream_id >= 0), None)
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


def _single(n: Node) -> int | None:
    streams = {m.stream_id for m in (*n.predecessors, *n.successors) if m.stream_id >= 0}
    return streams.pop() if len(streams) == 1 else None
