"""Send/Recv insertion (minimal first version: one event per cross-stream edge, unpruned)."""
from __future__ import annotations

from ..plan.plan import LAUNCH, RECORD, WAIT, Event, Plan, Step


def insert_events(plan: Plan) -> None:
    producer = {v.index: v.producer for v in plan.values}
    pairs = []
    for n in plan.nodes:
        for vi in n.inputs:
            p = producer.get(vi, -1) if vi >= 0 else -1
            if p >= 0 and plan.nodes[p].stream != n.stream and (p, n.index) not in pairs:
                pairs.append((p, n.index))
    records: dict[int, list[int]] = {}
    waits: dict[int, list[int]] = {}
    for src, dst in pairs:
        e = Event(index=len(plan.events), event_id=len(plan.events), src=plan.nodes[src].name,
                  dst=plan.nodes[dst].name, src_stream=plan.nodes[src].stream,
                  dst_stream=plan.nodes[dst].stream, src_node=src, dst_node=dst)
        plan.events.append(e)
        records.setdefault(src, []).append(e.index)
        waits.setdefault(dst, []).append(e.index)
    for s, steps in enumerate(plan.streams):
        new = []
        for st in steps:
            if st.kind == LAUNCH:
                new.extend(Step(WAIT, e) for e in waits.get(st.arg, []))
                new.append(st)
                new.extend(Step(RECORD, e) for e in records.get(st.arg, []))
            else:
                new.append(st)
        plan.streams[s] = new
