"""streams_table / streams_json (what `pyge streams` prints)."""
from __future__ import annotations

import json

from pyge.profiling.report import streams_json, streams_table

from ._helpers import reference_model


def test_json_shape():
    model = reference_model(True)
    d = streams_json(model)
    json.dumps(d)
    assert d["num_streams"] == 2 and d["num_events"] == len(model.events)
    nodes = {n["name"]: n for n in d["nodes"]}
    ev = model.events[0]
    assert nodes["Abs_1"]["stream"] == 1 and nodes["Abs_1"]["engine"]
    assert nodes[ev.src]["records"] == [{"event_id": ev.event_id, "to": ev.dst, "stream": ev.dst_stream}]
    assert nodes[ev.dst]["waits"] == [{"event_id": ev.event_id, "from": ev.src, "stream": ev.src_stream}]
    s0, s1 = d["streams"]
    assert s1["nodes"] == ["Abs_1"] and s1["custom"] and not s0["custom"]
    assert s0["recvs"] == s1["sends"] == len(model.events)


def test_table_text():
    model = reference_model(True)
    text = streams_table(model)
    lines = text.splitlines()
    header = next(l for l in lines if l.startswith("#"))
    assert header.split() == ["#", "node", "op", "engine", "stream", "waits", "records"]
    abs_row = next(l for l in lines if " Abs_1 " in l)
    ev = model.events[0]
    assert f"e{ev.event_id}@s{ev.dst_stream}" in abs_row
    assert any(l.startswith("stream") and "custom" in l for l in lines)
    assert "2 stream(s)" in lines[0]


def test_single_stream_table():
    text = streams_table(reference_model(False))
    assert "1 stream(s), 0 event(s)" in text
