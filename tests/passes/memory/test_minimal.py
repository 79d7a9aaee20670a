"""Memory events are minimal (issue 20 item 13), proven as Send/Recv events are: removing any
one of them, with release points recomputed for the plan without it, makes verify() fail on
the buffer reuse it ordered."""
from __future__ import annotations

import copy
import random
import sys
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import pyge
from pyge.analysis.happens_before import HappensBefore
from pyge.errors import VerificationError
from pyge.passes.memory import planner as memory_mod
from pyge.passes.memory.planner import value_readers
from pyge.passes.memory.release import release_points as _release_points
from pyge.passes.verify.checks import verify_plan
from pyge.testing import light_path

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))
from executors.helpers import (branch_streams, light_model, random_graph,  # noqa: E402
                               random_streams, replan)
from plan_oracles import drop_event  # noqa: E402


def memory_events(plan):
    return [e.index for e in plan.events if e.reason == "memory"]


def without_event(plan, k):
    """`plan` with logical event k removed, ids reassigned and release points recomputed for
    the ordering that is left (so that only the arena layout can still need the event)."""
    drop_event(plan, k, 0)
    _release_points(plan, HappensBefore.of_steps(plan), value_readers(plan))
    return plan


def removable(model) -> list[str]:
    """The memory events of `model` without which its plan still verifies."""
    verify_plan(model.plan)
    out = []
    for k in memory_events(model.plan):
        plan = without_event(copy.deepcopy(model.plan), k)
        try:
            verify_plan(plan)
        except VerificationError as err:
            assert "unordered buffer reuse" in str(err), err
            continue
        e = model.plan.events[k]
        out.append(f"{e.src}@s{e.src_stream}->{e.dst}@s{e.dst_stream}")
    return out


def forced(seed, nodes, k):
    """A random DAG on k random streams, memory events allowed whenever the arena exceeds
    1.15x one stream's (SLACK 0): small graphs get them often."""
    single = pyge.compile(random_graph(random.Random(seed), nodes), "cpu",
                          {"ge.enableSingleStream": "true"})
    with pytest.MonkeyPatch.context() as mp:
        mp.setattr(memory_mod, "SLACK", 0)
        return replan(single, random_streams(k, seed))


@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(seed=st.integers(0, 10_000), nodes=st.integers(2, 40), k=st.integers(2, 5))
def test_no_memory_event_of_a_random_plan_can_be_removed(seed, nodes, k):
    assert removable(forced(seed, nodes, k)) == []


def test_no_memory_event_of_many_plans_can_be_removed():
    """A fixed sweep, so that the property above is known to meet plenty of memory events."""
    models = [forced(seed, 40, k) for seed in range(12) for k in (3, 5)]
    assert sum(len(memory_events(m.plan)) for m in models) >= 20
    assert [removable(m) for m in models] == [[]] * len(models)


# (seed, nodes, streams) where the packers choose an edge the final layout does not need:
# without minimal.needed_edges each plan keeps a memory event that verify() does not miss.
REDUNDANT = [(0, 12, 5), (0, 40, 4), (1, 12, 3), (1, 40, 4)]


@pytest.mark.parametrize("case", REDUNDANT)
def test_events_the_layout_does_not_need_are_dropped(case):
    m = forced(*case)
    assert memory_events(m.plan) and removable(m) == []


def test_without_minimisation_those_plans_keep_a_removable_event(monkeypatch):
    """The regression cases above really exercise minimal.py."""
    monkeypatch.setattr(memory_mod, "needed_edges", lambda hb, items, edges: sorted(set(edges)))
    assert all(removable(forced(*case)) for case in REDUNDANT)


def test_inception_v2_keeps_no_removable_memory_event(monkeypatch):
    """The issue's configuration (fusion off, MainStream:4), memory events allowed at any
    growth over one stream's arena (the default bounds add none to it today)."""
    monkeypatch.setattr(memory_mod, "SLACK", 0)
    monkeypatch.setattr(memory_mod, "RATIO", 1.0)
    m = pyge.compile(light_path("inception_v2"), "cpu",
                     {"ge.autoMultistreamParallelMode": "MainStream:4", "ge.exec.enableFusion": "false"})
    assert memory_events(m.plan) and removable(m) == []


def test_unfused_resnet50_keeps_no_removable_memory_event(monkeypatch):
    """resnet50 with its BatchNormalizations apart and the shortcut on a side stream gets
    memory events under the default bounds (tests/passes/memory/test_memory.py)."""
    from pyge.passes.graph import fuse_conv_bn
    monkeypatch.setattr(fuse_conv_bn, "fuse_conv_bn", lambda graph: 0)
    single = light_model("resnet50")
    monkeypatch.undo()
    for k in (2, 4):
        m = replan(single, branch_streams(k))
        assert memory_events(m.plan) and removable(m) == []


def test_a_smaller_layout_that_needs_no_event_is_kept(monkeypatch):
    """(35, 40, 2): the packer chose edges for a layout that, finished, needs none of them;
    it is smaller than the layout packed without events, so it is kept, event-free."""
    seed, nodes, k = 35, 40, 2
    single = pyge.compile(random_graph(random.Random(seed), nodes), "cpu",
                          {"ge.enableSingleStream": "true"})
    monkeypatch.setattr(memory_mod, "RATIO", 1e9)
    bare = replan(single, random_streams(k, seed))
    monkeypatch.undo()
    m = forced(seed, nodes, k)
    assert memory_events(m.plan) == [] and m.plan.meta["memory_events"] == 0
    assert m.memory.peak_bytes < bare.memory.peak_bytes
