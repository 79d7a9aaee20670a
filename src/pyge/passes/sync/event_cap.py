"""Meeting a cap on physical event ids (pyge.maxEventNum) by adding order.

Physical ids are reused by interval colouring (event_ids.py), which needs exactly as many
ids as the most events alive at one point of the host order (from an event's RECORD to its
WAIT). When that is above the cap, reuse alone cannot help: fewer events must be alive at
once. Order gets there, in three steps, each adding order and never losing any (every
dependency stays covered):

  1. host order: the plan records its cap (`plan.options["pyge.maxEventNum"]`) and the host
     enqueue order (plan/order.py) holds a RECORD back while the cap's worth of events are
     alive, until a WAIT closes one. Every executor issues steps in that order, so this
     costs the device nothing but a later record.
  2. The WAITs in front of one launch guard the same launch, so their order is free: they
     are put in the order their RECORDs are enqueued, so that a stream does not first wait
     for an event the host holds back while another one it could take is alive.
  3. Where that is not enough, the device records later too: at the first host position
     with more than `cap` events alive, the RECORD of the alive event whose WAIT comes last
     (the one that holds an id longest, Belady's rule) moves down its stream past the next
     launch: the consumer then waits for more of the producer's stream than it needs, and
     the event opens later, after others have closed. A RECORD that already follows its
     stream's last launch, or whose move would deadlock the plan, is left and the next
     alive event tried; failing those, an alive event's WAIT moves earlier, before the step
     in front of its run of WAITs (its stream then waits before that step too).

This repeats until the cap holds. RECORDs only move down their streams and WAITs only up,
past other kinds of steps, so it ends; when no alive event at the overloaded point can move, the cap cannot be
met this way, the error says where, and the plan is left as it was.
"""
from __future__ import annotations

import heapq
import logging

from ...errors import PlanError
from ...plan.order import host_order
from ...plan.plan import LAUNCH, RECORD, WAIT, Plan
from .lifetimes import event_lifetimes

log = logging.getLogger(__name__)

CAP_KEY = "pyge.maxEventNum"


def meet_cap(plan: Plan, cap: int) -> int:
    """Delay RECORD steps of `plan` until at most `cap` events are alive at once in the host
    order; returns how many moves that took. Raises PlanError, plan unchanged, if it cannot."""
    saved = [list(steps) for steps in plan.streams]
    saved_cap = plan.options.get(CAP_KEY)
    plan.options[CAP_KEY] = str(cap)       # the host order merges under the cap (plan/order.py)
    moves = 0
    budget = 2 * sum(len(steps) for steps in plan.streams)
    try:
        while True:
            _sort_waits(plan)
            spans = event_lifetimes(plan)
            over = _first_overload(spans, cap)
            if over is None:
                break
            t, alive = over
            if moves > budget or not _delay_one(plan, spans, alive):
                raise PlanError(_why(plan, cap, t, alive))
            moves += 1
    except PlanError:
        plan.streams[:] = saved
        if saved_cap is None:
            plan.options.pop(CAP_KEY, None)
        else:
            plan.options[CAP_KEY] = saved_cap
        raise
    if moves:
        log.info("plan %s: %d RECORD step(s) delayed to keep at most %d events alive (pyge.maxEventNum)",
                 plan.graph_name, moves, cap)
    return moves


def _sort_waits(plan: Plan) -> None:
    """Put every run of WAITs (they guard the same launch, so their order is free) in the
    order their RECORDs are enqueued: a stream then never waits first for an event the host
    holds back while another it could take is alive."""
    rec_pos: dict[int, int] = {}
    for t, (s, i) in enumerate(host_order(plan)):
        st = plan.streams[s][i]
        if st.kind == RECORD:
            rec_pos[st.arg] = t
    for steps in plan.streams:
        i = 0
        while i < len(steps):
            if steps[i].kind != WAIT:
                i += 1
                continue
            j = i
            while j < len(steps) and steps[j].kind == WAIT:
                j += 1
            if j - i > 1:
                steps[i:j] = sorted(steps[i:j], key=lambda st: rec_pos.get(st.arg, -1))
            i = j


def _first_overload(spans: list[tuple[int, int]], cap: int) -> tuple[int, list[int]] | None:
    """(host position, events alive there) at the first RECORD that makes more than `cap`."""
    alive: list[tuple[int, int]] = []      # (end, event)
    for k in sorted(range(len(spans)), key=lambda k: spans[k][0]):
        begin, end = spans[k]
        while alive and alive[0][0] < begin:
            heapq.heappop(alive)
        heapq.heappush(alive, (end, k))
        if len(alive) > cap:
            return begin, [e for _, e in alive]
    return None


def _delay_one(plan: Plan, spans: list[tuple[int, int]], alive: list[int]) -> bool:
    """One move that adds order around the alive events; False if none is possible. First
    a RECORD later (past the next launch of its stream), the event that closes last first;
    then a WAIT earlier (before the step in front of its run of WAITs), the event that closes
    first first. A move that would deadlock the plan is undone and the next one tried."""
    for e in sorted(alive, key=lambda k: (-spans[k][1], -spans[k][0], k)):
        steps = plan.streams[plan.events[e].src_stream]
        i = next(j for j, st in enumerate(steps) if st.kind == RECORD and st.arg == e)
        nxt = next((j for j in range(i + 1, len(steps)) if steps[j].kind == LAUNCH), None)
        if nxt is not None and _try_move(plan, steps, i, nxt):   # lands right after that launch
            return True
    for e in sorted(alive, key=lambda k: (spans[k][1], spans[k][0], k)):
        steps = plan.streams[plan.events[e].dst_stream]
        i = next(j for j, st in enumerate(steps) if st.kind == WAIT and st.arg == e)
        run = i
        while run > 0 and steps[run - 1].kind == WAIT:
            run -= 1
        if run > 0 and _try_move(plan, steps, i, run - 1):        # before the step ahead of its run
            return True
    return False


def _try_move(plan: Plan, steps: list, i: int, j: int) -> bool:
    """Move steps[i] to index j (as list.insert after the pop); keep it unless the plan
    deadlocks then."""
    before = list(steps)
    steps.insert(j, steps.pop(i))
    try:
        host_order(plan)
    except PlanError:
        steps[:] = before
        return False
    return True


def _why(plan: Plan, cap: int, t: int, alive: list[int]) -> str:
    names = ", ".join(f"{plan.events[k].src}->{plan.events[k].dst}" for k in sorted(alive)[:3])
    more = f" and {len(alive) - 3} more" if len(alive) > 3 else ""
    return (f"pyge.maxEventNum={cap} cannot be met for plan {plan.graph_name!r}: {len(alive)} events "
            f"are alive at once at host step {t} ({names}{more}) and none of their RECORDs can be "
            "delayed (each follows its stream's last launch, or delaying it would deadlock); "
            "raise pyge.maxEventNum or use fewer streams")
