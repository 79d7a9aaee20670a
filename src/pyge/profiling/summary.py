"""Summary figures of a profile, and the critical path through the measured graph.

    wall         median over runs of the operators' span (first start to last end)
    serial       median over runs of the sum of operator durations: the time one stream would need
    concurrency  serial / wall, what the streams achieved
    overlap      median over runs of the time during which two or more operators ran at once
    critical     the longest path through the dataflow graph (data and control edges), each node
                 weighted by its median measured duration: no schedule can beat it
    bound        serial / critical, the most concurrency the graph allows with these op times
    schedule     the longest path when each stream's own order is added as edges: what this
                 plan's stream assignment allows with no overhead at all
    op_types     per operator type: ops per run, median time per run, share of serial
"""
from __future__ import annotations

from collections import defaultdict

from ..analysis.dag import longest_path
from ..analysis.happens_before import dependencies
from .records import OpRecord, median


def node_medians(records: list[OpRecord], num_nodes: int) -> list[float]:
    per: dict[int, list[float]] = defaultdict(list)
    for r in records:
        if r.node >= 0:
            per[r.node].append(r.duration)
    return [median(per.get(i, [])) for i in range(num_nodes)]


def _per_run(records: list[OpRecord]) -> dict[int, list[OpRecord]]:
    runs: dict[int, list[OpRecord]] = defaultdict(list)
    for r in records:
        runs[r.run].append(r)
    return runs


def busy_overlap(recs: list[OpRecord]) -> float:
    """Time during which at least two operators ran at once (sweep over interval ends)."""
    edges = sorted([(r.start, 1) for r in recs] + [(r.end, -1) for r in recs], key=lambda e: (e[0], e[1]))
    total, active, last = 0.0, 0, 0.0
    for t, d in edges:
        if active >= 2:
            total += t - last
        active, last = active + d, t
    return total


def compute_summary(profile) -> dict:
    runs = _per_run(profile.records)
    spans = [max(r.end for r in rs) - min(r.start for r in rs) for rs in runs.values()]
    serials = [sum(r.duration for r in rs) for rs in runs.values()]
    wall, serial = median(spans), median(serials)
    streams = []
    for s in range(profile.num_streams):
        busy = [sum(r.duration for r in rs if r.stream == s) for rs in runs.values()]
        count = sum(1 for r in profile.records if r.stream == s) // max(len(runs), 1)
        b = median(busy)
        streams.append({"stream": s, "ops": count, "busy_s": b,
                        "utilisation": b / wall if wall > 0 else 0.0})
    out = {"graph": profile.graph_name, "device": profile.device, "mode": profile.mode,
           "runs": len(runs), "num_streams": profile.num_streams,
           "num_ops": len(profile.records) // max(len(runs), 1),
           "wall_s": wall, "run_wall_s": median([r.duration for r in profile.runs]),
           "serial_s": serial, "concurrency": serial / wall if wall > 0 else 0.0,
           "overlap_s": median([busy_overlap(rs) for rs in runs.values()]),
           "streams": streams, "stream_busy_s": {d["stream"]: d["busy_s"] for d in streams}}
    out["op_types"] = op_type_breakdown(runs, serial)
    out.update(_bounds(profile, serial))
    return Summary(out)


def op_type_breakdown(runs: dict[int, list[OpRecord]], serial: float) -> list[dict]:
    """Where the time goes, per operator type: ops per run, median time per run, and its share
    of the serial sum; the most expensive type first."""
    types = sorted({r.op_type for rs in runs.values() for r in rs})
    rows = []
    for t in types:
        per_run = [sum(r.duration for r in rs if r.op_type == t) for rs in runs.values()]
        count = sum(1 for rs in runs.values() for r in rs if r.op_type == t) // max(len(runs), 1)
        time_s = median(per_run)
        rows.append({"op_type": t, "count": count, "time_s": time_s,
                     "share": time_s / serial if serial > 0 else 0.0})
    rows.sort(key=lambda d: (-d["time_s"], d["op_type"]))
    return rows


def _bounds(profile, serial: float) -> dict:
    plan = profile.plan
    if plan is None or not any(r.node >= 0 for r in profile.records):
        return {"critical_path_s": None, "bound": None, "schedule_s": None, "critical_path": []}
    w = node_medians(profile.records, len(plan.nodes))
    cp, path = longest_path(dependencies(plan), w)
    sched, _ = longest_path(dependencies(plan, with_streams=True), w)
    return {"critical_path_s": cp, "bound": serial / cp if cp > 0 else None, "schedule_s": sched,
            "critical_path": [plan.nodes[i].name for i in path]}


def _ms(x) -> str:
    return "n/a" if x is None else f"{x * 1e3:.3f} ms"


class Summary(dict):
    """The summary figures: a dict (json.dumps-able as it is) whose keys are also attributes
    (`s.wall_s`, `s.op_types`); str() gives the text a person reads."""

    def __getattr__(self, name: str):
        try:
            return self[name]
        except KeyError:
            raise AttributeError(f"profile summary has no field {name!r}") from None

    def __dir__(self):
        return sorted(set(super().__dir__()) | set(self))

    def __repr__(self) -> str:
        return (f"<profile summary of {self['graph']!r}: wall {_ms(self['wall_s'])}, "
                f"concurrency {self['concurrency']:.2f}x, {self['num_streams']} stream(s); print() it for the rest>")

    def _repr_pretty_(self, printer, cycle) -> None:      # IPython / Jupyter show the text
        printer.text(str(self))

    def __str__(self) -> str:
        d = self
        lines = [f"profile of {d['graph']!r} on {d['device']} ({d['mode']}): {d['runs']} run(s), "
                 f"{d['num_streams']} stream(s), {d['num_ops']} op(s) per run (times are medians over the runs)",
                 f"  wall (op span)             {_ms(d['wall_s'])}   (run() call {_ms(d['run_wall_s'])})",
                 f"  serial sum of op times     {_ms(d['serial_s'])}",
                 f"  achieved concurrency       {d['concurrency']:.2f}x",
                 f"  time with >= 2 ops running {_ms(d['overlap_s'])}"]
        if d.get("critical_path_s") is not None:
            bound = f"{d['bound']:.2f}x" if d["bound"] is not None else "n/a"
            lines.append(f"  critical path              {_ms(d['critical_path_s'])}  -> bound {bound}")
            lines.append(f"  this plan's schedule       {_ms(d['schedule_s'])}  (stream order + deps, no overhead)")
        for s in d["streams"]:
            lines.append(f"  stream {s['stream']:<3} busy {_ms(s['busy_s']):>12}  "
                         f"{100 * s['utilisation']:5.1f}% of wall, {s['ops']} op(s)")
        lines += _op_type_lines(d.get("op_types") or [])
        return "\n".join(lines)


def _op_type_lines(rows: list[dict]) -> list[str]:
    if not rows:
        return []
    w = max(7, *(len(r["op_type"]) for r in rows))
    out = ["  time per op type:", f"    {'op type':<{w}}  {'ops':>5}  {'time':>12}  {'share':>6}"]
    for r in rows:
        out.append(f"    {r['op_type']:<{w}}  {r['count']:>5}  {_ms(r['time_s']):>12}  {100 * r['share']:5.1f}%")
    return out
