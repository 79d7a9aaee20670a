"""An explicit, numbered sequence of named passes, with instruments around them.

Each pass declares what it requires and what it ensures (names of facts about the compile
state); the manager checks `requires` before running a pass and records `ensures` after.
Instruments (timing, dumps, verify-after-each) wrap passes; passes never dump or time
themselves (TVM's PassInstrument).
"""
from __future__ import annotations

import logging
import time
from dataclasses import dataclass, field
from typing import Any, Callable

from ..errors import PassError

log = logging.getLogger(__name__)


@dataclass
class CompileState:
    graph: Any
    options: Any
    device: str
    graph_id: int = 0
    plan: Any = None
    num_streams: int = 0
    max_stream_id: int = -1          # largest stream id drawn so far (holes included)
    custom_streams: list[int] = field(default_factory=list)
    custom_ids: set[int] = field(default_factory=set)
    facts: set[str] = field(default_factory=set)
    timings: list[tuple[str, float]] = field(default_factory=list)
    dumper: Any = None


@dataclass
class Pass:
    name: str
    fn: Callable[[CompileState], Any]
    requires: tuple[str, ...] = ()
    ensures: tuple[str, ...] = ()
    dump_stage: str | None = None   # dump the graph after this pass at DUMP_GRAPH_LEVEL=1


class TimingInstrument:
    def before(self, p: Pass, st: CompileState) -> None:
        self._t = time.perf_counter()

    def after(self, p: Pass, st: CompileState) -> None:
        dt = time.perf_counter() - self._t
        st.timings.append((p.name, dt))
        log.debug("pass %s: %.3f ms", p.name, dt * 1e3)


class DumpInstrument:
    def before(self, p: Pass, st: CompileState) -> None:
        pass

    def after(self, p: Pass, st: CompileState) -> None:
        if st.dumper is not None and p.dump_stage:
            st.dumper.stage(p.dump_stage, st.graph, level=1)


def run_pipeline(passes: list[Pass], st: CompileState, instruments: list | None = None) -> CompileState:
    instruments = instruments if instruments is not None else [TimingInstrument(), DumpInstrument()]
    for i, p in enumerate(passes):
        missing = [r for r in p.requires if r not in st.facts]
        if missing:
            raise PassError(f"pass #{i} {p.name!r} requires {', '.join(missing)}, not established by earlier passes")
        for ins in instruments:
            ins.before(p, st)
        p.fn(st)
        for ins in instruments:
            ins.after(p, st)
        st.facts.update(p.ensures)
    return st
