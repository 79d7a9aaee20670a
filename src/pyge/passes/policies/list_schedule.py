"""Policy `list_schedule`: HEFT list scheduling on per-operator costs over k streams.

HEFT (Topcuoglu et al., 2002) in two phases:

1. Priority: the upward rank, rank(u) = cost(u) + max over successors (c + rank(v)), where c
   is the mean cost of the edge's synchronisation: an event (`event_s`) when the two ends
   land on different streams, which for k streams happens with probability (k-1)/k.
2. Placement, highest rank first among the ready nodes: each node goes to the stream where
   it *finishes* earliest, and may be inserted into an idle gap of a stream between two
   nodes already placed there (HEFT's insertion policy) if it fits before the next one.
   Ties: the stream of the latest-finishing producer (saves an event), then the lowest.

Costs are measured ones where `pyge.costFile` gives them (see `pyge tune`), else the static
estimate. The graph is then ordered by planned start, so each stream launches its nodes in
the planned order (an inserted node really runs in its gap).
"""
from __future__ import annotations

import bisect
import heapq
import logging

from ...analysis.dag import bottom_levels
from ...ir.graph import Graph
from ._dag import CostTable, DagView, finish, fold_light_streams

log = logging.getLogger(__name__)


def upward_rank(view: DagView, edge_cost: float) -> list[float]:
    return bottom_levels(view.succs, view.cost, edge_cost)


class _Timeline:
    """One stream's busy intervals, sorted by start; finds the earliest fitting gap."""

    def __init__(self) -> None:
        self.starts: list[float] = []
        self.ends: list[float] = []

    def earliest(self, ready: float, dur: float) -> float:
        t = ready
        j = bisect.bisect_right(self.ends, t)   # intervals ending after t may block
        while j < len(self.starts):
            if t + dur <= self.starts[j] + 1e-12 and (j == 0 or self.ends[j - 1] <= t + 1e-12):
                return t
            t = max(t, self.ends[j])
            j += 1
        return t

    def add(self, start: float, end: float) -> None:
        j = bisect.bisect_right(self.starts, start)
        self.starts.insert(j, start)
        self.ends.insert(j, end)


def heft(view: DagView, pool: list[int], event_s: float) -> tuple[list[int], list[float]]:
    """Stream and start time of every scheduled node."""
    n, k = len(view), len(pool)
    rank = upward_rank(view, event_s * (k - 1) / k)
    prio = [-round(r * 1e9) for r in rank]
    indeg = [len(p) for p in view.preds]
    heap = [(prio[i], i) for i in range(n) if indeg[i] == 0]
    heapq.heapify(heap)
    lines: dict[int, _Timeline] = {}
    stream, start, end = [-1] * n, [0.0] * n, [0.0] * n
    while heap:
        _, i = heapq.heappop(heap)
        cands = [view.nodes[i].stream_id] if view.fixed[i] else pool
        pref = [stream[p] for p in sorted(view.preds[i], key=lambda p: (-end[p], p))]
        best = None
        for rank_c, s in enumerate(cands):
            ready = max((end[p] + (0.0 if stream[p] == s else event_s) for p in view.preds[i]), default=0.0)
            t = lines.setdefault(s, _Timeline()).earliest(ready, view.cost[i])
            key = (round((t + view.cost[i]) * 1e9), pref.index(s) if s in pref else len(pref), rank_c)
            if best is None or key < best[0]:
                best = (key, s, t)
        _, s, t = best
        stream[i], start[i], end[i] = s, t, t + view.cost[i]
        lines[s].add(t, end[i])
        for j in view.succs[i]:
            indeg[j] -= 1
            if indeg[j] == 0:
                heapq.heappush(heap, (prio[j], j))
    return stream, start


def assign_list_schedule(graph: Graph, k: int, table: CostTable | None = None) -> int:
    """Run the policy on `graph`'s direct nodes over k streams; returns the streams used."""
    table = table or CostTable()
    view = DagView(graph, table.cost_fn())
    if not len(view):
        return 0
    pool = view.pool(k)
    stream, start = heft(view, pool, table.event_s)
    used = finish(view, fold_light_streams(view, stream, pool[0]), start)
    log.debug("list_schedule:%d: %d nodes on %d streams", k, len(view), used)
    return used
