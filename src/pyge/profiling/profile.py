"""Profile: the measured runs of one model, and what to do with them."""
from __future__ import annotations

from collections import defaultdict

from .records import EventRecord, OpRecord, RunRecord, interval_overlap, median


class Profile:
    """Per-operator start and end per stream over several runs.

        prof.records          OpRecord per operator run (name, op_type, stream, start, end, run)
        prof.events           EventRecord per Send/Recv pair per run
        prof.runs             RunRecord per run() call
        prof.summary()        wall, serial sum, concurrency, per-stream busy, critical-path bound
        prof.overlap(a, b)    seconds operators a and b ran at the same time (median over runs)
        prof.save_trace(p)    Chrome/Perfetto trace JSON
        prof.plot(p)          per-stream timeline PNG (span_s=: a time axis shared with another)
    """

    def __init__(self, graph_name: str, device: str, num_streams: int, plan,
                 records: list[OpRecord], events: list[EventRecord], runs: list[RunRecord],
                 mode: str = "cpu threads"):
        self.graph_name = graph_name
        self.device = device
        self.num_streams = num_streams
        self.plan = plan
        self.records = records
        self.events = events
        self.runs = runs
        self.mode = mode   # how times were taken: "cpu threads", "cuda events", "cuda graph replay"

    # -- queries --------------------------------------------------------------------------
    def records_of(self, name: str, run: int | None = None) -> list[OpRecord]:
        return [r for r in self.records if r.name == name and (run is None or r.run == run)]

    def durations(self, name: str) -> list[float]:
        return [r.duration for r in self.records_of(name)]

    def op_times(self) -> dict[str, float]:
        """Node name -> median duration in seconds."""
        per: dict[str, list[float]] = defaultdict(list)
        for r in self.records:
            per[r.name].append(r.duration)
        return {k: median(v) for k, v in per.items()}

    def overlap(self, name_a: str, name_b: str, run: int | None = None) -> float:
        """Seconds during which `name_a` and `name_b` both ran: for one run, or the median over
        the runs in which both ran."""
        runs = [run] if run is not None else sorted({r.run for r in self.records})
        per_run = []
        for k in runs:
            a, b = self.records_of(name_a, k), self.records_of(name_b, k)
            if a and b:
                per_run.append(sum(interval_overlap(x.start, x.end, y.start, y.end) for x in a for y in b))
        if not per_run:
            raise KeyError(f"no run of the profile has both {name_a!r} and {name_b!r}")
        return median(per_run)

    def overlap_fraction(self, name_a: str, name_b: str) -> float:
        """overlap / the shorter of the two operators' median durations (0 = serial, 1 = fully)."""
        shorter = min(median(self.durations(name_a)), median(self.durations(name_b)))
        return self.overlap(name_a, name_b) / shorter if shorter > 0 else 0.0

    def run_records(self, run: int) -> list[OpRecord]:
        return [r for r in self.records if r.run == run]

    def representative_run(self) -> int:
        """The run whose operator span is the median one (what the plot shows)."""
        spans = defaultdict(lambda: [float("inf"), float("-inf")])
        for r in self.records:
            s = spans[r.run]
            s[0], s[1] = min(s[0], r.start), max(s[1], r.end)
        if not spans:
            return 0
        order = sorted(spans, key=lambda k: spans[k][1] - spans[k][0])
        return order[len(order) // 2]

    def span(self, run: int | None = None) -> float:
        """Seconds from the first operator start to the last end of one run (the
        representative one unless `run` says otherwise): the width of its timeline."""
        recs = self.run_records(self.representative_run() if run is None else run)
        return max(r.end for r in recs) - min(r.start for r in recs) if recs else 0.0

    # -- outputs --------------------------------------------------------------------------
    def summary(self):
        from .summary import compute_summary
        return compute_summary(self)

    def to_chrome_trace(self) -> dict:
        from .trace import chrome_trace
        return chrome_trace(self)

    def save_trace(self, path) -> str:
        from .trace import save_trace
        return save_trace(self, path)

    def plot(self, path, run: int | None = None, span_s: float | None = None) -> str:
        """A per-stream timeline picture of one run (the representative one unless `run`, an
        index of prof.runs, says otherwise); `span_s` fixes the time axis, for side-by-side
        pictures of two profiles."""
        from .plot import plot_timeline
        return plot_timeline(self, path, run=run, span_s=span_s)

    def __str__(self) -> str:
        return str(self.summary())

    def __repr__(self) -> str:
        return (f"<Profile {self.graph_name!r} on {self.device}: {len(self.runs)} run(s), "
                f"{len(self.records)} op record(s), {self.num_streams} stream(s)>")
