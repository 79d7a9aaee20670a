"""Smaller intra-op teams while other work competes for the cores (executors/contention.py):
driven here by a fake clock and a fake count of involuntary context switches."""
from __future__ import annotations

import numpy as np
import pytest
import torch

import pyge
from pyge.executors import contention
from pyge.executors.contention import TeamSizer
from pyge.kernels import register


class _Fake:
    """Stands in for the clock and getrusage: each run takes `cost[team]` seconds and
    brings `rate` involuntary switches per second."""

    def __init__(self, monkeypatch, cost: dict[int, float], rate: float):
        self.now, self.switches, self.cost, self.rate = 100.0, 0, cost, rate
        monkeypatch.setattr(contention, "_switches", lambda: int(self.switches))
        monkeypatch.setattr(contention, "_clock", lambda: self.now)

    def run(self, sizer: TeamSizer, full: int) -> int:
        team = sizer.begin(full)
        dt = self.cost[team]
        self.now += dt
        self.switches += self.rate * dt
        sizer.end()
        return team


def test_a_quiet_machine_never_probes(monkeypatch):
    fake = _Fake(monkeypatch, {4: 0.01, 2: 0.005, 1: 0.002}, rate=5.0)
    sizer = TeamSizer()
    assert {fake.run(sizer, 4) for _ in range(500)} == {4}


def test_busy_probes_every_candidate_interleaved_and_keeps_the_fastest(monkeypatch):
    fake = _Fake(monkeypatch, {4: 0.01, 2: 0.006, 1: 0.004}, rate=500.0)
    sizer = TeamSizer()
    teams = [fake.run(sizer, 4) for _ in range(5 + 3 * contention.PROBE_RUNS)]
    first_probe = teams.index(2) - 1
    assert teams[:first_probe] == [4] * first_probe            # watching: a window of runs
    assert teams[first_probe:first_probe + 9] == [4, 2, 1] * 3   # the probe, interleaved
    held = [fake.run(sizer, 4) for _ in range(int(contention.HOLD_S / 0.004) - 5)]
    assert set(held) == {1}                                      # the fastest, for HOLD_S


def test_a_confirmed_choice_holds_longer_and_a_quiet_probe_restores_the_team(monkeypatch):
    fake = _Fake(monkeypatch, {2: 0.01, 1: 0.004}, rate=500.0)
    sizer = TeamSizer()
    while sizer.state != contention._HOLD:
        fake.run(sizer, 2)
    assert sizer.hold == contention.HOLD_S and sizer.team == 1
    fake.now = sizer.until                                       # the hold is over: probe
    while not (sizer.state == contention._HOLD and fake.now < sizer.until):
        fake.run(sizer, 2)
    assert sizer.hold == 2 * contention.HOLD_S                   # confirmed: looks less often
    fake.cost, fake.rate = {2: 0.004, 1: 0.006}, 0.0            # the machine is quiet again
    fake.now = sizer.until
    for _ in range(2 * contention.PROBE_RUNS):
        fake.run(sizer, 2)
    assert sizer.state == contention._WATCH
    assert {fake.run(sizer, 2) for _ in range(100)} == {2}


def test_short_runs_are_sampled_and_a_busy_machine_still_found(monkeypatch):
    fake = _Fake(monkeypatch, {2: 0.0002, 1: 0.0001}, rate=0.0)
    reads = []
    monkeypatch.setattr(contention, "_switches", lambda: reads.append(1) or int(fake.switches))
    sizer = TeamSizer()
    for _ in range(1000):
        fake.run(sizer, 2)
    # 0.2 ms runs: one in 1 + SAMPLE_S / 0.2 ms measured, two readings each
    assert 2 * 1000 // (1 + 5) - 2 <= len(reads) <= 2 * 1000 // (1 + 4) + 2
    assert sizer.state == contention._WATCH
    fake.rate = 50_000.0              # now busy: the sampled window still reaches WINDOW_S
    runs = 0
    while sizer.state == contention._WATCH:
        fake.run(sizer, 2)
        runs += 1
        assert runs <= 6 * (contention.WINDOW_S / 0.0002) + 6
    assert sizer.state == contention._PROBE


def test_a_team_of_one_is_left_alone(monkeypatch):
    fake = _Fake(monkeypatch, {1: 0.01}, rate=10_000.0)
    sizer = TeamSizer()
    assert {fake.run(sizer, 1) for _ in range(100)} == {1}


SEEN: list[int] = []


@register("TestSeeTeam", domain="pyge.test")
def _see_team(ctx):
    def fn(xs):
        SEEN.append(torch.get_num_threads())
        return [xs[0] + 1.0]
    return fn


def test_the_sequential_executor_runs_the_chosen_team_and_restores_torchs(monkeypatch):
    if torch.get_num_threads() < 2:
        pytest.skip("needs 2 or more intra-op threads")
    fake = _Fake(monkeypatch, {}, rate=0.0)
    b = pyge.GraphBuilder("team")
    x = b.input("x", "float32", (2, 2))
    b.output(b.op("TestSeeTeam", [x], name="S", domain="pyge.test"), "y")
    model = pyge.compile(b.build(), "cpu")
    sizer = model.executor._sizer
    sizer.state, sizer.team, sizer.until = contention._HOLD, 1, fake.now + 10
    before = torch.get_num_threads()
    SEEN.clear()
    model.run({"x": np.ones((2, 2), np.float32)})
    assert SEEN == [1] and torch.get_num_threads() == before
    forced = pyge.compile(b.build(), "cpu", {"pyge.intraOpThreads": "2"})
    forced.executor._sizer.state = contention._HOLD        # forced threads: never resized
    forced.executor._sizer.team = 1
    SEEN.clear()
    forced.run({"x": np.ones((2, 2), np.float32)})
    assert SEEN == [2]
