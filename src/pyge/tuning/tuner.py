"""`tune`: pick the fastest stream plan for one network on one device, by measurement.

1. Measure per-operator costs on the device (single stream; costs.py).
2. Build the candidates: single stream, GE's chain as configured, GE's automatic modes
   (LoadBalance:k, MainStream:k) and the three pyge policies (critical_path, min_streams,
   list_schedule, on the measured costs) for each stream count k. Plans that come out the
   same (same streams, same launch order) are tried once.
3. Prune with the simulator (simulator.py): keep the `top` fastest simulated plans.
4. Measure the survivors for real, with single stream, a second copy of single stream (the
   noise control) and GE's own plan, in interleaved rounds (profiling/compare.py: every
   round runs each once, in a fresh seeded order), so that machine noise hits them alike.
   A candidate's score is its speedup, single-stream time / its time within the same round
   (> 1 is faster), summarised as the median over rounds and the middle half around it.
5. Keep the fastest measured plan only if it beats single stream beyond that spread: the
   lower quartile of its speedups must be above 1 + `min_gain` and above the upper quartile
   of the noise control's. Otherwise keep single stream, so the result is never measurably
   slower than it.

The result can be written as a policy file (policy_file.py) that reproduces the plan.
"""
from __future__ import annotations

import logging
import os
import statistics
import tempfile
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable, Mapping

from ..ir.graph import Graph
from ..passes.policies.policy_file import policy_dict, write_policy_file
from ..profiling.compare import Spread, batch_size, interleaved, speedups
from .costs import OpCosts, device_kind, measure_costs, random_feeds, static_costs
from .simulator import DeviceModel, critical_path_bound, simulate

log = logging.getLogger(__name__)

POLICY_NAMES = ("critical_path", "min_streams", "list_schedule")
STREAM_KEYS = ("ge.enableSingleStream", "ge.autoMultistreamParallelMode", "pyge.streamPolicy",
               "pyge.policyFile", "pyge.maxStreams", "pyge.costFile")


@dataclass
class Candidate:
    name: str
    options: dict[str, str]
    model: Any = None
    streams: int = 0
    events: int = 0
    sim_s: float | None = None
    times: list[float] = field(default_factory=list)
    speedups: list[float] = field(default_factory=list)     # per round: single time / this time
    note: str = ""
    same_as: "Candidate | None" = None

    @property
    def median_s(self) -> float | None:
        return statistics.median(self.times) if self.times else None

    @property
    def spread(self) -> Spread | None:
        """The speedup over single stream: median over rounds and the middle half."""
        return Spread.of(self.speedups) if self.speedups else None

    @property
    def speedup(self) -> float | None:
        return self.spread.median if self.speedups else None

    def row(self) -> dict:
        ms = lambda x: None if x is None else round(x * 1e3, 4)   # noqa: E731
        r4 = lambda x: None if x is None else round(x, 4)         # noqa: E731
        sp = self.spread
        return {"name": self.name, "streams": self.streams, "events": self.events,
                "sim_ms": ms(self.sim_s), "measured_ms": ms(self.median_s),
                "speedup_vs_single": r4(sp.median if sp else None),
                "speedup_low": r4(sp.low if sp else None), "speedup_high": r4(sp.high if sp else None),
                "rounds": len(self.times), "note": self.note}


@dataclass
class TuneResult:
    graph_name: str
    device: str
    best: Candidate
    single: Candidate
    candidates: list[Candidate]
    costs: OpCosts
    bound_s: float
    elapsed_s: float
    base_options: dict[str, str]

    @property
    def speedup(self) -> float:
        """The chosen plan's speedup over single stream (1.0 when single stream is kept)."""
        return self.best.speedup if self.best.speedup is not None else 1.0

    def policy(self) -> dict:
        """The policy file's JSON object: the best plan's streams and launch order."""
        plan = self.best.model.plan
        streams = {pn.name: pn.stream for pn in plan.nodes}
        tuned = {"choice": self.best.name, "options": self.best.options, "device": self.device,
                 "speedup_vs_single": round(self.speedup, 4),
                 "single_ms": round((self.single.median_s or 0.0) * 1e3, 4),
                 "best_ms": round((self.best.median_s or 0.0) * 1e3, 4),
                 "use_with": {**self.base_options, "pyge.policyFile": "<this file>"},
                 "tried": [c.row() for c in self.candidates]}
        return policy_dict(self.graph_name, streams, [pn.name for pn in plan.nodes], tuned=tuned)

    def write(self, path: str | Path) -> None:
        write_policy_file(path, self.policy())

    @property
    def rounds(self) -> int:
        """How many interleaved timing rounds were run (0: simulated only)."""
        return max((len(c.times) for c in self.candidates), default=0)

    def to_json(self) -> dict:
        """The table and the choice as plain data (`pyge tune --format json`)."""
        sp = self.best.spread
        return {"graph": self.graph_name, "device": self.device, "elapsed_s": round(self.elapsed_s, 3),
                "critical_path_bound_ms": round(self.bound_s * 1e3, 4), "rounds": self.rounds,
                "ratio": "speedup_vs_single = single-stream time / candidate time (> 1: faster)",
                "chosen": self.best.name, "speedup_vs_single": round(self.speedup, 4),
                "speedup_low": None if sp is None else round(sp.low, 4),
                "speedup_high": None if sp is None else round(sp.high, 4),
                "summary": self.summary(), "candidates": [c.row() for c in self.candidates]}

    def table(self) -> str:
        """The candidates, their speedup over single stream (single time / their time, > 1 is
        faster) with the middle half of the rounds, and the choice, in one convention."""
        head = (f"{'candidate':<22}{'streams':>8}{'events':>8}{'sim ms':>10}{'measured ms':>13}"
                f"{'speedup':>9}  {'middle half':<13}  note")
        rounds = self.rounds
        timing = f"{rounds} interleaved round(s)" if rounds else "simulated only"
        lines = [f"pyge tune {self.graph_name} on {self.device}: {len(self.candidates)} candidates, "
                 f"{timing}, {self.elapsed_s:.1f} s; critical-path bound {self.bound_s * 1e3:.3f} ms", head]
        for c in self.candidates:
            r, sp = c.row(), c.spread
            f = lambda x, w, p: f"{x:>{w}.{p}f}" if x is not None else f"{'-':>{w}}"   # noqa: E731
            half = f"{sp.low:.2f}x-{sp.high:.2f}x" if sp else "-"
            speed = f"{sp.median:>8.2f}x" if sp else f"{'-':>9}"
            mark = "*" if c is self.best else " "
            lines.append(f"{mark}{c.name:<21}{c.streams:>8}{c.events:>8}{f(r['sim_ms'], 10, 3)}"
                         f"{f(r['measured_ms'], 13, 3)}{speed}  {half:<13}  {c.note}".rstrip())
        lines.append("speedup = single-stream time / candidate time in the same round (> 1: faster); "
                     "middle half: its rounds' quartiles")
        lines.append(f"chosen: {self.summary()}")
        return "\n".join(lines)

    def summary(self) -> str:
        """One line: the choice, its speedup and spread, and the noise control's spread."""
        control = next((c for c in self.candidates if c.name == "single_again"), None)
        noise = f"; noise control {control.spread}" if control is not None and control.spread else ""
        if self.best is not self.single:
            return f"{self.best.name}, speedup {self.best.spread} over single stream{noise}"
        timed = [c for c in self.candidates if c.speedups and c.name not in ("single", "single_again")]
        if not timed:
            return f"single stream (no other plan was timed){noise}"
        top = max(timed, key=lambda c: (c.speedup, c.name))
        return (f"single stream: no plan beat it beyond the spread (fastest {top.name}, "
                f"speedup {top.spread}){noise}")


def default_stream_counts(device: str) -> list[int]:
    if device_kind(device) == "cuda":
        return [2, 3, 4, 6, 8]
    return sorted({2, 3, 4, max(2, min(8, os.cpu_count() or 2))})


def _candidates(base: dict[str, str], ks: list[int], cost_file: str) -> list[Candidate]:
    single = {**base, "ge.enableSingleStream": "true"}
    out = [Candidate("single", single), Candidate("single_again", dict(single), note="noise control"),
           Candidate("ge", dict(base))]
    for k in ks:
        for mode in ("LoadBalance", "MainStream"):
            out.append(Candidate(f"ge_{mode}:{k}", {**base, "ge.autoMultistreamParallelMode": f"{mode}:{k}"}))
        for p in POLICY_NAMES:
            out.append(Candidate(f"{p}:{k}", {**base, "pyge.streamPolicy": p, "pyge.maxStreams": str(k),
                                                "pyge.costFile": cost_file}))
    return out


def _signature(model) -> tuple:
    return tuple((pn.name, pn.stream) for pn in model.plan.nodes)


def _compile_all(graph: Graph, device: str, cands: list[Candidate],
                 say: Callable[[str], None]) -> list[Candidate]:
    """Compile every candidate. One whose plan repeats an earlier one's keeps its row in the
    table (`same_as`) but is neither simulated nor timed again; one that fails is dropped."""
    import pyge
    from ..errors import PygeError
    seen: dict[tuple, Candidate] = {}
    kept = []
    for i, c in enumerate(cands, 1):
        say(f"compiling candidate {i} of {len(cands)}: {c.name}")
        try:
            c.model = pyge.compile(graph, device=device, options=c.options)
        except PygeError as err:
            log.warning("tune: candidate %s does not compile: %s", c.name, err)
            continue
        c.streams, c.events = c.model.num_streams, len(c.model.plan.events)
        sig = _signature(c.model)
        if sig in seen and c.name not in ("single", "single_again", "ge"):
            c.same_as = seen[sig]
            c.note = f"same plan as {c.same_as.name}"
        seen.setdefault(sig, c)
        kept.append(c)
    return kept


def _runner(model, feeds: Mapping[str, Any], device: str):
    """A zero-argument call of one run. On CUDA the inputs stay on the device and the
    outputs too (a replay is then timed, not the PCIe copies around it)."""
    if device_kind(device) != "cuda":
        return lambda: model.run(feeds)
    import torch
    model.executor    # built first: no usable CUDA device is its OptionError, not torch's assertion
    dev_feeds = {k: torch.as_tensor(v).to(device) for k, v in feeds.items()}

    def run():
        model.run(dev_feeds, output_device=device)
        torch.cuda.synchronize(device)
    return run


def _measure(cands: list[Candidate], feeds, device: str, budget_s: float, min_rounds: int,
             max_rounds: int, on_progress: Callable[[str], None] | None = None) -> None:
    """Interleaved rounds; cands[0] is single stream, the reference of every speedup."""
    keys = [str(i) for i in range(len(cands))]
    runs = {k: _runner(c.model, feeds, device) for k, c in zip(keys, cands)}
    for k in keys:                       # warm up: threads, allocator, kernels, graph capture
        runs[k]()
        runs[k]()
    inner = batch_size(runs[keys[0]])
    start = time.perf_counter()

    def said(r: int) -> None:
        if on_progress is not None:
            on_progress(f"timing {len(cands)} plans: round {r} ({time.perf_counter() - start:.0f} s "
                        f"of {max(budget_s, 0):.0f} s, at least {min_rounds} rounds)")
    times = interleaved(runs, max_rounds, min_rounds=min_rounds, deadline=start + budget_s,
                        inner=inner, on_round=said)
    ups = speedups(times, keys[0])
    for k, c in zip(keys, cands):
        c.times, c.speedups = times[k], ups[k]


def _note(c: Candidate, text: str) -> None:
    c.note = (c.note + "; " if c.note else "") + text


def _decide(finalists: list[Candidate], min_gain: float) -> Candidate:
    """The fastest finalist if it beats single stream beyond the spread, else single stream.

    finalists[0] is single stream and finalists[1] the same plan compiled again: its speedups
    would all be 1 on a quiet machine, so their spread is the noise. A winner's lower
    quartile must clear both 1 + `min_gain` and the noise control's upper quartile."""
    single, control = finalists[0], finalists[1]
    best = max(finalists[2:], key=lambda c: (c.speedup or 0.0, c.name), default=single)
    need = 1.0 + min_gain
    if control.spread is not None:
        need = max(need, control.spread.high)
    sp = best.spread
    if best is not single and sp is not None and sp.low > need:
        _note(best, "chosen")
        return best
    if best is not single and sp is not None:
        _note(best, f"fastest, but not beyond the spread (lower quartile {sp.low:.3f}, needs > {need:.3f})")
    _note(single, "chosen")
    return single


def tune(graph: Graph, device: str = "cpu", feeds: Mapping[str, Any] | None = None, *,
         options: Mapping[str, str] | None = None, stream_counts: list[int] | None = None,
         top: int = 3, budget_s: float = 60.0, min_gain: float = 0.02, min_rounds: int = 5,
         max_rounds: int = 200, costs: OpCosts | None = None, measure: bool = True,
         on_progress: Callable[[str], None] | None = None) -> TuneResult:
    """Try policies x stream counts on `device`; see the module doc. `budget_s` is the whole
    tuning's time budget: the timing rounds get what cost measurement and compilation left
    (but at least `min_rounds` rounds). With `measure=False` nothing runs: the simulator alone
    ranks the candidates (for tests). `on_progress(text)` is told what is being done (the
    `pyge tune` command shows it on a terminal)."""
    from ..executors import check_usable
    check_usable(device)        # cuda without a GPU: fail before measuring or compiling anything
    say = on_progress or (lambda text: None)
    t0 = time.perf_counter()
    base = {k: str(v) for k, v in (options or {}).items() if k not in STREAM_KEYS}
    feeds = dict(feeds) if feeds is not None else random_feeds(graph)
    if costs is None:
        say("measuring every operator (single stream)")
        costs = measure_costs(graph, device, feeds, base) if measure else None
        if costs is None or not costs.times:
            import pyge
            costs = static_costs(pyge.compile(graph, device=device, options=base).graph, device)
    ks = sorted(set(stream_counts or default_stream_counts(device)))
    with tempfile.TemporaryDirectory(prefix="pyge-tune-") as tmp:
        cost_file = str(Path(tmp) / "costs.json")
        costs.save(cost_file)
        cands = _compile_all(graph, device, _candidates(base, ks, cost_file), say)
    say(f"simulating {len(cands)} plans")
    dev = DeviceModel.for_costs(costs)
    for c in cands:
        c.sim_s = c.same_as.sim_s if c.same_as else simulate(c.model.plan, costs, dev, graph=c.model.graph).makespan
    single, control = cands[0], cands[1]
    bound = critical_path_bound(single.model.plan, costs)
    ranked = sorted((c for c in cands[3:] if c.same_as is None), key=lambda c: (round(c.sim_s * 1e9), c.name))
    for c in ranked[top:]:
        c.note = "pruned by the simulator"
    finalists = [single, control, cands[2], *ranked[:top]]
    if measure:
        _measure(finalists, feeds, device, budget_s - (time.perf_counter() - t0), min_rounds, max_rounds, say)
    else:
        for c in finalists:
            c.speedups = [single.sim_s / c.sim_s] if single.sim_s and c.sim_s else [1.0]
    best = _decide(finalists, min_gain)
    return TuneResult(graph.name, str(device), best, single, cands, costs, bound,
                      time.perf_counter() - t0, base)
