"""Side-by-side timing: interleaved rounds, one speedup convention, the spread of the rounds."""
from __future__ import annotations

import time

import pytest

from pyge.profiling.compare import Spread, batch_size, interleaved, speedups


def test_spread_is_the_median_and_the_quartiles():
    s = Spread.of([1.0, 2.0, 3.0, 4.0, 5.0])
    assert (s.median, s.low, s.high, s.n) == (3.0, 2.0, 4.0, 5)
    assert str(Spread.of([1.25])) == "1.25x (1.25x-1.25x)"
    with pytest.raises(ValueError):
        Spread.of([])


def test_rounds_alternate_the_contenders():
    calls = []
    runners = {k: (lambda k=k: calls.append(k)) for k in ("a", "b", "c")}
    done = []
    times = interleaved(runners, 6, inner=2, on_round=done.append)
    assert done == [1, 2, 3, 4, 5, 6] and all(len(v) == 6 for v in times.values())
    rounds = [calls[i:i + 6] for i in range(0, len(calls), 6)]
    for r in rounds:                 # each round runs every contender, `inner` times in a row
        assert sorted(r) == ["a", "a", "b", "b", "c", "c"] and r[0] == r[1]
    assert len({tuple(r[::2]) for r in rounds}) > 1      # the order changes from round to round


def test_deadline_stops_after_the_least_rounds():
    times = interleaved({"a": lambda: time.sleep(0.002)}, 1000, min_rounds=3, deadline=time.perf_counter())
    assert len(times["a"]) == 3


def test_speedup_is_reference_over_contender():
    ups = speedups({"single": [2.0, 4.0], "fast": [1.0, 2.0], "slow": [4.0, 8.0]}, "single")
    assert ups == {"single": [1.0, 1.0], "fast": [2.0, 2.0], "slow": [0.5, 0.5]}


def test_batch_size_grows_for_quick_calls():
    assert batch_size(lambda: None) == 50
    assert batch_size(lambda: time.sleep(0.01)) == 1
