"""An event-driven simulator of a Plan on a shared device, for tests and for the tuner.

The model, in four parts:

* Streams run their steps in order. A WAIT blocks until its RECORD has happened, plus
  `event_s` (a Send/Recv costs a wake-up on the CPU, a graph edge on a GPU).
* Each launch first takes `host_s` on the host, a resource all streams share one at a
  time (the GIL that the CPU executor's Python loop holds between kernels; a single issuing
  thread for eager CUDA; ~0 for a replayed CUDA graph), then `launch_s` on its stream, then
  its work on the device.
* The device is shared (processor sharing). Each operator has an alone-time t (the time it
  takes with the device to itself) and a demand d in (0, 1], the fraction of the device it
  can keep busy. While the running operators' demands add up to at most 1, each runs at
  full speed; above that, all slow down by the same factor 1 / sum(d). So two small
  kernels overlap for free, while two convolutions that each fill the GPU take as long
  together as one after the other - the reference's warning that concurrency can fail to pay.
* CPU: the executor's thread rule (executors/cpu.py): with k > 1 busy streams the main
  stream (the first busy one) gets ceil(C / a) of the budget C, a being the plan's average
  parallelism, and each side stream what is left, split evenly, at least 1. So an operator
  runs with p threads: its alone-time follows Amdahl's law through the measured times with
  C threads and with 1 thread, and its demand is the cores it keeps busy over C: its
  speed-up over one thread (p if unknown), at most p (more threads than cores oversubscribe
  the cores: sum(d) > 1; an operator that does not scale holds one core, whatever its p).
  CUDA: d comes from the fraction of peak FLOP/s or bytes/s the measured time achieves
  (a kernel at 5% of peak leaves most SMs free), at least 1/20.
"""
from __future__ import annotations

import heapq
from dataclasses import dataclass, field

from ..analysis.dag import longest_path
from ..analysis.happens_before import dependencies
from ..plan.plan import LAUNCH, RECORD, Plan
from .costs import OVERHEADS, OpCosts, device_kind

_EPS = 1e-12


@dataclass
class DeviceModel:
    kind: str = "cpu"            # "cpu" or "cuda"
    cores: int = 1               # cpu: intra-op thread budget C
    event_s: float = 0.0
    launch_s: float = 0.0
    host_s: float = 0.0
    peak_flops: float = 400e12   # cuda: TF32 tensor-core peak (H200 ~ 490e12 dense)
    peak_bytes: float = 4.0e12   # cuda: HBM bandwidth (H200 ~ 4.8e12)
    min_demand: float = 0.05

    @classmethod
    def for_costs(cls, costs: OpCosts, **kw) -> "DeviceModel":
        kind = device_kind(costs.device)
        base = dict(OVERHEADS[kind])
        if costs.source == "measured":
            base.update(event_s=costs.event_s, launch_s=costs.launch_s, host_s=costs.host_s)
        base.update(kw)
        return cls(kind=kind, cores=max(1, costs.threads), **base)


@dataclass
class SimResult:
    makespan: float
    start: list[float]
    end: list[float]
    busy: list[float] = field(default_factory=list)      # per stream: time its ops ran

    @property
    def ms(self) -> float:
        return self.makespan * 1e3


def op_profile(plan: Plan, costs: OpCosts, dev: DeviceModel, graph=None) -> tuple[list[float], list[float]]:
    """(alone-time, demand) of every plan node on `dev`, for this plan's stream count."""
    busy = [s for s, steps in enumerate(plan.streams) if any(st.kind == LAUNCH for st in steps)]
    main_p = side_p = dev.cores
    if dev.kind == "cpu" and len(busy) > 1:     # the CPU executor's rule, see the module doc
        from ..executors.cpu import average_parallelism, intra_op_threads, side_threads
        main_p = intra_op_threads(dev.cores, min(average_parallelism(plan), len(busy)))
        side_p = side_threads(dev.cores, main_p, len(busy) - 1)
    times, demands = [], []
    nodes = {n.name: n for n in graph.nodes} if graph is not None else {}
    for pn in plan.nodes:
        t = costs.times.get(pn.name, 0.0)
        if dev.kind == "cpu":
            p = min(dev.cores, main_p if pn.stream == busy[0] else side_p)
            t1 = costs.times_1t.get(pn.name)
            if t1 is not None and p < dev.cores:
                t = amdahl(t, t1, dev.cores, p)
            # cores it keeps busy: its speed-up over one thread (at most its p threads)
            used = p if t1 is None or t <= 0 else min(p, max(1.0, t1 / t))
            d = used / dev.cores
        else:
            d = gpu_demand(nodes.get(pn.name), t, dev)
        times.append(t)
        demands.append(min(1.0, max(d, dev.min_demand)))
    return times, demands


def amdahl(t_c: float, t_1: float, c: int, p: int) -> float:
    """Time with p <= c threads, given the times with c threads and with 1 (Amdahl's law).
    Never below t_c: where one thread measured faster than c (a tiny operator, thread
    start-up dominating) Amdahl has no serial fraction that fits, and taking t_1 would make
    a plan look faster than the critical path of the measured times (a 2-stream plan of two
    ops "beating" both ops' own times)."""
    if c <= 1 or t_1 <= 0:
        return t_c
    serial = min(1.0, max(0.0, (t_c / t_1 - 1.0 / c) / (1.0 - 1.0 / c)))
    return max(t_c, t_1 * (serial + (1.0 - serial) / p))


def gpu_demand(node, t: float, dev: DeviceModel) -> float:
    if node is None or t <= 0:
        return 1.0
    from ..passes.streams.cost import flops, nbytes
    moved = sum(nbytes(v) for v in node.inputs) + sum(nbytes(o) for o in node.outputs)
    return max(flops(node) / (t * dev.peak_flops), moved / (t * dev.peak_bytes))


def simulate(plan: Plan, costs: OpCosts, dev: DeviceModel | None = None, graph=None) -> SimResult:
    """Simulated latency of one run of `plan`. `graph` (the compiled graph) lets the CUDA
    model read shapes for each operator's demand."""
    dev = dev or DeviceModel.for_costs(costs)
    times, demand = op_profile(plan, costs, dev, graph)
    return _Sim(plan, times, demand, dev).run()


class _Sim:
    def __init__(self, plan: Plan, times: list[float], demand: list[float], dev: DeviceModel):
        self.plan, self.times, self.demand, self.dev = plan, times, demand, dev
        n = len(plan.nodes)
        self.start, self.end = [0.0] * n, [0.0] * n
        self.pos = [0] * len(plan.streams)
        self.recorded: dict[int, float] = {}
        self.waiters: dict[int, list[int]] = {}
        self.running: dict[int, list] = {}     # node -> [remaining alone-time, stream]
        self.host_free = 0.0
        self.now = 0.0
        self.version = 0
        self.heap: list = []
        self.seq = 0

    def push(self, t: float, kind: str, arg) -> None:
        self.seq += 1
        heapq.heappush(self.heap, (t, self.seq, kind, arg))

    def rate(self) -> float:
        total = sum(self.demand[i] for i in self.running)
        return 1.0 if total <= 1.0 + _EPS else 1.0 / total

    def progress(self, t: float) -> None:
        if self.running and t > self.now:
            r = self.rate()
            for st in self.running.values():
                st[0] -= r * (t - self.now)
        self.now = max(self.now, t)

    def reschedule(self) -> None:
        """Queue a check at the next completion; older checks become stale."""
        self.version += 1
        if self.running:
            r = self.rate()
            left = min(st[0] for st in self.running.values())
            self.push(self.now + max(0.0, left) / r, "check", self.version)

    def advance(self, s: int, t: float) -> None:
        """Stream s is free at time t: run its steps until it blocks or launches."""
        dev, steps = self.dev, self.plan.streams[s]
        while self.pos[s] < len(steps):
            st = steps[self.pos[s]]
            if st.kind == RECORD:
                self.recorded[st.arg] = t
                for w in self.waiters.pop(st.arg, []):
                    self.push(t + dev.event_s, "resume", w)
            elif st.kind == LAUNCH:
                h = max(t, self.host_free)
                self.host_free = h + dev.host_s
                self.pos[s] += 1
                self.push(h + dev.host_s + dev.launch_s, "start", (s, st.arg))
                return
            else:
                rec = self.recorded.get(st.arg)
                if rec is None:
                    self.waiters.setdefault(st.arg, []).append(s)
                    return
                if t + _EPS < rec + dev.event_s:
                    self.push(rec + dev.event_s, "resume", s)
                    return
            self.pos[s] += 1

    def run(self) -> SimResult:
        for s in range(len(self.plan.streams)):
            self.advance(s, 0.0)
        while self.heap:
            t, _, kind, arg = heapq.heappop(self.heap)
            if kind == "check" and arg != self.version:
                continue
            self.progress(t)
            if kind == "resume":
                self.advance(arg, t)
            elif kind == "start":
                s, i = arg
                self.start[i] = t
                self.running[i] = [self.times[i], s]
            else:
                self.finish_done(t)
            self.reschedule()
        stuck = [s for s, steps in enumerate(self.plan.streams) if self.pos[s] < len(steps)]
        if stuck:
            from ..errors import PlanError
            raise PlanError(f"simulated plan deadlocks on stream {stuck[0]}")
        busy = [0.0] * len(self.plan.streams)
        for pn in self.plan.nodes:
            busy[pn.stream] += self.end[pn.index] - self.start[pn.index]
        return SimResult(max(self.end, default=0.0), self.start, self.end, busy)

    def finish_done(self, t: float) -> None:
        done = sorted(i for i, st in self.running.items() if st[0] <= 1e-9 * self.times[i] + 1e-15)
        for i in done:
            s = self.running.pop(i)[1]
            self.end[i] = t
            self.advance(s, t)


def critical_path_bound(plan: Plan, costs: OpCosts) -> float:
    """The longest path by measured operator time: no schedule on any number of streams
    can beat it (zero overheads, unlimited device)."""
    return longest_path(dependencies(plan), [costs.times.get(pn.name, 0.0) for pn in plan.nodes])[0]
