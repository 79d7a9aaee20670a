"""Happens-before between a plan's launches, as per-stream vector clocks.

H is a DAG over the plan's nodes. Its edges are each stream's launch order (a stream runs
its steps in order) plus one of two edge sets, chosen by the caller:

- `HappensBefore.of_dependencies(plan)`: every data dependency (v reads a value u produces,
  implicit subgraph reads included) and every control edge. This is the order the plan
  *must* realise; the events pass (passes/sync/events.py) reads off it which Send/Recv
  pairs realise it with the fewest events.
- `HappensBefore.of_steps(plan)`: the plan's Send/Recv steps. This is the order the plan
  *does* realise on every executor, and what the memory planner may rely on. An event
  orders every launch before its RECORD step on the recording stream before every launch
  after its WAIT step on the waiting stream: one edge, last launch before the record ->
  first launch after the wait. Data edges are not added on their own: a data edge that no
  event covers is exactly what verify() reports, and a memory plan must not rely on it.

Per-node vector clocks, O(nodes x streams) memory:

    clock[v][s] = launch ordinal on stream s of the latest launch that happens-before-or-is v

A stream is a chain, so a (ordinal o on stream s) happens-before-or-is v iff o <= clock[v][s]:
an O(1) query, with no all-pairs closure. A *frontier* summarises a set of nodes (a value's
producer and readers) as ((stream, highest ordinal there), ...): the whole set happens-before
v iff each entry does, an O(streams) query, since the earlier launches of each stream
precede the highest one.

The verifier (passes/verify/clocks.py) deliberately does not use this module: it recomputes
happens-before from the finished step lists in its own way.
"""
from __future__ import annotations

import heapq

from ..errors import PlanError
from ..plan.plan import LAUNCH, RECORD, WAIT, Plan
from .dag import topological_order

Frontier = tuple  # ((stream, ordinal), ...), streams ascending, one entry per stream


class StreamLayout:
    """Where each node sits: its stream, its launch ordinal there, its stream predecessor,
    and per stream the nodes it launches, in order."""

    __slots__ = ("stream", "ordinal", "prev", "chains")

    def __init__(self, plan: Plan):
        n = len(plan.nodes)
        self.stream = [-1] * n
        self.ordinal = [-1] * n
        self.prev = [-1] * n
        self.chains: list[list[int]] = []
        for s, steps in enumerate(plan.streams):
            chain = [st.arg for st in steps if st.kind == LAUNCH]
            for i, v in enumerate(chain):
                if not 0 <= v < n or self.stream[v] >= 0:
                    raise PlanError(f"stream {s} launches node #{v}, which is out of range "
                                    "or already launched")
                if plan.nodes[v].stream != s:
                    raise PlanError(f"node {plan.nodes[v].name!r} says stream "
                                    f"{plan.nodes[v].stream} but is launched on stream {s}")
                self.stream[v], self.ordinal[v] = s, i
                self.prev[v] = chain[i - 1] if i else -1
            self.chains.append(chain)
        missing = [i for i in range(n) if self.stream[i] < 0]
        if missing:
            raise PlanError(f"node {plan.nodes[missing[0]].name!r} is launched on no stream")


def dependencies(plan: Plan, with_streams: bool = False) -> list[list[int]]:
    """Per plan node, the nodes it depends on: the producers of its inputs and its control
    predecessors (sorted, deduplicated, itself excluded); with `with_streams`, then also
    the previous launch on its stream where that is not one of them already."""
    producer = [v.producer for v in plan.values]
    preds: list[list[int]] = []
    for pn in plan.nodes:
        ins = pn.inputs
        if len(ins) == 1 and not pn.control_preds:       # the usual node, without the set
            p = producer[ins[0]] if ins[0] >= 0 else -1
            preds.append([p] if p >= 0 and p != pn.index else [])
            continue
        ps = {producer[vi] for vi in ins if vi >= 0 and producer[vi] >= 0}
        ps.update(pn.control_preds)
        ps.discard(pn.index)
        preds.append(sorted(ps))
    if with_streams:
        for steps in plan.streams:
            prev = -1
            for st in steps:
                if st.kind == LAUNCH:
                    if prev >= 0 and prev not in preds[st.arg]:
                        preds[st.arg].append(prev)
                    prev = st.arg
    return preds


def step_preds(plan: Plan) -> list[list[int]]:
    """Per plan node, the launches the steps order before it: its stream predecessor, then
    for each WAIT before it (since the previous launch of its stream) the last launch before
    that event's RECORD. The edge set of `HappensBefore.of_steps`; nothing is checked here."""
    preds: list[list[int]] = [[] for _ in plan.nodes]
    record_anchor: dict[int, int] = {}       # logical event -> last launch before its record
    wait_anchor: dict[int, list[int]] = {}   # logical event -> first launch after each wait
    for steps in plan.streams:
        last = -1
        pending: list[int] = []
        for st in steps:
            if st.kind == LAUNCH:
                if last >= 0:
                    preds[st.arg].append(last)
                for e in pending:
                    wait_anchor.setdefault(e, []).append(st.arg)
                pending = []
                last = st.arg
            elif st.kind == RECORD:
                if last >= 0:
                    record_anchor[st.arg] = last
            elif st.kind == WAIT:
                pending.append(st.arg)
    for e, dsts in wait_anchor.items():
        src = record_anchor.get(e, -1)
        for d in dsts:
            if src >= 0 and src != d:
                preds[d].append(src)
    return preds


class HappensBefore:
    """Happens-before over plan node indices, as vector clocks over a given edge set.

    `order` is a topological order of H, `position[v]` v's place in it; `preds` and `succs`
    are H's edges (stream order included), `chains[s]` stream s's launches in order,
    `prev[v]` the launch before v on its stream.
    """

    def __init__(self, plan: Plan, layout: StreamLayout, preds: list[list[int]],
                 smallest_first: bool = True, what: str = "events"):
        self.num_nodes, self.num_streams = len(preds), max(len(plan.streams), 1)
        self.stream_of, self.ordinal, self.chains = layout.stream, layout.ordinal, layout.chains
        self.prev = layout.prev                       # stream predecessor, -1 for none
        self.preds = preds
        self.order, self.succs = topological_order(preds, smallest_first)
        if len(self.order) != len(preds):
            done = set(self.order)
            stuck = next(v for v in range(len(preds)) if v not in done)
            raise PlanError(f"stream order contradicts the {what} around node "
                            f"{plan.nodes[stuck].name!r} "
                            f"(stream {self.stream_of[stuck]}): no order can satisfy both, "
                            "the plan would deadlock")
        self.position = [0] * len(preds)
        for i, v in enumerate(self.order):
            self.position[v] = i
        self.clock: list[list[int]] = [[]] * len(preds)
        self._refresh_all(self.order)

    @classmethod
    def of_steps(cls, plan: Plan) -> "HappensBefore":
        """Stream order and Send/Recv steps: what every executor guarantees."""
        return cls(plan, StreamLayout(plan), step_preds(plan))

    @classmethod
    def of_dependencies(cls, plan: Plan) -> tuple["HappensBefore", list[list[int]]]:
        """Stream order, data and control dependencies: what the plan must guarantee.
        Returns the clocks and `dependencies(plan)`. The order is first in, first out (the
        events pass numbers its events in it)."""
        layout = StreamLayout(plan)
        deps = dependencies(plan)
        preds = [ps + [p] if p >= 0 else list(ps) for ps, p in zip(deps, layout.prev)]
        return cls(plan, layout, preds, smallest_first=False, what="dependencies"), deps

    @classmethod
    def total(cls, plan: Plan) -> "HappensBefore":
        """The same nodes run one after another in index order (a topological order of the
        graph, see plan/build.py): the single-stream plan's happens-before."""
        hb = cls.__new__(cls)
        n = len(plan.nodes)
        hb.num_nodes, hb.num_streams = n, 1
        hb.stream_of, hb.ordinal, hb.prev = [0] * n, list(range(n)), list(range(-1, n - 1))
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
        self._refresh_all((v,))

    def _refresh_all(self, nodes) -> None:
        """refresh(v) for each v of `nodes` in turn (one loop: the constructor's)."""
        preds, clock, stream_of, ordinal = self.preds, self.clock, self.stream_of, self.ordinal
        ns = self.num_streams
        for v in nodes:
            ps = preds[v]
            if not ps:
                c = [-1] * ns
            elif len(ps) == 1:
                c = clock[ps[0]][:]
            elif len(ps) == 2:                        # the usual join, without the generator
                c = list(map(max, clock[ps[0]], clock[ps[1]]))
            else:
                c = list(map(max, *(clock[p] for p in ps)))
            c[stream_of[v]] = ordinal[v]
            clock[v] = c

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
