"""The verify pass and model.verify(): check a finished plan, independently of the code that built it.

Checks, in order (the first failure raises VerificationError naming the culprit):
  1. structure: every step points at an existing node or event; every node is launched
     exactly once, on its own stream; every event is recorded exactly once, on its source
     stream, and waited on its destination stream; physical ids are 0..K-1 without holes;
  2. no deadlock: some global order runs every WAIT after its RECORD (clocks.py);
  3. every data and control dependency is ordered: the producer happens before the consumer
     through stream order and events (read-after-write across streams);
  4. every event really orders what it says: its RECORD follows its source node on the
     source stream, its WAIT precedes its destination node;
  5. physical ids: replaying the host enqueue order, every WAIT binds to the RECORD of its
     own logical event (no reuse of an id while an earlier user still waits);
  6. memory (memory.py): buffer reuse and release points (write-after-read);
  7. collectives (collectives.py): totally ordered, so every rank issues them alike.
Near-linear: O(steps x streams) for the clocks, O(1) per dependency afterwards.
"""
from __future__ import annotations

from ...errors import VerificationError
from ...plan.order import host_order
from ...plan.plan import LAUNCH, RECORD, WAIT, Plan
from .collectives import check_collective_order
from .clocks import PlanClocks
from .memory import check_buffers, check_releases, value_readers


def verify_plan(plan: Plan) -> PlanClocks:
    """Raise VerificationError on the first unordered pair; returns the clocks otherwise."""
    _check_structure(plan)
    clocks = PlanClocks(plan)
    _check_dependencies(plan, clocks)
    _check_event_ends(plan, clocks)
    _check_physical_ids(plan)
    readers = value_readers(plan)
    check_buffers(plan, clocks, readers)
    check_releases(plan, clocks, readers)
    check_collective_order(plan, clocks)
    return clocks


def _fail(msg: str) -> None:
    raise VerificationError(msg)


def _check_structure(plan: Plan) -> None:
    n, ne = len(plan.nodes), len(plan.events)
    launches = [0] * n
    records = [0] * ne
    for s, steps in enumerate(plan.streams):
        for i, st in enumerate(steps):
            limit = n if st.kind == LAUNCH else ne
            if st.kind not in (LAUNCH, RECORD, WAIT) or not 0 <= st.arg < limit:
                _fail(f"stream {s} step {i} ({st}) points at nothing")
            if st.kind == LAUNCH:
                launches[st.arg] += 1
                if plan.nodes[st.arg].stream != s:
                    _fail(f"node {plan.nodes[st.arg].name!r} says stream "
                          f"{plan.nodes[st.arg].stream} but is launched on stream {s}")
            elif st.kind == RECORD:
                records[st.arg] += 1
                if plan.events[st.arg].src_stream != s:
                    _fail(f"event {plan.events[st.arg]} is recorded on stream {s}")
            elif plan.events[st.arg].dst_stream != s:
                _fail(f"event {plan.events[st.arg]} is waited on stream {s}")
    for i, c in enumerate(launches):
        if c != 1:
            _fail(f"node {plan.nodes[i].name!r} is launched {c} times, not once")
    for k, c in enumerate(records):
        if c != 1:
            _fail(f"event {plan.events[k]} has {c} RECORD steps, not exactly one")
        if plan.events[k].index != k:
            _fail(f"event {plan.events[k]} sits at Plan.events[{k}] but says index "
                  f"{plan.events[k].index}")
    ids = {e.event_id for e in plan.events}
    if ids != set(range(len(ids))):
        _fail(f"physical event ids are not contiguous from 0: {sorted(ids)[:10]}")


def _check_dependencies(plan: Plan, clocks: PlanClocks) -> None:
    values = plan.values
    for v, node in enumerate(plan.nodes):
        for vi in node.inputs:
            u = values[vi].producer if vi >= 0 else -1
            if u >= 0 and u != v and not clocks.before(u, v):
                _fail(f"unordered data dependency: {clocks.where(u)} -> {clocks.where(v)} "
                      f"(value {values[vi].name!r}): no stream order or event makes the "
                      "producer finish before the consumer reads")
        for u in node.control_preds:
            if u != v and not clocks.before(u, v):
                _fail(f"unordered control dependency: {clocks.where(u)} -> {clocks.where(v)}: "
                      "no stream order or event orders them")


def _check_event_ends(plan: Plan, clocks: PlanClocks) -> None:
    """The RECORD follows its source node and the WAIT precedes its destination node, so
    model.events reports what the steps really order."""
    for s, steps in enumerate(plan.streams):
        for i, st in enumerate(steps):
            if st.kind != WAIT:
                continue
            e = plan.events[st.arg]
            if e.dst_node >= 0 and not (clocks.stream[e.dst_node] == s and clocks.pos[e.dst_node] > i):
                _fail(f"event {e}: its WAIT on stream {s} is not before {e.dst!r}")
    for e in plan.events:
        rs, ri = clocks.record_pos[e.index]
        if e.src_node >= 0 and not (clocks.stream[e.src_node] == rs and clocks.pos[e.src_node] < ri):
            _fail(f"event {e}: its RECORD on stream {rs} is not after {e.src!r}")


def _check_physical_ids(plan: Plan) -> None:
    """Replay the host enqueue order: a WAIT binds to the latest RECORD of its physical id."""
    bound: dict[int, int] = {}
    for s, i in host_order(plan):
        st = plan.streams[s][i]
        if st.kind == RECORD:
            bound[plan.events[st.arg].event_id] = st.arg
        elif st.kind == WAIT:
            e = plan.events[st.arg]
            got = bound.get(e.event_id)
            if got != st.arg:
                other = plan.events[got] if got is not None else "nothing"
                _fail(f"physical event id e{e.event_id} is reused too early: the WAIT of "
                      f"{e.src!r}@s{e.src_stream} -> {e.dst!r}@s{e.dst_stream} on stream {s} "
                      f"would bind to {other}")
