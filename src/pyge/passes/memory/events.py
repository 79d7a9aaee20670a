"""Events the memory planner adds (`Event.reason == "memory"`), and their removal.

A memory event orders an old tenant's last reader x (stream a) before the producer p of a
new tenant of the same bytes (stream b): RECORD right after x's launch on a, WAIT right
before p's launch on b. blocks.py and pack.py decide which; this module edits the step lists.
Physical ids are then assigned again for all events (event_ids.assign_event_ids, whose
reuse rule covers any event), and the verifier treats a memory event like any other.

plan_memory first strips the memory events of an earlier run, so planning the same plan
twice gives the same result.
"""
from __future__ import annotations

from ...plan.plan import LAUNCH, Plan
from ..sync.events import add_events

MEMORY = "memory"


def strip_memory_events(plan: Plan) -> bool:
    """Remove every memory event (steps too) and renumber the others; True if any went."""
    drop = {e.index for e in plan.events if e.reason == MEMORY}
    if not drop:
        return False
    keep = [e for e in plan.events if e.reason != MEMORY]
    remap = {e.index: i for i, e in enumerate(keep)}
    for s, steps in enumerate(plan.streams):
        new = []
        for st in steps:
            if st.kind != LAUNCH:
                if st.arg in drop:
                    continue
                st.arg = remap.get(st.arg, st.arg)
            new.append(st)
        plan.streams[s] = new
    for i, e in enumerate(keep):
        e.index = i
    plan.events = keep
    return True


def add_memory_events(plan: Plan, edges: list[tuple[int, int]]) -> int:
    """One event per (reader, producer) pair; for one producer, only the latest reader of
    each stream (it follows the others there). Returns the number added. Physical ids are
    provisional (one per event) until assign_event_ids runs."""
    latest: dict[tuple[int, int], int] = {}
    pos: dict[int, int] = {}
    for s, steps in enumerate(plan.streams):
        for i, st in enumerate(steps):
            if st.kind == LAUNCH:
                pos[st.arg] = i
    for x, p in edges:
        key = (p, plan.nodes[x].stream)
        if key not in latest or pos[x] > pos[latest[key]]:
            latest[key] = x
    ordered = sorted(latest.items(), key=lambda kv: (kv[0][0], kv[1]))
    return add_events(plan, [(x, p, MEMORY) for (p, _), x in ordered])
