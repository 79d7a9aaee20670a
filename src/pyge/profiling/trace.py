"""Chrome / Perfetto trace (the JSON "traceEvents" format; open in ui.perfetto.dev or
chrome://tracing).

    one complete event ("ph": "X") per operator run: name = node name, tid = stream id,
    pid = 0, ts/dur in microseconds, args = op type, run index, node index
    thread_name metadata naming each track "stream N"
    each Send and Recv as an instant event ("ph": "i") on its stream, and a flow arrow
    ("ph": "s" -> "ph": "f", same id, "bp": "e") from the producer's slice on the Send's stream
    to the consumer's slice on the Recv's stream
"""
from __future__ import annotations

import json
import os

from ..errors import PygeError

PID = 0


def _us(t: float) -> float:
    return round(t * 1e6, 3)


def _meta(profile) -> list[dict]:
    out = [{"ph": "M", "name": "process_name", "pid": PID, "tid": 0,
            "args": {"name": f"pyge {profile.graph_name} ({profile.device}, {profile.mode})"}}]
    for s in range(profile.num_streams):
        out.append({"ph": "M", "name": "thread_name", "pid": PID, "tid": s, "args": {"name": f"stream {s}"}})
        out.append({"ph": "M", "name": "thread_sort_index", "pid": PID, "tid": s, "args": {"sort_index": s}})
    return out


def _ops(profile) -> list[dict]:
    return [{"ph": "X", "name": r.name, "cat": "op", "pid": PID, "tid": r.stream, "ts": _us(r.start),
             "dur": _us(r.end - r.start), "args": {"op_type": r.op_type, "run": r.run, "node": r.node}}
            for r in profile.records]


def _inside(start: float, end: float, t: float) -> float:
    """A time strictly inside [start, end] near t, so that flow events bind to that slice."""
    eps = min(1e-7, 0.25 * (end - start))
    return min(max(t, start + eps), end - eps)


def _events(profile) -> list[dict]:
    out: list[dict] = []
    slices = {(r.run, r.node): r for r in profile.records}
    for k, e in enumerate(profile.events):
        label = f"e{e.event_id}"
        args = {"event_id": e.event_id, "src": e.src, "dst": e.dst, "run": e.run}
        out.append({"ph": "i", "s": "t", "name": f"Send {label}", "cat": "event", "pid": PID,
                    "tid": e.src_stream, "ts": _us(e.send), "args": args})
        out.append({"ph": "i", "s": "t", "name": f"Recv {label}", "cat": "event", "pid": PID,
                    "tid": e.dst_stream, "ts": _us(e.recv), "args": args})
        pe = profile.plan.events[e.event] if profile.plan is not None else None
        src = slices.get((e.run, pe.src_node)) if pe is not None else None
        dst = slices.get((e.run, pe.dst_node)) if pe is not None else None
        s_ts = _inside(src.start, src.end, e.send) if src is not None else e.send
        f_ts = _inside(dst.start, dst.end, e.recv) if dst is not None else e.recv
        out.append({"ph": "s", "id": k, "name": label, "cat": "event", "pid": PID, "tid": e.src_stream,
                    "ts": _us(s_ts)})
        out.append({"ph": "f", "bp": "e", "id": k, "name": label, "cat": "event", "pid": PID,
                    "tid": e.dst_stream, "ts": _us(f_ts)})
    return out


def chrome_trace(profile) -> dict:
    return {"traceEvents": _meta(profile) + _ops(profile) + _events(profile),
            "displayTimeUnit": "ms",
            "otherData": {"graph": profile.graph_name, "device": profile.device, "mode": profile.mode,
                          "runs": len(profile.runs)}}


def save_trace(profile, path) -> str:
    path = os.fspath(path)
    try:
        with open(path, "w", encoding="utf-8") as f:
            json.dump(chrome_trace(profile), f)
    except OSError as err:
        raise PygeError(f"cannot write trace {path!r}: {err.strerror or err}") from err
    return path
