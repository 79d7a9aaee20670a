"""Random DAGs with random stream assignments, for tests and benchmarks of the event passes.

A DAG here is a `DagSpec`: per node, its data predecessors, its control predecessors and its
stream, with nodes numbered in a topological order. It becomes either a real graph
(`spec_to_graph`, runnable: Relu/Abs/Identity/Add/Sum on a small float tensor) or, for the
100,000-node benchmarks, a plan directly (`spec_to_plan`, no graph objects).

`dags()` is a hypothesis strategy of specs (hypothesis is imported only when it is called,
on purpose: it is a test dependency, not a run-time one).
"""
from __future__ import annotations

import random
from dataclasses import dataclass

from ..ir.builder import GraphBuilder
from ..passes.custom import GRAPH_SUCCESS
from ..plan.plan import LAUNCH, Plan, PlanNode, PlanValue, Step


@dataclass
class DagSpec:
    preds: list[list[int]]          # data predecessors of node i (all < i)
    ctrl: list[list[int]]           # control predecessors of node i (all < i)
    streams: list[int]              # stream of node i
    num_streams: int

    def __len__(self) -> int:
        return len(self.preds)


def random_spec(rng: random.Random, n: int, num_streams: int, max_in: int = 3,
                window: int = 64, control_prob: float = 0.05) -> DagSpec:
    """Predecessors drawn from the previous `window` nodes (networks are local), streams uniform."""
    preds, ctrl = [], []
    for i in range(n):
        lo = max(0, i - window)
        k = rng.randint(0, min(max_in, i - lo))
        preds.append(sorted(rng.sample(range(lo, i), k)))
        ctrl.append([rng.randrange(lo, i)] if i > lo and rng.random() < control_prob else [])
    streams = [rng.randrange(num_streams) for _ in range(n)]
    return DagSpec(preds, ctrl, streams, num_streams)


def spec_to_graph(spec: DagSpec, name: str = "random_dag"):
    """A runnable graph: node i is named n<i>; nodes nobody reads are graph outputs."""
    b = GraphBuilder(name)
    x = b.input("x", "float32", (2, 3))
    outs, used = [], set()
    for i, ps in enumerate(spec.preds):
        ins = [outs[p] for p in ps] or [x]
        op = {0: "Relu", 1: ("Relu", "Abs", "Identity")[i % 3], 2: "Add"}.get(len(ps), "Sum")
        outs.append(b.op(op, ins, name=f"n{i}"))
        used.update(ps)
    for i, cs in enumerate(spec.ctrl):
        for c in cs:
            b.control_edge(f"n{c}", f"n{i}")
    for i, v in enumerate(outs):
        if i not in used:
            b.output(v)
    g = b.build()
    for node in g.nodes:
        node.stream_id = spec.streams[int(node.name[1:])]
    return g


def spec_to_plan(spec: DagSpec, name: str = "random_dag") -> Plan:
    """The plan build_plan would make for `spec_to_graph(spec)`, without building the graph."""
    values = [PlanValue(index=0, name="x", dtype="float32", shape=(2, 3), is_input=True)]
    nodes, streams = [], [[] for _ in range(spec.num_streams)]
    for i, (ps, cs) in enumerate(zip(spec.preds, spec.ctrl)):
        values.append(PlanValue(index=i + 1, name=f"n{i}_out", dtype="float32", shape=(2, 3),
                                producer=i))
        nodes.append(PlanNode(index=i, name=f"n{i}", op_type="Relu", stream=spec.streams[i],
                              inputs=[p + 1 for p in ps] or [0], outputs=[i + 1],
                              control_preds=list(cs)))
        streams[spec.streams[i]].append(Step(LAUNCH, i))
    return Plan(graph_name=name, values=values, nodes=nodes, streams=streams, inputs=[0])


def dags(max_nodes: int = 12, max_streams: int = 4, control: bool = True):
    """Hypothesis strategy of DagSpecs (small: the oracle in the tests is brute force)."""
    from hypothesis import strategies as st

    @st.composite
    def build(draw) -> DagSpec:
        n = draw(st.integers(1, max_nodes))
        s = draw(st.integers(1, max_streams))
        preds, ctrl = [], []
        for i in range(n):
            ps = draw(st.lists(st.integers(0, i - 1), max_size=min(3, i), unique=True)) if i else []
            cs = draw(st.lists(st.integers(0, i - 1), max_size=1)) if i and control else []
            preds.append(sorted(ps))
            ctrl.append(cs)
        streams = draw(st.lists(st.integers(0, s - 1), min_size=n, max_size=n))
        return DagSpec(preds, ctrl, streams, s)

    return build()


def fixed_streams_pass(wanted: dict[str, int]):
    """A custom stream pass that puts each named node on the given stream (allocating ids up
    to it), for compiling a random DAG's assignment through the public pass API."""
    def assign(graph, ctx):
        for node in graph.get_direct_nodes():
            target = wanted.get(node.name, 0)
            while ctx.get_curr_max_stream_id() < target:
                ctx.allocate_next_stream_id()
            ctx.set_stream_id(node, target)
        return GRAPH_SUCCESS
    return assign
