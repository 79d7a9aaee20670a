"""analysis/dag.py against brute-force oracles on random DAGs."""
from __future__ import annotations

import itertools

from hypothesis import given, settings
from hypothesis import strategies as st

from pyge.analysis.dag import (bottom_levels, depths, heaviest_chain, list_schedule, longest_path,
                               reach_sets, successors, topological_order)


@st.composite
def topo_dags(draw, max_nodes=9):
    """(preds, weights), nodes numbered topologically."""
    n = draw(st.integers(1, max_nodes))
    preds = [sorted(draw(st.sets(st.integers(0, v - 1), max_size=3)) if v else []) for v in range(n)]
    weights = draw(st.lists(st.floats(0, 10, allow_nan=False), min_size=n, max_size=n))
    return preds, weights


@st.composite
def dags(draw):
    """(preds, weights) in a shuffled numbering, so that no algorithm relies on index order."""
    preds, weights = draw(topo_dags())
    n = len(preds)
    perm = draw(st.permutations(list(range(n))))
    inv = {old: new for new, old in enumerate(perm)}
    p2 = [[] for _ in range(n)]
    w2 = [0.0] * n
    for old in range(n):
        p2[inv[old]] = [inv[p] for p in preds[old]]
        w2[inv[old]] = weights[old]
    return p2, w2


def _brute(preds, w):
    memo = {}

    def best(v):
        if v not in memo:
            memo[v] = w[v] + max((best(p) for p in preds[v]), default=0.0)
        return memo[v]
    return max(best(v) for v in range(len(preds)))


def _paths_from(v, succs):
    """Every maximal path starting at v."""
    if not succs[v]:
        return [[v]]
    return [[v] + rest for s in succs[v] for rest in _paths_from(s, succs)]


@settings(max_examples=150, deadline=None)
@given(dags())
def test_longest_path_matches_oracle(dag):
    preds, w = dag
    length, path = longest_path(preds, w)
    assert abs(length - _brute(preds, w)) < 1e-9
    assert abs(sum(w[v] for v in path) - length) < 1e-9
    assert all(a in preds[b] for a, b in zip(path, path[1:]))


@settings(max_examples=100, deadline=None)
@given(dags(), st.booleans())
def test_topological_order_is_one(dag, smallest_first):
    preds, _ = dag
    order, succs = topological_order(preds, smallest_first)
    pos = {v: i for i, v in enumerate(order)}
    assert sorted(order) == list(range(len(preds)))
    assert all(pos[p] < pos[v] for v in range(len(preds)) for p in preds[v])
    assert succs == successors(preds)


def _heap_kahn(preds):
    """Kahn taking the smallest ready node, the plain way (the oracle of the shortcut)."""
    import heapq
    succs, indeg = successors(preds), [len(ps) for ps in preds]
    ready = [v for v in range(len(preds)) if not indeg[v]]
    order = []
    while ready:
        v = heapq.heappop(ready)
        order.append(v)
        for w in succs[v]:
            indeg[w] -= 1
            if not indeg[w]:
                heapq.heappush(ready, w)
    return order


@settings(max_examples=100, deadline=None)
@given(st.one_of(topo_dags(), dags()))
def test_smallest_first_is_the_heap_order_numbered_or_not(dag):
    # Topologically numbered DAGs take a shortcut (the identity order): it must be the order
    # the heap would give, and a shuffled numbering must still go through the heap.
    preds, _ = dag
    assert topological_order(preds, True)[0] == _heap_kahn(preds)


def test_topological_order_stops_short_on_a_cycle():
    order, _ = topological_order([[2], [0], [1], []])
    assert order == [3]


def test_smallest_first_and_fifo_orders():
    preds = [[], [0], []]               # 0 -> 1, 2 independent
    assert topological_order(preds, smallest_first=True)[0] == [0, 1, 2]
    assert topological_order(preds, smallest_first=False)[0] == [0, 2, 1]


@settings(max_examples=100, deadline=None)
@given(topo_dags(), st.floats(0, 3, allow_nan=False))
def test_bottom_levels_are_the_heaviest_paths_to_an_exit(dag, edge):
    preds, w = dag
    succs = successors(preds)
    levels = bottom_levels(succs, w, edge)
    for v in range(len(preds)):
        want = max(sum(w[x] for x in p) + edge * (len(p) - 1) for p in _paths_from(v, succs))
        assert abs(levels[v] - want) < 1e-9


@settings(max_examples=100, deadline=None)
@given(topo_dags())
def test_depths_count_the_most_edges_from_a_source(dag):
    preds, _ = dag
    succs = successors(preds)
    d = depths(preds)
    sources = [v for v in range(len(preds)) if not preds[v]]
    for v in range(len(preds)):
        longest = max(len(p) - 1 for s in sources for p in _paths_from(s, succs) if v in p
                      for p in [p[:p.index(v) + 1]])
        assert d[v] == longest


@settings(max_examples=100, deadline=None)
@given(topo_dags())
def test_heaviest_chain_is_a_longest_path(dag):
    preds, w = dag
    succs = successors(preds)
    path = heaviest_chain(preds, succs, bottom_levels(succs, w))
    assert not preds[path[0]] and not succs[path[-1]]
    assert all(a in preds[b] for a, b in zip(path, path[1:]))
    assert abs(sum(w[v] for v in path) - _brute(preds, w)) < 1e-6


@settings(max_examples=100, deadline=None)
@given(topo_dags())
def test_reach_sets_match_transitive_closure(dag):
    preds, _ = dag
    n = len(preds)
    anc, desc = reach_sets(preds, successors(preds))
    for a, b in itertools.product(range(n), repeat=2):
        reaches = any(b in path for path in _paths_from(a, successors(preds))) and a != b
        assert bool(anc[b] >> a & 1) == reaches == bool(desc[a] >> b & 1)


@settings(max_examples=100, deadline=None)
@given(topo_dags(), st.integers(1, 3), st.floats(0, 1, allow_nan=False))
def test_list_schedule_respects_dependencies_and_streams(dag, k, event_s):
    preds, w = dag
    succs = successors(preds)
    stream, start = list_schedule(preds, succs, w, bottom_levels(succs, w), lambda i: range(k), event_s)
    for v in range(len(preds)):
        assert 0 <= stream[v] < k
        for p in preds[v]:
            gap = 0.0 if stream[p] == stream[v] else event_s
            assert start[v] >= start[p] + w[p] + gap - 1e-9
    for a, b in itertools.combinations(range(len(preds)), 2):    # one node at a time per stream
        if stream[a] == stream[b]:
            assert start[a] + w[a] <= start[b] + 1e-9 or start[b] + w[b] <= start[a] + 1e-9


def test_list_schedule_puts_told_nodes_where_told_and_spreads_the_rest():
    preds = [[], [], [], [0, 1, 2]]     # three independent unit nodes, then a join
    succs = successors(preds)
    w = [1.0, 1.0, 1.0, 1.0]
    stream, start = list_schedule(preds, succs, w, bottom_levels(succs, w), lambda i: [0, 1, 2],
                                  0.0, told=lambda i: 2 if i == 3 else None)
    assert sorted(stream[:3]) == [0, 1, 2] and start[:3] == [0.0, 0.0, 0.0]
    assert stream[3] == 2 and start[3] == 1.0
