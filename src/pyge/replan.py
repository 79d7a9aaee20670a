"""A compiled model re-planned with a stream assignment of the caller's.

The stream passes decide streams inside pyge.compile. Tests and benchmarks also need plans
with assignments of their own (random, one stream per branch): they compile once
single-stream (type inference, constant folding, fusion) and re-plan the compiled graph
with `replan`, which runs the compiler's PLAN_PASSES (plan, collective order, events, event
ids, memory plan, verify) on a copy. A policy file (`pyge.policyFile`) is the user-facing way
to the same end.
"""
from __future__ import annotations

from typing import Callable, Mapping

from .compiler import PLAN_PASSES
from .errors import PlanError
from .ir.clone import clone_graph
from .ir.graph import Graph
from .model import CompiledModel
from .options import parse_options
from .passes.pipeline import CompileState, run_pipeline
from .passes.verify.checks import verify_plan

Assignment = Callable[[Graph], Mapping[str, int]] | Mapping[str, int]


def replan(model: CompiledModel, assign: Assignment, device: str = "cpu",
           options: Mapping[str, str] | None = None) -> CompiledModel:
    """A copy of `model` whose root-graph nodes sit on the streams `assign` gives them
    (a mapping of node name to stream, or a function of the copied graph returning one;
    unnamed nodes go to stream 0; ids are renumbered densely). The plan is always verified.
    A dynamic-shape model whose only part is its dynamic root (no static sub-model) is one
    plan of every node, re-planned like a static one; with static sub-models it is refused."""
    if getattr(model, "partitioned", False) and len(model.submodels) > 1:
        raise PlanError(f"replan re-plans one static model; {model.plan.graph_name!r} has dynamic shapes "
                        f"and {len(model.submodels)} parts (compile it with "
                        "ge.exec.static_model_ops_lower_limit or re-plan a part's graph)")
    opts = parse_options(dict(options or {}))
    g = clone_graph(model.graph)
    streams = dict(assign(g) if callable(assign) else assign)
    used = sorted({streams.get(n.name, 0) for n in g.nodes} | {0})
    dense = {s: i for i, s in enumerate(used)}
    for n in g.nodes:
        n.stream_id = dense[streams.get(n.name, 0)]
    st = CompileState(graph=g, options=opts, device=device, num_streams=len(used))
    run_pipeline(PLAN_PASSES, st)
    if not opts["pyge.verify"]:
        verify_plan(st.plan)
    return CompiledModel(g, st.plan, device, opts)


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
