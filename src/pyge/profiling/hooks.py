"""CPU profiling hooks: wall-clock start and end of each node, per stream.

The executor calls the hooks on the thread that runs the stream, so each stream's buffer is
written by one thread only: no lock is needed, and the cost per node is two method calls,
two clock reads and three list appends. Parsing happens after the runs.
"""
from __future__ import annotations

from time import perf_counter_ns

from .records import OpRecord, RunRecord

_RECORD, _WAIT = 0, 1


class CpuHooks:
    """Collects (node, start_ns, end_ns) per stream and (kind, event, t_ns) per stream."""

    __slots__ = ("ops", "evs", "_op_marks", "_ev_marks")

    def __init__(self, num_streams: int):
        n = max(num_streams, 1)
        self.ops: list[list[int]] = [[] for _ in range(n)]
        self.evs: list[list[tuple[int, int, int]]] = [[] for _ in range(n)]
        self._op_marks: list[list[int]] = []
        self._ev_marks: list[list[int]] = []

    def before(self, node_index: int, stream: int) -> None:
        buf = self.ops[stream]
        buf.append(node_index)
        buf.append(perf_counter_ns())

    def after(self, node_index: int, stream: int) -> None:
        self.ops[stream].append(perf_counter_ns())

    def record(self, event_index: int, stream: int) -> None:
        self.evs[stream].append((_RECORD, event_index, perf_counter_ns()))

    def wait(self, event_index: int, stream: int) -> None:
        self.evs[stream].append((_WAIT, event_index, perf_counter_ns()))

    def end_run(self) -> None:
        """Mark where one run's entries end (called between runs, not during one)."""
        self._op_marks.append([len(b) for b in self.ops])
        self._ev_marks.append([len(b) for b in self.evs])

    # -- after the runs -------------------------------------------------------------------
    def op_records(self, plan, t0_ns: int) -> list[OpRecord]:
        out: list[OpRecord] = []
        nodes = plan.nodes
        for s, buf in enumerate(self.ops):
            lo = 0
            for run, marks in enumerate(self._op_marks):
                hi = marks[s]
                for i in range(lo, hi - 2, 3):
                    ni = buf[i]
                    pn = nodes[ni]
                    out.append(OpRecord(ni, pn.name, pn.op_type, s, (buf[i + 1] - t0_ns) * 1e-9,
                                        (buf[i + 2] - t0_ns) * 1e-9, run))
                lo = hi
        out.sort(key=lambda r: (r.run, r.start, r.stream))
        return out

    def hooked_events(self, t0_ns: int) -> dict[tuple[str, int, int], float]:
        """("record"|"wait", run, event index) -> seconds, first time seen in that run."""
        out: dict[tuple[str, int, int], float] = {}
        for s, buf in enumerate(self.evs):
            lo = 0
            for run, marks in enumerate(self._ev_marks):
                for kind, k, t in buf[lo:marks[s]]:
                    key = ("record" if kind == _RECORD else "wait", run, k)
                    out.setdefault(key, (t - t0_ns) * 1e-9)
                lo = marks[s]
        return out


def run_cpu(executor, feeds, runs: int, warmup: int, num_streams: int):
    """Warm up, then run `runs` times with hooks; returns (hooks, run records, t0_ns)."""
    for _ in range(warmup):
        executor.run(feeds)
    hooks = CpuHooks(num_streams)
    spans: list[tuple[int, int]] = []
    for _ in range(runs):
        a = perf_counter_ns()
        executor.run(feeds, hooks=hooks)
        b = perf_counter_ns()
        spans.append((a, b))
        hooks.end_run()
    t0 = spans[0][0]
    run_records = [RunRecord(i, (a - t0) * 1e-9, (b - t0) * 1e-9) for i, (a, b) in enumerate(spans)]
    return hooks, run_records, t0
