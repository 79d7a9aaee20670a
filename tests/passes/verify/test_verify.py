"""Pass 14, verify_plan / model.verify(): races, deadlocks and unsafe memory reuse are named."""
from __future__ import annotations

import sys
from pathlib import Path

import pytest

import pyge
from pyge.errors import VerificationError
from pyge.passes.sync.event_ids import assign_event_ids
from pyge.passes.sync.events import insert_events
from pyge.testing.random_dags import DagSpec, spec_to_plan
from pyge.passes.verify.checks import verify_plan
from pyge.plan.plan import LAUNCH, RECORD, WAIT, Event, PlanValue, Step

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))
import plan_oracles  # noqa: E402


def plan_of(preds, streams, ctrl=None):
    n = len(preds)
    spec = DagSpec([list(p) for p in preds], ctrl or [[] for _ in range(n)], list(streams),
                   1 + max(streams))
    plan = spec_to_plan(spec)
    insert_events(plan)
    assign_event_ids(plan, 1023)
    verify_plan(plan)
    return plan


def drop_event(plan, k):
    plan_oracles.drop_event(plan, k, 1023)


def fork_join():
    # n0 (s0) -> n1 (s1), n0 -> n2 (s0), n1 + n2 -> n3 (s0)
    return plan_of([[], [0], [0], [1, 2]], [0, 1, 0, 0])


def test_missing_event_names_the_unordered_pair_and_streams():
    plan = fork_join()
    k = next(e.index for e in plan.events if e.dst == "n3")
    drop_event(plan, k)
    with pytest.raises(VerificationError,
                       match=r"unordered data dependency: 'n1' \(stream 1\) -> 'n3' \(stream 0\)"):
        verify_plan(plan)


def test_unordered_control_dependency():
    plan = plan_of([[], []], [0, 1], ctrl=[[], [0]])
    drop_event(plan, 0)
    with pytest.raises(VerificationError, match=r"unordered control dependency: 'n0' \(stream 0\)"):
        verify_plan(plan)


def test_deadlock_is_reported():
    plan = fork_join()
    # Move n0's RECORD after a WAIT that needs n1, which itself waits for n0: a cycle.
    e_back = Event(index=len(plan.events), event_id=plan.num_physical_events, src="n1", dst="n2",
                   src_stream=1, dst_stream=0, src_node=1, dst_node=2)
    plan.events.append(e_back)
    plan.streams[1].append(Step(RECORD, e_back.index))
    plan.streams[0].insert(0, Step(WAIT, e_back.index))
    with pytest.raises(VerificationError, match="deadlocks"):
        verify_plan(plan)


def test_wait_without_record_and_double_record():
    plan = fork_join()
    rec = [st for st in plan.streams[0] if st.kind == RECORD][0]
    plan.streams[0].remove(rec)
    with pytest.raises(VerificationError, match="0 RECORD steps"):
        verify_plan(plan)
    plan.streams[0].insert(1, rec)
    plan.streams[0].insert(1, Step(RECORD, rec.arg))
    with pytest.raises(VerificationError, match="2 RECORD steps"):
        verify_plan(plan)


def test_event_on_the_wrong_side_is_reported():
    plan = fork_join()
    e = plan.events[0]
    e.dst_node, e.dst = 3, "n3"        # claims to guard n3, but its WAIT sits before n1
    plan.streams[1], plan.streams[0] = plan.streams[1], plan.streams[0]
    with pytest.raises(VerificationError, match="is not before 'n3'"):
        verify_plan(plan)


def test_structure_errors():
    plan = fork_join()
    plan.streams[0].append(Step(LAUNCH, 0))
    with pytest.raises(VerificationError, match="launched 2 times"):
        verify_plan(plan)
    plan = fork_join()
    plan.events[0].event_id = 5
    with pytest.raises(VerificationError, match="not contiguous"):
        verify_plan(plan)
    plan = fork_join()
    plan.streams[1].append(Step(WAIT, 99))
    with pytest.raises(VerificationError, match="points at nothing"):
        verify_plan(plan)


# -- memory ------------------------------------------------------------------------------

def share(plan, *values, buffer=0):
    for v in values:
        plan.values[v].buffer = buffer


def test_buffer_reuse_across_streams_needs_ordering():
    # n0 (s0) -> n1 (s1); n2 (s0) independent. n0's output (value 1) is read by n1 on s1.
    plan = plan_of([[], [0], []], [0, 1, 0])
    share(plan, 1, 3)                  # n2 overwrites n0's output while n1 may still read it
    with pytest.raises(VerificationError, match=r"write after read.*reader 'n1' \(stream 1\)"
                                                r".*writer 'n2' \(stream 0\)"):
        verify_plan(plan)


def test_buffer_reuse_ordered_by_stream_or_event_passes():
    plan = plan_of([[], [0], [1]], [0, 0, 0])
    share(plan, 1, 3)                  # n2 writes after n1 read n0's output: same stream
    verify_plan(plan)
    plan = plan_of([[], [0], [1]], [0, 1, 0])
    share(plan, 1, 3)                  # n1 (s1) -> n2 (s0) has an event: ordered
    verify_plan(plan)


def test_in_place_reuse_by_the_only_reader_passes():
    plan = plan_of([[], [0]], [0, 0])
    share(plan, 1, 2)
    verify_plan(plan)


def test_output_or_input_buffers_cannot_be_taken_over():
    plan = plan_of([[], [0], [1]], [0, 0, 0])
    plan.values[1].is_output = True
    share(plan, 1, 3)
    with pytest.raises(VerificationError, match="graph output 'n0_out' is overwritten"):
        verify_plan(plan)
    plan = plan_of([[], [0]], [0, 0])
    share(plan, 0, 2)
    verify_plan(plan)                  # input x is read by n0 only; n1 runs after n0
    plan.values.append(PlanValue(index=3, name="y", dtype="float32", shape=(2, 3), is_input=True))
    share(plan, 3)
    with pytest.raises(VerificationError, match="'y' is a graph input or constant"):
        verify_plan(plan)


def test_release_before_a_reader_on_another_stream_is_reported():
    plan = plan_of([[], [0], [0]], [0, 1, 0])
    plan.nodes[2].free_after = [1]     # released after n2 (s0) while n1 (s1) may still read it
    with pytest.raises(VerificationError, match=r"unordered release: 'n0_out' .* 'n1' \(stream 1\)"):
        verify_plan(plan)
    plan.nodes[2].free_after = []
    plan.nodes[1].free_after = [1]     # after n1: n2 on s0 is not ordered before n1 either
    with pytest.raises(VerificationError, match="unordered release"):
        verify_plan(plan)


def test_release_after_the_join_passes():
    plan = plan_of([[], [0], [0], [1, 2]], [0, 1, 0, 0])
    plan.nodes[3].free_after = [1]
    verify_plan(plan)


def test_model_verify_on_a_compiled_model():
    b = pyge.GraphBuilder("g")
    x = b.input("x", "float32", (2, 3))
    b.output(b.op("Add", [b.op("Abs", [x], name="Abs_1"), b.op("Relu", [x])]), "y")
    m = pyge.compile(b.build())
    m.verify()
    verify_plan(m.plan)
