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
    that order, so every stream is internally consistent with the data flow.
    """
    order = graph.topological_sort()
    values: list[PlanValue] = []
    vindex: dict[int, int] = {}

    def add_value(v, **kw) -> int:
        key = id(v)
        if key in vindex:
            return vindex[key]
        pv = PlanValue(index=len(values), name=v.name, dtype=v.dtype, shape=v.shape, kind=v.kind,
                       nbytes=value_nbytes(v.dtype, v.shape) if v.kind == "tensor" else 0, **kw)
        values.append(pv)
        vindex[key] = pv.index
        return pv.index

    inputs = [add_value(v, is_input=True) for v in graph.inputs]
    for v in graph.initializers.values():
        add_value(v, is_const=True)
    nodes: list[PlanNode] = []
    nindex = {id(n): i for i, n in enumerate(order)}
    streams: list[list[Step]] = [[] for _ in range(max(num_streams, 1))]
    for i, n in enumerate(order):
        if n.stream_id < 0 or n.stream_id >= len(streams):
            raise PlanError(f"node {n.name!r} ({n.op_type}) has stream {n.stream_id}, "
                            f"outside 0..{len(streams) - 1}")
        outs = [add_value(o, producer=i) for o in n.outputs]
        ins = []
        for v in n.inputs:
            if v is None:
                ins.append(-1)
                continue
            vi = vindex.get(id(v))
            if vi is None:
                raise PlanError(f"node {n.name!r} reads {v.name!r}, which is not defined before it")
            ins.append(vi)
        if n.attrs and holds_graph(n.attrs):
            for v in n.implicit_inputs():
                if id(v) not in vindex:
                    raise PlanError(f"node {n.name!r}: subgraph reads {v.name!r}, which is not defined before it")
                ins.append(vindex[id(v)])
        nodes.append(PlanNode(index=i, name=n.name, op_type=n.op_type, stream=n.stream_id,
                              inputs=ins, outputs=outs, engine=n.engine or "compute",
                              control_preds=[nindex[id(p)] for p in n.control_preds if id(p) in nindex]))
        streams[n.stream_id].append(Step(LAUNCH, i))
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
