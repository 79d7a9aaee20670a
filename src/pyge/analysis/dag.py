"""DAG algorithms on integer-numbered nodes: topological order, depths, bottom levels,
longest paths, ancestor sets and list scheduling. One home for each, used by the events and
memory passes, the stream policies, the automatic modes, the simulator, profiling and the
CPU executor.

A DAG is given as `preds` (per node, the nodes it depends on), sometimes also as `succs`
(`successors(preds)`); costs and weights are per node. Functions that take no order assume
the nodes are numbered in a topological order (every predecessor has a smaller number), as
the stream policies number theirs; the others find one themselves.
"""
from __future__ import annotations

import heapq
from collections import deque
from typing import Callable, Sequence


def successors(preds: Sequence[Sequence[int]]) -> list[list[int]]:
    """Per node, the nodes that list it as a predecessor, in increasing node order."""
    succs: list[list[int]] = [[] for _ in preds]
    for v, ps in enumerate(preds):
        for p in ps:
            succs[p].append(v)
    return succs


def topological_order(preds: Sequence[Sequence[int]], smallest_first: bool = True
                      ) -> tuple[list[int], list[list[int]]]:
    """Kahn's algorithm. Returns (order, succs); the order is shorter than the graph when it
    has a cycle (the caller names the culprit: the nodes missing from it).

    `smallest_first` takes the smallest ready node each time (the plan's own numbering when it
    is consistent); otherwise ready nodes go first in, first out (a repeated predecessor
    counts once per listing, on both sides)."""
    n = len(preds)
    succs = successors(preds)
    indeg = [len(ps) for ps in preds]
    order: list[int] = []
    if smallest_first:
        if all(p < v for v, ps in enumerate(preds) for p in ps):
            # Numbered topologically already: Kahn taking the smallest ready node would pop
            # 0, 1, 2, ... (each node's predecessors are all smaller, so it is ready, and
            # every smaller node is gone), so that is the order, without the heap.
            return list(range(n)), succs
        ready = [v for v in range(n) if indeg[v] == 0]
        heapq.heapify(ready)
        while ready:
            v = heapq.heappop(ready)
            order.append(v)
            for w in succs[v]:
                indeg[w] -= 1
                if indeg[w] == 0:
                    heapq.heappush(ready, w)
        return order, succs
    queue = deque(v for v in range(n) if indeg[v] == 0)
    while queue:
        v = queue.popleft()
        order.append(v)
        for w in succs[v]:
            indeg[w] -= 1
            if indeg[w] == 0:
                queue.append(w)
    return order, succs


def depths(preds: Sequence[Sequence[int]]) -> list[int]:
    """Per node, the most edges on a path from a source to it (0 for a source): its level
    in an as-soon-as-possible layering. Nodes numbered topologically."""
    out = [0] * len(preds)
    for i, ps in enumerate(preds):
        if ps:
            out[i] = 1 + max(out[p] for p in ps)
    return out


def bottom_levels(succs: Sequence[Sequence[int]], cost: Sequence[float],
                  edge_cost: float = 0.0) -> list[float]:
    """Per node, the heaviest path from it to an exit, itself included: its cost plus, over
    its successors, the most of `edge_cost` + their level (HEFT's upward rank; with no edge
    cost, the bottom level). Nodes numbered topologically."""
    level = [0.0] * len(succs)
    for i in reversed(range(len(succs))):
        level[i] = cost[i] + max((edge_cost + level[s] for s in succs[i]), default=0.0)
    return level


def level_key(levels: Sequence[float]) -> Callable[[int], tuple[int, int]]:
    """Sort key: the highest level first, rounded to nanoseconds (float noise cannot flip a
    tie), then the smallest node."""
    return lambda i: (-round(levels[i] * 1e9), i)


def heaviest_chain(preds: Sequence[Sequence[int]], succs: Sequence[Sequence[int]],
                   levels: Sequence[float]) -> list[int]:
    """The critical path read off bottom levels: from the source with the highest level,
    follow the successor with the highest level (ties by `level_key`)."""
    key = level_key(levels)
    path: list[int] = []
    cur = min((i for i in range(len(preds)) if not preds[i]), key=key, default=None)
    while cur is not None:
        path.append(cur)
        cur = min(succs[cur], key=key, default=None)
    return path


def longest_path(preds: Sequence[Sequence[int]], weight: Sequence[float]) -> tuple[float, list[int]]:
    """The heaviest path of a DAG in any numbering (Kahn order): (its weight, its nodes from
    first to last). Nodes on a cycle are left out."""
    n = len(preds)
    succs = successors(preds)
    indeg = [len(ps) for ps in preds]
    best = [0.0] * n
    via = [-1] * n
    ready = [v for v in range(n) if indeg[v] == 0]
    while ready:
        v = ready.pop()
        best[v] += weight[v]
        for s in succs[v]:
            if best[v] > best[s]:
                best[s], via[s] = best[v], v
            indeg[s] -= 1
            if indeg[s] == 0:
                ready.append(s)
    if not n:
        return 0.0, []
    end = max(range(n), key=best.__getitem__)
    path = [end]
    while via[path[-1]] >= 0:
        path.append(via[path[-1]])
    return best[end], path[::-1]


def reach_sets(preds: Sequence[Sequence[int]], succs: Sequence[Sequence[int]]
               ) -> tuple[list[int], list[int]]:
    """Ancestor and descendant sets of every node as bitsets (Python ints), nodes numbered
    topologically. Quadratic in memory at worst: for graphs of policy size."""
    n = len(preds)
    anc, desc = [0] * n, [0] * n
    for i in range(n):
        for p in preds[i]:
            anc[i] |= anc[p] | (1 << p)
    for i in reversed(range(n)):
        for s in succs[i]:
            desc[i] |= desc[s] | (1 << s)
    return anc, desc


def list_schedule(preds: Sequence[Sequence[int]], succs: Sequence[Sequence[int]],
                  cost: Sequence[float], levels: Sequence[float],
                  allowed: Callable[[int], Sequence[int]], event_s: float,
                  told: Callable[[int], int | None] = lambda i: None
                  ) -> tuple[list[int], list[float]]:
    """List scheduling without insertion: ready nodes by decreasing level (`level_key`),
    each to the allowed stream where it can start earliest, counting `event_s` for each
    producer on another stream. Ties go to the stream of the latest-finishing producer (no
    event), then to the earlier stream in `allowed`. A node whose `told(i)` is not None goes
    to that stream. Returns (stream per node, start per node)."""
    n = len(preds)
    indeg = [len(p) for p in preds]
    prio = [-round(b * 1e9) for b in levels]
    heap = [(prio[i], i) for i in range(n) if indeg[i] == 0]
    heapq.heapify(heap)
    free: dict[int, float] = {}
    stream, start, finish_t = [-1] * n, [0.0] * n, [0.0] * n

    def ready_on(i: int, s: int) -> float:
        return max((finish_t[p] + (0.0 if stream[p] == s else event_s) for p in preds[i]), default=0.0)

    while heap:
        _, i = heapq.heappop(heap)
        fixed = told(i)
        if fixed is not None:
            s, t = fixed, max(free.get(fixed, 0.0), ready_on(i, fixed))
        else:
            pref = [stream[p] for p in sorted(preds[i], key=lambda p: (-finish_t[p], p))]
            best = None
            for rank, cand in enumerate(allowed(i)):
                t_c = max(free.get(cand, 0.0), ready_on(i, cand))
                key = (round(t_c * 1e9), pref.index(cand) if cand in pref else len(pref), rank)
                if best is None or key < best[0]:
                    best = (key, cand, t_c)
            _, s, t = best
        stream[i], start[i] = s, t
        finish_t[i] = free[s] = t + cost[i]
        for j in succs[i]:
            indeg[j] -= 1
            if indeg[j] == 0:
                heapq.heappush(heap, (prio[j], j))
    return stream, start
