"""Property tests: random DAGs, random stream assignments, brute-force oracles.

For every random plan: the verifier passes; the kept events are exactly the cross-stream
edges of the transitive reduction of (data + control edges + stream order), computed by
brute force; removing any one event makes the verifier fail; on tiny graphs no smaller set
of events exists at all (exhaustive search).
"""
from __future__ import annotations

import itertools

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import pyge
from pyge.errors import VerificationError
from pyge.passes.sync.event_ids import assign_event_ids
from pyge.passes.sync.events import insert_events
from pyge.testing.random_dags import dags, fixed_streams_pass, spec_to_graph, spec_to_plan
from pyge.passes.verify.checks import verify_plan
from pyge.plan.build import build_plan
from pyge.plan.plan import LAUNCH

from _event_oracle import closure, events_of, h_edges, oracle_events

SETTINGS = settings(max_examples=120, deadline=None)


def compiled(spec):
    plan = spec_to_plan(spec)
    insert_events(plan)
    assign_event_ids(plan, 1 << 20)
    return plan


def without_event(spec, k):
    """The same plan with logical event k removed (ids reassigned to stay contiguous)."""
    plan = compiled(spec)
    plan.streams = [[st for st in steps if st.kind == LAUNCH or st.arg != k] for steps in plan.streams]
    for steps in plan.streams:
        for st in steps:
            if st.kind != LAUNCH and st.arg > k:
                st.arg -= 1
    dropped = plan.events.pop(k)
    for i, e in enumerate(plan.events):
        e.index = i
    assign_event_ids(plan, 1 << 20)
    return plan, dropped


# -- properties --------------------------------------------------------------------------

@SETTINGS
@given(dags(max_nodes=14, max_streams=4))
def test_verifier_passes_and_events_equal_the_transitive_reduction(spec):
    plan = compiled(spec)
    verify_plan(plan)
    assert events_of(plan) == oracle_events(plan)
    assert len(plan.events) == len(events_of(plan))            # one event per edge
    assert {e.event_id for e in plan.events} == set(range(plan.num_physical_events))


@settings(max_examples=60, deadline=None)
@given(dags(max_nodes=12, max_streams=4), st.data())
def test_removing_any_event_breaks_verification(spec, data):
    plan = compiled(spec)
    if not plan.events:
        return
    k = data.draw(st.integers(0, len(plan.events) - 1))
    broken, dropped = without_event(spec, k)
    with pytest.raises(VerificationError, match=rf"unordered .*'{dropped.dst}'"):
        verify_plan(broken)


def test_removing_each_event_of_one_plan_breaks_verification():
    import random
    from pyge.testing.random_dags import random_spec
    spec = random_spec(random.Random(5), 60, 4, control_prob=0.2)
    n = len(compiled(spec).events)
    assert n > 10
    for k in range(n):
        broken, _ = without_event(spec, k)
        with pytest.raises(VerificationError, match="unordered"):
            verify_plan(broken)


@settings(max_examples=25, deadline=None)
@given(dags(max_nodes=7, max_streams=3))
def test_no_smaller_event_set_exists(spec):
    """Exhaustive: every proper subset of the cross-stream edges of H loses some ordering."""
    plan = compiled(spec)
    n, edges = len(plan.nodes), h_edges(plan)
    target = closure(n, edges)
    stream_edges = {(u, v) for u, v in edges if plan.nodes[u].stream == plan.nodes[v].stream}
    cross = sorted(edges - stream_edges)
    best = next(k for k in range(len(cross) + 1)
                if any(closure(n, stream_edges | set(sub)) == target
                       for sub in itertools.combinations(cross, k)))
    assert len(plan.events) == best


@settings(max_examples=40, deadline=None)
@given(dags(max_nodes=10, max_streams=3))
def test_graph_plan_runs_like_one_stream_and_survives_memory_planning(spec):
    from pyge.executors.sequential import SequentialExecutor
    from pyge.passes.memory.planner import plan_memory
    g = spec_to_graph(spec)
    plan = build_plan(g, spec.num_streams)
    insert_events(plan)
    assign_event_ids(plan, 1023)
    assert events_of(plan) == oracle_events(plan)
    plan_memory(plan, None)
    verify_plan(plan)
    x = {"x": np.linspace(-1, 1, 6, dtype=np.float32).reshape(2, 3)}
    multi = SequentialExecutor(g, plan).run(x)
    for n in g.nodes:
        n.stream_id = 0
    single = build_plan(g, 1)
    insert_events(single)
    assert single.events == []
    ref = SequentialExecutor(g, single).run(x)
    assert multi.keys() == ref.keys()
    for k in ref:
        np.testing.assert_array_equal(multi[k], ref[k])


# -- through pyge.compile with a custom stream pass ----------------------------------------

@settings(max_examples=15, deadline=None)
@given(dags(max_nodes=10, max_streams=3))
def test_random_streams_through_a_custom_pass(spec):
    from pyge.passes.custom import custom_passes_scope
    g = spec_to_graph(spec)
    wanted = {n.name: n.stream_id for n in g.nodes}
    assign = fixed_streams_pass(wanted)

    with custom_passes_scope():          # the registry is restored afterwards
        pyge.register_custom_pass("PygeTestRandomStreams").custom_allocate_stream_pass_fn(assign)
        m = pyge.compile(g)
    m.verify()
    used = {wanted.get(n.name, 0) for n in m.plan.nodes}
    assert m.num_streams == len(used)
    assert events_of(m.plan) == oracle_events(m.plan)
    for e in m.events:
        assert m.stream_of(e.src) == e.src_stream != e.dst_stream == m.stream_of(e.dst)
