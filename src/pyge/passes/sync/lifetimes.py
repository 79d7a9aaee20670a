"""Event lifetimes in the host enqueue order: what physical ids are reused by (event_ids.py)
and what a cap on live events is met by (event_cap.py)."""
from __future__ import annotations

from ...errors import PlanError
from ...plan.order import host_order
from ...plan.plan import RECORD, WAIT, Plan


def event_lifetimes(plan: Plan) -> list[tuple[int, int]]:
    """Per logical event, (host position of its RECORD, host position of its last WAIT)."""
    n = len(plan.events)
    start, end = [-1] * n, [-1] * n
    for t, (s, i) in enumerate(host_order(plan)):
        st = plan.streams[s][i]
        if st.kind == RECORD:
            if start[st.arg] >= 0:
                raise PlanError(f"event {plan.events[st.arg]} is recorded twice")
            start[st.arg] = t
        elif st.kind == WAIT:
            end[st.arg] = max(end[st.arg], t)
    for k in range(n):
        if start[k] < 0:
            raise PlanError(f"event {plan.events[k]} is never recorded")
    return [(start[k], max(start[k], end[k])) for k in range(n)]
