"""Near-linear packing: replay the producers in happens-before order through a best-fit
allocator whose free blocks remember who used them.

Walking the nodes in `hb.order` (a topological order of happens-before), each node first
takes bytes for its planned outputs, then gives back the values whose latest use (in that
order) it is. A given-back block keeps the *frontier* of its previous tenants' uses
(analysis/happens_before.py); adjacent free blocks coalesce when one frontier covers the
other. A node p may take a free block only if that frontier happens-before p: every earlier tenant's
producer and readers finished before p writes (write-after-read and write-after-write
safe), an O(streams) test, whatever stream p runs on. On one stream every given-back block
qualifies and this is a plain offline best-fit allocator.

Choice: the smallest free block that fits and qualifies (oldest first within a size: older
blocks are the likeliest to be ordered before p); else the free block ending at the arena
top, if it qualifies, grown to size; else new bytes at the top. The search looks at no more
than SCAN blocks, so a node costs O(SCAN x streams) at worst and the pass stays linear in
the graph; a block passed over is only a missed reuse, never an unsafe one. Blocks found
unusable go to the back of their size's queue. SCAN is generous because on many random
streams few free blocks qualify for a given node, and a short search then misses most
reuse; an arena that reuses well has few free blocks, so a long search costs little
(docs/performance.md, Memory plan).

Memory events. With `edges` given, when growing the arena would take it past `limit`, the
packer may instead take a free block that does not qualify yet and order it: for every
stream where the frontier is not before p, an edge (that stream's last use -> p) becomes an
Event(reason="memory"), RECORD after the reader and WAIT before p. The reader precedes p in
`hb.order` (a block is given back only after its last use in that order, and never to the
node doing so), so p cannot happen-before it: the edge cannot close a cycle and the order
stays topological. Among such blocks it takes the one whose unordered readers finish
earliest in `rank` (the plan's merged launch order): those are the closest to being ordered
already, so the new edge costs the least concurrency.
"""
from __future__ import annotations

from bisect import bisect_left, insort

from ...analysis.happens_before import Frontier, HappensBefore
from .pack import Item

SCAN = 256


class _Block:
    __slots__ = ("off", "size", "front")

    def __init__(self, off: int, size: int, front: Frontier):
        self.off, self.size, self.front = off, size, front


def _covering(a: Frontier, b: Frontier) -> Frontier | None:
    """join(a, b) when that is a or b (one frontier covers the other: each of its entries
    is at least the other's on that stream), else None; without building the join."""
    if a == b:
        return a
    top = dict(a)
    a_covers = True                     # every entry of b at most a's
    b_covers = True                     # every entry of a at most b's
    seen = 0
    for s, o in b:
        x = top.get(s)
        if x is None:
            a_covers = False
            continue
        seen += 1
        if o > x:
            a_covers = False
        elif o < x:
            b_covers = False
    if a_covers:
        return a
    if b_covers and seen == len(a):
        return b
    return None


class FreeBlocks:
    """Free byte ranges, by address (to coalesce) and by size (best fit)."""

    def __init__(self) -> None:
        self.at_start: dict[int, _Block] = {}
        self.at_end: dict[int, _Block] = {}
        self.sizes: list[int] = []                      # sizes with a non-empty bucket
        self.bucket: dict[int, dict[_Block, None]] = {}  # insertion-ordered: oldest first

    def add(self, b: _Block) -> None:
        self.at_start[b.off] = b
        self.at_end[b.off + b.size] = b
        bk = self.bucket.get(b.size)
        if bk is None:
            bk = self.bucket[b.size] = {}
            insort(self.sizes, b.size)
        bk[b] = None

    def remove(self, b: _Block) -> None:
        del self.at_start[b.off]
        del self.at_end[b.off + b.size]
        bk = self.bucket[b.size]
        del bk[b]
        if not bk:
            del self.bucket[b.size]
            self.sizes.pop(bisect_left(self.sizes, b.size))

    def give_back(self, off: int, size: int, front: Frontier) -> None:
        # Coalesce with a free neighbour only when one frontier covers the other (always on
        # one stream). Joining unrelated frontiers would make the merged block usable only
        # once both are ordered, hiding the part that is free already: on inception_v2 over
        # 2 streams that tripled the arena.
        left = self.at_end.get(off)
        if left is not None:
            both = _covering(left.front, front)
            if both is not None:
                self.remove(left)
                off, size, front = left.off, size + left.size, both
        right = self.at_start.get(off + size)
        if right is not None:
            both = _covering(front, right.front)
            if both is not None:
                self.remove(right)
                size, front = size + right.size, both
        self.add(_Block(off, size, front))

    def fitting(self, need: int, limit: int):
        """Up to `limit` free blocks of at least `need` bytes, smallest first."""
        sizes, k = self.sizes, 0
        for i in range(bisect_left(sizes, need), len(sizes)):
            for b in self.bucket[sizes[i]]:
                yield b
                k += 1
                if k >= limit:
                    return

    def rotate(self, blocks: list[_Block]) -> None:
        """Send blocks found unusable to the back of their size's queue, so that the next
        search, limited to SCAN blocks, looks at others first (a block whose readers sit on
        a stream that rarely joins would otherwise hide the usable ones behind it)."""
        for b in blocks:
            bk = self.bucket[b.size]
            del bk[b]
            bk[b] = None

    def take(self, b: _Block, need: int) -> int:
        """Use the low `need` bytes of b; the rest stays free with b's frontier."""
        self.remove(b)
        if b.size > need:
            self.add(_Block(b.off + need, b.size - need, b.front))
        return b.off


def pack_blocks(items: list[Item], hb: HappensBefore, edges: list | None = None,
                limit: int = 0, rank: list[int] | None = None) -> int:
    """Set every item's offset; returns the arena size. With `edges` (a list), memory
    events may be added (appended as (reader, producer) node pairs, and to hb)."""
    by_prod: dict[int, list[Item]] = {}
    give_at: dict[int, list[Item]] = {}
    for it in items:
        by_prod.setdefault(it.producer, []).append(it)
        give_at.setdefault(it.last, []).append(it)
    free = FreeBlocks()
    top = 0
    all_before = hb.all_before
    clock, stream_of = hb.clock, hb.stream_of
    sizes, bucket = free.sizes, free.bucket
    for p in hb.order:
        if edges is not None:
            hb.refresh(p)                   # a predecessor may have gained a memory event
        for it in by_prod.get(p, ()):
            need = it.need
            # free.fitting(need, SCAN) and hb.all_before(b.front, p), inline (the loop runs
            # for every planned value): the first of up to SCAN blocks whose frontier
            # happens-before p, strictly (on p's own stream, before p's ordinal).
            chosen, passed = None, []
            cp, sp = clock[p], stream_of[p]     # per item: an ordered block may renew clock[p]
            i, count = bisect_left(sizes, need), len(sizes)
            while i < count:
                for b in bucket[sizes[i]]:
                    for s, o in b.front:
                        if o > cp[s] or (s == sp and o == cp[s]):
                            break
                    else:
                        chosen = b
                        break
                    passed.append(b)
                    if len(passed) >= SCAN:
                        break
                if chosen is not None or len(passed) >= SCAN:
                    break
                i += 1
            if passed:
                free.rotate(passed)
            if chosen is not None:
                it.offset = free.take(chosen, need)
                continue
            tb = free.at_end.get(top)
            grow_from = tb.off if tb is not None and all_before(tb.front, p) else top
            if edges is not None and grow_from + need > max(limit, top):
                chosen = _order_a_block(free, need, p, hb, edges, rank)
                if chosen is not None:
                    it.offset = free.take(chosen, need)
                    continue
            if grow_from < top:
                free.remove(tb)
            it.offset = grow_from
            top = grow_from + need
        for it in give_at.get(p, ()):
            free.give_back(it.offset, it.need, it.front)
    return top


def _order_a_block(free: FreeBlocks, need: int, p: int, hb: HappensBefore, edges: list,
                   rank: list[int] | None) -> _Block | None:
    """The fitting free block whose unordered readers finish earliest; orders it before p."""
    best, best_key, best_nodes = None, None, None
    for b in free.fitting(need, SCAN):
        nodes = hb.unordered(b.front, p)
        key = (max((rank[x] if rank else hb.position[x]) for x in nodes) if nodes else -1,
               len(nodes), b.size, b.off)
        if best_key is None or key < best_key:
            best, best_key, best_nodes = b, key, nodes
    if best is None:
        return None
    for x in best_nodes:
        hb.add_edge(x, p)
        edges.append((x, p))
    return best
