"""Memory plan (minimal first version: release after last use in the merged order)."""
from __future__ import annotations

from ..plan.plan import Plan


def plan_memory(plan: Plan, options) -> None:
    order = plan.launch_order()
    last: dict[int, int] = {}
    for n in order:
        for vi in plan.nodes[n].inputs:
            if vi >= 0:
                last[vi] = n
    for vi, n in last.items():
        v = plan.values[vi]
        if not (v.is_output or v.is_input or v.is_const):
            plan.nodes[n].free_after.append(vi)
    total = sum(v.nbytes for v in plan.values if not (v.is_input or v.is_const))
    plan.memory.no_reuse_bytes = total
    plan.memory.peak_bytes = total
