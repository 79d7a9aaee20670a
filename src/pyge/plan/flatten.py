"""The plans of a partitioned model as one plan, for reading (`CompiledModel.flat_plan`).

A dynamic-shape model is compiled into a root plan (the dynamic part, with one call node
per static sub-model) and a plan per static sub-model, each with its own streams 0..n-1 and
events. Views that cover the whole model (`model.streams`, `events`, `num_streams`,
`stream_of`, profiles and traces) read one plan in which

  - streams are numbered across the parts: the root's first, then each sub-model's in
    execution order (part k's stream s is global stream offset_k + s);
  - every call node is replaced by the nodes of its sub-model, at its place in the root's
    order (a topological order of the whole model); a sub-model's inputs and outputs are
    the root's values they are bound to, so data dependencies cross the boundary;
  - events keep their parts' order, with logical indices, physical ids and streams
    offset, so that each is unique in the model (each executor makes its own events);
  - the memory plan is the sum of the parts' (their arenas coexist); no buffers.

It is never executed or verified: each part's own plan is (`model.submodels`). An event of
a multi-stream root whose end is a call node keeps that node's name and has node index -1.
"""
from __future__ import annotations

from dataclasses import dataclass, field, replace

from .plan import LAUNCH, Event, MemoryPlan, Plan, PlanNode, PlanValue, Step


@dataclass
class FlatMaps:
    """Where each part's indices went: node (-1 for a call node), value, stream and event offsets."""
    nodes: list[list[int]] = field(default_factory=list)
    values: list[list[int]] = field(default_factory=list)
    stream_offset: list[int] = field(default_factory=list)
    event_offset: list[int] = field(default_factory=list)
    physical_offset: list[int] = field(default_factory=list)


def flatten(plans: list[Plan], calls: dict[int, int]) -> tuple[Plan, FlatMaps]:
    """`plans[0]` is the root; `calls` maps a root node index to the index in `plans` of the
    sub-model it calls. Returns the flat plan and the index maps."""
    maps = FlatMaps()
    s_off = e_off = p_off = 0
    for p in plans:
        maps.stream_offset.append(s_off)
        maps.event_offset.append(e_off)
        maps.physical_offset.append(p_off)
        s_off, e_off, p_off = s_off + p.num_streams, e_off + len(p.events), p_off + p.num_physical_events
        maps.nodes.append([-1] * len(p.nodes))
        maps.values.append([-1] * len(p.values))
    root = plans[0]
    values = [replace(v, buffer=-1) for v in root.values]
    maps.values[0] = list(range(len(values)))
    nodes: list[PlanNode] = []
    for pn in root.nodes:
        k = calls.get(pn.index)
        if k is None:
            maps.nodes[0][pn.index] = len(nodes)
            nodes.append(replace(pn, index=len(nodes), inputs=list(pn.inputs), outputs=list(pn.outputs),
                                 control_preds=[], free_after=[]))
        else:
            _inline(plans[k], k, pn, values, nodes, maps)
    _control_edges(plans, calls, nodes, maps)
    for pn in nodes:
        for o in pn.outputs:
            values[o].producer = pn.index
    streams: list[list[Step]] = []
    events: list[Event] = []
    for k, p in enumerate(plans):
        for steps in p.streams:
            streams.append([Step(st.kind, maps.nodes[k][st.arg]) if st.kind == LAUNCH
                            else Step(st.kind, st.arg + maps.event_offset[k])
                            for st in steps if st.kind != LAUNCH or maps.nodes[k][st.arg] >= 0])
        events += [_moved(e, k, maps) for e in p.events]
    memory = MemoryPlan(peak_bytes=sum(p.memory.peak_bytes for p in plans),
                        no_reuse_bytes=sum(p.memory.no_reuse_bytes for p in plans))
    custom = [s + maps.stream_offset[k] for k, p in enumerate(plans) for s in p.custom_streams]
    flat = Plan(graph_name=root.graph_name, values=values, nodes=nodes, streams=streams,
                events=events, inputs=list(root.inputs), outputs=list(root.outputs), memory=memory,
                custom_streams=custom, options=dict(root.options), meta={"flat": True})
    return flat, maps


def _inline(sub: Plan, k: int, call: PlanNode, values: list[PlanValue], nodes: list[PlanNode],
            maps: FlatMaps) -> None:
    """The nodes of sub-model plan `sub` (the k-th) in place of root call node `call`."""
    vm = maps.values[k]
    for vi, root_vi in zip(sub.inputs, call.inputs):
        vm[vi] = root_vi
    for vi, root_vi in zip(sub.outputs, call.outputs):
        vm[vi] = root_vi
    for v in sub.values:
        if vm[v.index] < 0:
            vm[v.index] = len(values)
            values.append(replace(v, index=len(values), buffer=-1, is_input=False, is_output=False))
    base = len(nodes)
    for pn in sub.nodes:
        maps.nodes[k][pn.index] = base + pn.index
    for pn in sub.nodes:
        gi = base + pn.index
        nodes.append(replace(pn, index=gi, stream=pn.stream + maps.stream_offset[k],
                             inputs=[vm[i] if i >= 0 else -1 for i in pn.inputs],
                             outputs=[vm[i] for i in pn.outputs],
                             control_preds=[base + c for c in pn.control_preds], free_after=[]))


def _control_edges(plans: list[Plan], calls: dict[int, int], nodes: list[PlanNode],
                   maps: FlatMaps) -> None:
    """The root's control edges in flat indices. Through a call node: a node ordered after
    it is ordered after every node of its sub-model, and every node of the sub-model after
    what the call node was ordered after."""
    def ends(ri: int) -> list[int]:
        k = calls.get(ri)
        return [maps.nodes[0][ri]] if k is None else list(maps.nodes[k])
    for pn in plans[0].nodes:
        preds = {g for c in pn.control_preds for g in ends(c)}
        k = calls.get(pn.index)
        if k is None:
            nodes[maps.nodes[0][pn.index]].control_preds = sorted(preds)
        elif preds:
            for gi in maps.nodes[k]:
                nodes[gi].control_preds = sorted(set(nodes[gi].control_preds) | preds)


def _moved(e: Event, k: int, maps: FlatMaps) -> Event:
    s = maps.stream_offset[k]
    return replace(e, index=e.index + maps.event_offset[k], event_id=e.event_id + maps.physical_offset[k],
                   src_stream=e.src_stream + s, dst_stream=e.dst_stream + s,
                   src_node=maps.nodes[k][e.src_node] if e.src_node >= 0 else -1,
                   dst_node=maps.nodes[k][e.dst_node] if e.dst_node >= 0 else -1)


__all__ = ["flatten", "FlatMaps"]
