"""Memory plan, made after streams and events (as GE plans memory after logical streams).

Two products:

1. **Arena layout.** Every planned intermediate (a tensor of static size that is neither a
   graph input, output nor constant) gets an offset in one arena (memory_pack.py). Two
   values may share bytes only if one's producer and every reader *happen-before* the
   other's producer (memory_order.py). Along one stream that is plain program order;
   across streams it holds only where a Send/Recv chain already orders the last use before
   the new definition. We never add events for memory: reuse takes what the stream plan
   offers. Without that rule a side stream could overwrite bytes another stream is still
   reading (write-after-read across streams).
   `PlanValue.buffer` names a `MemoryPlan.buffers` entry: values placed at the same offset
   share one buffer (its tenants, necessarily ordered, since they overlap). Buffers may
   overlap one another too, and the rule is the same: **any two values whose byte ranges
   [offset, offset + nbytes) overlap are ordered**; memory_check.check_memory verifies it.

2. **Release points** (`PlanNode.free_after`). A value is released after a node m only if
   every reader (and the producer) happens-before-or-is m. On the CPU a release drops the
   reference from the value table; releasing on one stream while another might still read
   the value would make that reader see None.

`peak_bytes` is the arena size; `no_reuse_bytes` the arena size with one region per value
(both with offsets aligned to memory_pack.ALIGN bytes, so the two compare like for like).
With `pyge.memoryReuse=false` every value gets its own region.
"""
from __future__ import annotations

import logging

from ..plan.plan import Buffer, MemoryPlan, Plan, PlanValue
from .memory_order import HappensBefore
from .memory_pack import Item, pack_by_size, pack_in_order, pack_no_reuse

log = logging.getLogger(__name__)


def _reuse_enabled(options) -> bool:
    if options is None:
        return True
    try:
        return bool(options["pyge.memoryReuse"])
    except (KeyError, TypeError):
        return True


def is_planned(v: PlanValue) -> bool:
    """Intermediates of known static size get a buffer; the rest are allocated at run time."""
    return (v.kind == "tensor" and v.nbytes > 0 and v.producer >= 0
            and not (v.is_input or v.is_output or v.is_const))


def value_uses(plan: Plan) -> tuple[list[int], list[list[int]]]:
    """Per value: bitset of its producer and readers, and the list of reader node indices."""
    uses = [0] * len(plan.values)
    readers: list[list[int]] = [[] for _ in plan.values]
    for v in plan.values:
        if v.producer >= 0:
            uses[v.index] |= 1 << v.producer
    for n in plan.nodes:
        bit = 1 << n.index
        for vi in dict.fromkeys(n.inputs):   # a node reading a value twice is one reader
            if vi >= 0:
                uses[vi] |= bit
                readers[vi].append(n.index)
    return uses, readers


def plan_memory(plan: Plan, options=None) -> MemoryPlan:
    hb = HappensBefore(plan)
    uses, readers = value_uses(plan)
    _release_points(plan, hb, uses, readers)
    mem = _allocate(plan, hb, uses, _reuse_enabled(options))
    plan.memory = mem
    log.debug("%s", mem)
    return mem


# -- release points ----------------------------------------------------------------------

def _release_points(plan: Plan, hb: HappensBefore, uses: list[int], readers: list[list[int]]) -> None:
    for n in plan.nodes:
        n.free_after = []
    for v in plan.values:
        if v.producer < 0 or v.is_output or v.is_input or v.is_const:
            continue
        m = _release_node(hb, uses[v.index], readers[v.index] or [v.producer])
        if m >= 0:
            plan.nodes[m].free_after.append(v.index)
        # else: readers on streams that never join again; the value lives to the end of the run


def _release_node(hb: HappensBefore, mask: int, candidates: list[int]) -> int:
    """The earliest node at or after which every use of the value has finished."""
    by_pos = sorted(candidates, key=lambda c: hb.position[c], reverse=True)
    for c in by_pos:                      # usual case: one reader follows all the others
        if hb.all_before_or_at(mask, c):
            return c
    # Readers on several streams: the first node that every one of them happens-before
    # (typically the consumer after a join). Nothing earlier is safe to release at.
    for m in hb.order[hb.position[by_pos[0]] + 1:]:
        if hb.all_before(mask, m):
            return m
    return -1


# -- arena layout ------------------------------------------------------------------------

def _allocate(plan: Plan, hb: HappensBefore, uses: list[int], reuse: bool) -> MemoryPlan:
    for v in plan.values:
        v.buffer = -1
    items = []
    for ni in hb.order:
        for vi in plan.nodes[ni].outputs:
            v = plan.values[vi]
            if is_planned(v):
                items.append(Item(vi, v.nbytes, ni, hb.position[ni], hb.after_all(uses[vi])))
    no_reuse = pack_no_reuse(items)
    peak = no_reuse
    if reuse and items:
        by_size = pack_by_size(items)
        offsets = [it.offset for it in items]
        in_order = pack_in_order(items, hb.order)
        if by_size < in_order:                     # keep the smaller layout
            for it, off in zip(items, offsets):
                it.offset = off
        peak = min(by_size, in_order)
    buffers: list[Buffer] = []
    at: dict[int, Buffer] = {}
    for it in items:                               # happens-before order: first tenant first
        b = at.get(it.offset)
        if b is None:
            b = Buffer(index=len(buffers), offset=it.offset, size=0,
                       stream=plan.nodes[it.producer].stream)
            buffers.append(b)
            at[it.offset] = b
        b.size = max(b.size, it.size)
        plan.values[it.vi].buffer = b.index
    return MemoryPlan(buffers=buffers, peak_bytes=peak, no_reuse_bytes=no_reuse)
