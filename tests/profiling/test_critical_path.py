"""longest_path against a brute-force oracle on random DAGs."""
from __future__ import annotations

from hypothesis import given, settings
from hypothesis import strategies as st

from pyge.profiling.cuda import assign_lanes
from pyge.profiling.summary import longest_path


@st.composite
def dags(draw):
    n = draw(st.integers(1, 9))
    preds = [sorted(draw(st.sets(st.integers(0, v - 1), max_size=3)) if v else []) for v in range(n)]
    weights = draw(st.lists(st.floats(0, 10, allow_nan=False), min_size=n, max_size=n))
    # Shuffle the numbering so that the algorithm cannot rely on index order.
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


@settings(max_examples=150, deadline=None)
@given(dags())
def test_longest_path_matches_oracle(dag):
    preds, w = dag
    length, path = longest_path(preds, w)
    assert abs(length - _brute(preds, w)) < 1e-9
    assert abs(sum(w[v] for v in path) - length) < 1e-9
    assert all(a in preds[b] for a, b in zip(path, path[1:]))


@settings(max_examples=100, deadline=None)
@given(st.lists(st.tuples(st.integers(0, 50), st.integers(1, 20)), max_size=20))
def test_lanes_never_overlap(items):
    spans = [(float(a), float(a + d)) for a, d in items]
    lanes = assign_lanes(spans)
    for i in range(len(spans)):
        for j in range(i + 1, len(spans)):
            if lanes[i] == lanes[j]:
                (a, b), (c, d) = spans[i], spans[j]
                assert b <= c or d <= a


@settings(max_examples=100, deadline=None)
@given(st.lists(st.tuples(st.integers(0, 30), st.integers(0, 10)), max_size=12))
def test_busy_overlap_matches_unit_cells(items):
    from pyge.profiling.records import OpRecord
    from pyge.profiling.summary import busy_overlap
    recs = [OpRecord(i, f"n{i}", "X", i % 3, float(a), float(a + d), 0) for i, (a, d) in enumerate(items)]
    cells = sum(1 for t in range(45) if sum(1 for a, d in items if a <= t < a + d) >= 2)
    assert busy_overlap(recs) == cells
