"""The order an executor issues steps in must be the one physical event ids were assigned for.

CUDA binds a stream-wait to the latest record of that event *issued before it*; passes/event_ids.py
reuses a physical id only where, in plan.order.host_order, every WAIT of the earlier logical
event is issued before the later RECORD. The CUDA executor allocates one CUDA event per physical
id, so issuing in any other order could bind a wait to the wrong record: a silent race. (With
the round-robin order the executors used before, every one of these plans had such a wait.)
"""
from __future__ import annotations

import random

import pytest

from pyge.executors.base import merged_steps
from pyge.passes.sync.event_ids import assign_event_ids
from pyge.passes.sync.events import insert_events
from pyge.testing.random_dags import random_spec, spec_to_plan
from pyge.plan.plan import RECORD, WAIT


def _binding_errors(plan, order):
    """WAITs that would bind to a record of another logical event sharing their physical id."""
    last_record: dict[int, int] = {}          # physical id -> logical event last recorded
    bad = []
    for _, kind, k in order:
        if kind == RECORD:
            last_record[plan.events[k].event_id] = k
        elif kind == WAIT and last_record.get(plan.events[k].event_id) != k:
            bad.append(k)
    return bad


@pytest.mark.parametrize("seed", range(30))
def test_executor_issue_order_binds_every_wait_to_its_own_record(seed):
    rng = random.Random(seed)
    plan = spec_to_plan(random_spec(rng, rng.randint(20, 120), rng.randint(2, 6)))
    insert_events(plan)
    assign_event_ids(plan, 1 << 20)
    assert _binding_errors(plan, merged_steps(plan)) == []
