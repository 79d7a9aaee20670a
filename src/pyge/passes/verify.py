"""Plan verifier (minimal first version: deadlock check only)."""
from __future__ import annotations

from ..plan.plan import Plan


def verify_plan(plan: Plan) -> None:
    plan.launch_order()
