"""Profiling on CUDA.

Eager runs: the executor calls the hooks around each node on the host thread that issues
that stream; the hooks record a pair of timing events on the node's CUDA stream (the
executor's `cuda_streams[s]` when it exposes them, else the current stream). After the run
one synchronise reads every pair against a base event recorded when the run began.
Cost: two cudaEventRecord calls per node on the host (a few microseconds each) and nothing
added to the device's work; on a launch-bound model that is visible, on a compute-bound one
it is not.

Graph replays: a replay launches the whole captured graph at once, so no hook runs per node.
Each replay is run under torch.profiler (CUPTI activity tracing) and its GPU kernels and copies
become the records. A replay's kernels cannot be traced back to plan nodes or to the capture
streams (the driver picks the streams a graph's branches run on), so records carry the kernel
name, op_type "kernel", and a "stream" that is a lane: kernels that overlap in time go to
different lanes of the same device stream. Summary figures (wall, serial sum, concurrency)
hold; the critical-path bound and per-node overlap need an eager profile. CUPTI adds well under
a microsecond per kernel on the device; starting and stopping the profiler (milliseconds)
happens outside the measured window.

The executor is asked duck-typed: `mode == "graph"` (pyge's CudaExecutor; else `uses_cuda_graph`)
says a plain run replays, checked after the warm-up runs (the first run captures, and a failed
capture leaves the executor eager); `streams` (or `cuda_streams`) gives the torch.cuda.Stream of
each logical stream. A run given hooks is always eager.
"""
from __future__ import annotations

from time import perf_counter_ns

from .profile import Profile
from .records import OpRecord, RunRecord, derive_events


def uses_graph(executor) -> bool:
    """Whether a plain run() replays a CUDA graph (pyge's CudaExecutor: mode == "graph")."""
    if getattr(executor, "mode", None) in ("graph", "eager"):
        return executor.mode == "graph"
    for attr in ("uses_cuda_graph", "graph_mode"):
        v = getattr(executor, attr, None)
        if isinstance(v, bool):
            return v
    return False


def executor_streams(executor, n: int):
    import torch
    for attr in ("streams", "cuda_streams"):
        v = getattr(executor, attr, None)
        if isinstance(v, (list, tuple)) and len(v) >= n and all(isinstance(s, torch.cuda.Stream) for s in v[:n]):
            return list(v)
    return None


class CudaEventHooks:
    """Timing events around each node, on the node's CUDA stream."""

    def __init__(self, plan, streams=None):
        import torch
        n = len(plan.nodes)
        self._plan = plan
        self._streams = streams
        self._start = [torch.cuda.Event(enable_timing=True) for _ in range(n)]
        self._end = [torch.cuda.Event(enable_timing=True) for _ in range(n)]
        self._base = torch.cuda.Event(enable_timing=True)
        self._seen: list[list[int]] = [[] for _ in range(max(plan.num_streams, 1))]

    def _stream(self, s: int):
        return self._streams[s] if self._streams is not None else None

    def before(self, node_index: int, stream: int) -> None:
        self._seen[stream].append(node_index)
        self._start[node_index].record(self._stream(stream))

    def after(self, node_index: int, stream: int) -> None:
        self._end[node_index].record(self._stream(stream))

    def begin_run(self) -> None:
        for s in self._seen:
            s.clear()
        self._base.record()

    def collect(self, run: int, offset: float) -> list[OpRecord]:
        """Read the run's events (after a synchronise); `offset` = run start in profile time."""
        import torch
        torch.cuda.synchronize()
        out = []
        for s, nodes in enumerate(self._seen):
            for ni in nodes:
                pn = self._plan.nodes[ni]
                a = self._base.elapsed_time(self._start[ni]) * 1e-3
                b = self._base.elapsed_time(self._end[ni]) * 1e-3
                out.append(OpRecord(ni, pn.name, pn.op_type, s, offset + a, offset + b, run))
        return out


def _eager(model, executor, feeds, runs: int) -> tuple[list[OpRecord], list[RunRecord]]:
    import torch
    plan = getattr(model, "flat_plan", None) or model.plan
    hooks = CudaEventHooks(plan, executor_streams(executor, plan.num_streams))
    records: list[OpRecord] = []
    spans = []
    t0 = None
    for r in range(runs):
        torch.cuda.synchronize()
        a = perf_counter_ns()
        t0 = a if t0 is None else t0
        hooks.begin_run()
        executor.run(feeds, hooks=hooks)
        torch.cuda.synchronize()
        b = perf_counter_ns()
        spans.append((a, b))
        records.extend(hooks.collect(r, (a - t0) * 1e-9))
    return records, [RunRecord(i, (a - t0) * 1e-9, (b - t0) * 1e-9) for i, (a, b) in enumerate(spans)]


def assign_lanes(items: list[tuple[float, float]]) -> list[int]:
    """Greedy interval colouring: items sorted by start get the first lane free at that time."""
    order = sorted(range(len(items)), key=lambda i: items[i][0])
    lane_end: list[float] = []
    out = [0] * len(items)
    for i in order:
        start, end = items[i]
        for k, e in enumerate(lane_end):
            if e <= start:
                lane_end[k], out[i] = end, k
                break
        else:
            lane_end.append(end)
            out[i] = len(lane_end) - 1
    return out


def _replay_kernels(executor, feeds) -> list[tuple[str, int, int, int]]:
    """(name, start_ns, end_ns, device stream) of every GPU activity of one run."""
    import torch
    from torch.profiler import ProfilerActivity, profile
    with profile(activities=[ProfilerActivity.CUDA]) as prof:
        executor.run(feeds)
        torch.cuda.synchronize()
    out = []
    for e in prof.profiler.kineto_results.events():
        if e.device_type() == torch.autograd.DeviceType.CUDA:
            out.append((e.name(), e.start_ns(), e.end_ns(), e.device_resource_id()))
    return out


def _replay(executor, feeds, runs: int) -> tuple[list[OpRecord], list[RunRecord], int]:
    import torch
    raw, spans = [], []
    for _ in range(runs):
        torch.cuda.synchronize()
        a = perf_counter_ns()
        raw.append(_replay_kernels(executor, feeds))
        spans.append((a, perf_counter_ns()))
    t0 = spans[0][0]
    lanes: dict[tuple[int, int], int] = {}
    records: list[OpRecord] = []
    for run, kernels in enumerate(raw):
        if not kernels:
            continue
        k0 = min(k[1] for k in kernels)
        offset = (spans[run][0] - t0) * 1e-9
        per_stream: dict[int, list[int]] = {}
        for i, k in enumerate(kernels):
            per_stream.setdefault(k[3], []).append(i)
        for dev_stream, idx in sorted(per_stream.items()):
            sub = assign_lanes([(kernels[i][1], kernels[i][2]) for i in idx])
            for i, lane in zip(idx, sub):
                name, a, b, _ = kernels[i]
                track = lanes.setdefault((dev_stream, lane), len(lanes))
                op = "memcpy" if name.lower().startswith(("memcpy", "memset")) else "kernel"
                records.append(OpRecord(-1, name, op, track, offset + (a - k0) * 1e-9,
                                        offset + (b - k0) * 1e-9, run))
    runs_out = [RunRecord(i, (a - t0) * 1e-9, (b - t0) * 1e-9) for i, (a, b) in enumerate(spans)]
    return records, runs_out, max(len(lanes), 1)


def _replay_profile(model, executor, feeds, runs: int) -> Profile:
    plan = getattr(model, "flat_plan", None) or model.plan
    records, run_records, tracks = _replay(executor, feeds, runs)
    records.sort(key=lambda r: (r.run, r.start))
    return Profile(plan.graph_name, str(model.device), tracks, plan, records, [], run_records,
                   mode="cuda graph replay, kernels")


def profile_cuda(model, executor, feeds, runs: int, warmup: int) -> Profile:
    import torch
    for _ in range(warmup):
        executor.run(feeds)
    torch.cuda.synchronize()
    plan = getattr(model, "flat_plan", None) or model.plan
    if uses_graph(executor):
        return _replay_profile(model, executor, feeds, runs)
    records, run_records = _eager(model, executor, feeds, runs)
    if not records and plan.nodes:
        # The executor replayed a graph without saying so (no hook ran): read its kernels.
        return _replay_profile(model, executor, feeds, runs)
    records.sort(key=lambda r: (r.run, r.start, r.stream))
    events = derive_events(plan, records)
    return Profile(plan.graph_name, str(model.device), plan.num_streams, plan, records, events,
                   run_records, mode="cuda events")
