"""Policy `critical_path`: the longest path by cost on the main stream, the rest spread.

As apex's torchsched and GE's MainStream mode do: the critical path (from the heaviest
source, follow the successor with the longest remaining path) decides the latency, so it
runs on stream 0 with no event inside it. Nodes that are ordered with every other node
(nothing could overlap them: the stem of a CNN, its classifier) join it there, since a side
stream would only add events. Everything else is list-scheduled on streams 1..k-1: each
node starts as early as it can, counting an event per producer on another stream, and
prefers the stream of its latest producer, so branches stay whole on one side stream.

With k = 1 every movable node lands on stream 0 (the same plan as a single stream).
"""
from __future__ import annotations

import logging

from ...ir.graph import Graph
from ._dag import CostTable, DagView, finish, fold_light_streams, schedule_est

log = logging.getLogger(__name__)


def main_nodes(view: DagView) -> set[int]:
    """The critical path plus every node ordered with all others."""
    main = set(view.critical_path())
    anc, desc = view.reach()
    everything = (1 << len(view)) - 1
    for i in range(len(view)):
        if anc[i] | desc[i] | (1 << i) == everything:
            main.add(i)
    return main


def assign_critical_path(graph: Graph, k: int, table: CostTable | None = None) -> int:
    """Run the policy on `graph`'s direct nodes over k streams; returns the streams used."""
    table = table or CostTable()
    view = DagView(graph, table.cost_fn())
    if not len(view):
        return 0
    pool = view.pool(k)
    main_stream, side = pool[0], (pool[1:] or pool[:1])
    main = main_nodes(view)
    stream, start = schedule_est(view, lambda i: side, table.event_s,
                                 fixed_stream=lambda i: main_stream if i in main else None)
    used = finish(view, fold_light_streams(view, stream, main_stream), start)
    log.debug("critical_path:%d: %d of %d nodes on the main stream, %d streams", k, len(main),
              len(view), used)
    return used
