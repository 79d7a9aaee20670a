"""Output a person reads: the summary prints as text and stays an object with fields, with a
per-op-type breakdown; timelines count runs from 1 and can share one time axis."""
from __future__ import annotations

import json

import pytest

from pyge.profiling import OpRecord, Profile, RunRecord
from pyge.profiling.records import derive_events

from ._helpers import feeds, reference_model


def _known(times: dict[str, tuple[float, float, int]], runs: int = 1) -> Profile:
    """A profile of the reference model with the given (start, end, stream) per node, `runs` times."""
    plan = reference_model(True).plan
    idx = {n.name: n for n in plan.nodes}
    recs = [OpRecord(idx[k].index, k, idx[k].op_type, s, a + 10 * r, b + 10 * r, r)
            for r in range(runs) for k, (a, b, s) in times.items()]
    run_recs = [RunRecord(r, 10.0 * r, 10.0 * r + 4.0) for r in range(runs)]
    return Profile("reference", "cpu", 2, plan, recs, derive_events(plan, recs), run_recs)


KNOWN = {"Relu_1": (0.0, 3.0, 0), "Abs_1": (1.0, 3.0, 1), "Add_1": (3.0, 4.0, 0)}


def test_summary_is_an_object_with_fields_and_prints_as_text():
    s = _known(KNOWN, runs=2).summary()
    assert s.wall_s == s["wall_s"] == pytest.approx(4.0) and s.runs == 2
    assert s.concurrency == pytest.approx(1.5) and s.streams[1]["busy_s"] == pytest.approx(2.0)
    with pytest.raises(AttributeError, match="no field 'nope'"):
        s.nope    # noqa: B018
    assert "op_types" in dir(s) and "wall_s" in dir(s)
    text = str(s)
    assert text.startswith("profile of 'reference' on cpu") and "\n  stream 1 " in text
    assert repr(s).startswith("<profile summary of 'reference'") and "\n" not in repr(s)
    json.dumps(s)                                     # tools still get plain data


def test_time_per_op_type():
    s = _known(KNOWN, runs=3).summary()
    assert [(r["op_type"], r["count"]) for r in s.op_types] == [("Relu", 1), ("Abs", 1), ("Add", 1)]
    by = {r["op_type"]: r for r in s.op_types}
    assert by["Relu"]["time_s"] == pytest.approx(3.0) and by["Relu"]["share"] == pytest.approx(0.5)
    assert by["Add"]["share"] == pytest.approx(1 / 6)
    assert sum(r["share"] for r in s.op_types) == pytest.approx(1.0)
    lines = str(s).splitlines()
    at = lines.index("  time per op type:")
    assert lines[at + 1].split() == ["op", "type", "ops", "time", "share"]
    assert lines[at + 2].split()[:2] == ["Relu", "1"] and lines[at + 2].endswith("50.0%")


def test_a_real_profile_has_the_breakdown():
    s = reference_model(True).profile(feeds(), runs=2).summary()
    assert {r["op_type"] for r in s.op_types} == {"Relu", "Abs", "Add"}
    assert all(r["count"] == 1 and r["time_s"] > 0 for r in s.op_types)


class _Captured(Exception):
    pass


def _drawn(monkeypatch, profile, **kw):
    """The figure plot() would write: (title, x label, x limits)."""
    from matplotlib.figure import Figure
    seen = {}

    def capture(fig, path, *a, **k):
        ax = fig.axes[0]
        seen.update(title=ax.get_title(), xlabel=ax.get_xlabel(), xlim=ax.get_xlim())
        raise _Captured
    monkeypatch.setattr(Figure, "savefig", capture)
    with pytest.raises(_Captured):
        profile.plot("unused.png", **kw)
    return seen


def test_timeline_counts_runs_from_one(monkeypatch):
    p = _known(KNOWN, runs=5)
    assert "run 1 of 5" in _drawn(monkeypatch, p, run=0)["title"]
    assert "run 5 of 5" in _drawn(monkeypatch, p, run=4)["title"]
    assert "run 0 of" not in _drawn(monkeypatch, p)["title"]


def test_two_timelines_share_one_axis(monkeypatch):
    short = _known({k: (a * 1e-4, b * 1e-4, s) for k, (a, b, s) in KNOWN.items()})   # 0.4 ms
    long = _known({k: (a * 1e-3, b * 1e-3, s) for k, (a, b, s) in KNOWN.items()})    # 4 ms
    own = _drawn(monkeypatch, short)
    assert "(µs)" in own["xlabel"]                      # alone, it picks its own unit
    span = max(short.span(), long.span())
    assert span == pytest.approx(4e-3)
    a, b = _drawn(monkeypatch, short, span_s=span), _drawn(monkeypatch, long, span_s=span)
    assert a["xlabel"] == b["xlabel"] and "(ms)" in a["xlabel"]
    assert a["xlim"] == pytest.approx(b["xlim"])
