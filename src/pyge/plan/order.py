"""Merging per-stream step lists into one order that respects every wait."""
from __future__ import annotations

from ..errors import PlanError
from .plan import LAUNCH, RECORD, WAIT, Plan


def merged_order(plan: Plan) -> list[int]:
    """Simulate the streams round-robin; a wait blocks until its record has run.

    Returns node indices in a order valid for one thread. Raises PlanError on deadlock
    (a wait whose record can never run), which is what verify() reports too.
    """
    pos = [0] * len(plan.streams)
    recorded = [False] * len(plan.events)
    order: list[int] = []
    remaining = sum(len(s) for s in plan.streams)
    while remaining:
        progressed = False
        for s, steps in enumerate(plan.streams):
            while pos[s] < len(steps):
                st = steps[pos[s]]
                if st.kind == WAIT and not recorded[st.arg]:
                    break
                if st.kind == LAUNCH:
                    order.append(st.arg)
                elif st.kind == RECORD:
                    recorded[st.arg] = True
                pos[s] += 1
                remaining -= 1
                progressed = True
        if not progressed:
            blocked = [(s, plan.streams[s][pos[s]]) for s in range(len(plan.streams))
                       if pos[s] < len(plan.streams[s])]
            s, st = blocked[0]
            raise PlanError(f"plan deadlocks: stream {s} waits on {st.describe(plan)} which is never recorded")
    return order
