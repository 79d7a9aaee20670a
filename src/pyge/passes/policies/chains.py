"""Policy `min_streams`: maximum concurrency on the fewest streams (Nimble's assignment).

1. Minimum chain cover of the DAG's transitive closure. A chain is a set of nodes that are
   pairwise ordered (each reaches the next), so it can share one stream without losing any
   concurrency; by Dilworth's theorem the fewest chains that cover the DAG equal its width
   (the largest set of mutually independent nodes). The cover comes from a maximum
   matching in the bipartite graph (u_out, v_in) with an edge wherever u reaches v:
   chains = nodes - matching (Fulkerson). Matching by Hopcroft-Karp, O(E sqrt(V)).
   Direct successors come first in each adjacency list, so ties favour chains that follow
   real edges (fewer events).
2. Each chain is a stream. Where there are more chains than pyge.maxStreams, chains are
   merged: by decreasing work, a chain joins a stream whose as-soon-as-possible busy time
   it does not overlap at all (no concurrency lost), else takes a new stream while the
   budget lasts, else joins the stream it overlaps least (ties: the one with the least work
   so far; the busy time is a union, so it does not grow when an equal chain joins, and
   without this every equal branch of a wide graph would pile onto one stream).
"""
from __future__ import annotations

import logging
from ...analysis.matching import hopcroft_karp
from ...ir.graph import Graph
from ._dag import CostTable, DagView, finish, fold_light_streams, schedule_est

log = logging.getLogger(__name__)



def _bits(m: int):
    while m:
        low = m & -m
        yield low.bit_length() - 1
        m ^= low


def min_chain_cover(desc: list[int], direct: list[list[int]] | None = None) -> list[list[int]]:
    """Fewest chains covering nodes 0..n-1 (a topological numbering) of a DAG whose
    descendant bitsets are `desc`. `direct[u]`, if given, are u's direct successors, tried
    first. Each chain is returned in topological order; chains by their first node."""
    n = len(desc)
    adj = []
    for u in range(n):
        first = [v for v in (direct[u] if direct else ()) if desc[u] >> v & 1]
        seen = set(first)
        adj.append(first + [v for v in _bits(desc[u]) if v not in seen])
    # Start from a greedy matching along direct edges: augmenting paths keep most of it, so
    # chains mostly follow real edges, and the plan needs fewer events.
    initial, taken = [-1] * n, set()
    for u in range(n):
        v = next((v for v in (direct[u] if direct else ()) if v not in taken and desc[u] >> v & 1), -1)
        if v >= 0:
            initial[u] = v
            taken.add(v)
    match = hopcroft_karp(adj, n, initial)
    has_pred = [False] * n
    for v in match:
        if v >= 0:
            has_pred[v] = True
    chains = []
    for u in range(n):
        if not has_pred[u]:
            chain = [u]
            while match[chain[-1]] >= 0:
                chain.append(match[chain[-1]])
            chains.append(chain)
    return chains


def _overlap(a: list[tuple[float, float]], b: list[tuple[float, float]]) -> float:
    """Total intersection of two sorted lists of disjoint intervals (two pointers)."""
    i = j = 0
    total = 0.0
    while i < len(a) and j < len(b):
        lo, hi = max(a[i][0], b[j][0]), min(a[i][1], b[j][1])
        if hi > lo:
            total += hi - lo
        if a[i][1] < b[j][1]:
            i += 1
        else:
            j += 1
    return total


def _union(a: list[tuple[float, float]], b: list[tuple[float, float]]) -> list[tuple[float, float]]:
    out: list[tuple[float, float]] = []
    for lo, hi in sorted(a + b):
        if out and lo <= out[-1][1]:
            out[-1] = (out[-1][0], max(out[-1][1], hi))
        else:
            out.append((lo, hi))
    return out


def merge_chains(view: DagView, chains: list[list[int]], k: int) -> list[list[int]]:
    """Group chains (node indices into view) into at most k streams; see the module doc."""
    est = [0.0] * len(view)
    for i in range(len(view)):       # as soon as possible, unlimited streams
        est[i] = max((est[p] + view.cost[p] for p in view.preds[i]), default=0.0)
    tol = 1e-9
    busy = [sorted((est[i], est[i] + view.cost[i]) for i in c if view.cost[i] > 0) for c in chains]
    work = [sum(view.cost[i] for i in c) for c in chains]
    order = sorted(range(len(chains)), key=lambda c: (-round(work[c] * 1e9), chains[c][0]))
    streams: list[list[int]] = []
    spans: list[list[tuple[float, float]]] = []
    load: list[float] = []
    for c in order:
        ov = [_overlap(busy[c], sp) for sp in spans]
        free = [s for s, o in enumerate(ov) if o <= tol]
        if free:
            s = free[0]
        elif len(streams) < k:
            s = len(streams)
            streams.append([])
            spans.append([])
            load.append(0.0)
        else:
            s = min(range(len(streams)), key=lambda t: (round(ov[t] * 1e9), round(load[t] * 1e9), t))
        streams[s].extend(chains[c])
        spans[s] = _union(spans[s], busy[c])
        load[s] += work[c]
    return streams


def assign_min_streams(graph: Graph, k: int, table: CostTable | None = None) -> int:
    """Run the policy on `graph`'s direct nodes over at most k streams; returns the streams used."""
    table = table or CostTable()
    view = DagView(graph, table.cost_fn())
    if not len(view):
        return 0
    movable = [i for i in range(len(view)) if not view.fixed[i]]
    local = {g: m for m, g in enumerate(movable)}
    _, desc = view.reach()
    sub_desc = [sum(1 << local[j] for j in _bits(desc[g]) if j in local) for g in movable]
    direct = [[local[j] for j in view.succs[g] if j in local] for g in movable]
    chains = [[movable[m] for m in c] for c in min_chain_cover(sub_desc, direct)]
    groups = merge_chains(view, chains, max(1, k))
    pool = view.pool(len(groups) or 1)
    target = {}
    for s, group in enumerate(groups):
        for i in group:
            target[i] = pool[s]
    stream, start = schedule_est(view, lambda i: [target[i]], table.event_s,
                                 fixed_stream=lambda i: target.get(i))
    used = finish(view, fold_light_streams(view, stream, pool[0]), start)
    log.debug("min_streams:%d: width %d, %d stream group(s)", k, len(chains), len(groups))
    return used
