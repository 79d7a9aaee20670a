"""Happens-before between the plan's launches, read from stream order and Send/Recv steps.

The memory planner's own small reachability (kept independent of passes/verify.py, which
checks the same rule from its side). Node a happens-before node b when b cannot start until
a has finished, on every executor:

- a precedes b on one stream (a stream runs its steps in order), or
- a chain of such orderings and events leads from a to b. An event orders every launch
  *before its RECORD step* on the recording stream before every launch *after its WAIT step*
  on the waiting stream, so it contributes one edge: last launch before the record -> first
  launch after the wait. (Where the events pass put the steps does not matter to us.)

Data edges are not added on their own: on the executors only stream order and events order
anything, so a data edge that no event covers is exactly what verify() reports, and the
memory plan must not rely on it.

Ancestor and descendant sets are Python ints used as bitsets (bit i = node i): cheap
OR/AND-NOT on a few thousand nodes.
"""
from __future__ import annotations

import heapq

from ..errors import PlanError
from ..plan.plan import LAUNCH, RECORD, WAIT, Plan


class HappensBefore:
    """Strict happens-before over plan node indices."""

    def __init__(self, plan: Plan):
        n = len(plan.nodes)
        self.num_nodes = n
        preds: list[set[int]] = [set() for _ in range(n)]
        self.stream_of = [-1] * n
        record_anchor: dict[int, int] = {}   # logical event -> last launch before its record
        wait_anchor: dict[int, list[int]] = {}  # logical event -> first launch after each wait
        for s, steps in enumerate(plan.streams):
            last = -1
            pending_waits: list[int] = []
            for st in steps:
                if st.kind == LAUNCH:
                    self.stream_of[st.arg] = s
                    if last >= 0:
                        preds[st.arg].add(last)
                    for e in pending_waits:
                        wait_anchor.setdefault(e, []).append(st.arg)
                    pending_waits = []
                    last = st.arg
                elif st.kind == RECORD:
                    if last >= 0:
                        record_anchor[st.arg] = last
                elif st.kind == WAIT:
                    pending_waits.append(st.arg)
        for e, dsts in wait_anchor.items():
            src = record_anchor.get(e, -1)
            for d in dsts:
                if src >= 0 and src != d:
                    preds[d].add(src)
        self.preds = [sorted(p) for p in preds]
        succs: list[list[int]] = [[] for _ in range(n)]
        for ni, ps in enumerate(self.preds):
            for p in ps:
                succs[p].append(ni)
        self.order = _topological(self.preds, succs)
        self.position = [0] * n
        for i, ni in enumerate(self.order):
            self.position[ni] = i
        self.anc = _closure(self.order, self.preds)              # strict ancestors
        self.desc = _closure(self.order[::-1], succs)            # strict descendants

    def before(self, a: int, b: int) -> bool:
        """a finishes before b starts (strict: a node is not before itself)."""
        return a != b and (self.anc[b] >> a) & 1 == 1

    def all_before(self, mask: int, b: int) -> bool:
        """Every node in bitset `mask` happens-before b (strictly)."""
        return mask & ~self.anc[b] == 0

    def all_before_or_at(self, mask: int, b: int) -> bool:
        return mask & ~(self.anc[b] | (1 << b)) == 0

    def after_all(self, mask: int) -> int:
        """Bitset of the nodes that every node in `mask` happens-before (strictly)."""
        out = -1
        rest = mask
        while rest:
            low = rest & -rest
            out &= self.desc[low.bit_length() - 1]
            rest ^= low
        return out if mask else 0


def _topological(preds: list[list[int]], succs: list[list[int]]) -> list[int]:
    """Kahn's algorithm, smallest node index first (the plan's own order when consistent)."""
    indeg = [len(p) for p in preds]
    ready = [i for i in range(len(preds)) if indeg[i] == 0]
    heapq.heapify(ready)
    order = []
    while ready:
        ni = heapq.heappop(ready)
        order.append(ni)
        for s in succs[ni]:
            indeg[s] -= 1
            if indeg[s] == 0:
                heapq.heappush(ready, s)
    if len(order) != len(preds):
        raise PlanError("memory plan: stream order and events form a cycle (the plan deadlocks)")
    return order


def _closure(order: list[int], edges: list[list[int]]) -> list[int]:
    """Per node, the bitset of nodes reachable backwards along `edges`, visiting `order`."""
    out = [0] * len(edges)
    for ni in order:
        acc = 0
        for p in edges[ni]:
            acc |= out[p] | (1 << p)
        out[ni] = acc
    return out
