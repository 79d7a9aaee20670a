"""Verifier, memory half: buffer reuse and release points are ordered across streams.

Write-after-read is the hazard here. When a buffer passes from value A to value B (same
`PlanValue.buffer` id), B's producer overwrites A's bytes; if any reader of A sits on
another stream and is not ordered before that write, it may read B's data. Same for
write-after-write (A's producer still writing when B's starts) and for release points
(`PlanNode.free_after`): a value released after node X must not have a reader that can
still run after X. On one stream, stream order settles all of it; across streams only
events do, which is what these checks confirm.

Buffer ids are not the whole story: the planner may give partly overlapping byte ranges
different buffer ids, so `check_overlaps` looks at the bytes themselves. A value's range is
[offset, offset + nbytes), its buffer's offset (`MemoryPlan.buffers`) being the value's. The
values covering any one byte must form a chain like a buffer's tenants. A sweep over
offsets keeps the values covering the current offset sorted by producer launch order (a
linear extension of happens-before) and checks each pair that becomes adjacent in that
order, as a value starts or ends: if every adjacent pair at every byte is ordered, every
pair sharing a byte is (transitively), and an unordered pair sharing a byte leaves some
adjacent pair there unordered. O(V log V) plus O(readers) per check, about 2 checks a value.
"""
from __future__ import annotations

from bisect import bisect_left

from ...errors import VerificationError
from ...plan.plan import Plan
from .clocks import PlanClocks


def value_readers(plan: Plan) -> list[list[int]]:
    """Per value, the nodes reading it (the verifier's own count, not the planner's)."""
    readers: list[list[int]] = [[] for _ in plan.values]
    for v, node in enumerate(plan.nodes):
        ins = node.inputs
        if len(ins) == 1:
            if ins[0] >= 0:
                readers[ins[0]].append(v)
            continue
        for vi in dict.fromkeys(ins):
            if vi >= 0:
                readers[vi].append(v)
    return readers


def check_buffers(plan: Plan, clocks: PlanClocks, readers: list[list[int]] | None = None) -> None:
    """Tenants of one buffer must form a chain: every access of a tenant happens before the
    producer of the next (a node may read a tenant and write the next one in place). So
    must the values sharing any arena byte, whatever their buffers (check_overlaps)."""
    readers = readers if readers is not None else value_readers(plan)
    check_overlaps(plan, clocks, readers)
    groups: dict[int, list[int]] = {}
    swept = len(plan.memory.buffers)
    for pv in plan.values:
        if pv.buffer >= 0:
            groups.setdefault(pv.buffer, []).append(pv.index)
    for b in [b for b, t in groups.items()        # tenants all share the buffer's first
              if b < swept and all(plan.values[vi].nbytes > 0 for vi in t)]:  # byte: swept
        del groups[b]
    if not any(len(t) > 1 for t in groups.values()):
        return                                       # no reuse planned: nothing to order
    rank = clocks.rank
    for b in sorted(groups):
        # Producer launch order in the replay: a linear extension of happens-before, so if
        # the tenants form a chain at all, this is the chain's order.
        tenants = sorted(groups[b], key=lambda vi: (rank[plan.values[vi].producer]
                                                    if plan.values[vi].producer >= 0 else -1, vi))
        for a, nxt in zip(tenants, tenants[1:]):
            _check_handover(plan, clocks, readers, _tenants_where(plan, b), a, nxt)


def check_overlaps(plan: Plan, clocks: PlanClocks, readers: list[list[int]]) -> None:
    """Values whose arena byte ranges overlap, whatever their buffer ids, are ordered.

    The sweep's keys are plain integers, compared as the tuples they encode (m bounds every
    value index): a bound (offset, 1 for a start / 0 for an end, value) is
    (2 * offset + flag) * m + value, and a value's place among the active ones,
    (producer launch rank, -1 for none; value), is (rank + 1) * m + value."""
    mem = plan.memory
    bufs, values, rank = mem.buffers, plan.values, clocks.rank
    m = 1 + max((pv.index for pv in values), default=0)
    place = [0] * m
    span = m * (m + 1)                      # places are below it
    starts = []                             # (offset, place) as offset * span + place
    for pv in values:
        if 0 <= pv.buffer < len(bufs) and pv.nbytes > 0:
            start = bufs[pv.buffer].offset
            if start < 0 or start + pv.nbytes > mem.peak_bytes:
                raise VerificationError(f"value {pv.name!r} at bytes [{start}, {start + pv.nbytes}) "
                                        f"of buffer {pv.buffer} lies outside the "
                                        f"{mem.peak_bytes}-byte arena")
            vi = pv.index
            k = place[vi] = (rank[pv.producer] + 1 if pv.producer >= 0 else 0) * m + vi
            starts.append(start * span + k)
    if len(starts) < 2:
        return
    starts.sort()
    if _tiled_and_ordered(plan, clocks, readers, starts, span, m):
        return
    bounds = []
    for key in starts:
        start, k = divmod(key, span)
        vi = k % m
        bounds.append(2 * (start + values[vi].nbytes) * m + vi)   # ends sort before starts:
        bounds.append((2 * start + 1) * m + vi)                   # ranges are half-open
    bounds.sort()

    def where(a: int, b: int) -> str:
        va, vb = values[a], values[b]
        sa, sb = bufs[va.buffer].offset, bufs[vb.buffer].offset
        return (f"overlapping arena bytes, {va.name!r} [{sa}, {sa + va.nbytes}) in buffer "
                f"{va.buffer} -> {vb.name!r} [{sb}, {sb + vb.nbytes}) in buffer {vb.buffer}")

    clock, stream, pos = clocks.clock, clocks.stream, clocks.pos

    def check(ka: int, kb: int) -> None:
        a, b = ka % m, kb % m
        va, pb = values[a], values[b].producer      # _check_handover's usual case, inline
        if pb >= 0 and not va.is_output:            # (clocks.all_before inline too)
            u, cv = va.producer, clock[pb]
            if u != pb and (u < 0 or cv[stream[u]] >= pos[u]):
                for r in readers[a]:
                    if r != pb and cv[stream[r]] < pos[r]:
                        break
                else:
                    return
        _check_handover(plan, clocks, readers, where, a, b)

    active: list[int] = []     # values covering the current offset, by place
    for bound in bounds:
        q, vi = divmod(bound, m)
        k = place[vi]
        i = bisect_left(active, k)
        if q & 1:
            active.insert(i, k)
            if i > 0:
                check(active[i - 1], k)
            if i + 1 < len(active):
                check(k, active[i + 1])
        else:
            active.pop(i)
            if 0 < i < len(active):            # its neighbours meet: both cover this offset
                check(active[i - 1], active[i])


def _tiled_and_ordered(plan: Plan, clocks: PlanClocks, readers: list[list[int]],
                       starts: list[int], span: int, m: int) -> bool:
    """check_overlaps' verdict without the sweep, for the usual arena: values that overlap
    start at the same offset (values of a few sizes at aligned offsets). Then the values
    starting at one offset all share its first byte, and no other value shares any of
    theirs; so every pair among them must be ordered, and since the handover relation is
    transitive (a's accesses before b's producer, b's producer before c's: a's before
    c's), it is enough that their consecutive pairs by place are. That is what the sweep
    decides too. `starts`: (offset, place) keys, sorted. True when that holds; False when
    some value overlaps one starting elsewhere, or some pair fails: the sweep then runs
    (and names the first unordered pair as it always has)."""
    values = plan.values
    clock, stream, pos = clocks.clock, clocks.stream, clocks.pos
    nxt, end, start = -1, 0, 0              # nxt: the first key past the current offset's
    prev, va = -1, None                     # (key % m is the value: span is a multiple of m)
    for key in starts:
        b = key % m
        vb = values[b]
        if key >= nxt:                      # the first value at a new offset
            start = key // span
            if start < end:                 # inside a range that starts earlier: sweep
                return False
            nxt, end = (start + 1) * span, start + vb.nbytes
            prev, va = b, vb
            continue
        pb = vb.producer                    # _check_handover's pass condition
        if pb < 0 or va.is_output:
            return False
        u, cv = va.producer, clock[pb]
        if u == pb or (u >= 0 and cv[stream[u]] < pos[u]):
            return False
        for r in readers[prev]:
            if r != pb and cv[stream[r]] < pos[r]:
                return False
        if start + vb.nbytes > end:
            end = start + vb.nbytes
        prev, va = b, vb
    return True


def _tenants_where(plan: Plan, b: int):
    """The culprit line of a buffer's handover, as _check_handover asks for it."""
    return lambda a, nxt: f"buffer {b}: {plan.values[a].name!r} -> {plan.values[nxt].name!r}"


def _check_handover(plan: Plan, clocks: PlanClocks, readers: list[list[int]], where_of,
                    a: int, nxt: int) -> None:
    """Value `a` hands its bytes over to `nxt`: fail unless every access of `a` happens
    before `nxt` is written. `where_of(a, nxt)` names the pair; it is called only to fail
    (most of the cost of a check was writing the line)."""
    va, vb = plan.values[a], plan.values[nxt]
    pa, pb = va.producer, vb.producer
    if pb >= 0 and not va.is_output and pa != pb and clocks.all_before(pa, readers[a], pb):
        return                                   # ordered: the usual case
    where = where_of(a, nxt)
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
    readers = readers if readers is not None else value_readers(plan)
    values, clock, stream, pos = plan.values, clocks.clock, clocks.stream, clocks.pos
    for x, node in enumerate(plan.nodes):
        if not node.free_after:
            continue
        cx = clock[x]
        for vi in node.free_after:
            pv = values[vi]
            if pv.is_output:
                raise VerificationError(f"graph output {pv.name!r} is released after "
                                        f"{clocks.where(x)}")
            users = ([pv.producer] if pv.producer >= 0 else []) + readers[vi]
            for r in users:                      # clocks.all_before(-1, users, x), inline
                if r != x and cx[stream[r]] < pos[r]:
                    break
            else:
                continue                         # every use is before or at x: the usual case
            for r in users:
                if not clocks.before_or_same(r, x):
                    raise VerificationError(
                        f"unordered release: {pv.name!r} is released after {clocks.where(x)} "
                        f"while {clocks.where(r)} may still use it")
