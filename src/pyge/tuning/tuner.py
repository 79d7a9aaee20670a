"""`tune`: pick the fastest stream plan for one network on one device, by measurement.

1. Measure per-operator costs on the device (single stream; costs.py).
2. Build the candidates: single stream, GE's chain as configured, GE's automatic modes
   (LoadBalance:k, MainStream:k) and the three pyge policies (critical_path, min_streams,
   list_schedule, on the measured costs) for each stream count k. Plans that come out the
   same (same streams, same launch order) are tried once.
3. Prune with the simulator (simulator.py): keep the `top` fastest simulated plans.
4. Measure the survivors for real, with single stream and GE's own plan, interleaved round
   by round (a fresh seeded order each round) so machine noise hits them alike; the score is the median
   over rounds of (candidate time / single-stream time in the same round).
5. Keep the fastest measured plan only if it clearly beats single stream (by `min_gain`, and
   by twice the noise that a second copy of the single-stream plan shows, in 2 rounds of
   3); otherwise keep single stream. So the result is never measurably slower than it.

The result can be written as a policy file (policy_file.py) that reproduces the plan.
"""
from __future__ import annotations

import logging
import os
import random
import statistics
import tempfile
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Mapping

from ..ir.graph import Graph
from ..passes.policies.policy_file import policy_dict, write_policy_file
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
    ratios: list[float] = field(default_factory=list)
    note: str = ""
    same_as: "Candidate | None" = None

    @property
    def median_s(self) -> float | None:
        return statistics.median(self.times) if self.times else None

    @property
    def ratio(self) -> float | None:
        return statistics.median(self.ratios) if self.ratios else None

    def row(self) -> dict:
        ms = lambda x: None if x is None else round(x * 1e3, 4)   # noqa: E731
        return {"name": self.name, "streams": self.streams, "events": self.events,
                "sim_ms": ms(self.sim_s), "measured_ms": ms(self.median_s),
                "ratio_to_single": None if self.ratio is None else round(self.ratio, 4), "note": self.note}


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
        return 1.0 / self.best.ratio if self.best.ratio else 1.0

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

    def table(self) -> str:
        head = f"{'candidate':<22}{'streams':>8}{'events':>8}{'sim ms':>10}{'measured ms':>13}{'vs single':>11}  note"
        lines = [f"pyge tune {self.graph_name} on {self.device}: {len(self.candidates)} candidates, "
                 f"{self.elapsed_s:.1f} s; critical-path bound {self.bound_s * 1e3:.3f} ms", head]
        for c in self.candidates:
            r = c.row()
            f = lambda x, w, p: f"{x:>{w}.{p}f}" if x is not None else f"{'-':>{w}}"   # noqa: E731
            mark = "*" if c is self.best else " "
            lines.append(f"{mark}{c.name:<21}{c.streams:>8}{c.events:>8}{f(r['sim_ms'], 10, 3)}"
                         f"{f(r['measured_ms'], 13, 3)}{f(r['ratio_to_single'], 11, 3)}  {c.note}")
        lines.append(f"chosen: {self.best.name} ({self.speedup:.2f}x single stream)")
        return "\n".join(lines)


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


def _compile_all(graph: Graph, device: str, cands: list[Candidate]) -> list[Candidate]:
    """Compile every candidate. One whose plan repeats an earlier one's keeps its row in the
    table (`same_as`) but is neither simulated nor timed again; one that fails is dropped."""
    import pyge
    from ..errors import PygeError
    seen: dict[tuple, Candidate] = {}
    kept = []
    for c in cands:
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
             max_rounds: int) -> None:
    """Interleaved timing; cands[0] is single stream, the reference of every ratio."""
    runs = {id(c): _runner(c.model, feeds, device) for c in cands}
    for c in cands:                      # warm up: threads, allocator, kernels, graph capture
        runs[id(c)]()
        runs[id(c)]()
    t0 = time.perf_counter()
    runs[id(cands[0])]()
    # Sub-millisecond runs (a GPU replay) are timed in batches of `inner`, so each sample
    # spans ~2 ms and the timer's and the scheduler's jitter stay small beside it.
    inner = max(1, min(50, int(2e-3 / max(time.perf_counter() - t0, 1e-6))))
    t_end = time.perf_counter() + budget_s
    rng = random.Random(0)
    for r in range(max_rounds):
        if r >= min_rounds and time.perf_counter() > t_end:
            break
        order = rng.sample(cands, len(cands))   # a fresh order each round: no fixed neighbour
        took = {}
        for c in order:
            fn = runs[id(c)]
            t0 = time.perf_counter()
            for _ in range(inner):
                fn()
            took[id(c)] = (time.perf_counter() - t0) / inner
        ref = took[id(cands[0])]
        for c in cands:
            c.times.append(took[id(c)])
            c.ratios.append(took[id(c)] / ref)


def _decide(finalists: list[Candidate], min_gain: float) -> Candidate:
    """The fastest finalist if it beats single stream clearly, else single stream.

    finalists[0] is single stream and finalists[1] the same plan compiled again: its ratio
    would be 1 on a quiet machine, so its distance from 1 measures the noise, and a winner
    must be faster than single by twice that (and by `min_gain`), and in 2 rounds of 3."""
    single, control = finalists[0], finalists[1]
    noise = abs(1.0 - control.ratio) if control.ratio is not None else 0.0
    need = max(min_gain, 2.0 * noise)
    best = min(finalists[2:], key=lambda c: (c.ratio, c.name), default=single)
    wins = sum(r < 1.0 for r in best.ratios) / max(1, len(best.ratios))
    if best.ratio is not None and best.ratio < 1.0 - need and wins >= 2 / 3:
        best.note = (best.note + "; " if best.note else "") + "chosen"
        return best
    if best is not single:
        best.note = (best.note + "; " if best.note else "") + \
            f"fastest, but not clearly faster than single (needs < {1.0 - need:.3f}, wins {wins:.0%})"
    single.note = (single.note + "; " if single.note else "") + "chosen"
    return single


def tune(graph: Graph, device: str = "cpu", feeds: Mapping[str, Any] | None = None, *,
         options: Mapping[str, str] | None = None, stream_counts: list[int] | None = None,
         top: int = 3, budget_s: float = 60.0, min_gain: float = 0.02, min_rounds: int = 5,
         max_rounds: int = 200, costs: OpCosts | None = None, measure: bool = True) -> TuneResult:
    """Try policies x stream counts on `device`; see the module doc. `budget_s` is the whole
    tuning's time budget: the timing rounds get what cost measurement and compilation left
    (but at least `min_rounds` rounds). With
    `measure=False` nothing runs: the simulator alone ranks the candidates (for tests)."""
    t0 = time.perf_counter()
    base = {k: str(v) for k, v in (options or {}).items() if k not in STREAM_KEYS}
    feeds = dict(feeds) if feeds is not None else random_feeds(graph)
    if costs is None:
        costs = measure_costs(graph, device, feeds, base) if measure else None
        if costs is None or not costs.times:
            import pyge
            costs = static_costs(pyge.compile(graph, device=device, options=base).graph, device)
    ks = sorted(set(stream_counts or default_stream_counts(device)))
    with tempfile.TemporaryDirectory(prefix="pyge-tune-") as tmp:
        cost_file = str(Path(tmp) / "costs.json")
        costs.save(cost_file)
        cands = _compile_all(graph, device, _candidates(base, ks, cost_file))
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
        _measure(finalists, feeds, device, budget_s - (time.perf_counter() - t0), min_rounds, max_rounds)
    else:
        for c in finalists:
            c.ratios = [c.sim_s / single.sim_s] if single.sim_s else [1.0]
    best = _decide(finalists, min_gain)
    return TuneResult(graph.name, str(device), best, single, cands, costs, bound,
                      time.perf_counter() - t0, base)
