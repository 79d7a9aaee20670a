"""Happens-before between the plan's launches, read from stream order and Send/Recv steps.

The memory planner's own reachability (kept independent of the event passes and of
passes/verify_hb.py, which checks the same rule from its side). Node a happens-before node
b when b cannot start until a has finished, on every executor:

- a precedes b on one stream (a stream runs its steps in order), or
- a chain of such orderings and events leads from a to b. An event orders every launch
  *before its RECORD step* on the recording stream before every launch *after its WAIT step*
  on the waiting stream, so it contributes one edge: last launch before the record -> first
  launch after the wait. (Where the events pass put the steps does not matter to us.)

Data edges are not added on their own: on the executors only stream order and events order
anything, so a data edge that no event covers is exactly what verify() reports, and the
memory plan must not rely on it.

Per-node vector clocks, O(nodes x streams) memory:

    clock[v][s] = launch ordinal on stream s of the latest launch that happens-before-or-is v

A stream is a chain, so a (ordinal o on stream s) happens-before-or-is v iff o <= clock[v][s]:
an O(1) query. A *frontier* summarises a set of nodes (a value's producer and readers) as
((stream, highest ordinal there), ...): the whole set happens-before v iff each entry does,
an O(streams) query, since the earlier launches of each stream precede the highest one.
"""
from __future__ import annotations

import heapq

from ..errors import PlanError
from ..plan.plan import LAUNCH, RECORD, WAIT, Plan

Frontier = tuple  # ((stream, ordinal), ...), streams ascending, one entry per stream


class HappensBefore:
    """Happens-before over plan node indices, as vector clocks."""

    def __init__(self, plan: Plan):
        n, ns = len(plan.nodes), max(len(plan.streams), 1)
        self.num_nodes, self.num_streams = n, ns
        self.stream_of = [-1] * n
        self.ordinal = [-1] * n
        self.chains: list[list[int]] = []              # per stream, its launches in order
        preds: list[list[int]] = [[] for _ in range(n)]
        record_anchor: dict[int, int] = {}   # logical event -> last launch before its record
        wait_anchor: dict[int, list[int]] = {}  # logical event -> first launch after each wait
        for s, steps in enumerate(plan.streams):
            chain: list[int] = []
            pending_waits: list[int] = []
            for st in steps:
                if st.kind == LAUNCH:
                    v = st.arg
                    if not 0 <= v < n or self.stream_of[v] >= 0:
                        raise PlanError(f"memory plan: stream {s} launches node #{v}, which is "
                                        "out of range or already launched")
                    self.stream_of[v], self.ordinal[v] = s, len(chain)
                    if chain:
                        preds[v].append(chain[-1])
                    for e in pending_waits:
                        wait_anchor.setdefault(e, []).append(v)
                    pending_waits = []
                    chain.append(v)
                elif st.kind == RECORD:
                    if chain:
                        record_anchor[st.arg] = chain[-1]
                elif st.kind == WAIT:
                    pending_waits.append(st.arg)
            self.chains.append(chain)
        if any(s < 0 for s in self.stream_of):
            raise PlanError("memory plan: some node is launched on no stream")
        for e, dsts in wait_anchor.items():
            src = record_anchor.get(e, -1)
            for d in dsts:
                if src >= 0 and src != d:
                    preds[d].append(src)
        self.preds = preds
        self.order, self.succs = _topological(preds)
        self.position = [0] * n
        for i, v in enumerate(self.order):
            self.position[v] = i
        self.clock: list[list[int]] = [[]] * n
        for v in self.order:
            self.refresh(v)

    @classmethod
    def total(cls, plan: Plan) -> "HappensBefore":
        """The same nodes run one after another in index order (a topological order of the
        graph, see plan/build.py): the single-stream plan's happens-before."""
        hb = cls.__new__(cls)
        n = len(plan.nodes)
        hb.num_nodes, hb.num_streams = n, 1
        hb.stream_of, hb.ordinal = [0] * n, list(range(n))
        hb.chains = [list(range(n))]
        hb.preds = [[v - 1] if v else [] for v in range(n)]
        hb.succs = [[v + 1] if v + 1 < n else [] for v in range(n)]
        hb.order, hb.position = list(range(n)), list(range(n))
        hb.clock = [[v] for v in range(n)]
        return hb

    def copy(self) -> "HappensBefore":
        """A copy that add_edge can change without touching this one (clock rows are never
        modified in place, only replaced, so sharing them is safe)."""
        hb = HappensBefore.__new__(HappensBefore)
        hb.__dict__.update(self.__dict__)
        hb.preds = [p[:] for p in self.preds]
        hb.succs = [s[:] for s in self.succs]
        hb.clock = self.clock[:]
        return hb

    def refresh(self, v: int) -> None:
        """Recompute clock[v] from its predecessors' clocks (which must be final)."""
        ps = self.preds[v]
        if not ps:
            c = [-1] * self.num_streams
        elif len(ps) == 1:
            c = self.clock[ps[0]][:]
        else:
            c = list(map(max, *(self.clock[p] for p in ps)))
        c[self.stream_of[v]] = self.ordinal[v]
        self.clock[v] = c

    def add_edge(self, a: int, b: int) -> None:
        """Order a before b (an event the memory planner adds). Only while b is the node being
        planned and a precedes it in `order`: clocks of later nodes are refreshed by the
        caller as it reaches them, earlier ones cannot change."""
        self.preds[b].append(a)
        self.succs[a].append(b)
        cb, ca = self.clock[b], self.clock[a]
        self.clock[b] = list(map(max, cb, ca))

    def add_edges(self, pairs) -> list[int]:
        """Order a before b for each (a, b), a earlier than b in `order` (so `order` stays
        topological), and bring the clocks up to date. Returns the nodes whose clock changed.
        Only descendants whose clock really changes are visited, in `order`: the new
        ordering usually stops spreading at the next join that already carried it."""
        todo = []
        for a, b in pairs:
            self.preds[b].append(a)
            self.succs[a].append(b)
            todo.append((self.position[b], b))
        heapq.heapify(todo)
        done: set[int] = set()
        changed = []
        while todo:
            _, v = heapq.heappop(todo)      # every predecessor that changes comes earlier
            if v in done:
                continue
            done.add(v)
            old = self.clock[v]
            self.refresh(v)
            if self.clock[v] != old:
                changed.append(v)
                for w in self.succs[v]:
                    heapq.heappush(todo, (self.position[w], w))
        return changed

    # -- queries ---------------------------------------------------------------------------

    def before(self, a: int, b: int) -> bool:
        """a finishes before b starts (strict: a node is not before itself)."""
        return a != b and self.ordinal[a] <= self.clock[b][self.stream_of[a]]

    def frontier(self, nodes) -> Frontier:
        """The frontier of a set of nodes: per stream, its latest launch among them."""
        top: dict[int, int] = {}
        so, od = self.stream_of, self.ordinal
        for u in nodes:
            s = so[u]
            if od[u] > top.get(s, -1):
                top[s] = od[u]
        return tuple(sorted(top.items()))

    def all_before(self, front: Frontier, b: int) -> bool:
        """Every node of the frontier happens-before b (strictly)."""
        cb, sb = self.clock[b], self.stream_of[b]
        for s, o in front:
            if o > cb[s] or (s == sb and o == cb[s]):
                return False
        return True

    def all_before_or_at(self, front: Frontier, b: int) -> bool:
        cb = self.clock[b]
        for s, o in front:
            if o > cb[s]:
                return False
        return True

    def unordered(self, front: Frontier, b: int) -> list[int]:
        """The nodes of the frontier that do not happen-before b (one per stream at most)."""
        cb, sb = self.clock[b], self.stream_of[b]
        return [self.chains[s][o] for s, o in front
                if o > cb[s] or (s == sb and o == cb[s])]


def join(a: Frontier, b: Frontier) -> Frontier:
    """The frontier of the union of two node sets."""
    if not a:
        return b
    if not b or a == b:
        return a
    top = dict(a)
    for s, o in b:
        if o > top.get(s, -1):
            top[s] = o
    return tuple(sorted(top.items()))


def _topological(preds: list[list[int]]) -> tuple[list[int], list[list[int]]]:
    """Kahn's algorithm, smallest node index first (the plan's own order when consistent).
    Returns the order and the successor lists."""
    n = len(preds)
    succs: list[list[int]] = [[] for _ in range(n)]
    indeg = [0] * n
    for v, ps in enumerate(preds):
        indeg[v] = len(ps)
        for p in ps:
            succs[p].append(v)
    ready = [i for i in range(n) if indeg[i] == 0]
    heapq.heapify(ready)
    order = []
    while ready:
        v = heapq.heappop(ready)
        order.append(v)
        for w in succs[v]:
            indeg[w] -= 1
            if indeg[w] == 0:
                heapq.heappush(ready, w)
    if len(order) != n:
        raise PlanError("memory plan: stream order and events form a cycle (the plan deadlocks)")
    return order, succs
