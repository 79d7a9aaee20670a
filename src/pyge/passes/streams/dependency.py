"""Rule 3 (GE's AssignByDependencyPass): a node continues a predecessor's stream.

Walking the graph in topological order, a compute node takes the stream of its first
predecessor (in input order) that

  * holds a stream of the node's own engine (not a labelled or independent stream), and
  * has not already handed that stream to another successor of the same engine.

Otherwise the node opens a new stream of its engine: per engine, new streams are taken
round-robin from at most ``ge.streamMaxParallelNum`` streams (default 1, as in GE, which is
why by default all compute nodes end up on one stream). An attach-engine node rides on its
first predecessor's stream whatever its engine, and on the compute engine's first stream
when it has none. Unlabelled skip nodes are looked through (their producers count as the
predecessors) and get their stream later, from rule 4.

As in GE, streams are first numbered per engine and only then laid out globally, engine by
engine in name order; in a subgraph the first of them is the parent node's stream.
"""
from __future__ import annotations

import logging

from ...ir.graph import Graph, Node
from ..engines import ATTACH, COMPUTE, SKIP, kind_of
from ._graph import EffectivePreds
from .context import StreamContext

log = logging.getLogger(__name__)

Slot = tuple[str, int]   # (engine, per-engine stream number)


class _Slots:
    """Per-engine round-robin stream numbers (GE's engine_next_streams_/engine_stream_num_)."""

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
        out: dict[Slot, int] = {}
        for engine in sorted(self.count):
            for local in range(self.count[engine]):
                if not out and self.ctx.default_stream is not None:
                    out[(engine, local)] = self.ctx.default_stream
                else:
                    out[(engine, local)] = self.ctx.new_stream()
        return out


def assign_by_dependency(graph: Graph, ctx: StreamContext) -> int:
    """Assign every unassigned compute/attach node of `graph`; returns how many."""
    preds_of = EffectivePreds()
    slots = _Slots(ctx)
    slot_of: dict[int, Slot] = {}
    handed: set[int] = set()   # predecessors that already passed their stream on
    todo = [n for n in graph.topological_sort() if n.stream_id < 0 and kind_of(n) != SKIP]
    for n in todo:
        slot_of[id(n)] = _pick(n, preds_of(n), slot_of, handed) or (
            slots.first(COMPUTE) if kind_of(n) == ATTACH else slots.new(n.engine or COMPUTE))
    streams = slots.to_streams()
    for n in todo:
        n.stream_id = streams[slot_of[id(n)]]
        log.debug("node %s (%s) -> stream %d", n.name, n.op_type, n.stream_id)
    return len(todo)


def _pick(n: Node, preds: list[Node], slot_of: dict[int, Slot], handed: set[int]) -> Slot | None:
    attach = kind_of(n) == ATTACH
    for p in preds:
        slot = slot_of.get(id(p))
        if slot is None:      # labelled or independent: those streams are never continued
            continue
        if attach:
            return slot
        if slot[0] != n.engine or id(p) in handed:
            continue
        # Only a successor of the same engine uses up the hand-off (GE's CouldReuse).
        handed.add(id(p))
        return slot
    return None
