"""The order_collectives pass: one issue order of the plan's collectives on every rank.

Every rank runs the same plan, and a collective only completes when every rank has issued
it: if two collectives could start in either order, one rank may issue A then B while
another issues B then A, and both wait forever. They are safe when the plan's happens-before
orders all of them totally: then each rank issues them in that one order, whatever its
threads' timing. The built-in allocation puts them on one stream of the independent engine,
which orders them already; a stream label, a policy or a custom stream pass may spread them
over several streams. So each collective gets a control edge from the previous one in plan
order (a topological order, the same on every rank) when the two sit on different streams.
insert_events, which runs next, turns an edge into an event only where the plan does not
already order the pair, so a plan that was already safe keeps its events. The edge cannot
make a cycle: the plan order runs along every dependency and every stream, so the earlier
node can never depend on the later one. plan.meta["collectives"] lists the collective nodes
for the verifier (passes/verify/collectives.py), which re-checks the total order on the
finished plan.
"""
from __future__ import annotations

import logging

from ...ir.graph import Graph
from ...kernels.collective import holds_collective
from ...plan.collectives import META_KEY
from ...plan.plan import Plan

log = logging.getLogger(__name__)


def order_collectives(plan: Plan, graph: Graph) -> int:
    """Chain the plan's collectives in plan order (see the module docstring); returns how
    many control edges were added."""
    holders = {n.name for n in graph.nodes if holds_collective(n)}
    chain = [pn.index for pn in plan.nodes if pn.name in holders]
    plan.meta[META_KEY] = chain
    added = 0
    for u, v in zip(chain, chain[1:]):
        later = plan.nodes[v]
        if plan.nodes[u].stream != later.stream and u not in later.control_preds:
            later.control_preds.append(u)
            added += 1
    if added:
        log.info("collectives of %r spread over several streams: %d control edge(s) keep one "
                 "issue order on every rank", plan.graph_name, added)
    return added
