"""analysis/matching.py: Hopcroft-Karp against a brute-force maximum matching, with and
without a start matching."""
from __future__ import annotations

import itertools

from hypothesis import given, settings
from hypothesis import strategies as st

from pyge.analysis.matching import greedy_matching, hopcroft_karp


def _best(edges, nl, nr) -> int:
    """The largest set of disjoint edges, by brute force."""
    es = sorted(edges)
    for r in range(min(nl, nr), 0, -1):
        if any(len({u for u, _ in c}) == r and len({v for _, v in c}) == r for c in itertools.combinations(es, r)):
            return r
    return 0


@settings(max_examples=150, deadline=None)
@given(st.integers(1, 6), st.integers(1, 6), st.data(), st.booleans())
def test_hopcroft_karp_finds_a_maximum_matching(nl, nr, data, greedy_start):
    edges = data.draw(st.sets(st.tuples(st.integers(0, nl - 1), st.integers(0, nr - 1)), max_size=15))
    adj = [sorted(v for (u, v) in edges if u == left) for left in range(nl)]
    match = hopcroft_karp(adj, nr, greedy_matching(adj, nr) if greedy_start else None)
    pairs = [(u, v) for u, v in enumerate(match) if v >= 0]
    assert all(v in adj[u] for u, v in pairs) and len({v for _, v in pairs}) == len(pairs)
    assert len(pairs) == _best(edges, nl, nr)
