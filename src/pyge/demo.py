"""`pyge demo`: the reference custom stream pass, end to end, with no arguments and no files.

The reference (GE's custom stream pass documentation): two operators with no dependency
between them land on the same logical stream under the built-in allocation, so they run one
after the other. A ten-line pass, SplitAbs, gives `Abs_1` a stream of its own; the built
graph then has a Send/Recv pair around `Abs_1` and the profile shows the two overlapping.

The demo compiles the graph twice (graph 1: built-in allocation only; graph 2: with SplitAbs),
dumps both compiles as GE would with DUMP_GE_GRAPH=2, runs both, checks they agree, profiles
both and writes a trace and a timeline picture of each.
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
from .cli_format import ms, table

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
    print(f"    (open the .pbtxt files in Netron: each node's stream is its _stream_id attribute;\n"
          f"     compare ..._BeforeAssignLogicStream{PASS_NAME} with ..._AfterAssignLogicStream{PASS_NAME},\n"
          f"     and see the Send/Recv nodes in ..._PreRunAfterBuild)", file=w)
    feeds = reference_inputs()
    r1, r2 = m1.run(feeds), m2.run(feeds)
    diff = max(float(np.max(np.abs(np.asarray(r1[k], np.float64) - np.asarray(r2[k], np.float64))))
               for k in r1)
    print(f"\n3. both versions run: outputs {'identical' if diff == 0 else f'differ by at most {diff:.3g}'}", file=w)
    rows, pictures = [], []
    with progress.bar(2, f"profiling {runs} runs of each version") as bar:
        for label, m in (("before", m1), ("after", m2)):
            prof = m.profile(feeds, runs=runs)
            rows.append(_profile_row(label, m, prof, other))
            pictures.append(prof.plot(folder / f"timeline_{label}.png"))
            prof.save_trace(folder / f"trace_{label}.json")
            bar.advance()
    print(f"\n4. profile, median of {runs} runs each:", file=w)
    print(table(["version", "streams", "events", "wall", "sum of op times", "concurrency",
                 f"{MOVED} || {other or '?'}"], rows, indent="    "), file=w)
    print("    (concurrency does not always pay: operators that compete for the same cores may not "
          "speed up; the profile is the judge)", file=w)
    print("\n5. timelines (one row per stream) and Chrome/Perfetto traces:", file=w)
    for p in pictures:
        print(f"    {p}", file=w)
    for label in ("before", "after"):
        print(f"    {folder / f'trace_{label}.json'}", file=w)
    return 0


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


__all__ = ["run_demo", "compile_both", "partner_of", "PASS_NAME", "MOVED"]
