"""Brute-force views of a plan for tests, sharing no code with the planner or the verifier:
reachability over its steps, and a plan with one logical event taken out.

Imported by test files with `tests/` on sys.path (tests have no package)."""
from __future__ import annotations

from pyge.passes.sync.event_ids import assign_event_ids
from pyge.plan.plan import LAUNCH, RECORD, WAIT


def closure(succ: dict, starts: dict) -> dict:
    """For each key of `starts`, every vertex reachable from its start vertex over `succ`
    (the start itself only if a cycle leads back to it)."""
    reach = {}
    for n, start in starts.items():
        seen, todo = set(), list(succ[start])
        while todo:
            k = todo.pop()
            if k not in seen:
                seen.add(k)
                todo.extend(succ[k])
        reach[n] = seen
    return reach


def steps_before(plan):
    """before(a, b): a path of stream-order and record->wait step edges leads from node a's
    launch to node b's."""
    succ = {(s, i): [] for s, ss in enumerate(plan.streams) for i in range(len(ss))}
    waits: dict[int, list] = {}
    for s, ss in enumerate(plan.streams):
        for i, step in enumerate(ss):
            if i + 1 < len(ss):
                succ[(s, i)].append((s, i + 1))
            if step.kind == WAIT:
                waits.setdefault(step.arg, []).append((s, i))
    for s, ss in enumerate(plan.streams):
        for i, step in enumerate(ss):
            if step.kind == RECORD:
                succ[(s, i)].extend(waits.get(step.arg, []))
    launch = {step.arg: (s, i) for s, ss in enumerate(plan.streams) for i, step in enumerate(ss)
              if step.kind == LAUNCH}
    reach = closure(succ, launch)
    return lambda a, b: a != b and launch[b] in reach[a]


def drop_event(plan, k: int, max_ids: int):
    """`plan` (changed in place) without logical event k: its record and wait steps go, the
    later events are renumbered and physical ids are assigned again within `max_ids`."""
    plan.streams = [[s for s in steps if s.kind == LAUNCH or s.arg != k] for steps in plan.streams]
    for steps in plan.streams:
        for s in steps:
            if s.kind != LAUNCH and s.arg > k:
                s.arg -= 1
    del plan.events[k]
    for i, e in enumerate(plan.events):
        e.index = i
    assign_event_ids(plan, max_ids)
    return plan
