"""Verifier, memory half: buffer reuse and release points are ordered across streams.

Write-after-read is the hazard here. When a buffer passes from value A to value B (same
`PlanValue.buffer` id), B's producer overwrites A's bytes; if any reader of A sits on
another stream and is not ordered before that write, it may read B's data. Same for
write-after-write (A's producer still writing when B's starts) and for release points
(`PlanNode.free_after`): a value released after node X must not have a reader that can
still run after X. On one stream, stream order settles all of it; across streams only
events do, which is what these checks confirm.
"""
from __future__ import annotations

from ..errors import VerificationError
from ..plan.plan import Plan
from .verify_hb import PlanClocks


def _readers(plan: Plan) -> list[list[int]]:
    readers: list[list[int]] = [[] for _ in plan.values]
    for v, node in enumerate(plan.nodes):
        for vi in dict.fromkeys(node.inputs):
            if vi >= 0:
                readers[vi].append(v)
    return readers


def check_buffers(plan: Plan, clocks: PlanClocks, readers: list[list[int]] | None = None) -> None:
    """Tenants of one buffer must form a chain: every access of a tenant happens before the
    producer of the next (a node may read a tenant and write the next one in place)."""
    groups: dict[int, list[int]] = {}
    for pv in plan.values:
        if pv.buffer >= 0:
            groups.setdefault(pv.buffer, []).append(pv.index)
    if not any(len(t) > 1 for t in groups.values()):
        return                                       # no reuse planned: nothing to order
    readers = readers if readers is not None else _readers(plan)
    rank = clocks.rank
    for b in sorted(groups):
        # Producer launch order in the replay: a linear extension of happens-before, so if
        # the tenants form a chain at all, this is the chain's order.
        tenants = sorted(groups[b], key=lambda vi: (rank[plan.values[vi].producer]
                                                    if plan.values[vi].producer >= 0 else -1, vi))
        for a, nxt in zip(tenants, tenants[1:]):
            _check_handover(plan, clocks, readers, b, a, nxt)


def _check_handover(plan: Plan, clocks: PlanClocks, readers: list[list[int]], b: int,
                    a: int, nxt: int) -> None:
    va, vb = plan.values[a], plan.values[nxt]
    pa, pb = va.producer, vb.producer
    where = f"buffer {b}: {va.name!r} -> {vb.name!r}"
    if pb < 0:
        raise VerificationError(f"{where}: {vb.name!r} is a graph input or constant and cannot "
                                "take over a buffer")
    if va.is_output:
        raise VerificationError(f"{where}: graph output {va.name!r} is overwritten by "
                                f"{clocks.where(pb)}")
    if pa == pb:
        raise VerificationError(f"{where}: both are outputs of {clocks.where(pa)}")
    if pa >= 0 and not clocks.before(pa, pb):
        raise VerificationError(f"unordered buffer reuse (write after write), {where}: "
                                f"{clocks.where(pa)} -> {clocks.where(pb)} are not ordered")
    for r in readers[a]:
        if not clocks.before_or_same(r, pb):
            raise VerificationError(f"unordered buffer reuse (write after read), {where}: "
                                    f"reader {clocks.where(r)} is not ordered before the "
                                    f"writer {clocks.where(pb)}")


def check_releases(plan: Plan, clocks: PlanClocks, readers: list[list[int]] | None = None) -> None:
    """A value released after node X: its producer and every reader happen before or at X."""
    if not any(node.free_after for node in plan.nodes):
        return
    readers = readers if readers is not None else _readers(plan)
    for x, node in enumerate(plan.nodes):
        for vi in node.free_after:
            pv = plan.values[vi]
            if pv.is_output:
                raise VerificationError(f"graph output {pv.name!r} is released after "
                                        f"{clocks.where(x)}")
            users = ([pv.producer] if pv.producer >= 0 else []) + readers[vi]
            for r in users:
                if not clocks.before_or_same(r, x):
                    raise VerificationError(
                        f"unordered release: {pv.name!r} is released after {clocks.where(x)} "
                        f"while {clocks.where(r)} may still use it")
