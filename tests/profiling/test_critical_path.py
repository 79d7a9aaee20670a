"""Profile helpers against brute force: timeline lanes, busy overlap. (The longest path
the summary uses is tested with its module, tests/analysis/test_dag.py.)"""
from __future__ import annotations

from hypothesis import given, settings
from hypothesis import strategies as st

from pyge.profiling.cuda import assign_lanes


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
