"""The pass infrastructure: passes with contracts that check things, and instruments.

A `Pass` is a named function of the `CompileState` that returns a `PassResult` (did it change
anything). It declares `requires` and `ensures`: `Condition`s, named predicates on the state
(onnx-ir's pass contracts). `run_pipeline` checks every precondition before a pass and every
postcondition after it, and raises `PreconditionError` / `PostconditionError` (PassError
subclasses) naming the pass, the condition and what is wrong. Conditions are cheap (a walk
over the graph or the plan). A precondition that an earlier pass of the same state ensured is
taken as established rather than walked again: that it still holds is what the
InvariantInstrument checks.

Instruments wrap passes: timing, dumps and, off by default, `InvariantInstrument`, which after
every pass re-checks every condition established so far (each pass's `ensures` stays true for
the rest of the pipeline) plus the expensive invariants registered with `register_invariant`
(the full plan verifier). The test suite turns it on (PYGE_CHECK_INVARIANTS=1, tests/conftest.py).
Passes never dump or time themselves (TVM's PassInstrument).

A pipeline is a list of passes and `StagePoint`s. A stage point runs no code of its own: it
calls `on_stage(name, state)` when the caller gives one (a hook for tools). GE's custom graph
passes run as passes of their own, one per stage (passes/custom/graph_passes.py). The lists
themselves, and so the order, are stated once, in pyge/compiler.py.
"""
from __future__ import annotations

import logging
import os
import time
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Callable, Sequence, Union

from ..errors import InvariantError, PassError, PostconditionError, PreconditionError
from ..ir.graph import Graph
from ..options import Options
from ..plan.plan import Plan

if TYPE_CHECKING:
    from ..dumps import Dumper

log = logging.getLogger(__name__)

INVARIANTS_ENV = "PYGE_CHECK_INVARIANTS"


@dataclass
class CompileState:
    """What the passes read and write. Graph passes work on `graph` (the compiler's copy of
    `source`, which nobody changes); model passes add the streams, then `plan`."""
    graph: Graph
    options: Options
    device: str = "cpu"
    graph_id: int = 0
    dumper: Dumper | None = None
    source: Graph | None = None                  # the caller's graph, left untouched
    plan: Plan | None = None
    num_streams: int = 0
    max_stream_id: int = -1                      # largest stream id drawn so far (holes included)
    custom_ids: set[int] = field(default_factory=set)         # ids custom passes drew
    custom_streams: list[int] = field(default_factory=list)   # the same, after renumbering
    partition: Any = None                        # passes/partition.Partition of a dynamic-shape model
    timings: list[tuple[str, float]] = field(default_factory=list)
    results: list[tuple[str, PassResult]] = field(default_factory=list)
    done: list[Pass] = field(default_factory=list)            # passes run so far, in order


@dataclass(frozen=True)
class Condition:
    """A named fact about the state. `check(state)` returns None when it holds, else one line
    saying what does not (the node, the stream, the event)."""
    name: str
    check: Callable[[CompileState], str | None]

    def __call__(self, st: CompileState) -> str | None:
        return self.check(st)


@dataclass(frozen=True)
class PassResult:
    """What a pass did: whether it changed the graph or the plan, and a short note for logs."""
    modified: bool
    note: str = ""


def changed(count: int, what: str) -> PassResult:
    """The result of a pass that made `count` changes of kind `what` ("folded", ...)."""
    return PassResult(count > 0, f"{count} {what}")


UNCHANGED = PassResult(False)


@dataclass(frozen=True)
class Pass:
    name: str
    run: Callable[[CompileState], PassResult]
    requires: tuple[Condition, ...] = ()
    ensures: tuple[Condition, ...] = ()
    dump_stage: str | None = None   # dump the graph after this pass at DUMP_GRAPH_LEVEL=1


@dataclass(frozen=True)
class StagePoint:
    """A named point in a pipeline where `run_pipeline` calls its caller's `on_stage` hook."""
    name: str


Step = Union[Pass, StagePoint]


class Instrument:
    """Called around every pass; subclasses override what they need."""

    def before(self, p: Pass, st: CompileState) -> None:
        pass

    def after(self, p: Pass, st: CompileState) -> None:
        pass


class TimingInstrument(Instrument):
    def before(self, p: Pass, st: CompileState) -> None:
        self._t = time.perf_counter()

    def after(self, p: Pass, st: CompileState) -> None:
        dt = time.perf_counter() - self._t
        st.timings.append((p.name, dt))
        note = st.results[-1][1].note if st.results else ""
        log.debug("pass %s: %.3f ms %s", p.name, dt * 1e3, note)


class DumpInstrument(Instrument):
    def after(self, p: Pass, st: CompileState) -> None:
        if st.dumper is not None and p.dump_stage:
            st.dumper.stage(p.dump_stage, st.graph, level=1)


# pass name -> invariants that hold from that pass on (too costly to check outside tests)
_INVARIANTS: dict[str, list[Condition]] = {}


def register_invariant(after: str, condition: Condition) -> None:
    """Have the InvariantInstrument check `condition` after pass `after` and every later one."""
    _INVARIANTS.setdefault(after, []).append(condition)


class InvariantInstrument(Instrument):
    """After every pass: every `ensures` of the passes before it, and every registered
    invariant of those passes and of itself, must still hold (its own `ensures` are its
    postconditions, which run_pipeline checks next). Raises InvariantError naming the pass
    that broke the fact and the pass that had established it."""

    def after(self, p: Pass, st: CompileState) -> None:
        for q in st.done:
            own = () if q is p else q.ensures
            for c in (*own, *_INVARIANTS.get(q.name, ())):
                msg = c(st)
                if msg is not None:
                    raise InvariantError(f"after pass {p.name!r}: invariant {c.name} (from pass "
                                         f"{q.name!r}) no longer holds: {msg}")


def invariants_on(env=os.environ) -> bool:
    return env.get(INVARIANTS_ENV, "") not in ("", "0", "false")


def default_instruments() -> list[Instrument]:
    out: list[Instrument] = [TimingInstrument(), DumpInstrument()]
    if invariants_on():
        out.append(InvariantInstrument())
    return out


def run_pipeline(steps: Sequence[Step], st: CompileState, instruments: list | None = None,
                 on_stage: Callable[[str, CompileState], None] | None = None) -> CompileState:
    """Run `steps` in order on `st`, checking each pass's contract (see the module doc)."""
    instruments = default_instruments() if instruments is None else instruments
    for p in steps:
        if isinstance(p, StagePoint):
            if on_stage is not None:
                on_stage(p.name, st)
            continue
        for c in p.requires:
            if any(c in q.ensures for q in st.done):
                continue                    # established earlier; InvariantInstrument rechecks
            msg = c(st)
            if msg is not None:
                raise PreconditionError(f"pass {p.name!r} requires {c.name}: {msg}")
        for ins in instruments:
            ins.before(p, st)
        result = p.run(st)
        if not isinstance(result, PassResult):
            raise PassError(f"pass {p.name!r} returned {type(result).__name__}, not a PassResult")
        st.results.append((p.name, result))
        st.done.append(p)
        for ins in instruments:             # before the checks: timings are the pass's own
            ins.after(p, st)
        for c in p.ensures:
            msg = c(st)
            if msg is not None:
                raise PostconditionError(f"pass {p.name!r} should ensure {c.name}: {msg}")
    return st
