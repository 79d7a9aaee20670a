"""passes/verify/memory.py: overlapping byte ranges must be ordered, whatever their buffer ids."""
from __future__ import annotations

import random

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from pyge.errors import VerificationError
from pyge.passes.sync.event_ids import assign_event_ids
from pyge.passes.sync.events import insert_events
from pyge.testing.random_dags import DagSpec, random_spec, spec_to_plan
from pyge.passes.verify.checks import verify_plan
from pyge.passes.verify.clocks import PlanClocks
from pyge.plan.plan import Buffer, MemoryPlan


def plan_of(preds, streams):
    spec = DagSpec([list(p) for p in preds], [[] for _ in preds], list(streams), 1 + max(streams))
    plan = spec_to_plan(spec)
    insert_events(plan)
    assign_event_ids(plan, 1023)
    for v in plan.values:
        v.nbytes = 24
    return plan


def lay_out(plan, placement: dict[int, int], peak: int = 1024):
    """One buffer per value index in `placement` (value -> offset)."""
    bufs = []
    for vi, off in placement.items():
        plan.values[vi].buffer = len(bufs)
        bufs.append(Buffer(index=len(bufs), offset=off, size=plan.values[vi].nbytes, stream=0))
    plan.memory = MemoryPlan(buffers=bufs, peak_bytes=peak)


def test_partly_overlapping_unordered_pair_is_caught():
    # n0 (s0) -> n1 (s1); n2 (s0) is independent. n2's output overlaps 8 bytes of n0's,
    # which n1 on stream 1 may still be reading: distinct buffer ids, same bytes.
    plan = plan_of([[], [0], []], [0, 1, 0])
    lay_out(plan, {1: 0, 3: 16})
    with pytest.raises(VerificationError, match=(
            r"write after read\), overlapping arena bytes, 'n0_out' \[0, 24\) in buffer 0 -> "
            r"'n2_out' \[16, 40\) in buffer 1: reader 'n1' \(stream 1\) is not ordered before "
            r"the writer 'n2' \(stream 0\)")):
        verify_plan(plan)


def test_adjacent_ranges_and_ordered_overlaps_pass():
    plan = plan_of([[], [0], []], [0, 1, 0])
    lay_out(plan, {1: 0, 3: 24})                  # [0, 24) and [24, 48): no shared byte
    verify_plan(plan)
    plan = plan_of([[], [0], [1]], [0, 1, 0])      # n1 (s1) -> n2 (s0) has an event
    lay_out(plan, {1: 0, 3: 16})
    verify_plan(plan)


def test_overlap_through_a_third_value_is_caught():
    """A long value between two short ones: the short ones never share a byte with each
    other, but each shares bytes with the long one."""
    plan = plan_of([[], [0], [], []], [0, 1, 0, 0])
    plan.values[2].nbytes = 64                     # n1's output, [0, 64) on stream 1
    lay_out(plan, {1: 100, 2: 0, 3: 0, 4: 40})     # n2, n3 outputs overlap it, unordered
    with pytest.raises(VerificationError, match=r"'n1_out' \[0, 64\) in buffer 1"):
        verify_plan(plan)


def test_value_outside_the_arena_is_caught():
    plan = plan_of([[], [0]], [0, 0])
    lay_out(plan, {1: 8}, peak=16)
    with pytest.raises(VerificationError, match=r"'n0_out' at bytes \[8, 32\).*16-byte arena"):
        verify_plan(plan)


def _brute_force_ok(plan) -> bool:
    clocks = PlanClocks(plan)
    readers = {v.index: [n.index for n in plan.nodes if v.index in n.inputs] for v in plan.values}

    def ordered(a, b):
        pa, pb = a.producer, b.producer
        return (pa != pb and clocks.before(pa, pb)
                and all(clocks.before_or_same(r, pb) for r in readers[a.index]))

    placed = [v for v in plan.values if v.buffer >= 0]
    for i, a in enumerate(placed):
        oa = plan.memory.buffers[a.buffer].offset
        for b in placed[i + 1:]:
            ob = plan.memory.buffers[b.buffer].offset
            if oa < ob + b.nbytes and ob < oa + a.nbytes and not (ordered(a, b) or ordered(b, a)):
                return False
    return True


@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(seed=st.integers(0, 100_000), n=st.integers(2, 16), k=st.integers(1, 3))
def test_sweep_agrees_with_all_pairs(seed, n, k):
    rng = random.Random(seed)
    plan = spec_to_plan(random_spec(rng, n, k, window=6, control_prob=0.0))
    insert_events(plan)
    assign_event_ids(plan, 1023)
    for v in plan.values[1:]:
        v.nbytes = rng.choice((8, 16, 24, 40))
    lay_out(plan, {v.index: rng.randrange(0, 64, 8) for v in plan.values[1:]
                   if rng.random() < 0.8}, peak=128)
    if _brute_force_ok(plan):
        verify_plan(plan)
    else:
        with pytest.raises(VerificationError, match="overlapping arena bytes"):
            verify_plan(plan)


def test_planned_partial_overlaps_pass():
    """The planner does produce partial overlaps under different buffer ids (largest-first
    packing puts small values inside a big one's old bytes); they verify."""
    import sys
    from pathlib import Path
    sys.path.insert(0, str(Path(__file__).resolve().parents[2]))
    from executors.helpers import branch_streams, cached_light_model, replan
    plan = replan(cached_light_model("inception_v1"), branch_streams(3)).plan
    spans = sorted((plan.memory.buffers[v.buffer].offset, v.nbytes, v.buffer)
                   for v in plan.values if v.buffer >= 0)
    partial = any(o2 < o1 + n1 and b1 != b2 and o1 != o2
                  for i, (o1, n1, b1) in enumerate(spans) for o2, _, b2 in spans[i + 1:])
    assert partial
    verify_plan(plan)


def test_tiled_arenas_are_decided_as_the_sweep_decides(monkeypatch):
    """Values starting only at aligned offsets (so overlapping values share their first
    byte): check_overlaps decides without the sweep; ordered or not, its verdict and its
    message are the sweep's (brute force the referee), and the quick path is taken."""
    from pyge.passes.verify import memory
    quick = memory._tiled_and_ordered
    taken = []
    monkeypatch.setattr(memory, "_tiled_and_ordered",
                        lambda *a: taken.append(quick(*a)) or taken[-1])
    verdicts = set()
    for seed in range(300):
        rng = random.Random(seed)
        plan = spec_to_plan(random_spec(rng, rng.randint(2, 14), rng.randint(1, 3), window=6,
                                        control_prob=0.0))
        insert_events(plan)
        assign_event_ids(plan, 1023)
        for v in plan.values[1:]:
            v.nbytes = rng.choice((8, 24, 32))
        lay_out(plan, {v.index: rng.randrange(0, 96, 32) for v in plan.values[1:]
                       if rng.random() < 0.8}, peak=128)
        if rng.random() < 0.2:                     # now and then one value straddles two
            vi = rng.randrange(1, len(plan.values))
            if plan.values[vi].buffer >= 0:
                plan.memory.buffers[plan.values[vi].buffer].offset = 16
        errors = []
        for sweep_only in (False, True):
            if sweep_only:
                monkeypatch.setattr(memory, "_tiled_and_ordered", lambda *a: False)
            try:
                verify_plan(plan)
                errors.append(None)
            except VerificationError as err:
                errors.append(str(err))
        monkeypatch.setattr(memory, "_tiled_and_ordered",
                            lambda *a: taken.append(quick(*a)) or taken[-1])
        assert errors[0] == errors[1]
        ok = _brute_force_ok(plan)
        assert (errors[0] is None) == ok
        verdicts.add(ok)
    assert verdicts == {True, False} and True in taken and False in taken
