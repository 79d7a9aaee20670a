"""verify(), the collectives check: every rank issues the plan's collectives in one order.

A collective completes only when every rank has issued it, and every rank runs the same
plan. If two collectives are not ordered by the plan's happens-before (stream order and
events), thread or device timing may issue them A-then-B on one rank and B-then-A on
another, and then each waits for the other until the collective times out. So the collectives must be totally ordered.

Checked on the replayed clocks of clocks.PlanClocks, not on the passes that built the
plan: sort the collectives by their position in the replay (a linear extension of
happens-before); they are totally ordered exactly when each one happens before the next in
that list (a chain is total, and in a total order the replay's order is the order itself).

Which nodes are collectives: plan/collectives.py (the compiler's list in the plan, and
every node of an ONNX Runtime collective op type).
"""
from __future__ import annotations

from ...errors import PlanError, VerificationError
from ...plan.collectives import plan_collectives
from ...plan.plan import Plan
from .clocks import PlanClocks


def check_collective_order(plan: Plan, clocks: PlanClocks) -> None:
    """Raise VerificationError naming the first two collectives that are not ordered."""
    try:
        held = plan_collectives(plan)
    except PlanError as err:
        raise VerificationError(str(err)) from err
    chain = sorted(held, key=lambda v: clocks.rank[v])
    for u, v in zip(chain, chain[1:]):
        if not clocks.before(u, v):
            raise VerificationError(
                f"collectives {clocks.where(u)} and {clocks.where(v)} are not ordered: ranks "
                "could issue them in different orders and wait for each other until they time out "
                "(put them on one stream, or order them with an event)")
