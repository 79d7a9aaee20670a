"""Automatic mode (ge.autoMultistreamParallelMode): spread independent work by a cost model.

Replaces rule 3 (dependency) for the nodes rules 1-2 left unassigned; rules 4-5 still run.

* ``LoadBalance:N`` - list scheduling (HEFT without insertion) on N streams: ready nodes are
  taken by decreasing bottom level (the longest estimated path from the node to the end), and
  each goes to the stream where it can start earliest, counting a Send/Recv (EVENT_S) for
  every producer on another stream. Ties keep a node on the stream of its latest producer,
  then the lowest stream. Independent branches thus spread over the streams in proportion
  to their estimated work, and chains stay together.
* ``MainStream:N`` - the critical path (the longest estimated path), plus every node that is
  ordered with all others (nothing could overlap it), stays on the main stream; the other
  nodes are list-scheduled as above on the N-1 side streams (all on the main one when N=1).

Costs come from ``cost.node_cost`` (FLOPs and bytes, or a measured `_cost_us`). Streams run
their launches in the graph's node order, so the pass also reorders the graph's nodes by
simulated start time: each stream then runs its nodes in the order the balance assumed.
"""
from __future__ import annotations

import heapq
import logging
from typing import Callable

from ...ir.graph import Graph, Node
from ._graph import EffectivePreds, Reach, is_transparent
from .context import StreamContext
from .cost import EVENT_S, node_cost

log = logging.getLogger(__name__)

LOAD_BALANCE, MAIN_STREAM = "LoadBalance", "MainStream"


class _Sim:
    """The nodes the scheduler places (all but unlabelled skip nodes) and their timing."""

    def __init__(self, graph: Graph, cost: Callable[[Node], float]):
        self.order = graph.topological_sort()
        self.nodes = [n for n in self.order if not is_transparent(n)]
        self.idx = {id(n): i for i, n in enumerate(self.nodes)}
        preds_of = EffectivePreds()
        self.preds = {id(n): preds_of(n) for n in self.nodes}
        self.succs: dict[int, list[Node]] = {id(n): [] for n in self.nodes}
        for n in self.nodes:
            for p in self.preds[id(n)]:
                self.succs[id(p)].append(n)
        self.cost = {id(n): cost(n) for n in self.nodes}
        self.blevel: dict[int, float] = {}
        for n in reversed(self.nodes):
            tail = max((self.blevel[id(s)] for s in self.succs[id(n)]), default=0.0)
            self.blevel[id(n)] = self.cost[id(n)] + tail
        self.start: dict[int, float] = {}
        self.finish: dict[int, float] = {}
        self.where: dict[int, tuple] = {}   # ("slot", k) or ("fixed", stream id)

    def ready_on(self, n: Node, key: tuple) -> float:
        return max((self.finish[id(p)] + (0.0 if self.where[id(p)] == key else EVENT_S)
                    for p in self.preds[id(n)]), default=0.0)


def assign_auto(graph: Graph, ctx: StreamContext, mode: str, n_streams: int,
                cost: Callable[[Node], float] = node_cost) -> int:
    """Assign the unassigned non-skip nodes of `graph` by `mode` over `n_streams`; returns how many."""
    sim = _Sim(graph, cost)
    main = _main_nodes(graph, sim) if mode == MAIN_STREAM else set()
    side = list(range(1, n_streams)) or [0]
    every = list(range(n_streams))

    def allowed(n: Node) -> list[int]:
        if mode == LOAD_BALANCE:
            return every
        return [0] if id(n) in main else side

    _schedule(sim, allowed)
    slots = sorted({k for kind, k in sim.where.values() if kind == "slot"})
    stream_of = {}
    for k in slots:
        first = not stream_of
        stream_of[k] = ctx.default_stream if first and ctx.default_stream is not None else ctx.new_stream()
    assigned = 0
    for n in sim.nodes:
        kind, k = sim.where[id(n)]
        if kind == "slot":
            n.stream_id = stream_of[k]
            assigned += 1
    _reorder(graph, sim)
    log.debug("%s:%d put %d nodes on %d streams", mode, n_streams, assigned, len(slots))
    return assigned


def _schedule(sim: _Sim, allowed: Callable[[Node], list[int]]) -> None:
    indeg = {id(n): len(sim.preds[id(n)]) for n in sim.nodes}
    heap = [(-sim.blevel[id(n)], sim.idx[id(n)]) for n in sim.nodes if indeg[id(n)] == 0]
    heapq.heapify(heap)
    free: dict[tuple, float] = {}
    while heap:
        _, i = heapq.heappop(heap)
        n = sim.nodes[i]
        if n.stream_id >= 0:          # labelled or independent: its stream is fixed
            key = ("fixed", n.stream_id)
            t = max(free.get(key, 0.0), sim.ready_on(n, key))
        else:
            key, t = _best_slot(sim, n, allowed(n), free)
        sim.where[id(n)] = key
        sim.start[id(n)] = t
        sim.finish[id(n)] = free[key] = t + sim.cost[id(n)]
        for s in sim.succs[id(n)]:
            indeg[id(s)] -= 1
            if indeg[id(s)] == 0:
                heapq.heappush(heap, (-sim.blevel[id(s)], sim.idx[id(s)]))


def _best_slot(sim: _Sim, n: Node, slots: list[int], free: dict[tuple, float]) -> tuple[tuple, float]:
    by_finish = sorted(sim.preds[id(n)], key=lambda p: (-sim.finish[id(p)], sim.idx[id(p)]))
    pref = []
    for p in by_finish:
        if sim.where[id(p)] not in pref:
            pref.append(sim.where[id(p)])
    # The latest producer finish per stream, so that each slot's ready time costs one pass
    # over the (few) streams instead of over all producers. Exactly ready_on(): rounding is
    # monotonic, so max(f + EVENT_S) == max(f) + EVENT_S.
    latest: dict[tuple, float] = {}
    for p in sim.preds[id(n)]:
        where, f = sim.where[id(p)], sim.finish[id(p)]
        if f > latest.get(where, -1.0):
            latest[where] = f
    best = None
    for k in slots:
        key = ("slot", k)
        ready = max((f if where == key else f + EVENT_S for where, f in latest.items()), default=0.0)
        t = max(free.get(key, 0.0), ready)
        # Round to nanoseconds so that float noise cannot break a tie differently per run.
        rank = (round(t * 1e9), pref.index(key) if key in pref else len(pref), k)
        if best is None or rank < best[0]:
            best = (rank, key, t)
    return best[1], best[2]


def _main_nodes(graph: Graph, sim: _Sim) -> set[int]:
    """The critical path plus the nodes that are ordered with every other node."""
    main: set[int] = set()
    sources = [n for n in sim.nodes if not sim.preds[id(n)]]
    node = min(sources, key=lambda n: (-sim.blevel[id(n)], sim.idx[id(n)]), default=None)
    while node is not None:
        main.add(id(node))
        node = min(sim.succs[id(node)], key=lambda n: (-sim.blevel[id(n)], sim.idx[id(n)]), default=None)
    reach = Reach(graph, sim.order)
    mask = 0
    for n in sim.nodes:
        mask |= reach.bit(n)
    for n in sim.nodes:
        if reach.related(n) & mask == mask:
            main.add(id(n))
    return main


def _reorder(graph: Graph, sim: _Sim) -> None:
    """Kahn's order over the whole graph, keyed by simulated start time (skip nodes: their
    producers' latest start), so per-stream launch order follows the simulation."""
    key: dict[int, float] = {}
    for n in sim.order:
        key[id(n)] = sim.start[id(n)] if id(n) in sim.start else max(
            (key[id(p)] for p in n.predecessors if id(p) in key), default=0.0)
    index = {id(n): i for i, n in enumerate(sim.order)}
    graph.set_node_order(sorted(sim.order, key=lambda n: (round(key[id(n)] * 1e9), index[id(n)])))
    graph.sort()  # Kahn's pass, stable for the new order: restores topological order on ties
