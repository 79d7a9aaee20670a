"""Per-operator costs: measured on the target device, or estimated statically.

Measuring runs the model single-stream with profiling hooks (executors/base.py protocol):

* cpu  - wall time of each kernel call (perf_counter_ns), median over runs, once with the
         process's intra-op thread budget (`times`) and once with one thread (`times_1t`):
         the two give each operator's parallel speed-up, which the simulator needs because
         the CPU executor splits the thread budget between busy streams.
* cuda - device time of each operator from CUDA events recorded around it, with CUDA graphs
         off. A `torch.cuda._sleep` kernel queued first keeps the GPU busy while the host
         enqueues the whole run, so the events time the kernels back to back, not the host's
         launch gaps (which graph replay removes anyway).

The static fallback is passes/streams/cost.py (FLOPs and bytes from shapes) on the CPU,
with GPU rates for cuda. A cost file (`save`, read back by `load` and by the policies'
`pyge.costFile`) holds microseconds per node name.
"""
from __future__ import annotations

import json
import logging
import statistics
from dataclasses import dataclass, field
from pathlib import Path
from time import perf_counter_ns
from typing import Any, Mapping

import numpy as np

from ..ir.graph import Graph
from ..errors import OptionError
from ..passes.policies._dag import COST_FILE_VERSION, CostTable, cost_us, load_costs

log = logging.getLogger(__name__)

# Overheads a run pays besides kernel time (seconds), per device kind. CPU: a Send/Recv is a
# flag and a Condition between worker threads (a wake-up costs tens of microseconds under the
# GIL); each launch pays the executor's Python loop. CUDA with graph replay: a cross-stream
# edge and a kernel node cost a few microseconds of device scheduling.
OVERHEADS = {"cpu": {"event_s": 30e-6, "launch_s": 3e-6, "host_s": 8e-6},
             "cuda": {"event_s": 3e-6, "launch_s": 1.5e-6, "host_s": 0.0}}
GPU_FLOP_RATE = 100e12      # TF32 convolutions at batch 1 reach a fraction of the peak
GPU_BYTE_RATE = 3e12
GPU_LAUNCH_S = 3e-6


def device_kind(device: str) -> str:
    return "cuda" if str(device).startswith("cuda") else "cpu"


@dataclass
class OpCosts:
    """Seconds per root-graph node name, and how they were obtained."""
    device: str
    times: dict[str, float]
    times_1t: dict[str, float] = field(default_factory=dict)   # cpu: with one intra-op thread
    threads: int = 1                                            # cpu: threads behind `times`
    source: str = "static"                                      # "measured" or "static"
    event_s: float = 0.0
    launch_s: float = 0.0
    host_s: float = 0.0

    def table(self) -> CostTable:
        return CostTable(costs=dict(self.times), event_s=self.event_s, launch_s=self.launch_s,
                         device=self.device)

    def to_json(self) -> dict:
        us = lambda d: {k: round(v * 1e6, 3) for k, v in d.items()}   # noqa: E731
        return {"version": COST_FILE_VERSION, "unit": "us", "device": self.device, "source": self.source,
                "threads": self.threads, "event_us": round(self.event_s * 1e6, 3),
                "launch_us": round(self.launch_s * 1e6, 3), "host_us": round(self.host_s * 1e6, 3),
                "costs": us(self.times), "costs_1t": us(self.times_1t)}

    def save(self, path: str | Path) -> None:
        Path(path).write_text(json.dumps(self.to_json(), indent=1) + "\n")

    @classmethod
    def load(cls, path: str | Path) -> "OpCosts":
        t = load_costs(path)
        one_us = t.extra.get("costs_1t") or {}
        threads = t.extra.get("threads", 1)
        if not isinstance(one_us, dict) or isinstance(threads, bool) or not isinstance(threads, int) or threads < 1:
            raise OptionError(f"option pyge.costFile: {str(path)!r}: costs_1t must map node names to "
                              f"microseconds and threads be an integer >= 1 (threads is {threads!r})")
        one = {str(k): cost_us(path, f"costs_1t of node {k!r}", v) for k, v in one_us.items()}
        return cls(device=t.device or "cpu", times=t.costs, times_1t=one,
                   threads=threads, source=str(t.extra.get("source", "measured")),
                   event_s=t.event_s, launch_s=t.launch_s, host_s=cost_us(path, "host_us", t.extra.get("host_us", 0.0)))


def random_feeds(graph: Graph, seed: int = 0) -> dict[str, np.ndarray]:
    """One input per graph input; unknown or symbolic dimensions are 1."""
    rng = np.random.default_rng(seed)
    feeds = {}
    for v in graph.inputs:
        shape = [d if isinstance(d, int) and d >= 0 else 1 for d in (v.shape or ())]
        dt = np.dtype(v.dtype or "float32")
        if dt.kind == "f":
            feeds[v.name] = rng.standard_normal(shape).astype(dt)
        elif dt.kind == "b":
            feeds[v.name] = rng.integers(0, 2, shape).astype(dt)
        else:
            feeds[v.name] = rng.integers(0, 4, shape).astype(dt)
    return feeds


def static_costs(graph: Graph, device: str = "cpu") -> OpCosts:
    """Estimates for every root-graph node of an already compiled graph."""
    from ..passes.streams.cost import flops, nbytes, node_cost
    kind = device_kind(device)
    times = {}
    for n in graph.nodes:
        if kind == "cuda":
            moved = sum(nbytes(v) for v in n.inputs) + sum(nbytes(o) for o in n.outputs)
            times[n.name] = GPU_LAUNCH_S + max(flops(n) / GPU_FLOP_RATE, moved / GPU_BYTE_RATE)
        else:
            times[n.name] = node_cost(n)
    return OpCosts(device=str(device), times=times, source="static", **OVERHEADS[kind])


class _WallHooks:
    """Kernel wall time per node (single-stream runs: one thread calls the hooks)."""

    def __init__(self) -> None:
        self.samples: dict[int, list[int]] = {}
        self._t = 0

    def before(self, node: int, stream: int) -> None:
        self._t = perf_counter_ns()

    def after(self, node: int, stream: int) -> None:
        self.samples.setdefault(node, []).append(perf_counter_ns() - self._t)


class _CudaHooks:
    """CUDA events around each node, read after the run."""

    def __init__(self) -> None:
        import torch
        self.torch = torch
        self.pending: list[tuple[int, Any, Any]] = []
        self.samples: dict[int, list[float]] = {}

    def before(self, node: int, stream: int) -> None:
        ev = self.torch.cuda.Event(enable_timing=True)
        ev.record()
        self.pending.append((node, ev, None))

    def after(self, node: int, stream: int) -> None:
        n, start, _ = self.pending[-1]
        end = self.torch.cuda.Event(enable_timing=True)
        end.record()
        self.pending[-1] = (n, start, end)

    def collect(self) -> None:
        self.torch.cuda.synchronize()
        for n, a, b in self.pending:
            if b is not None:
                self.samples.setdefault(n, []).append(a.elapsed_time(b) * 1e6)   # ms -> ns
        self.pending.clear()


def _medians(model, samples: Mapping[int, list]) -> dict[str, float]:
    return {model.plan.nodes[i].name: statistics.median(v) * 1e-9 for i, v in samples.items() if v}


def _run_hooked_cpu(model, feeds, runs: int, warmup: int) -> dict[str, float]:
    for _ in range(warmup):
        model.run(feeds)
    hooks = _WallHooks()
    for _ in range(runs):
        model.executor.run(feeds, hooks=hooks)
    return _medians(model, hooks.samples)


def _run_hooked_cuda(model, feeds, runs: int, warmup: int) -> dict[str, float]:
    import torch

    from ..kernels.convert import to_torch
    model.executor    # built first: no usable CUDA device is its OptionError, not torch's assertion
    # Feeds on the device first: copying a numpy feed from pageable memory inside run()
    # would wait for the sleep kernel below, and the events would then time launch gaps.
    feeds = {k: to_torch(v, model.device) for k, v in feeds.items()}
    for _ in range(warmup):
        model.run(feeds)
    torch.cuda.synchronize()
    t0 = perf_counter_ns()
    model.run(feeds)
    host_s = (perf_counter_ns() - t0) * 1e-9
    hooks = _CudaHooks()
    for _ in range(runs):
        torch.cuda._sleep(int(2.5 * host_s * 2e9))   # ~2 GHz: keep the GPU ahead of the host
        model.executor.run(feeds, hooks=hooks)
        hooks.collect()
    return _medians(model, hooks.samples)


def measure_costs(graph: Graph, device: str = "cpu", feeds: Mapping[str, Any] | None = None,
                  options: Mapping[str, str] | None = None, runs: int = 5, warmup: int = 2,
                  one_thread: bool = True) -> OpCosts:
    """Compile `graph` single-stream on `device` and measure every root-graph node."""
    import torch

    import pyge
    kind = device_kind(device)
    opts = {**dict(options or {}), "ge.enableSingleStream": "true"}
    if kind == "cuda":
        opts["pyge.cudaGraph"] = "false"
    model = pyge.compile(graph, device=device, options=opts)
    feeds = feeds if feeds is not None else random_feeds(graph)
    if kind == "cuda":
        times = _run_hooked_cuda(model, feeds, runs, warmup)
        return OpCosts(device=str(device), times=times, source="measured", **OVERHEADS["cuda"])
    threads = torch.get_num_threads()
    times = _run_hooked_cpu(model, feeds, runs, warmup)
    one: dict[str, float] = {}
    if one_thread and threads > 1:
        torch.set_num_threads(1)
        try:
            one = _run_hooked_cpu(model, feeds, runs, 1)
        finally:
            torch.set_num_threads(threads)
    log.info("measured %d op costs on %s (%d threads): %.2f ms in total", len(times), device, threads,
             sum(times.values()) * 1e3)
    return OpCosts(device=str(device), times=times, times_1t=one, threads=threads, source="measured",
                   **OVERHEADS["cpu"])
