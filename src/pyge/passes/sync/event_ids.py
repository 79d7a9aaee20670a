"""Physical event ids, reused where lifetimes cannot overlap.

Every logical event k (Plan.events[k]) has one RECORD and its WAITs. Executors that drive
all streams from one host thread (CUDA; the sequential executor) enqueue the steps in
`plan.order.host_order`; the CPU thread executor synchronises on logical indices and needs
no physical ids at all.

The reuse rule. A physical id P may carry logical event k1 and later k2 iff, in the host
enqueue order, every WAIT of k1 is enqueued before the RECORD of k2 (the lifetime
[RECORD, last WAIT] of k1 ends before that of k2 begins). Why this is enough on CUDA:
cudaEventRecord captures the work of its stream at the moment of the call, and
cudaStreamWaitEvent binds, at the moment of *its* call, to the most recently captured
record; later records of the same event do not affect a wait already enqueued. So each WAIT
of k1 (enqueued after k1's RECORD and before k2's) binds to k1, and each WAIT of k2 binds
to k2. Nothing about which stream k2 records on or when the device runs it matters: the
binding happens on the host. Stream capture into a CUDA graph turns the same calls into
graph edges at the same call points, so the argument carries over. Why it is needed: a
RECORD of k2 enqueued before some WAIT of k1 would capture that wait, which would then wait
for the wrong work (a race if k2's work is older, an over-wait otherwise).

(Hardware whose waits resolve on the device at execution time, GE's Ascend events, would
need the stricter rule "every WAIT of k1 happens-before the RECORD of k2"; pyge's executors
do not, and the stricter rule would need one id per event on a one-way pipeline.)

Optimality. Lifetimes are intervals over host-order positions and two events may share an
id iff their intervals are disjoint, so id assignment is colouring an interval graph. Taking
events by start and reusing a freed id (the smallest, for determinism) uses exactly as many
ids as the most events alive at one point, which every assignment needs: it is optimal.
Ids come out contiguous, 0..K-1.
"""
from __future__ import annotations

import heapq
import logging

from ...plan.plan import Plan
from .event_cap import meet_cap
from .lifetimes import event_lifetimes

log = logging.getLogger(__name__)


def colour_intervals(spans: list[tuple[int, int]]) -> list[int]:
    """Optimal interval colouring: ids 0..K-1, K = the most intervals alive at one point."""
    ids = [-1] * len(spans)
    alive: list[tuple[int, int]] = []      # (end, id) of intervals still alive
    free: list[int] = []                   # ids whose interval has ended
    nxt = 0
    for k in sorted(range(len(spans)), key=lambda k: spans[k][0]):
        begin, finish = spans[k]
        while alive and alive[0][0] < begin:
            heapq.heappush(free, heapq.heappop(alive)[1])
        if free:
            ids[k] = heapq.heappop(free)
        else:
            ids[k], nxt = nxt, nxt + 1
        heapq.heappush(alive, (finish, ids[k]))
    return ids


def assign_event_ids(plan: Plan, max_events: int = 0) -> int:
    """Give every logical event its physical id. Returns the number of physical ids.

    No cap by default (`max_events` 0, pyge.maxEventNum's default): GE has none at compile
    time, the runtime creates the events a model needs. With a cap, event_cap.meet_cap first
    adds order (delays RECORDs) until no more than that many events are alive at once in the
    host order; it raises PlanError saying why when it cannot, and leaves the plan unchanged.
    """
    cap = int(max_events)
    if cap > 0 and plan.events:
        meet_cap(plan, cap)
    ids = colour_intervals(event_lifetimes(plan))
    needed = 1 + max(ids, default=-1)
    for e, pid in zip(plan.events, ids):
        e.event_id = pid
    log.debug("plan %s: %d events on %d physical ids", plan.graph_name, len(plan.events), needed)
    return needed
