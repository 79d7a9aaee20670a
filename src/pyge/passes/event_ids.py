"""Physical event ids (minimal first version: one per logical event)."""
from __future__ import annotations

from ..errors import PlanError
from ..plan.plan import Plan


def assign_event_ids(plan: Plan, max_events: int) -> None:
    for i, e in enumerate(plan.events):
        e.event_id = i
    if len(plan.events) > max_events:
        raise PlanError(f"plan needs {len(plan.events)} events, above ge.maxEventNum={max_events}")
