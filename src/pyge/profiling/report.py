"""What `pyge streams` prints: every node's stream and events, and a per-stream summary.

    streams_table(model) -> str    for a terminal
    streams_json(model)  -> dict   for tools (json.dumps-able)

"waits" are the events a node waits for before it starts (e<id>@s<stream that records it>),
"records" the events it records when done (e<id>@s<stream that waits>); ids are the physical
event ids executors use.
"""
from __future__ import annotations

from ..formatting import table
from ..plan.plan import LAUNCH, RECORD, WAIT


def _node_events(plan) -> tuple[dict[int, list], dict[int, list]]:
    waits: dict[int, list] = {}
    records: dict[int, list] = {}
    for e in plan.events:
        if e.dst_node >= 0:
            waits.setdefault(e.dst_node, []).append(e)
        if e.src_node >= 0:
            records.setdefault(e.src_node, []).append(e)
    return waits, records


def streams_json(model) -> dict:
    plan = model.plan
    waits, records = _node_events(plan)
    nodes = [{"index": pn.index, "name": pn.name, "op_type": pn.op_type, "engine": pn.engine,
              "stream": pn.stream,
              "waits": [{"event_id": e.event_id, "from": e.src, "stream": e.src_stream}
                        for e in waits.get(pn.index, [])],
              "records": [{"event_id": e.event_id, "to": e.dst, "stream": e.dst_stream}
                          for e in records.get(pn.index, [])]}
             for pn in plan.nodes]
    events = [{"index": e.index, "event_id": e.event_id, "src": e.src, "dst": e.dst,
               "src_stream": e.src_stream, "dst_stream": e.dst_stream, "reason": e.reason}
              for e in plan.events]
    custom = set(plan.custom_streams)
    streams = []
    for s, steps in enumerate(plan.streams):
        launches = [plan.nodes[st.arg].name for st in steps if st.kind == LAUNCH]
        engines = sorted({plan.nodes[st.arg].engine for st in steps if st.kind == LAUNCH})
        streams.append({"stream": s, "ops": len(launches), "nodes": launches, "engines": engines,
                        "sends": sum(1 for st in steps if st.kind == RECORD),
                        "recvs": sum(1 for st in steps if st.kind == WAIT),
                        "custom": s in custom})
    return {"graph": plan.graph_name, "device": str(getattr(model, "device", "cpu")),
            "num_streams": plan.num_streams, "num_events": len(plan.events),
            "num_physical_events": plan.num_physical_events,
            "nodes": nodes, "events": events, "streams": streams}


def _events_cell(items: list[dict]) -> str:
    return ",".join(f"e{x['event_id']}@s{x['stream']}" for x in items) or "-"


def streams_table(model) -> str:
    d = streams_json(model)
    rows = [[str(n["index"]), n["name"], n["op_type"], n["engine"], str(n["stream"]),
             _events_cell(n["waits"]), _events_cell(n["records"])] for n in d["nodes"]]
    out = [f"graph {d['graph']!r}: {d['num_streams']} stream(s), {d['num_events']} event(s) on "
           f"{d['num_physical_events']} physical id(s)", ""]
    out.append(table(["#", "node", "op", "engine", "stream", "waits", "records"], rows,
                     numbers_right=False))
    out.append("")
    srows = [[str(s["stream"]), str(s["ops"]), str(s["sends"]), str(s["recvs"]),
              ",".join(s["engines"]) or "-", "yes" if s["custom"] else "",
              _span(s["nodes"])] for s in d["streams"]]
    out.append(table(["stream", "ops", "sends", "recvs", "engines", "custom", "first .. last"], srows,
                     numbers_right=False))
    return "\n".join(out)


def _span(names: list[str]) -> str:
    if not names:
        return "(empty)"
    return names[0] if len(names) == 1 else f"{names[0]} .. {names[-1]}"
