"""A compiled model re-planned with a stream assignment of the caller's.

The stream passes decide streams inside pyge.compile. Tests and benchmarks also need plans
with assignments of their own (random, one stream per branch): they compile once
single-stream (type inference, constant folding, fusion) and re-plan the compiled graph
with `replan`, which runs the back half of the compiler (plan, collective order, events,
event ids, memory plan, verify) on a copy. A policy file (`pyge.policyFile`) is the
user-facing way to the same end.
"""
from __future__ import annotations

from typing import Callable, Mapping

from .ir.clone import clone_graph
from .ir.graph import Graph
from .model import CompiledModel
from .options import parse_options
from .passes.graph.collectives import order_collectives
from .passes.sync.event_ids import assign_event_ids
from .passes.sync.events import insert_events
from .passes.memory.planner import plan_memory
from .passes.verify.checks import verify_plan
from .plan.build import build_plan

Assignment = Callable[[Graph], Mapping[str, int]] | Mapping[str, int]


def replan(model: CompiledModel, assign: Assignment, device: str = "cpu",
           options: Mapping[str, str] | None = None) -> CompiledModel:
    """A copy of `model` whose root-graph nodes sit on the streams `assign` gives them
    (a mapping of node name to stream, or a function of the copied graph returning one;
    unnamed nodes go to stream 0; ids are renumbered densely)."""
    opts = parse_options(dict(options or {}))
    g = clone_graph(model.graph)
    streams = dict(assign(g) if callable(assign) else assign)
    used = sorted({streams.get(n.name, 0) for n in g.nodes} | {0})
    dense = {s: i for i, s in enumerate(used)}
    for n in g.nodes:
        n.stream_id = dense[streams.get(n.name, 0)]
    plan = build_plan(g, len(used), [], opts.as_dict())
    order_collectives(plan, g)
    insert_events(plan)
    assign_event_ids(plan, opts["pyge.maxEventNum"])
    plan_memory(plan, opts)
    verify_plan(plan)
    return CompiledModel(g, plan, device, opts)


def branch_streams(k: int) -> Callable[[Graph], dict[str, int]]:
    """GE-like assignment: a node continues its first predecessor's stream unless a sibling
    already took it; otherwise it opens the next stream round-robin (at most k)."""
    def assign(g: Graph) -> dict[str, int]:
        out: dict[str, int] = {}
        taken: set[str] = set()           # producers whose stream a successor already continued
        nxt = 0
        for n in g.topological_sort():
            free = [p for p in n.predecessors if p.name in out and p.name not in taken]
            if free:
                out[n.name] = out[free[0].name]
                taken.add(free[0].name)
            else:
                out[n.name] = nxt % k
                nxt += 1
        return out
    return assign
