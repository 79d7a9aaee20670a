"""analysis/happens_before.py: vector clocks against brute-force reachability, for both edge
sets (stream order + Send/Recv steps; stream order + data and control dependencies)."""
from __future__ import annotations

import sys
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from pyge.analysis.happens_before import HappensBefore, StreamLayout, dependencies
from pyge.errors import PlanError
from pyge.passes.memory.events import add_memory_events
from pyge.passes.sync.event_ids import assign_event_ids
from pyge.passes.sync.events import insert_events
from pyge.passes.verify.checks import verify_plan
from pyge.plan.plan import LAUNCH, Step
from pyge.testing.random_dags import dags, spec_to_plan

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
from plan_oracles import closure as _closure, steps_before as steps_oracle  # noqa: E402


def dependency_oracle(plan):
    """before(a, b): a path of data, control and stream-order edges leads from a to b."""
    n = len(plan.nodes)
    succ = {v: [] for v in range(n)}
    producer = {v.index: v.producer for v in plan.values}
    for v, node in enumerate(plan.nodes):
        for vi in node.inputs:
            if vi >= 0 and producer[vi] >= 0:
                succ[producer[vi]].append(v)
        for c in node.control_preds:
            succ[c].append(v)
    for steps in plan.streams:
        chain = [st_.arg for st_ in steps if st_.kind == LAUNCH]
        for a, b in zip(chain, chain[1:]):
            succ[a].append(b)
    reach = _closure(succ, {v: v for v in range(n)})
    return lambda a, b: a != b and b in reach[a]


@settings(max_examples=30, deadline=None)
@given(dags(max_nodes=14, max_streams=4))
def test_step_clocks_match_reachability(spec):
    plan = spec_to_plan(spec)
    insert_events(plan)
    assign_event_ids(plan, 1 << 20)
    hb, before = HappensBefore.of_steps(plan), steps_oracle(plan)
    n = len(plan.nodes)
    for a in range(n):
        for b in range(n):
            assert hb.before(a, b) == before(a, b), (a, b)


@settings(max_examples=30, deadline=None)
@given(dags(max_nodes=14, max_streams=4))
def test_dependency_clocks_match_reachability(spec):
    plan = spec_to_plan(spec)
    hb, deps = HappensBefore.of_dependencies(plan)
    before = dependency_oracle(plan)
    n = len(plan.nodes)
    for a in range(n):
        for b in range(n):
            assert hb.before(a, b) == before(a, b), (a, b)
    assert sorted(hb.order) == list(range(n))
    assert all(hb.position[p] < hb.position[v] for v in range(n) for p in deps[v])


@settings(max_examples=30, deadline=None)
@given(dags(max_nodes=14, max_streams=4))
def test_events_make_the_steps_realise_the_dependencies(spec):
    """After insert_events, what the steps order is exactly what the plan must order."""
    plan = spec_to_plan(spec)
    want, _ = HappensBefore.of_dependencies(plan)
    insert_events(plan)
    got = HappensBefore.of_steps(plan)
    assert got.clock == want.clock


def test_dependencies_with_streams_adds_the_stream_predecessor():
    spec_plan = spec_to_plan(_spec([[], [0], []], [[], [], [0]], [0, 0, 0]))
    assert dependencies(spec_plan) == [[], [0], [0]]
    # node 2 runs after node 1 on stream 0: its stream predecessor is added
    assert dependencies(spec_plan, with_streams=True) == [[], [0], [0, 1]]


def _spec(preds, ctrl, streams):
    from pyge.testing.random_dags import DagSpec
    return DagSpec(preds, ctrl, streams, max(streams) + 1)


def test_layout_rejects_a_node_launched_twice_or_never():
    plan = spec_to_plan(_spec([[], [0]], [[], []], [0, 0]))
    plan.streams[0].append(Step(LAUNCH, 0))
    with pytest.raises(PlanError, match="already launched"):
        StreamLayout(plan)
    plan = spec_to_plan(_spec([[], [0]], [[], []], [0, 0]))
    plan.streams[0].pop()
    with pytest.raises(PlanError, match="launched on no stream"):
        StreamLayout(plan)


def test_stream_order_against_the_dependencies_is_a_deadlock():
    plan = spec_to_plan(_spec([[], [0]], [[], []], [0, 0]))
    plan.streams[0].reverse()                    # the consumer launches before its producer
    with pytest.raises(PlanError, match="contradicts the dependencies around node 'n"):
        HappensBefore.of_dependencies(plan)


@settings(max_examples=40, deadline=None)
@given(dags(max_nodes=14, max_streams=4), st.data())
def test_added_edges_update_clocks_like_a_rebuild(spec, data):
    """hb.add_edges (used by the by-size packer) gives the clocks of a plan rebuilt with
    those memory events in its steps; add_edge + refresh in order (the block packer) too."""
    plan = spec_to_plan(spec)
    insert_events(plan)
    assign_event_ids(plan, 1 << 20)
    hb = HappensBefore.of_steps(plan)
    n = len(plan.nodes)
    pairs = [(a, b) for a in range(n) for b in range(n)
             if hb.position[a] < hb.position[b] and hb.stream_of[a] != hb.stream_of[b]]
    if not pairs:
        return
    picked = sorted(set(data.draw(st.lists(st.sampled_from(pairs), min_size=1, max_size=4))))
    one, two = hb.copy(), hb.copy()
    one.add_edges(picked)
    for v in two.order:
        two.refresh(v)
        for a, b in picked:
            if b == v:
                two.add_edge(a, b)
    add_memory_events(plan, picked)
    assign_event_ids(plan, 1 << 20)
    verify_plan(plan)
    rebuilt = HappensBefore.of_steps(plan)
    assert one.clock == rebuilt.clock == two.clock
    assert hb.clock != rebuilt.clock or all(hb.before(a, b) for a, b in picked)


def test_total_order_is_one_stream_in_index_order():
    plan = spec_to_plan(_spec([[], [], [0, 1]], [[], [], []], [0, 1, 0]))
    hb = HappensBefore.total(plan)
    assert hb.order == [0, 1, 2] and hb.before(0, 1) and hb.before(1, 2) and not hb.before(2, 0)
    assert hb.prev == [-1, 0, 1]
