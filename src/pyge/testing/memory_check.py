"""A second check of a finished memory plan, from the planner's side (used by tests; the
verifier's own check is passes/verify/memory.py): overlapping byte ranges are ordered, release
points follow every use.

Re-derives happens-before from the plan's steps (analysis.happens_before.HappensBefore.of_steps) and compares
every pair of values whose arena ranges overlap, whatever their buffer ids: pairwise within
each group of overlapping ranges, so meant for test-sized plans.
"""
from __future__ import annotations

from ..errors import VerificationError
from ..plan.plan import Plan
from ..passes.memory.planner import is_planned, value_readers
from ..analysis.happens_before import HappensBefore


def memory_problems(plan: Plan) -> list[str]:
    hb = HappensBefore.of_steps(plan)
    readers = value_readers(plan)
    uses = [hb.frontier(readers[v.index] + ([v.producer] if v.producer >= 0 else []))
            for v in plan.values]
    problems: list[str] = []
    mem = plan.memory
    spans = []
    for v in plan.values:
        if v.buffer < 0:
            if is_planned(v) and mem.buffers:
                problems.append(f"value {v.name!r} has a static size but no buffer")
            continue
        if not is_planned(v):
            problems.append(f"value {v.name!r} is an input, output or constant but has buffer {v.buffer}")
            continue
        b = mem.buffers[v.buffer]
        if v.nbytes > b.size or b.offset + v.nbytes > mem.peak_bytes:
            problems.append(f"value {v.name!r} ({v.nbytes} B) does not fit buffer {b.index} "
                            f"(size {b.size}, offset {b.offset}, arena {mem.peak_bytes})")
        spans.append((b.offset, b.offset + v.nbytes, v))
    spans.sort(key=lambda t: t[0])
    for i, (start, end, v) in enumerate(spans):
        for start2, _, w in spans[i + 1:]:
            if start2 >= end:
                break
            if not (hb.all_before(uses[v.index], w.producer) or hb.all_before(uses[w.index], v.producer)):
                problems.append(
                    f"values {v.name!r} ({plan.nodes[v.producer].name}@s{plan.nodes[v.producer].stream}) and "
                    f"{w.name!r} ({plan.nodes[w.producer].name}@s{plan.nodes[w.producer].stream}) share "
                    "arena bytes but neither one's uses happen-before the other's producer")
    problems.extend(_release_problems(plan, hb, uses))
    return problems


def _release_problems(plan: Plan, hb: HappensBefore, uses: list) -> list[str]:
    problems = []
    released: dict[int, str] = {}
    for n in plan.nodes:
        for vi in n.free_after:
            v = plan.values[vi]
            if v.is_input or v.is_output or v.is_const:
                problems.append(f"{n.name} releases {v.name!r}, a graph input, output or constant")
            if vi in released:
                problems.append(f"{v.name!r} is released twice ({released[vi]} and {n.name})")
            released[vi] = n.name
            if not hb.all_before_or_at(uses[vi], n.index):
                problems.append(f"{n.name}@s{n.stream} releases {v.name!r} while a reader on another "
                                "stream may not have finished")
    return problems


def check_memory(plan: Plan) -> None:
    """Raise VerificationError naming the first unsafe reuse or release."""
    problems = memory_problems(plan)
    if problems:
        more = f" (and {len(problems) - 1} more)" if len(problems) > 1 else ""
        raise VerificationError(f"memory plan of {plan.graph_name!r}: {problems[0]}{more}")
