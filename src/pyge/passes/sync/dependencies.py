"""Node-level dependency structure of a plan, for the event passes.

H is the DAG of the plan's nodes with an edge u -> v for every data dependency (v reads a
value u produces, implicit subgraph reads included), every control edge, and every pair of
consecutive launches on one stream. Everything the event passes decide is a statement
about reachability in H, answered with per-stream vector clocks:

    clock[v][s] = position (launch ordinal) on stream s of the latest launch that reaches v

Because a stream is a chain, u (ordinal p on stream a) reaches v iff clock[v][a] >= p: the
clock of a node answers "does u happen before me" for every u in O(1), with O(S) memory
per node instead of an all-pairs closure.

The verifier (passes/verify.py) deliberately does not use this module: it recomputes
happens-before from the finished step lists.
"""
from __future__ import annotations

from collections import deque

from ...errors import PlanError
from ...plan.plan import LAUNCH, Plan


class StreamLayout:
    """Where each node sits: its stream, its launch ordinal there, its stream predecessor."""

    __slots__ = ("stream", "ordinal", "prev", "chains")

    def __init__(self, plan: Plan):
        n = len(plan.nodes)
        self.stream = [-1] * n
        self.ordinal = [-1] * n
        self.prev = [-1] * n
        self.chains: list[list[int]] = []
        for s, steps in enumerate(plan.streams):
            chain = [st.arg for st in steps if st.kind == LAUNCH]
            for i, v in enumerate(chain):
                if not 0 <= v < n or self.stream[v] >= 0:
                    raise PlanError(f"stream {s} launches node #{v}, which is out of range "
                                    "or already launched")
                if plan.nodes[v].stream != s:
                    raise PlanError(f"node {plan.nodes[v].name!r} says stream "
                                    f"{plan.nodes[v].stream} but is launched on stream {s}")
                self.stream[v], self.ordinal[v] = s, i
                self.prev[v] = chain[i - 1] if i else -1
            self.chains.append(chain)
        missing = [i for i in range(n) if self.stream[i] < 0]
        if missing:
            raise PlanError(f"node {plan.nodes[missing[0]].name!r} is launched on no stream")


def dependency_preds(plan: Plan) -> tuple[list[list[int]], list[set[int]]]:
    """Per node, its data and control predecessors (deduplicated, self excluded).

    Returns (preds, data_preds): data_preds[v] is the subset that feeds v a value, so an
    event can say whether it guards data or only a control edge.
    """
    producer = [pv.producer for pv in plan.values]
    preds: list[list[int]] = []
    data_preds: list[set[int]] = []
    for v, node in enumerate(plan.nodes):
        data = {producer[vi] for vi in node.inputs if vi >= 0} - {-1, v}
        ctrl = [p for p in node.control_preds if p != v and p not in data]
        data_preds.append(data)
        preds.append(sorted(data) + sorted(set(ctrl)))
    return preds, data_preds


def topological_order(plan: Plan, preds: list[list[int]], layout: StreamLayout) -> list[int]:
    """A topological order of H (Kahn). Raises PlanError if H has a cycle.

    For plans from build_plan this is simply 0..n-1; it is computed rather than assumed so
    that a hand-made plan whose stream order contradicts its data flow is reported, not
    silently mis-synchronised.
    """
    n = len(plan.nodes)
    indeg = [0] * n
    succs: list[list[int]] = [[] for _ in range(n)]
    for v in range(n):
        ps = preds[v] + ([layout.prev[v]] if layout.prev[v] >= 0 else [])
        indeg[v] = len(ps)
        for p in ps:
            succs[p].append(v)
    ready = deque(v for v in range(n) if indeg[v] == 0)
    order: list[int] = []
    while ready:
        u = ready.popleft()
        order.append(u)
        for w in succs[u]:
            indeg[w] -= 1
            if indeg[w] == 0:
                ready.append(w)
    if len(order) != n:
        stuck = next(v for v in range(n) if indeg[v] > 0)
        raise PlanError(f"stream order contradicts the dependencies around node "
                        f"{plan.nodes[stuck].name!r} (stream {layout.stream[stuck]}): "
                        "no order can satisfy both, the plan would deadlock")
    return order
