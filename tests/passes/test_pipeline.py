"""The pass infrastructure (passes/pipeline.py): contracts, results, instruments, stage points."""
from __future__ import annotations

import pytest

import pyge
from pyge.errors import InvariantError, PassError, PostconditionError, PreconditionError
from pyge.options import parse_options
from pyge.passes import pipeline
from pyge.passes.pipeline import (UNCHANGED, CompileState, Condition, InvariantInstrument, Pass,
                                  PassResult, StagePoint, TimingInstrument, changed, invariants_on,
                                  run_pipeline)


def _state() -> CompileState:
    b = pyge.GraphBuilder("g")
    x = b.input("x", "float32", (2,))
    b.output(b.op("Relu", [x], name="r"))
    return CompileState(graph=b.build(), options=parse_options(None))


def _flag(name: str) -> Condition:
    """Holds while st.graph.metadata[name] == "yes"."""
    return Condition(name, lambda st: None if st.graph.metadata.get(name) == "yes" else f"{name} unset")


def _setter(name: str, value: str = "yes"):
    def run(st):
        st.graph.metadata[name] = value
        return PassResult(True)
    return run


def test_a_pass_whose_precondition_fails_does_not_run():
    ran = []
    p = Pass("needs_a", lambda st: ran.append(1) or UNCHANGED, requires=(_flag("a"),))
    with pytest.raises(PreconditionError, match="pass 'needs_a' requires a: a unset"):
        run_pipeline([p], _state(), instruments=[])
    assert ran == []


def test_requires_met_by_an_earlier_pass():
    st = run_pipeline([Pass("make_a", _setter("a"), ensures=(_flag("a"),)),
                       Pass("needs_a", lambda st: UNCHANGED, requires=(_flag("a"),))],
                      _state(), instruments=[])
    assert [(n, r.modified) for n, r in st.results] == [("make_a", True), ("needs_a", False)]
    assert [p.name for p in st.done] == ["make_a", "needs_a"]


def test_a_pass_that_does_not_establish_its_postcondition():
    p = Pass("claims_a", lambda st: UNCHANGED, ensures=(_flag("a"),))
    with pytest.raises(PostconditionError, match="pass 'claims_a' should ensure a: a unset"):
        run_pipeline([p], _state(), instruments=[])


def test_a_pass_must_return_a_pass_result():
    with pytest.raises(PassError, match="pass 'bad' returned NoneType, not a PassResult"):
        run_pipeline([Pass("bad", lambda st: None)], _state(), instruments=[])


def test_the_invariant_instrument_names_who_broke_what():
    steps = [Pass("make_a", _setter("a"), ensures=(_flag("a"),)),
             Pass("break_a", _setter("a", "no"))]
    run_pipeline(steps, _state(), instruments=[])            # off: nobody notices
    with pytest.raises(InvariantError, match="after pass 'break_a': invariant a "
                                             r"\(from pass 'make_a'\) no longer holds: a unset"):
        run_pipeline(steps, _state(), instruments=[InvariantInstrument()])


def test_registered_invariants_start_after_their_pass(monkeypatch):
    monkeypatch.setattr(pipeline, "_INVARIANTS", {})
    pipeline.register_invariant("second", _flag("b"))
    st = _state()
    steps = [Pass("first", lambda st: UNCHANGED), Pass("second", _setter("b")),
             Pass("third", _setter("b", "no"))]
    with pytest.raises(InvariantError, match="after pass 'third': invariant b .from pass 'second'"):
        run_pipeline(steps, st, instruments=[InvariantInstrument()])
    assert [p.name for p in st.done] == ["first", "second", "third"]


def test_stage_points_call_the_hook_in_order_and_nothing_else():
    seen = []
    steps = [StagePoint("ONE"), Pass("p", lambda st: UNCHANGED), StagePoint("TWO")]
    st = run_pipeline(steps, _state(), instruments=[],
                      on_stage=lambda name, s: seen.append((name, [p.name for p in s.done])))
    assert seen == [("ONE", []), ("TWO", ["p"])]
    assert [n for n, _ in st.results] == ["p"]
    run_pipeline(steps, _state(), instruments=[])             # no hook: stage points do nothing


def test_timing_instrument_records_every_pass_and_changed_counts():
    st = run_pipeline([Pass("a", lambda st: changed(3, "things")), Pass("b", lambda st: changed(0, "x"))],
                      _state(), instruments=[TimingInstrument()])
    assert [n for n, _ in st.timings] == ["a", "b"] and all(t >= 0 for _, t in st.timings)
    assert [(r.modified, r.note) for _, r in st.results] == [(True, "3 things"), (False, "0 x")]


@pytest.mark.parametrize("value, on", [("", False), ("0", False), ("false", False), ("1", True),
                                       ("yes", True)])
def test_invariants_env_switch(value, on):
    assert invariants_on({pipeline.INVARIANTS_ENV: value}) is on
    assert invariants_on({}) is False


def test_the_suite_runs_with_invariants_on():
    assert invariants_on()
    assert any(isinstance(i, InvariantInstrument) for i in pipeline.default_instruments())
