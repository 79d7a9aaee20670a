"""The insert_events pass: Send/Recv events, exactly the minimum set.

A dependency u -> v whose ends sit on different streams is a read-after-write (or, for a
control edge, an ordering) hazard across streams: nothing stops v's stream from running v
before u's stream has finished u, unless a RECORD after u on u's stream is WAITed for
before v on v's stream. Each such pair is one `Event`.

Which edges need one? Let H be the DAG of data edges + control edges + each stream's launch
order (`HappensBefore.of_dependencies` in analysis/happens_before.py). Executing a plan
realises stream order plus the kept events, so a set of events is sufficient iff together
with stream order it reaches everything H reaches. A same-stream edge of the transitive reduction TR(H) is always a
stream-order edge, so the minimum set is exactly the cross-stream edges of TR(H): each of
those must be kept (it is the only path between its ends) and together with stream order
they generate all of H.

Computing TR(H) with vector clocks, consumers in topological order:
  * of v's predecessors on one source stream a only the latest one (highest ordinal p) can
    be in TR(H): the earlier ones reach it through a's stream order;
  * that latest u is in TR(H) iff no other direct predecessor w of v (the latest of each
    other stream, or v's own stream predecessor) already has u in its past, i.e. iff
    clock[w][a] < p for all of them;
  * clock[v] (the elementwise max of its predecessors' clocks, with v's own ordinal on v's
    own stream) equals the max over just those candidates: every other predecessor is
    earlier on one of their streams, so its clock is covered.
Cost O(E * S) for the clocks and O(N * S * S) for the test, S streams: linear in the graph
for a fixed number of streams, no all-pairs closure.
"""
from __future__ import annotations

from ...analysis.happens_before import HappensBefore
from ...errors import PlanError
from ...plan.plan import LAUNCH, RECORD, WAIT, Event, Plan, Step


def minimal_sync_edges(plan: Plan) -> list[tuple[int, int, str]]:
    """The cross-stream edges of TR(H) as (src node, dst node, reason), grouped by consumer."""
    hb, deps = HappensBefore.of_dependencies(plan)
    stream, ordinal, prev, clock = hb.stream_of, hb.ordinal, hb.prev, hb.clock
    producer = [pv.producer for pv in plan.values]
    kept: list[tuple[int, int, str]] = []
    for v in hb.order:
        sv = stream[v]
        latest: dict[int, int] = {}                  # source stream -> its latest predecessor
        for u in deps[v]:
            a = stream[u]
            if a != sv and (a not in latest or ordinal[u] > ordinal[latest[a]]):
                latest[a] = u
        if not latest:
            continue
        cands = list(latest.values())
        if prev[v] >= 0:
            cands.append(prev[v])
        data = None
        for a in sorted(latest):
            u = latest[a]
            # u needs an event unless another direct predecessor has already seen u (or a
            # later launch of stream a): then a path u -> ... -> w -> v exists without it.
            if all(w == u or clock[w][a] < ordinal[u] for w in cands):
                if data is None:
                    data = {producer[vi] for vi in plan.nodes[v].inputs if vi >= 0}
                kept.append((u, v, "data" if u in data else "control"))
    return kept


def insert_events(plan: Plan) -> int:
    """Add one Event (RECORD after the producer, WAIT before the consumer) per edge of
    `minimal_sync_edges`. Returns the number of events. Physical ids are provisional
    (one per event) until passes/sync/event_ids.py assigns them."""
    if plan.events or any(st.kind != LAUNCH for steps in plan.streams for st in steps):
        raise PlanError(f"insert_events: plan {plan.graph_name!r} already has events; "
                        "the pass runs once, on a plan of launches only")
    return add_events(plan, minimal_sync_edges(plan))


def add_events(plan: Plan, pairs) -> int:
    """One Event per (src node, dst node, reason) of `pairs`, in that order: RECORD right
    after src's launch on its stream, WAIT right before dst's launch on its stream (before
    any steps already next to those launches). Returns how many were added."""
    records: dict[int, list[int]] = {}
    waits: dict[int, list[int]] = {}
    added = 0
    events, nodes = plan.events, plan.nodes
    for src, dst, reason in pairs:
        s, d = nodes[src], nodes[dst]
        k = len(events)
        events.append(Event(k, k, s.name, d.name, s.stream, d.stream, src, dst, reason))
        records.setdefault(src, []).append(k)
        waits.setdefault(dst, []).append(k)
        added += 1
    for s, steps in enumerate(plan.streams):
        if not any(st.kind == LAUNCH and (st.arg in records or st.arg in waits) for st in steps):
            continue
        new: list[Step] = []
        for st in steps:
            if st.kind == LAUNCH:
                ks = waits.get(st.arg)
                if ks:
                    new.extend([Step(WAIT, k) for k in ks])
                new.append(st)
                ks = records.get(st.arg)
                if ks:
                    new.extend([Step(RECORD, k) for k in ks])
            else:
                new.append(st)
        plan.streams[s] = new
    return added
