"""`pyge demo`: the reference custom stream pass, end to end, with no arguments and no files.

The reference (GE's custom stream pass documentation): two operators with no dependency
between them land on the same logical stream under the built-in allocation, so they run one
after the other. A ten-line pass, SplitAbs, gives `Abs_1` a stream of its own; the built
graph then has a Send/Recv pair around `Abs_1` and the profile shows the two overlapping.

The demo compiles the graph twice (graph 1: built-in allocation only; graph 2: with SplitAbs),
dumps both compiles as GE would with DUMP_GE_GRAPH=2, runs both and checks they agree, times
them in interleaved rounds (a ratio taken within each round, so that the machine's load weighs
on both alike: timed one after the other, on a busy machine the verdict could flip), profiles
both and writes a trace and a timeline picture of each, the two pictures on one time axis.
"""
from __future__ import annotations

import contextlib
import os
import sys
import tempfile
from pathlib import Path
from typing import Iterator, TextIO

import numpy as np

from . import progress
from .cli.table import ms, table
from .errors import OptionError
from .profiling.compare import Spread, interleaved, speedups

PASS_NAME = "SplitAbs"      # the name the reference registers its pass under
MOVED = "Abs_1"
# GE's built-in chain exactly, whatever pyge's own default policy for the device may be: the
# point of the demo is what GE's rules do with the reference graph.
GE_RULES = {"pyge.streamPolicy": "ge"}


@contextlib.contextmanager
def _environ(**values: str) -> Iterator[None]:
    """Set environment variables for the block (the dump settings are read at compile time)."""
    old = {k: os.environ.get(k) for k in values}
    os.environ.update(values)
    try:
        yield
    finally:
        for k, v in old.items():
            if v is None:
                os.environ.pop(k, None)
            else:
                os.environ[k] = v


def _compile(graph, graph_id: int, dumps: Path):
    from .compiler import compile_graph
    before = set(dumps.iterdir())
    with _environ(DUMP_GE_GRAPH="2", DUMP_GRAPH_PATH=str(dumps), DUMP_GRAPH_LEVEL="2"):
        model = compile_graph(graph, device="cpu", options=GE_RULES, graph_id=graph_id)
    return model, sorted(set(dumps.iterdir()) - before)


def compile_both(dumps: Path):
    """(model without the pass, its dumps), (model with SplitAbs, its dumps); the registry of
    custom passes is as it was afterwards, and plugins play no part in either compile."""
    from .examples import reference_graph, split_abs
    from .passes.custom import clear_custom_passes, custom_passes_scope, register_custom_pass
    from .passes.custom.plugins import ensure_plugins_loaded
    ensure_plugins_loaded()            # load them now, so the scope below does not swallow them
    graph = reference_graph()
    with custom_passes_scope():
        clear_custom_passes()
        before = _compile(graph, 1, dumps)
        register_custom_pass(PASS_NAME).custom_allocate_stream_pass_fn(split_abs)
        after = _compile(graph, 2, dumps)
    return graph, before, after


def partner_of(model, name: str) -> str | None:
    """The operator that shares `name`'s stream but has no dependency with it either way."""
    plan = model.plan
    idx = plan.node_index()[name]
    preds = [{plan.values[v].producer for v in n.inputs if v >= 0} | set(n.control_preds) for n in plan.nodes]
    anc, stack = set(), [idx]
    while stack:
        for p in preds[stack.pop()]:
            if p >= 0 and p not in anc:
                anc.add(p)
                stack.append(p)
    desc = {i for i in range(len(plan.nodes)) if _reaches(preds, i, idx)}
    same = [n for n in plan.nodes if n.stream == plan.nodes[idx].stream and n.index != idx
            and n.index not in anc and n.index not in desc and n.engine != "skip"]
    return same[0].name if same else None


def _reaches(preds: list[set[int]], src: int, dst: int) -> bool:
    """Whether src depends (transitively) on dst."""
    seen, stack = set(), [src]
    while stack:
        for p in preds[stack.pop()]:
            if p == dst:
                return True
            if p >= 0 and p not in seen:
                seen.add(p)
                stack.append(p)
    return False


def _streams_lines(model, out: TextIO) -> None:
    for s, names in enumerate(model.streams):
        print(f"    stream {s}: {', '.join(names)}", file=out)
    if model.events:
        for e in model.events:
            print(f"    event e{e.event_id}: Send after {e.src} on stream {e.src_stream} -> "
                  f"Recv before {e.dst} on stream {e.dst_stream} ({e.reason})", file=out)
    else:
        print("    events: none (one stream needs no Send/Recv)", file=out)


def _dump_lines(files: list[Path], out: TextIO) -> None:
    for f in files:
        print(f"    {f.name}", file=out)


def run_demo(out: str | None = None, runs: int = 20, stream: TextIO | None = None) -> int:
    """Run the demo; prints to `stream` (stdout) and returns 0."""
    from .examples import reference_inputs
    if isinstance(runs, bool) or not isinstance(runs, int) or runs < 1:
        raise OptionError(f"demo: runs must be an integer >= 1, got {runs!r}")
    w = stream or sys.stdout
    folder = Path(out) if out else Path(tempfile.mkdtemp(prefix="pyge-demo-"))
    dumps = folder / "dumps"
    dumps.mkdir(parents=True, exist_ok=True)
    print("pyge demo: a custom stream pass that moves Abs_1 to a stream of its own", file=w)
    print(f"files go to {folder}\n", file=w)
    with progress.task("compiling the reference graph twice"):
        graph, (m1, d1), (m2, d2) = compile_both(dumps)
    other = partner_of(m1, MOVED)
    print(f"1. built-in stream allocation (graph 1): {MOVED} and {other or 'its neighbour'} have no "
          f"dependency, yet share stream {m1.stream_of(MOVED)}", file=w)
    _streams_lines(m1, w)
    _dump_lines(d1, w)
    print(f"\n2. with custom stream pass {PASS_NAME} (graph 2): {MOVED} moves from stream "
          f"{m1.stream_of(MOVED)} to stream {m2.stream_of(MOVED)}; Send/Recv events keep the order", file=w)
    _streams_lines(m2, w)
    _dump_lines(d2, w)
    print(f"    (open the .pbtxt files in Netron: each node's stream is its stream_id attribute;\n"
          f"     compare ..._BeforeAssignLogicStream{PASS_NAME} with ..._AfterAssignLogicStream{PASS_NAME},\n"
          f"     and see the Send/Recv nodes in ..._PreRunAfterBuild)", file=w)
    feeds = reference_inputs()
    r1, r2 = m1.run(feeds), m2.run(feeds)
    diff = max(float(np.max(np.abs(np.asarray(r1[k], np.float64) - np.asarray(r2[k], np.float64))))
               for k in r1)
    print(f"\n3. both versions run: outputs {'identical' if diff == 0 else f'differ by at most {diff:.3g}'}", file=w)
    _comparison(m1, m2, feeds, runs, w)
    _profiles(m1, m2, feeds, runs, other, folder, w)
    return 0


def compare_runs(m1, m2, feeds, rounds: int) -> Spread:
    """The speedup of `m2` over `m1` (m1's time / m2's time per round, > 1: m2 is faster),
    measured in interleaved rounds (profiling/compare.py), so that the load of the machine
    weighs on both alike."""
    runners = {"before": lambda: m1.run(feeds), "after": lambda: m2.run(feeds)}
    for fn in runners.values():               # warm up: worker threads, allocator
        fn()
        fn()
    with progress.bar(rounds, f"timing both versions, {rounds} interleaved round(s)") as bar:
        times = interleaved(runners, rounds, on_round=lambda k: bar.advance())
    return Spread.of(speedups(times, "before")["after"])


def _comparison(m1, m2, feeds, runs: int, w: TextIO) -> None:
    sp = compare_runs(m1, m2, feeds, runs)
    if sp.low > 1.0:
        verdict = f"with {PASS_NAME} it is faster, beyond the spread of the rounds"
    elif sp.high < 1.0:
        verdict = f"with {PASS_NAME} it is slower, beyond the spread of the rounds"
    else:
        verdict = "no difference beyond the spread of the rounds"
    print(f"\n4. both versions timed run for run: {runs} interleaved round(s), each running both once", file=w)
    print(f"    speedup of graph 2 over graph 1: {sp.median:.2f}x (middle half of the rounds "
          f"{sp.low:.2f}x-{sp.high:.2f}x)", file=w)
    print("    (speedup = graph 1's time / graph 2's time in the same round; > 1: graph 2 is faster)", file=w)
    print(f"    verdict: {verdict}", file=w)
    print("    (concurrency does not always pay: operators that compete for the same cores may not "
          "speed up; the measurement is the judge)", file=w)


def _profiles(m1, m2, feeds, runs: int, other: str | None, folder: Path, w: TextIO) -> None:
    rows, profs = [], []
    with progress.bar(2, f"profiling {runs} run(s) of each version") as bar:
        for label, m in (("before", m1), ("after", m2)):
            prof = m.profile(feeds, runs=runs)
            rows.append(_profile_row(label, m, prof, other))
            profs.append((label, prof))
            prof.save_trace(folder / f"trace_{label}.json")
            bar.advance()
    print(f"\n5. profile, median of {runs} run(s) each:", file=w)
    print(table(["version", "streams", "events", "wall", "sum of op times", "concurrency",
                 f"{MOVED} || {other or '?'}"], rows, indent="    "), file=w)
    span = max(p.span() for _, p in profs)     # one time axis for both pictures
    pictures = [p.plot(folder / f"timeline_{label}.png", span_s=span) for label, p in profs]
    print("\n6. timelines (one row per stream, both on the same time axis) and Chrome/Perfetto traces:", file=w)
    for p in pictures:
        print(f"    {p}", file=w)
    for label, _ in profs:
        print(f"    {folder / f'trace_{label}.json'}", file=w)


def _profile_row(label: str, model, prof, other: str | None) -> list[str]:
    s = prof.summary()
    overlap = "n/a"
    if other is not None:
        try:
            overlap = f"{ms(prof.overlap(MOVED, other))} ({100 * prof.overlap_fraction(MOVED, other):.0f}%)"
        except KeyError:
            pass
    return [label, str(model.num_streams), str(len(model.events)), ms(s["wall_s"]), ms(s["serial_s"]),
            f"{s['concurrency']:.2f}x", overlap]


__all__ = ["run_demo", "compile_both", "compare_runs", "partner_of", "PASS_NAME", "MOVED"]
