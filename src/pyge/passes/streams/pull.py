"""Rule 5: a node whose producers and consumers all live on other streams is pulled onto
a neighbour's stream.

Such a node costs a Send/Recv on each side. Moving it next to a neighbour saves at least one
pair, but it must not cost concurrency: the node is moved to stream `t` only when every node
already on `t` is an ancestor or a descendant of it. Those nodes cannot run at the same time
as it anyway, and the stream's launch order (topological) puts it between them, so nothing is
delayed. (x -> a -> z with `a` alone on its stream and only x and z on theirs: `a` joins them.
x -> a, x -> b, a & b -> z with `b` alone: not moved, `a` would serialise with it.)

Candidate streams are tried by how many neighbours they hold, then producers before
consumers. Labelled nodes, independent-engine nodes and the streams they own are exempt:
those streams were asked for. One sweep in topological order.
"""
from __future__ import annotations

import logging

from ...ir.graph import Graph, Node
from ..engines import INDEPENDENT, kind_of
from ._graph import Reach, label_of
from .context import StreamContext

log = logging.getLogger(__name__)


def pull_isolated(graph: Graph, ctx: StreamContext) -> int:
    """Move isolated nodes of `graph` onto a neighbour's stream; returns how many moved."""
    reach = Reach(graph)
    pinned = ctx.pinned_streams()
    on_stream: dict[int, int] = {}
    for n in reach.order:
        on_stream[n.stream_id] = on_stream.get(n.stream_id, 0) | reach.bit(n)
    moved = 0
    for n in reach.order:
        if label_of(n) is not None or kind_of(n) == INDEPENDENT:
            continue
        target = _target(n, reach, on_stream, pinned)
        if target is None:
            continue
        bit = reach.bit(n)
        on_stream[n.stream_id] &= ~bit
        on_stream[target] = on_stream.get(target, 0) | bit
        log.debug("pulling %s (%s) from stream %d onto stream %d", n.name, n.op_type, n.stream_id, target)
        n.stream_id = target
        moved += 1
    return moved


def _target(n: Node, reach: Reach, on_stream: dict[int, int], pinned: set[int]) -> int | None:
    neighbours = [*n.predecessors, *n.successors]
    streams = [m.stream_id for m in neighbours]
    if not neighbours or n.stream_id in streams:
        return None
    first_seen = {s: i for i, s in reversed(list(enumerate(streams)))}
    candidates = sorted(set(streams) - pinned, key=lambda s: (-streams.count(s), first_seen[s]))
    related = reach.related(n)
    for s in candidates:
        if s >= 0 and on_stream.get(s, 0) & ~related == 0:
            return s
    return None
