"""GE's AssignByDependencyPass: a cluster continues a predecessor's stream, else opens one.

Clusters are visited in order (of their first node). An unassigned compute cluster takes
the stream of its first predecessor cluster (in the order its edges are met) that

  * holds a stream the rules gave by dependency (not a labelled or independent stream),
  * continues a stream of the cluster's own engine (its own engine, or, for an attach
    cluster such as an If node, the engine of the stream it rode on: GE's reused_subgraph),
  * and has not already handed that stream to another successor of that engine.

Otherwise the cluster opens a new stream of its engine. Per engine, new streams are taken
round-robin from at most ``ge.streamMaxParallelNum`` streams (default 1, as in GE: with one
engine everything that is not labelled or independent shares one stream). An attach cluster
rides on its first predecessor's stream whatever the engine, and on the compute engine's
first stream when it has none; it never uses up a hand-off. Skip-engine clusters without a
label are looked through (their predecessors count) and get their streams from the skip rule.

As in GE, streams are first numbered per engine and only then laid out, engine by engine in
name order, on fresh ids.
"""
from __future__ import annotations

import logging

from ..graph.engines import ATTACH, COMPUTE, SKIP
from .clusters import Cluster
from .context import StreamContext

log = logging.getLogger(__name__)

Slot = tuple[str, int]   # (engine, per-engine stream number)


class _Slots:
    """Per-engine round-robin stream numbers (GE's engine_next_streams_ / engine_stream_num_)."""

    def __init__(self, ctx: StreamContext):
        self.ctx = ctx
        self.next_local: dict[str, int] = {}
        self.count: dict[str, int] = {}

    def new(self, engine: str) -> Slot:
        local = self.next_local.get(engine, 0)
        if local >= self.ctx.parallel_num(engine):
            local = 0
        self.next_local[engine] = local + 1
        self.count[engine] = max(self.count.get(engine, 0), local + 1)
        return engine, local

    def first(self, engine: str) -> Slot:
        self.count[engine] = max(self.count.get(engine, 0), 1)
        self.next_local.setdefault(engine, 1)
        return engine, 0

    def to_streams(self) -> dict[Slot, int]:
        return {(engine, local): self.ctx.new_stream()
                for engine in sorted(self.count) for local in range(self.count[engine])}


def _transparent(c: Cluster) -> bool:
    return c.kind == SKIP and c.label is None


class _Preds:
    """Predecessor clusters with unlabelled skip clusters looked through (memoised)."""

    def __init__(self) -> None:
        self._memo: dict[int, list[Cluster]] = {}

    def __call__(self, c: Cluster) -> list[Cluster]:
        out: dict[int, Cluster] = {}
        for p in c.preds:
            for q in (self._through(p) if _transparent(p) else (p,)):
                if q is not c:
                    out.setdefault(id(q), q)
        return list(out.values())

    def _through(self, skip: Cluster) -> list[Cluster]:
        got = self._memo.get(id(skip))
        if got is None:
            got = self._memo[id(skip)] = self(skip)
        return got


def assign_by_dependency(clusters: list[Cluster], ctx: StreamContext) -> int:
    """Assign every unassigned, non-skip cluster; returns how many."""
    preds_of = _Preds()
    slots = _Slots(ctx)
    slot_of: dict[int, Slot] = {}
    handed: set[int] = set()         # clusters that already passed their stream on
    todo = [c for c in clusters if c.stream < 0 and c.kind != SKIP]
    for c in todo:
        slot_of[id(c)] = _pick(c, preds_of(c), slot_of, handed) or (
            slots.first(COMPUTE) if c.kind == ATTACH else slots.new(c.engine))
    streams = slots.to_streams()
    for c in todo:
        c.stream = streams[slot_of[id(c)]]
        log.debug("cluster %d (%s, %d node(s), first %s) -> stream %d", c.index, c.engine,
                  len(c.nodes), c.nodes[0].name, c.stream)
    return len(todo)


def _pick(c: Cluster, preds: list[Cluster], slot_of: dict[int, Slot], handed: set[int]) -> Slot | None:
    attach = c.kind == ATTACH
    for p in preds:
        slot = slot_of.get(id(p))
        if slot is None:      # labelled or independent: those streams are never continued
            continue
        if attach:
            return slot
        if slot[0] != c.engine or id(p) in handed:
            continue
        # Only a successor of the stream's engine uses up the hand-off (GE's CouldReuse).
        handed.add(id(p))
        return slot
    return None
