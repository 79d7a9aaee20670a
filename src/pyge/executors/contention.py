"""Smaller intra-op teams while other work competes for the cores.

Why. torch runs an operator's parallel part as an OpenMP team with a static split and a
barrier at the end, so the operator takes as long as its slowest thread. On a machine where
another process keeps a core busy, the team member that shares that core is descheduled for
a scheduler slice (milliseconds) at a time, and every operator waits for it; its bounded
spin (pyge/__init__.py) makes it worse, since a spinning thread spends the credit the
scheduler gives to threads that sleep. onnxruntime's pool hands out work in small shards
that whichever thread is running takes, so it loses only the busy core. Small operators
suffer most: a team of one runs squeezenet faster under a busy core than a team of two.

What. A run measures the process's involuntary context switches (getrusage; another
runnable task took a core from one of its threads) against its wall time. While they stay
rare, nothing changes. Once they pass `BUSY_RATE` per second over a window of at least
`WINDOW_S`, the executor probes: it times `PROBE_RUNS` runs with each candidate team
(the full team, half of it, one thread), interleaved, keeps the fastest for `HOLD_S`, and
then probes again; a probe that confirms a smaller team doubles the hold (up to
`MAX_HOLD_S`), one that picks the full team goes back to watching. A quiet machine never
probes. While watching, runs shorter than `SAMPLE_S` are sampled, not all measured: the two
readings of a run cost about as much as a few small operators, and a window of the sampled
runs' wall time measures the same rate. `benchmarks/bench_busy.py` measures it against onnxruntime with a hog on one core.
"""
from __future__ import annotations

import math
import resource
import statistics
import time

BUSY_RATE = 100.0     # involuntary context switches per second that mean "busy"
WINDOW_S = 0.05       # the shortest stretch of runs the rate is taken over
PROBE_RUNS = 3        # runs per candidate team in a probe
HOLD_S = 2.0          # how long a probe's choice holds before the next probe
MAX_HOLD_S = 30.0
SAMPLE_S = 1e-3       # while watching, about one run per this much run time is measured
MAX_SKIP = 15         # (at most this many runs go unmeasured in a row)

_WATCH, _PROBE, _HOLD = 0, 1, 2


def _switches() -> int:
    return resource.getrusage(resource.RUSAGE_SELF).ru_nivcsw


_clock = time.perf_counter


class TeamSizer:
    """Per executor: the intra-op team of the next run (`begin`), told how the run went
    (`end`). `begin(full)` takes the team the run would use on a quiet machine."""

    __slots__ = ("state", "team", "hold", "until", "_held", "_t0", "_c0", "_wall", "_csw",
                 "_plan", "_times", "_skip", "_measured")

    def __init__(self):
        self.state = _WATCH
        self.team = 0                   # the team of the current run (0: none chosen yet)
        self.hold = HOLD_S
        self.until = 0.0
        self._held = 0                  # the smaller team the last probe chose (0: none)
        self._t0 = self._c0 = 0
        self._wall, self._csw = 0.0, 0
        self._plan: list[int] = []      # the probe's teams still to run, in order
        self._times: dict[int, list[float]] = {}
        self._skip = 0                  # watching: runs to leave unmeasured before the next
        self._measured = False          # whether the current run is measured

    def begin(self, full: int) -> int:
        """The team for the run about to start (at most `full`)."""
        if self.state == _HOLD and _clock() >= self.until:
            self._start_probe(full)
        if self.state == _PROBE:
            self.team = min(self._plan[0], full)
        elif self.state == _HOLD:
            self.team = min(self.team, full)
        else:
            self.team = full
            if self._skip > 0:
                self._skip -= 1
                self._measured = False
                return self.team
        self._measured = True
        if self.state == _WATCH:
            self._c0 = _switches()
        self._t0 = _clock()
        return self.team

    def end(self) -> None:
        """After the run that `begin` started (also after a failed run)."""
        if not self._measured:
            return
        wall = _clock() - self._t0
        if self.state == _PROBE:
            self._times.setdefault(self._plan.pop(0), []).append(wall)
            if not self._plan:
                self._decide()
        elif self.state == _WATCH:
            self._wall += wall
            self._csw += _switches() - self._c0
            self._skip = min(MAX_SKIP, int(SAMPLE_S / wall)) if wall > 0 else MAX_SKIP
            if self._wall >= WINDOW_S:
                busy = self._csw / self._wall >= BUSY_RATE
                self._wall, self._csw = 0.0, 0
                if busy and self.team > 1:
                    self._start_probe(self.team)

    def _start_probe(self, full: int) -> None:
        teams = sorted({full, math.ceil(full / 2), 1}, reverse=True)
        self._plan = teams * PROBE_RUNS
        self._times = {}
        self.state = _PROBE

    def _decide(self) -> None:
        best = min(self._times, key=lambda t: (statistics.median(self._times[t]), -t))
        if best == max(self._times):
            self.state, self.team, self.hold, self._held = _WATCH, best, HOLD_S, 0
            return
        # the same smaller team again: the machine stays busy, look less often
        self.hold = min(self.hold * 2, MAX_HOLD_S) if best == self._held else HOLD_S
        self.state, self.team, self._held = _HOLD, best, best
        self.until = _clock() + self.hold
