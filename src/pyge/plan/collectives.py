"""Which plan nodes are collectives (a query on the plain-data plan, for the verifier and
the CUDA executor's capture decision).

A node is one when the compiler listed it in plan.meta["collectives"]
(passes/sync/collectives.py; that list also holds nodes whose subgraphs run a collective), or,
read from the plan alone, when its op type is one of ONNX Runtime's collectives.
"""
from __future__ import annotations

from ..errors import PlanError
from .plan import Plan

META_KEY = "collectives"
COLLECTIVE_OP_TYPES = frozenset({"AllReduce", "AllGather", "AllToAll"})


def plan_collectives(plan: Plan) -> list[int]:
    """Node indices of the plan's collectives, ascending. Raises PlanError when the listed
    indices are not node indices (a hand-made or corrupt plan)."""
    listed = plan.meta.get(META_KEY, ())
    if not isinstance(listed, (list, tuple)) or not all(
            isinstance(i, int) and not isinstance(i, bool) and 0 <= i < len(plan.nodes) for i in listed):
        raise PlanError(f"plan {plan.graph_name!r}: its list of collective nodes "
                        f"(meta {META_KEY!r}) is not a list of node indices")
    found = {pn.index for pn in plan.nodes if pn.op_type in COLLECTIVE_OP_TYPES}
    return sorted(found.union(listed))
