"""Memory events as few as the layout needs: drop every one the final offsets do not need.

The packers (blocks.py, pack.py) choose memory edges (reader x -> producer p) as they place
values, and may choose more than the finished layout needs:
- a block's frontier summarises all its earlier tenants, while the new value may overlap
  only some of them;
- the unordered uses ordered before p come one per stream, and one of them may already
  happen-before another (then its own edge adds nothing);
- the by-size packer places values out of order, so an edge added later may order what an
  earlier edge was added for.
Send/Recv events are minimal by construction (passes/sync/events.py); memory events are
made minimal here, in the same sense: none can be removed while the plan still verifies.

What the layout needs is the verifier's rule (passes/verify/memory.py): values sharing a
byte are ordered, every use of the one produced first happening before the producer of
the other. Along each byte the tenants, taken in producer order, must each be ordered
before the next; the chain then orders every pair. So the constraints are: per value, the
frontier of each tenant that last held one of its bytes before it. Each edge in turn
(latest producer first) is removed when every constraint still holds without it; clocks
are brought down only for the descendants whose clock changes. A kept edge is needed at
the time it is tried, and stays needed as later removals only take ordering away, so no
kept edge can go.
"""
from __future__ import annotations

import heapq
from bisect import bisect_right

from ...analysis.happens_before import Frontier, HappensBefore
from .pack import Item


def needed_edges(hb0: HappensBefore, items: list[Item], edges: list[tuple[int, int]]) -> list[tuple[int, int]]:
    """The subset of `edges` that the items' offsets need (see the module doc). `hb0` is the
    happens-before without any of `edges`; it is not changed."""
    edges = sorted(set(edges))
    if not edges:
        return edges
    hb = hb0.copy()
    hb.add_edges(edges)
    constraints = _constraints(items)
    pos = hb.position
    keep = set(edges)
    for x, p in sorted(edges, key=lambda e: (pos[e[1]], pos[e[0]]), reverse=True):
        if _removable(hb, x, p, constraints):
            keep.discard((x, p))
    return sorted(keep)


def _constraints(items: list[Item]) -> dict[int, list[Frontier]]:
    """Producer node -> frontiers of the tenants that held one of its values' bytes just
    before it. A sweep over the items in producer order keeps, per byte range, its latest
    tenant (non-overlapping segments sorted by start)."""
    starts: list[int] = []
    segs: list[tuple[int, int, Item]] = []          # (start, end, tenant)
    out: dict[int, list[Frontier]] = {}
    for it in sorted(items, key=lambda i: (i.pos, i.vi)):
        a, b = it.offset, it.offset + it.need
        i = bisect_right(starts, a) - 1
        if i < 0 or segs[i][1] <= a:
            i += 1
        j = i
        before: dict[int, Item] = {}
        while j < len(segs) and segs[j][0] < b:
            before[id(segs[j][2])] = segs[j][2]
            j += 1
        if before:
            out.setdefault(it.producer, []).extend(t.front for t in before.values())
        new = []
        if i < j and segs[i][0] < a:
            new.append((segs[i][0], a, segs[i][2]))
        new.append((a, b, it))
        if i < j and segs[j - 1][1] > b:
            new.append((b, segs[j - 1][1], segs[j - 1][2]))
        segs[i:j] = new
        starts[i:j] = [s[0] for s in new]
    return out


def _removable(hb: HappensBefore, x: int, p: int, constraints: dict[int, list[Frontier]]) -> bool:
    """Remove edge x -> p from `hb` if every constraint holds without it (clocks updated);
    otherwise leave `hb` as it was. Only descendants of p whose clock changes are visited."""
    hb.preds[p].remove(x)
    hb.succs[x].remove(p)
    pos, clock, stream_of, ordinal = hb.position, hb.clock, hb.stream_of, hb.ordinal
    new: dict[int, list[int]] = {}
    todo, done = [(pos[p], p)], set()
    while todo:
        _, v = heapq.heappop(todo)          # every changed predecessor comes earlier
        if v in done:
            continue
        done.add(v)
        rows = [new.get(u, clock[u]) for u in hb.preds[v]]
        c = list(map(max, *rows)) if len(rows) > 1 else (rows[0][:] if rows else [-1] * hb.num_streams)
        sv = stream_of[v]
        c[sv] = ordinal[v]
        if c == clock[v]:
            continue
        for front in constraints.get(v, ()):
            if any(o > c[s] or (s == sv and o == c[s]) for s, o in front):
                hb.preds[p].append(x)        # still needed: put it back, clocks untouched
                hb.succs[x].append(p)
                return False
        new[v] = c
        for w in hb.succs[v]:
            heapq.heappush(todo, (pos[w], w))
    for v, c in new.items():
        clock[v] = c
    return True
