"""Release points (`PlanNode.free_after`), the memory planner's second product.

A value is released after the earliest node m (in hb.order, a topological order of
happens-before) at or after which every use of it (its producer and readers) has finished:
every use happens-before-or-is m. Usually one use follows all the others in happens-before,
and m is that use. Otherwise the uses sit on several streams and m is the first node that
every one of them happens-before (typically the consumer after a join): on one stream, the
first launch after the latest use whose clock covers each (stream, ordinal) entry of the
uses' frontier is, per entry, a bisection of that stream's clock column, which is sorted
because clocks only grow along a stream; the latest of those covers them all, and the
earliest hit over the streams is m. A value whose readers sit on streams that never join
again has none: it lives to the end of the run.

The bisections are batched over every value of the second kind with numpy (tens of
thousands on a 100,000-node graph over 4 streams), in the same stream order and with the
same tie rule (the first stream with the earliest position wins) as one value at a time.
"""
from __future__ import annotations

import numpy as np

from ...analysis.happens_before import HappensBefore
from ...plan.plan import Plan


def release_points(plan: Plan, hb: HappensBefore, readers: list[list[int]],
                   known: dict[int, tuple] | None = None) -> None:
    """Set every node's free_after (module doc); `known`: value -> (frontier, last use)
    already computed against `hb` (make_items's), which are not computed again."""
    nodes = plan.nodes
    for n in nodes:
        n.free_after = []
    pos, known, clock = hb.position, known or {}, hb.clock
    at: list[tuple[int, int]] = []          # (value, release node or -1 while unknown)
    joins: list[tuple] = []                 # (frontier, last use) of the values of kind two
    for v in plan.values:
        if v.producer < 0 or v.is_output or v.is_input or v.is_const:
            continue
        got = known.get(v.index)
        if got is None:
            uses = readers[v.index] + [v.producer]
            got = hb.frontier(uses), max(uses, key=pos.__getitem__)
        front, last = got
        cl = clock[last]
        for s, o in front:
            if o > cl[s]:                   # some use does not happen-before-or-is `last`
                at.append((v.index, -1 - len(joins)))
                joins.append(got)
                break
        else:
            at.append((v.index, last))
    found = _after_joins(hb, joins) if joins else []
    for vi, m in at:
        if m < 0:
            m = found[-1 - m]
        if m >= 0:
            nodes[m].free_after.append(vi)


def _after_joins(hb: HappensBefore, joins: list[tuple]) -> list[int]:
    """Per (frontier, last use) of `joins`, the earliest node that every use happens-before
    (-1: none), by the batched bisections of the module doc."""
    count, ns, pos = len(joins), hb.num_streams, hb.position
    rows, cols, vals = [], [], []
    for r, (front, _) in enumerate(joins):
        for s, o in front:
            rows.append(r)
            cols.append(s)
            vals.append(o)
    need = np.full((count, ns), -2, dtype=np.int64)     # -2: no entry, bisects to 0
    need[rows, cols] = vals
    after = np.array([pos[last] for _, last in joins], dtype=np.int64)
    best = np.full(count, -1, dtype=np.int64)
    best_pos = np.full(count, len(pos), dtype=np.int64)
    clock = hb.clock
    for chain in hb.chains:
        if not chain:
            continue
        end = len(chain)
        where = np.array([pos[v] for v in chain], dtype=np.int64)
        column = np.array([clock[v] for v in chain], dtype=np.int64).reshape(end, ns).T
        k = np.searchsorted(where, after, side="right")      # the first launch after `last`
        for s in range(ns):                                   # ... covering every entry
            k = np.maximum(k, np.searchsorted(column[s], need[:, s], side="left"))
        hit = k < end
        k = np.minimum(k, end - 1)
        at = np.where(hit, where[k], len(pos))
        better = at < best_pos
        best = np.where(better, np.asarray(chain, dtype=np.int64)[k], best)
        best_pos = np.where(better, at, best_pos)
    return best.tolist()
