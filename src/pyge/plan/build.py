"""Graph with stream ids -> Plan with launch steps (events and memory come from later passes)."""
from __future__ import annotations

from ..errors import PlanError
from ..ir.graph import Graph
from ..ir.node import holds_graph
from .plan import LAUNCH, Plan, PlanNode, PlanValue, Step, value_nbytes


def build_plan(graph: Graph, num_streams: int, custom_streams: list[int] | None = None,
               options: dict[str, str] | None = None) -> Plan:
    """Lay the root graph's nodes out as per-stream launch lists.

    Node indices follow one topological order of the graph; each stream's launches are in
    that order, so every stream is internally consistent with the data flow. (One pass
    over the nodes, its dataclasses built from positional arguments: it runs on every
    node of every compile.)
    """
    order = graph.topological_sort()
    values: list[PlanValue] = []
    vindex: dict[int, int] = {}

    def add_value(v, producer: int = -1, is_input: bool = False, is_const: bool = False) -> int:
        key = id(v)
        vi = vindex.get(key)
        if vi is None:
            vi = vindex[key] = len(values)
            kind = v.kind
            values.append(PlanValue(vi, v.name, v.dtype, v.shape, kind, producer, is_input, False,
                                    is_const, value_nbytes(v.dtype, v.shape) if kind == "tensor" else 0))
        return vi

    inputs = [add_value(v, is_input=True) for v in graph.inputs]
    for v in graph.initializers.values():
        add_value(v, is_const=True)
    nodes: list[PlanNode] = []
    nindex = {id(n): i for i, n in enumerate(order)}
    streams: list[list[Step]] = [[] for _ in range(max(num_streams, 1))]
    count = len(streams)
    vget = vindex.get
    for i, n in enumerate(order):
        sid = n.stream_id
        if not 0 <= sid < count:
            raise PlanError(f"node {n.name!r} ({n.op_type}) has stream {sid}, outside 0..{count - 1}")
        outs = [add_value(o, i) for o in n._outputs]
        ins = [-1 if v is None else vget(id(v)) for v in n._inputs]
        if None in ins:
            v = n._inputs[ins.index(None)]
            raise PlanError(f"node {n.name!r} reads {v.name!r}, which is not defined before it")
        if n.attrs and holds_graph(n.attrs):
            for v in n.implicit_inputs():
                if id(v) not in vindex:
                    raise PlanError(f"node {n.name!r}: subgraph reads {v.name!r}, which is not defined before it")
                ins.append(vindex[id(v)])
        cps = n._control_preds
        nodes.append(PlanNode(i, n.name, n.op_type, sid, ins, outs, n.engine or "compute",
                              [nindex[id(p)] for p in cps if id(p) in nindex] if cps else []))
        streams[sid].append(Step(LAUNCH, i))
    outputs = []
    for v in graph.outputs:
        if id(v) not in vindex:
            raise PlanError(f"graph output {v.name!r} is not produced by the graph")
        idx = vindex[id(v)]
        values[idx].is_output = True
        outputs.append(idx)
    return Plan(graph_name=graph.name, values=values, nodes=nodes, streams=streams,
                inputs=inputs, outputs=outputs, custom_streams=list(custom_streams or []),
                options=dict(options or {}))
