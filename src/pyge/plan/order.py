"""The host enqueue order: every stream's steps merged into one sequence that respects every wait.

An executor that drives all streams from one host thread (the sequential executor, the CUDA
executor) enqueues the steps in exactly this order; physical event ids are reused on the
strength of it (passes/sync/event_ids.py), so an executor that uses `Event.event_id` must not
invent an order of its own.

The merge simulates the streams running side by side with unit-time operators: a launch's
*level* is one more than the level of the launch before it on its stream and one more than
the level of the launch each of its WAITs depends on (the one before the RECORD). Steps go
out level by level, and within a level all WAITs, then all LAUNCHes, then all RECORDs (ties
by node index). So an event is recorded late and waited early: lifetimes are short, which
is what lets physical ids be reused, and the host feeds every stream early, which is what a
concurrent device wants. Levels do not depend on how plan nodes are numbered.

A plan compiled with a cap on physical events (`plan.options["pyge.maxEventNum"]`, passes/
event_cap.py) is merged under it: a RECORD that would make more events alive than the cap
waits (its stream with it) until a WAIT closes one, unless nothing else can go first.
"""
from __future__ import annotations

import heapq
from array import array

from ..errors import PlanError
from .plan import LAUNCH, RECORD, WAIT, Plan

_RANK = {WAIT: 0, LAUNCH: 1, RECORD: 2}   # within a level: close events before opening new ones


def _anchors(steps) -> list[int]:
    """Node index each step belongs to: a WAIT to the launch it guards, a RECORD to the
    launch it follows. Ties within a level go by it, so equal levels keep the plan's order."""
    out, nxt = [0] * len(steps), 1 << 62
    for i in range(len(steps) - 1, -1, -1):
        if steps[i].kind == LAUNCH:
            nxt = steps[i].arg
        out[i] = nxt
    prev = -1
    for i, st in enumerate(steps):
        if st.kind == LAUNCH:
            prev = st.arg
        elif st.kind == RECORD:
            out[i] = prev
    return out


def event_cap(plan: Plan) -> int:
    """The plan's cap on events alive at once (0: none)."""
    raw = str(plan.options.get("pyge.maxEventNum", "0") or "0").strip()
    return int(raw) if raw.isdigit() else 0


def host_order(plan: Plan) -> list[tuple[int, int]]:
    """All steps as (stream, position in that stream), in host enqueue order.

    A WAIT is never placed before the RECORD of its event. Raises PlanError if the plan
    deadlocks (a wait whose record can never be enqueued).

    The order is a function of the steps, the number of events and the cap alone; the last
    one computed for a plan is kept on it with those inputs (a private attribute, not a
    field: it is in no dump or file) and given again while they are unchanged, since the
    event-id pass and the verifier both replay it.
    """
    key = _inputs_of(plan)
    memo = getattr(plan, _MEMO, None)
    if memo is not None and memo[0] == key:
        return list(zip(memo[1], memo[2]))
    out = _host_order(plan)
    setattr(plan, _MEMO, (key, array("i", [s for s, _ in out]), array("i", [i for _, i in out])))
    return out


_MEMO = "_host_order_memo"


def _inputs_of(plan: Plan) -> tuple:
    """What host_order reads of `plan`, compactly (packed bytes: compared exactly)."""
    steps = [st for ss in plan.streams for st in ss]
    return (event_cap(plan), len(plan.events), tuple(map(len, plan.streams)),
            array("q", [st.kind for st in steps]).tobytes(),
            array("q", [st.arg for st in steps]).tobytes())


def _host_order(plan: Plan) -> list[tuple[int, int]]:
    streams, n_events = plan.streams, len(plan.events)
    cap = event_cap(plan)
    open_waits = [0] * n_events             # WAITs of each event not yet enqueued
    if cap:
        for steps in streams:
            for st in steps:
                if st.kind == WAIT and 0 <= st.arg < n_events:
                    open_waits[st.arg] += 1
    alive = 0
    deferred: list[tuple[int, int, int, int]] = []   # RECORDs held back by the cap
    pos = [0] * len(streams)
    last = [-1] * len(streams)              # level of the latest launch on each stream
    need = [0] * len(streams)               # least level of the next launch (from waits)
    rec_level: list[int | None] = [None] * n_events
    parked: dict[int, list[int]] = {}       # event -> streams blocked on a WAIT for it
    heap: list[tuple[int, int, int, int]] = []
    out: list[tuple[int, int]] = []
    anchor = [_anchors(steps) for steps in streams]

    def push(s: int) -> None:
        st = streams[s][pos[s]]
        if st.kind == RECORD:
            key = last[s]
        elif st.kind == LAUNCH:
            key = max(last[s] + 1, need[s])
        elif 0 <= st.arg < n_events and rec_level[st.arg] is not None:
            key = max(last[s] + 1, need[s], rec_level[st.arg] + 1)
        else:                               # its RECORD has not been enqueued yet
            parked.setdefault(st.arg, []).append(s)
            return
        heapq.heappush(heap, (key, _RANK[st.kind], anchor[s][pos[s]], s))

    for s in range(len(streams)):
        if streams[s]:
            push(s)
    while heap or deferred:
        forced = not heap                   # nothing else can go: exceed the cap
        item = deferred.pop(0) if forced else heapq.heappop(heap)
        key, _, _, s = item
        st = streams[s][pos[s]]
        if cap and not forced and st.kind == RECORD and alive >= cap and \
                0 <= st.arg < n_events and open_waits[st.arg]:
            deferred.append(item)
            continue
        out.append((s, pos[s]))
        if cap and 0 <= st.arg < n_events and st.kind != LAUNCH:
            if st.kind == RECORD and open_waits[st.arg]:
                alive += 1
            elif st.kind == WAIT:
                open_waits[st.arg] -= 1
                if open_waits[st.arg] == 0:
                    alive -= 1
                    for d in deferred:
                        heapq.heappush(heap, d)
                    deferred.clear()
        if st.kind == LAUNCH:
            last[s] = key
        elif st.kind == WAIT:
            need[s] = max(need[s], key)
        elif 0 <= st.arg < n_events and rec_level[st.arg] is None:
            rec_level[st.arg] = last[s]
            for t in parked.pop(st.arg, ()):
                push(t)
        pos[s] += 1
        if pos[s] < len(streams[s]):
            push(s)
    if parked:
        _deadlock(plan, parked, pos)
    return out


def _deadlock(plan: Plan, parked: dict[int, list[int]], pos: list[int]) -> None:
    e, waiting = min(parked.items(), key=lambda kv: min(kv[1]))
    s = min(waiting)
    what = plan.streams[s][pos[s]].describe(plan if 0 <= e < len(plan.events) else None)
    raise PlanError(f"plan deadlocks: stream {s} waits on {what}, which is never recorded "
                    "before it")


def merged_order(plan: Plan) -> list[int]:
    """Node indices in host enqueue order (a valid order for one thread)."""
    return [plan.streams[s][i].arg for s, i in host_order(plan)
            if plan.streams[s][i].kind == LAUNCH]
