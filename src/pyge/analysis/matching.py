"""Maximum bipartite matching (Hopcroft-Karp), for the minimum path and chain covers.

Both covers reduce to the same matching: GE's DAG pass (passes/streams/dag_cover.py) matches
on a DAG's direct edges for a minimum path cover, pyge's `min_streams` policy
(passes/policies/chains.py) on its transitive closure for a minimum chain cover. Each phase
layers the free left vertices by breadth-first search, then flips vertex-disjoint shortest
augmenting paths found by depth-first search along the layers; O(E sqrt(V)).
"""
from __future__ import annotations

from collections import deque

_INF = 1 << 60


def hopcroft_karp(adj: list[list[int]], n_right: int, initial: list[int] | None = None) -> list[int]:
    """Maximum bipartite matching; adj[u] lists the right vertices of left vertex u, tried in
    that order, and `initial` (optional) is a matching to start from. Returns match_left: the
    right vertex matched to each left vertex, or -1."""
    n_left = len(adj)
    match_l, match_r = [-1] * n_left, [-1] * n_right
    for u, v in enumerate(initial or ()):
        if v >= 0:
            match_l[u], match_r[v] = v, u
    while True:
        dist = [_INF] * n_left
        q = deque(u for u in range(n_left) if match_l[u] < 0)
        for u in q:
            dist[u] = 0
        found = False
        while q:
            u = q.popleft()
            for v in adj[u]:
                w = match_r[v]
                if w < 0:
                    found = True
                elif dist[w] == _INF:
                    dist[w] = dist[u] + 1
                    q.append(w)
        if not found:
            return match_l
        it = [0] * n_left
        for root in range(n_left):
            if match_l[root] < 0:
                _augment(root, adj, dist, it, match_l, match_r)


def greedy_matching(adj: list[list[int]], n_right: int) -> list[int]:
    """Each left vertex takes its first still-free right vertex: a cheap start for
    hopcroft_karp, which keeps most of it (so covers mostly follow the preferred edges)."""
    match, taken = [-1] * len(adj), [False] * n_right
    for u, vs in enumerate(adj):
        for v in vs:
            if not taken[v]:
                match[u], taken[v] = v, True
                break
    return match


def _augment(root: int, adj, dist, it, match_l, match_r) -> bool:
    """One iterative DFS along the BFS layers from a free left vertex; flips the path."""
    stack, chosen = [root], {}
    while stack:
        x = stack[-1]
        if it[x] >= len(adj[x]):
            dist[x] = _INF          # dead end: no later search goes through x this phase
            stack.pop()
            continue
        v = adj[x][it[x]]
        it[x] += 1
        w = match_r[v]
        if w < 0:
            chosen[x] = v
            for y in stack:
                match_l[y], match_r[chosen[y]] = chosen[y], y
            return True
        if dist[w] == dist[x] + 1:
            chosen[x] = v
            stack.append(w)
    return False


__all__ = ["hopcroft_karp", "greedy_matching"]
