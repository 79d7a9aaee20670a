"""model.profile: records, trace, summary, plot."""
from __future__ import annotations

import json

import pytest

from pyge.errors import OptionError
from pyge.profiling import OpRecord, Profile, RunRecord
from pyge.profiling.hooks import CpuHooks
from pyge.profiling.records import derive_events

from ._helpers import feeds, reference_model


@pytest.fixture(scope="module")
def serial_profile():
    return reference_model(False).profile(feeds(), runs=3, warmup=1)


@pytest.fixture(scope="module")
def split_profile():
    return reference_model(True).profile(feeds(), runs=4, warmup=1)


def test_one_record_per_op_run(serial_profile):
    p = serial_profile
    names = [n.name for n in p.plan.nodes]
    assert len(p.records) == 3 * len(names)
    assert {r.run for r in p.records} == {0, 1, 2}
    for run in range(3):
        recs = sorted(p.run_records(run), key=lambda r: r.start)
        assert sorted(r.name for r in recs) == sorted(names)
        assert all(r.start <= r.end for r in recs)
        # One stream: operators follow one another.
        assert all(a.end <= b.start for a, b in zip(recs, recs[1:]))
    assert all(r.stream == 0 and r.op_type for r in p.records)
    assert len(p.runs) == 3 and all(r.duration > 0 for r in p.runs)


def test_trace_format(serial_profile, tmp_path):
    path = serial_profile.save_trace(tmp_path / "trace.json")
    trace = json.loads(open(path).read())
    events = trace["traceEvents"]
    xs = [e for e in events if e["ph"] == "X"]
    assert len(xs) == len(serial_profile.records)
    for e, r in zip(xs, serial_profile.records):
        assert e["name"] == r.name and e["tid"] == r.stream and e["pid"] == 0
        assert e["args"]["op_type"] == r.op_type and e["args"]["run"] == r.run
        assert e["dur"] == pytest.approx(r.duration * 1e6, abs=0.01)
    names = {e["tid"]: e["args"]["name"] for e in events if e["ph"] == "M" and e["name"] == "thread_name"}
    assert names == {0: "stream 0"}


def test_trace_send_recv_and_flows(split_profile):
    p = split_profile
    assert p.num_streams == 2 and len(p.events) == 4 * len(p.plan.events)
    trace = p.to_chrome_trace()["traceEvents"]
    sends = [e for e in trace if e["ph"] == "i" and e["name"].startswith("Send")]
    recvs = [e for e in trace if e["ph"] == "i" and e["name"].startswith("Recv")]
    assert len(sends) == len(recvs) == len(p.events)
    starts = {e["id"]: e for e in trace if e["ph"] == "s"}
    ends = {e["id"]: e for e in trace if e["ph"] == "f"}
    assert starts.keys() == ends.keys() and len(starts) == len(p.events)
    slices = {(e["args"]["run"], e["name"]): e for e in trace if e["ph"] == "X"}
    for k, ev in enumerate(p.events):
        s, f = starts[k], ends[k]
        assert f["bp"] == "e" and s["tid"] == ev.src_stream and f["tid"] == ev.dst_stream
        src, dst = slices[(ev.run, ev.src)], slices[(ev.run, ev.dst)]
        assert src["ts"] <= s["ts"] <= src["ts"] + src["dur"]      # bound to the producer's slice
        assert dst["ts"] <= f["ts"] <= dst["ts"] + dst["dur"]      # and to the consumer's


def test_summary(split_profile):
    s = split_profile.summary()
    for key in ("wall_s", "serial_s", "concurrency", "streams", "stream_busy_s", "critical_path_s", "bound"):
        assert key in s
    assert s["concurrency"] == pytest.approx(s["serial_s"] / s["wall_s"])
    assert set(s["stream_busy_s"]) == {0, 1}
    assert 0 < s["critical_path_s"] <= s["serial_s"] * 1.5
    text = str(s)
    assert "concurrency" in text and "stream 1" in text and "critical path" in text
    json.dumps(s)   # usable by tools as is


def test_plot_png(split_profile, tmp_path):
    path = split_profile.plot(tmp_path / "timeline.png")
    data = open(path, "rb").read()
    assert data[:8] == b"\x89PNG\r\n\x1a\n" and len(data) > 5000
    split_profile.plot(tmp_path / "run0.png", run=0)


@pytest.mark.parametrize("runs,warmup", [(0, 1), (2, -1), ("x", 0), (1.5, 0), (True, 0), (2, 0.5),
                                         (float("inf"), 0), (float("nan"), 0)])
def test_bad_counts(runs, warmup):
    with pytest.raises(OptionError, match="runs"):
        reference_model(False).profile(feeds(), runs=runs, warmup=warmup)


def _fake(plan, times: dict[str, tuple[float, float, int]], run=0) -> list[OpRecord]:
    idx = {n.name: n for n in plan.nodes}
    return [OpRecord(idx[k].index, k, idx[k].op_type, s, a, b, run) for k, (a, b, s) in times.items()]


def test_critical_path_and_overlap_on_known_times():
    model = reference_model(True)
    plan = model.plan
    assert {n.name for n in plan.nodes} == {"Relu_1", "Abs_1", "Add_1"}
    recs = _fake(plan, {"Relu_1": (0.0, 3.0, 0), "Abs_1": (1.0, 3.0, 1), "Add_1": (3.0, 4.0, 0)})
    p = Profile("reference", "cpu", 2, plan, recs, derive_events(plan, recs), [RunRecord(0, 0.0, 4.0)])
    s = p.summary()
    assert s["serial_s"] == pytest.approx(6.0) and s["wall_s"] == pytest.approx(4.0)
    assert s["concurrency"] == pytest.approx(1.5) and s["overlap_s"] == pytest.approx(2.0)
    assert s["critical_path_s"] == pytest.approx(4.0) and s["critical_path"] == ["Relu_1", "Add_1"]
    assert s["bound"] == pytest.approx(1.5)
    assert s["stream_busy_s"] == {0: pytest.approx(4.0), 1: pytest.approx(2.0)}
    assert p.overlap("Relu_1", "Abs_1") == pytest.approx(2.0)
    assert p.overlap_fraction("Relu_1", "Abs_1") == pytest.approx(1.0)
    assert p.overlap("Abs_1", "Add_1") == 0.0
    ev = p.events[0]
    assert (ev.src, ev.dst, ev.send, ev.recv) == ("Abs_1", "Add_1", 3.0, 3.0)
    with pytest.raises(KeyError):
        p.overlap("Relu_1", "nope")


def test_cpu_hooks_parse_runs():
    model = reference_model(True)
    plan = model.plan
    h = CpuHooks(2)
    for _ in range(2):
        for pn in plan.nodes:
            h.before(pn.index, pn.stream)
            h.after(pn.index, pn.stream)
        h.record(0, 1)
        h.wait(0, 0)
        h.end_run()
    recs = h.op_records(plan, t0_ns=0)
    assert len(recs) == 2 * len(plan.nodes) and {r.run for r in recs} == {0, 1}
    hooked = h.hooked_events(0)
    assert {k[:2] for k in hooked} == {("record", 0), ("wait", 0), ("record", 1), ("wait", 1)}
