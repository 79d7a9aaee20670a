"""What a profile holds: one record per operator run and per Send/Recv pair, plain data.

Times are seconds from the profile's time zero (the start of its first measured run).
"""
from __future__ import annotations

from dataclasses import dataclass


@dataclass(slots=True)
class OpRecord:
    node: int          # plan node index (-1 for a kernel that could not be attributed)
    name: str          # node name (kernel name for unattributed kernels)
    op_type: str
    stream: int        # logical stream id
    start: float
    end: float
    run: int

    @property
    def duration(self) -> float:
        return self.end - self.start


@dataclass(slots=True)
class EventRecord:
    """One Send/Recv pair in one run: `send` on src_stream, `recv` (wait done) on dst_stream."""
    event: int         # logical index into plan.events
    event_id: int      # physical id
    src: str
    dst: str
    src_stream: int
    dst_stream: int
    send: float
    recv: float
    run: int


@dataclass(slots=True)
class RunRecord:
    """One measured call of the executor's run(), host side."""
    run: int
    start: float
    end: float

    @property
    def duration(self) -> float:
        return self.end - self.start


def interval_overlap(a_start: float, a_end: float, b_start: float, b_end: float) -> float:
    return max(0.0, min(a_end, b_end) - max(a_start, b_start))


def median(xs: list[float]) -> float:
    if not xs:
        return 0.0
    s = sorted(xs)
    m = len(s) // 2
    return s[m] if len(s) % 2 else 0.5 * (s[m - 1] + s[m])


def derive_events(plan, records: list[OpRecord], hooked: dict | None = None) -> list[EventRecord]:
    """Send/Recv times per run: from the executor's record/wait hooks where it called them,
    else the producer's end (Send) and the consumer's start (Recv)."""
    hooked = hooked or {}
    by_run_node: dict[tuple[int, int], OpRecord] = {(r.run, r.node): r for r in records if r.node >= 0}
    runs = sorted({r.run for r in records})
    out = []
    for run in runs:
        for e in plan.events:
            src = by_run_node.get((run, e.src_node))
            dst = by_run_node.get((run, e.dst_node))
            if src is None or dst is None:
                continue
            send = hooked.get(("record", run, e.index), src.end)
            recv = hooked.get(("wait", run, e.index), dst.start)
            out.append(EventRecord(e.index, e.event_id, e.src, e.dst, e.src_stream, e.dst_stream,
                                   send, recv, run))
    return out
