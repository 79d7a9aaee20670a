"""Memory plan, made after streams and events (as GE plans memory after logical streams).

Two products:

1. **Arena layout.** Every planned intermediate (a tensor of static size that is neither a
   graph input, output nor constant) gets an offset in one arena. Two values may share
   bytes only if one's producer and every reader *happen-before* the other's producer
   (analysis/happens_before.py: vector clocks over stream order and Send/Recv steps). Along
   one stream that is plain program order; across streams it holds only where an event
   chain orders the last use before the new definition. Without that rule a side stream could overwrite
   bytes another stream is still reading (write-after-read across streams).
   Packing: blocks.pack_blocks (near-linear, always) and pack.pack_by_size
   (greedy by size, quadratic but vectorised, up to BY_SIZE_LIMIT values); the smaller
   arena wins.
   `PlanValue.buffer` names a `MemoryPlan.buffers` entry: values placed at the same offset
   share one buffer (its tenants, necessarily ordered, since they overlap). Buffers may
   overlap one another too, and the rule is the same: **any two values whose byte ranges
   [offset, offset + nbytes) overlap are ordered**; the verifier checks it
   (passes/verify/memory.check_overlaps).

2. **Release points** (`PlanNode.free_after`). A value is released after a node m only if
   every reader (and the producer) happens-before-or-is m. On the CPU a release drops the
   reference from the value table; releasing on one stream while another might still read
   the value would make that reader see None.

**Memory events.** Streams can leave big values pairwise unordered (a residual block
whose shortcut runs on its own stream: its large activations may not share bytes with
the main branch's), so the multi-stream arena can exceed the one-stream arena of the same
graph (docs/performance.md, Memory plan, has the measured cases). The rule: only when the multi-stream arena
exceeds both RATIO (1.15) x the single-stream peak and that peak + SLACK (1 MiB: below
that, serialising streams is not worth the bytes), the planner packs again allowing
Event(reason="memory") edges, each from an old tenant's last reader to a new tenant's
producer, only where growing the arena past a limit is the alternative, and only from a
reader that precedes the producer in a topological order of happens-before (so never a
cycle or deadlock), preferring readers that finish earliest in the merged launch order
(blocks.py, pack.py); of the edges a packer chose, only those the final offsets need are
kept (minimal.py: no memory event can be removed while the plan still verifies). Trials: each packer with the limit at 1.15x, then 1x,
the single-stream peak; kept: the one within 1.15x with the fewest events, else the
smallest arena, if smaller than without events. The single-stream peak is that of the same
nodes planned in index order on one stream (what ge.enableSingleStream=true plans); it is
only computed when the arena exceeds the bounds against the live-bytes lower bound of that
order. The events go through assign_event_ids again; if a pyge.maxEventNum cap cannot hold
them, they are dropped and the layout without them is kept. plan_memory first removes memory
events of an earlier run, so it is idempotent.

`peak_bytes` is the arena size; `no_reuse_bytes` the arena size with one region per value
(both with offsets aligned to pack.ALIGN bytes, so the two compare like for like).
With `pyge.memoryReuse=false` every value gets its own region and no event is added.
"""
from __future__ import annotations

import gc
import logging
from ...analysis.happens_before import HappensBefore
from ...errors import PlanError
from ...options import parse_options
from ...plan.order import merged_order
from ...plan.plan import Buffer, MemoryPlan, Plan, PlanValue
from ..sync import event_ids
from .blocks import pack_blocks
from .events import add_memory_events, strip_memory_events
from .minimal import needed_edges
from .pack import BY_SIZE_LIMIT, Item, live_lower_bound, make_items, pack_by_size, pack_no_reuse
from .release import release_points

log = logging.getLogger(__name__)

RATIO = 1.15          # multi-stream arena allowed over the single-stream one before events
SLACK = 1 << 20       # ... and bytes over it: smaller savings are not worth an event


def is_planned(v: PlanValue) -> bool:
    """Intermediates of known static size get a buffer; the rest are allocated at run time."""
    return (v.kind == "tensor" and v.nbytes > 0 and v.producer >= 0
            and not (v.is_input or v.is_output or v.is_const))


def value_readers(plan: Plan) -> list[list[int]]:
    """Per value, the nodes reading it (a node reading a value twice is one reader)."""
    readers: list[list[int]] = [[] for _ in plan.values]
    for n in plan.nodes:
        ins = n.inputs
        if len(ins) == 1:                   # the usual node: nothing to deduplicate
            if ins[0] >= 0:
                readers[ins[0]].append(n.index)
            continue
        for vi in dict.fromkeys(ins):
            if vi >= 0:
                readers[vi].append(n.index)
    return readers


def plan_memory(plan: Plan, options=None) -> MemoryPlan:
    # Hundreds of thousands of small lists and tuples, none in a reference cycle: with the
    # cyclic collector on, its generation scans over the whole plan are a large share of the
    # time on large graphs. Reference counting still frees everything.
    was_enabled = gc.isenabled()
    gc.disable()
    try:
        return _plan_memory(plan, options)
    finally:
        if was_enabled:
            gc.enable()


def _plan_memory(plan: Plan, options) -> MemoryPlan:
    opts = parse_options(options)         # None -> the defaults; an Options passes through
    reuse = bool(opts["pyge.memoryReuse"])
    cap = opts["pyge.maxEventNum"]          # 0: no cap (the default, as in GE)
    if strip_memory_events(plan):            # planning twice gives the same plan
        event_ids.assign_event_ids(plan, cap)
    hb = HappensBefore.of_steps(plan)
    readers = value_readers(plan)
    for v in plan.values:
        v.buffer = -1
    items = make_items(plan, hb, readers, is_planned)
    peak = no_reuse = pack_no_reuse(items)
    added = 0
    items_hb = hb
    if reuse and items:
        peak = _pack(items, hb)
        if plan.num_streams > 1:
            peak, added, hb = _maybe_order(plan, hb, items, readers, peak, cap)
    # The items' frontiers and last uses are the release points' too, while hb is theirs.
    known = {it.vi: (it.front, it.last) for it in items} if hb is items_hb else {}
    release_points(plan, hb, readers, known)
    mem = MemoryPlan(buffers=_buffers(plan, items), peak_bytes=peak, no_reuse_bytes=no_reuse)
    plan.memory = mem
    plan.meta["memory_events"] = added
    log.debug("%s (%d memory events)", mem, added)
    return mem


def _pack(items: list[Item], hb: HappensBefore) -> int:
    """The smaller of the two packings; leaves its offsets in the items."""
    peak = pack_blocks(items, hb)
    if len(items) <= BY_SIZE_LIMIT:
        kept = [it.offset for it in items]
        by_size = pack_by_size(items, hb)
        if by_size < peak:
            return by_size
        for it, off in zip(items, kept):
            it.offset = off
    return peak


def _over(peak: int, single: int) -> bool:
    return peak > RATIO * single and peak - single > SLACK


def single_stream_peak(plan: Plan, readers: list[list[int]]) -> int:
    """The arena of the same values planned on one stream, nodes in index order."""
    total = HappensBefore.total(plan)
    return _pack(make_items(plan, total, readers, is_planned), total)


def _maybe_order(plan: Plan, hb: HappensBefore, items: list[Item], readers: list[list[int]],
                 peak: int, cap: int) -> tuple[int, int, HappensBefore]:
    """Add memory events when the arena exceeds the single-stream one (see module doc)."""
    spans = [(it.producer, max(readers[it.vi] + [it.producer]), it.need) for it in items]
    if not _over(peak, live_lower_bound(spans)):
        return peak, 0, hb
    single = single_stream_peak(plan, readers)
    if not _over(peak, single):
        return peak, 0, hb
    kept = [it.offset for it in items]
    rank = [0] * len(plan.nodes)
    for i, ni in enumerate(merged_order(plan)):
        rank[ni] = i
    # Trials: each packer, events allowed past 1.15x or past 1x the single-stream arena.
    # Keep the one within 1.15x with the fewest events (then the smallest arena), else the
    # smallest arena.
    packers = [pack_blocks] + ([pack_by_size] if len(items) <= BY_SIZE_LIMIT else [])
    best = None
    for packer in packers:
        for limit in (int(RATIO * single), single):
            edges: list[tuple[int, int]] = []
            got = packer(items, hb.copy(), edges, limit=limit, rank=rank)
            edges = needed_edges(hb, items, edges)      # minimal.py: none can go
            key = (got > RATIO * single, len(edges) if got <= RATIO * single else 0, got)
            if best is None or key < best[0]:
                best = (key, got, edges, [it.offset for it in items])
            if got <= RATIO * single:
                break                        # the looser limit sufficed: fewer events
    _, ordered, edges, offsets = best
    if ordered >= peak:
        for it, off in zip(items, kept):
            it.offset = off
        return peak, 0, hb
    for it, off in zip(items, offsets):
        it.offset = off
    if not edges:                            # a smaller layout that needs no event after all
        return ordered, 0, hb
    ids = [e.event_id for e in plan.events]
    added = add_memory_events(plan, edges)
    try:
        event_ids.assign_event_ids(plan, cap)
    except PlanError as err:                 # pyge.maxEventNum cannot hold them: do without
        log.warning("memory plan of %s: %s; keeping the %d-byte arena without memory events",
                    plan.graph_name, err, peak)
        strip_memory_events(plan)            # ours were appended: the others keep their index
        for e, pid in zip(plan.events, ids):
            e.event_id = pid
        for it, off in zip(items, kept):
            it.offset = off
        return peak, 0, hb
    log.info("memory plan of %s: %d memory events bring the arena from %d to %d bytes "
             "(single stream: %d)", plan.graph_name, added, peak, ordered, single)
    return ordered, added, HappensBefore.of_steps(plan)


def _buffers(plan: Plan, items: list[Item]) -> list[Buffer]:
    """Values at one offset share a buffer; items come in producer order, first tenant first."""
    buffers: list[Buffer] = []
    at: dict[int, Buffer] = {}
    for it in items:
        b = at.get(it.offset)
        if b is None:
            b = Buffer(index=len(buffers), offset=it.offset, size=0,
                       stream=plan.nodes[it.producer].stream)
            buffers.append(b)
            at[it.offset] = b
        b.size = max(b.size, it.size)
        plan.values[it.vi].buffer = b.index
    return buffers
