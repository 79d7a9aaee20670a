"""Side-by-side timing: several ways of running the same work, measured in interleaved rounds.

Timing A for a while and then B for a while measures the machine as much as A and B: on a
shared machine the load changes between the two blocks, and the ratio's direction can flip
from one try to the next. So every round runs each contender once, in a fresh (seeded) order,
and a ratio is taken within the round, where the conditions were the same for all; what is
reported is the median of the per-round ratios and their spread (the middle half of them).

One ratio convention everywhere: speedup = reference time / contender time, so > 1 means the
contender is faster.
"""
from __future__ import annotations

import random
import statistics
import time
from dataclasses import dataclass
from typing import Callable, Mapping, Sequence


@dataclass(frozen=True)
class Spread:
    """The median of repeated measurements and the quartiles around it."""
    median: float
    low: float          # lower quartile
    high: float         # upper quartile
    n: int

    @classmethod
    def of(cls, xs: Sequence[float]) -> "Spread":
        xs = sorted(xs)
        if not xs:
            raise ValueError("a spread needs at least one measurement")
        if len(xs) == 1:
            return cls(xs[0], xs[0], xs[0], 1)
        q1, _, q3 = statistics.quantiles(xs, n=4, method="inclusive")
        return cls(statistics.median(xs), q1, q3, len(xs))

    def ratio_text(self) -> str:
        """`1.12x (1.05x-1.18x)`: a speedup and the middle half of the rounds."""
        return f"{self.median:.2f}x ({self.low:.2f}x-{self.high:.2f}x)"

    def __str__(self) -> str:
        return self.ratio_text()


def batch_size(fn: Callable[[], object], target_s: float = 2e-3, most: int = 50) -> int:
    """How many calls of `fn` make one sample of about `target_s`: sub-millisecond runs
    (a GPU replay) are timed in batches, so the timer's and the scheduler's jitter stay small
    beside them."""
    t0 = time.perf_counter()
    fn()
    return max(1, min(most, int(target_s / max(time.perf_counter() - t0, 1e-6))))


def interleaved(runners: Mapping[str, Callable[[], object]], rounds: int, *, min_rounds: int | None = None,
                deadline: float | None = None, inner: int = 1, seed: int = 0,
                on_round: Callable[[int], None] | None = None) -> dict[str, list[float]]:
    """Seconds per call of each runner, one sample per round.

    Each round calls every runner `inner` times in a row, the runners in a fresh seeded order
    (no fixed neighbour). Rounds stop after `rounds`, or at `deadline` (a perf_counter time)
    once `min_rounds` are done. `on_round(k)` is told after round k (counted from 1).
    """
    names = list(runners)
    rng = random.Random(seed)
    times: dict[str, list[float]] = {k: [] for k in names}
    least = rounds if min_rounds is None else min_rounds
    for r in range(rounds):
        if r >= least and deadline is not None and time.perf_counter() > deadline:
            break
        for name in rng.sample(names, len(names)):
            fn = runners[name]
            t0 = time.perf_counter()
            for _ in range(inner):
                fn()
            times[name].append((time.perf_counter() - t0) / inner)
        if on_round is not None:
            on_round(r + 1)
    return times


def speedups(times: Mapping[str, Sequence[float]], reference: str) -> dict[str, list[float]]:
    """Per round, reference time / each contender's time (> 1: faster than the reference)."""
    ref = times[reference]
    return {k: [a / b if b > 0 else float("inf") for a, b in zip(ref, v)] for k, v in times.items()}


__all__ = ["Spread", "interleaved", "speedups", "batch_size"]
