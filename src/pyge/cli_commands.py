"""The work behind `pyge compile`, `pyge run`, `pyge streams` and `pyge profile`.

Each command takes the parsed arguments, prints to standard output and returns an exit status;
errors are raised (PygeError) and turned into one line on standard error by pyge.cli.main.
"""
from __future__ import annotations

import argparse
import json
import time
from pathlib import Path

import numpy as np

from . import progress
from .cli_format import array_row, human_bytes, key_values, ms, shape_str, summary_text, table
from .cli_models import (Loaded, UsageError, load_graph, load_kernels, make_feeds, obtain_model, options_of,
                         safe_filename)


def _model_facts(loaded: Loaded) -> list[tuple[str, str]]:
    m = loaded.model
    mem = m.memory
    facts = [("model", loaded.source),
             ("device", m.device),
             ("nodes", str(len(m.plan.nodes))),
             ("streams", f"{m.num_streams}" + (f" ({len(m.custom_streams)} from custom passes)"
                                                if m.custom_streams else "")),
             ("events", f"{len(m.events)} Send/Recv pair(s) on {m.num_events} physical id(s)"),
             ("memory", f"peak {human_bytes(mem.peak_bytes)} (without reuse {human_bytes(mem.no_reuse_bytes)})")]
    if loaded.compile_s:
        facts.append(("compile", ms(loaded.compile_s)))
    return facts


# ---------------------------------------------------------------------------------------
# pyge compile


def cmd_compile(args: argparse.Namespace) -> int:
    from .compiler import compile_graph
    from .modelfile import is_model_file
    if is_model_file(args.model):
        raise UsageError(f"{args.model} is already an offline model; compile its source model instead")
    with progress.task(f"loading {args.model}"):
        graph = load_graph(args.model, args.pb_inputs, args.pb_outputs)
    load_kernels()
    t0 = time.perf_counter()
    with progress.task(f"compiling {graph.name}"):
        model = compile_graph(graph, device=args.device or "cpu", options=options_of(args),
                              graph_id=args.graph_id)
    dt = time.perf_counter() - t0
    out = Path(args.output)
    with progress.task(f"writing {out}"):
        model.save(out)
    loaded = Loaded(model, args.model, graph, dt)
    print(f"compiled {args.model} -> {out} ({human_bytes(out.stat().st_size)})")
    print(key_values(_model_facts(loaded)[1:], indent="  "))
    return 0


# ---------------------------------------------------------------------------------------
# pyge run


def cmd_run(args: argparse.Namespace) -> int:
    if args.runs < 1 or args.warmup < 0:
        raise UsageError("--runs must be at least 1 and --warmup at least 0")
    loaded = obtain_model(args)
    model = loaded.model
    feeds, note = make_feeds(args, loaded)
    with progress.bar(args.warmup + args.runs, "running") as bar:
        for _ in range(args.warmup):
            model.run(feeds)
            bar.advance()
        times, outputs = [], {}
        for _ in range(args.runs):
            t0 = time.perf_counter()
            outputs = model.run(feeds)
            times.append(time.perf_counter() - t0)
            bar.advance()
    facts = _model_facts(loaded)
    facts.append(("inputs", ", ".join(f"{k} {_dtype(v)}{shape_str(np.shape(v))}" for k, v in feeds.items())
                  + f" ({note})"))
    facts.append(("run", _timing(times, args.warmup)))
    print(key_values(facts))
    print()
    print(table(["output", "dtype", "shape", "min", "max", "mean", "values"],
                [array_row(k, v) for k, v in outputs.items()]))
    if args.save_outputs:
        _save_outputs(Path(args.save_outputs), outputs)
    if args.profile or args.timeline:
        _profile(model, feeds, max(args.runs, 1), args.profile, args.timeline, as_json=False)
    return 0


def _dtype(v) -> str:
    return str(getattr(v, "dtype", type(v).__name__)).replace("torch.", "")


def _timing(times: list[float], warmup: int) -> str:
    t = np.asarray(times)
    s = f"{len(t)} run(s) after {warmup} warm-up: "
    if len(t) == 1:
        return s + ms(t[0])
    s += f"median {ms(float(np.median(t)))}, mean {ms(t.mean())}, min {ms(t.min())}, max {ms(t.max())}"
    return s


def _save_outputs(folder: Path, outputs: dict) -> None:
    folder.mkdir(parents=True, exist_ok=True)
    for name, arr in outputs.items():
        p = folder / f"{safe_filename(name)}.npy"
        np.save(p, np.asarray(arr), allow_pickle=False)
        print(f"wrote {p}")


# ---------------------------------------------------------------------------------------
# pyge streams


def cmd_streams(args: argparse.Namespace) -> int:
    from .profiling.report import streams_json, streams_table
    loaded = obtain_model(args)
    if args.json or getattr(args, "format", "table") == "json":
        print(json.dumps(streams_json(loaded.model), indent=2))
        return 0
    print(key_values(_model_facts(loaded)))
    print()
    print(streams_table(loaded.model))
    if args.plan:
        print()
        print(loaded.model.plan.format())
    return 0


# ---------------------------------------------------------------------------------------
# pyge profile (and pyge run --profile/--timeline)


def cmd_profile(args: argparse.Namespace) -> int:
    if args.runs < 1:
        raise UsageError("--runs must be at least 1")
    loaded = obtain_model(args)
    feeds, _ = make_feeds(args, loaded)
    if not args.json:
        print(key_values(_model_facts(loaded)))
        print()
    _profile(loaded.model, feeds, args.runs, args.trace, args.timeline, as_json=args.json)
    return 0


def _profile(model, feeds, runs: int, trace: str | None, timeline: str | None, as_json: bool) -> None:
    with progress.task(f"profiling {runs} run(s)"):
        prof = model.profile(feeds, runs=runs)
    summary = prof.summary()
    if as_json:
        print(json.dumps(summary if not isinstance(summary, str) else {"summary": summary}, indent=2, default=str))
    else:
        print(summary_text(summary))
    if trace:
        prof.save_trace(trace)
        _say(as_json, f"wrote trace {trace} (open in chrome://tracing or ui.perfetto.dev)")
    if timeline:
        prof.plot(timeline)
        _say(as_json, f"wrote timeline {timeline}")


def _say(quiet: bool, text: str) -> None:
    if not quiet:
        print(text)


__all__ = ["cmd_compile", "cmd_run", "cmd_streams", "cmd_profile"]
