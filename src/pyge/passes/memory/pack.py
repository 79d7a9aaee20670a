"""Offset packing: place every planned value in one arena so that two values share bytes
only if they are ordered.

Values v and w are *compatible* (may overlap) when every use of one (its producer and
readers, summarised as a frontier, analysis/happens_before.py) happens-before the producer
of the other: an O(streams) test.

Two packers:

- `pack_blocks` (blocks.py), near-linear: replays producers in happens-before
  order like a best-fit allocator over free blocks. It is always run.
- `pack_by_size` here, as TFLite's greedy-by-size: largest value first, each at the lowest
  offset that overlaps no incompatible value already placed (first fit). It often packs
  big activations tighter, but compares every value with every placed one (quadratic,
  vectorised with numpy), so plan_memory runs it only on graphs of at most BY_SIZE_LIMIT
  values.

plan_memory keeps whichever gives the smaller arena.
"""
from __future__ import annotations

from itertools import accumulate

import numpy as np

from ...analysis.happens_before import Frontier, HappensBefore

ALIGN = 256   # CUDA kernels like 256-byte aligned operands; arena offsets are multiples of it
BY_SIZE_LIMIT = 4000


def align(n: int) -> int:
    return (n + ALIGN - 1) // ALIGN * ALIGN


class Item:
    """One value to place."""

    __slots__ = ("vi", "size", "need", "producer", "pos", "front", "last", "offset")

    def __init__(self, vi: int, size: int, producer: int, pos: int, front: Frontier, last: int):
        self.vi, self.size, self.producer, self.pos = vi, size, producer, pos
        self.need = align(size)          # bytes reserved in the arena
        self.front = front               # frontier of the producer and every reader
        self.last = last                 # the use latest in happens-before order (a node)
        self.offset = -1


def make_items(plan, hb: HappensBefore, readers: list[list[int]], planned) -> list[Item]:
    """Planned values in producer order (hb.order; a node's outputs in output order)."""
    items = []
    pos = hb.position
    for ni in hb.order:
        for vi in plan.nodes[ni].outputs:
            v = plan.values[vi]
            if planned(v):
                uses = readers[vi] + [ni]
                items.append(Item(vi, v.nbytes, ni, pos[ni], hb.frontier(uses),
                                  max(uses, key=pos.__getitem__)))
    return items


def _clock_arrays(items: list[Item], hb: HappensBefore) -> tuple[np.ndarray, np.ndarray]:
    """F[i] = item i's frontier as a dense row (-1: no use on that stream); C[i] = its
    producer's clock, own stream minus one. Item a's uses all happen-before item b's
    producer iff all(F[a] <= C[b]) (strictly: a node is not before itself)."""
    m, ns = len(items), hb.num_streams
    front = np.full((m, ns), -1, dtype=np.int64)
    for i, it in enumerate(items):
        for s, o in it.front:
            front[i, s] = o
    clock = np.array([hb.clock[it.producer] for it in items], dtype=np.int64).reshape(m, ns)
    clock[np.arange(m), [hb.stream_of[it.producer] for it in items]] -= 1
    return front, clock


def pack_by_size(items: list[Item], hb: HappensBefore, edges: list | None = None,
                 limit: int = 0, rank: list[int] | None = None) -> int:
    """Largest value first (ties: earlier producer); returns the arena size (sets offsets).

    Two values conflict unless one's uses all happen-before the other's producer. That is
    never true for two outputs of one node, nor when a node reads one and writes the other:
    kernels read inputs while writing outputs, so no in-place reuse. The conflicts of each
    value with the placed ones are found with numpy over the dense clock rows (the pairwise
    test is the quadratic part, and BY_SIZE_LIMIT bounds it).

    With `edges` (a list), memory events may be added as in blocks.py: when first
    fit would take the arena past `limit`, the value may instead go where every value in
    the way is *orderable* with it (one's last use precedes the other's producer in
    hb.order, so an edge from those uses cannot close a cycle); the edges are added to hb
    and appended to `edges`."""
    order = sorted(items, key=lambda i: (-i.size, i.pos, i.vi))
    front, clock = _clock_arrays(order, hb)
    rows: dict[int, list[int]] = {}                 # producer -> its items' rows
    for k, it in enumerate(order):
        rows.setdefault(it.producer, []).append(k)
    offs = np.zeros(len(order), dtype=np.int64)
    needs = np.array([it.need for it in order], dtype=np.int64)
    peak = 0
    for k, it in enumerate(order):
        ordered = (front[:k] <= clock[k]).all(axis=1) | (front[k] <= clock[:k]).all(axis=1)
        idx = np.flatnonzero(~ordered)
        off = _first_fit(it.need, offs[idx], needs[idx])
        bound = max(limit, peak)
        if edges is not None and off + it.need > bound:
            found = _orderable_fit(it, [order[j] for j in idx], hb, bound, rank or hb.position)
            if found is not None:
                off, fix = found
                edges.extend(fix)
                for p in hb.add_edges(fix):                  # clocks have grown
                    for j in rows.get(p, ()):
                        clock[j] = hb.clock[p]
                        clock[j, hb.stream_of[p]] -= 1
        it.offset = off
        offs[k] = off
        peak = max(peak, off + it.need)
    return peak


def _first_fit(need: int, starts: np.ndarray, sizes: np.ndarray) -> int:
    """The lowest offset where `need` bytes overlap none of the spans [start, start + size)."""
    if not len(starts):
        return 0
    o = np.argsort(starts, kind="stable")
    s = starts[o]
    reach = np.maximum.accumulate(s + sizes[o])       # furthest end among spans so far
    before = np.concatenate(([0], reach[:-1]))        # candidate offset ahead of span i
    fits = before + need <= s
    i = int(np.argmax(fits))
    return int(before[i]) if fits[i] else int(reach[-1])


def _orderable_fit(it: Item, conflicts: list[Item], hb: HappensBefore, bound: int,
                   rank: list[int]) -> tuple[int, list[tuple[int, int]]] | None:
    """The offset within `bound` whose conflicts can all be ordered, with those edges; the
    one whose latest newly ordered reader finishes earliest in `rank` (then fewest edges)."""
    pos = hb.position
    fixes: dict[int, list[tuple[int, int]] | None] = {}
    for w in conflicts:
        if pos[w.last] < it.pos:               # w is over before it starts, in hb.order
            fixes[id(w)] = [(x, it.producer) for x in hb.unordered(w.front, it.producer)]
        elif pos[it.last] < w.pos:
            fixes[id(w)] = [(x, w.producer) for x in hb.unordered(it.front, w.producer)]
        else:
            fixes[id(w)] = None
    best = None
    for o in sorted({0} | {w.offset + w.need for w in conflicts}):
        if o + it.need > bound:
            break
        fix: list[tuple[int, int]] = []
        for w in conflicts:
            if w.offset < o + it.need and o < w.offset + w.need:
                f = fixes[id(w)]
                if f is None:
                    break
                fix.extend(f)
        else:
            fix = sorted(set(fix))
            key = (max(rank[x] for x, _ in fix) if fix else -1, len(fix), o)
            if best is None or key < best[0]:
                best = (key, o, fix)
    return None if best is None else (best[1], best[2])


def pack_no_reuse(items: list[Item]) -> int:
    off = 0
    for it in sorted(items, key=lambda i: (i.pos, i.vi)):
        it.offset = off
        off += it.need
    return off


def live_lower_bound(spans: list[tuple[int, int, int]]) -> int:
    """The most bytes live at once for (first node, last node, bytes) spans when nodes run
    one after another in index order: a lower bound on any safe single-stream arena, since
    values live at one node are pairwise unordered there. O(values + nodes)."""
    if not spans:
        return 0
    delta = [0] * (2 + max(last for _, last, _ in spans))
    for first, last, need in spans:
        delta[first] += need
        delta[last + 1] -= need
    return max(0, max(accumulate(delta)))          # the highest running total
