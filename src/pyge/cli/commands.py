"""The work behind `pyge compile`, `run`, `streams`, `profile` and `demo`.

Each handler takes the parsed arguments, prints to standard output (text, or one JSON document
with --format json) and returns an exit status; errors are raised (PygeError) and turned into
one line on standard error by pyge.cli.main. Paths and counts were checked by the parser.
"""
from __future__ import annotations

import argparse
import json
import time
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import numpy as np

from .. import progress
from .args import UsageError
from .models import Loaded, load_graph, load_kernels, make_feeds, obtain_model, options_of, tf_flags
from .outputs import MANIFEST, input_files, save_outputs
from .table import array_row, human_bytes, key_values, ms, shape_str, table


def _facts(loaded: Loaded) -> dict[str, Any]:
    m = loaded.model
    facts = {"model": loaded.source, "device": str(m.device), "nodes": len(m.flat_plan.nodes),
             "streams": m.num_streams, "custom_streams": len(m.custom_streams),
             "events": m.num_event_pairs, "physical_events": m.num_physical_events,
             "peak_bytes": m.memory.peak_bytes, "no_reuse_bytes": m.memory.no_reuse_bytes,
             "compile_s": loaded.compile_s or None}
    if m.partitioned:       # a dynamic-shape model: its parts, root first
        facts["submodels"] = [{"name": p.name, "kind": p.kind, "streams": p.num_streams,
                               "first_stream": p.stream_offset} for p in m.submodels]
    return facts


def _facts_rows(f: dict[str, Any]) -> list[tuple[str, str]]:
    custom = f" ({f['custom_streams']} from custom passes)" if f["custom_streams"] else ""
    rows = [("model", f["model"]), ("device", f["device"]), ("nodes", str(f["nodes"])),
            ("streams", f"{f['streams']}{custom}"),
            ("events", f"{f['events']} Send/Recv pair(s) on {f['physical_events']} physical id(s)"),
            ("memory", f"peak {human_bytes(f['peak_bytes'])} (without reuse {human_bytes(f['no_reuse_bytes'])})")]
    if f.get("submodels"):
        rows.append(("parts", ", ".join(f"{p['name']} ({p['kind']})" for p in f["submodels"])))
    if f["compile_s"]:
        rows.append(("compile", ms(f["compile_s"])))
    return rows


def _print_json(doc: Any) -> None:
    print(json.dumps(doc, indent=2, default=str))


# -- pyge compile -----------------------------------------------------------------------------

def cmd_compile(args: argparse.Namespace) -> int:
    from ..compiler import compile_graph
    from ..modelfile import is_model_file
    if is_model_file(args.model):
        raise UsageError(f"{args.model} is already an offline model; compile its source model instead")
    opts = options_of(args)
    pb_inputs, pb_outputs = tf_flags(args)
    with progress.task(f"loading {args.model}"):
        graph = load_graph(args.model, pb_inputs, pb_outputs)
    load_kernels()
    t0 = time.perf_counter()
    with progress.task(f"compiling {graph.name}"):
        model = compile_graph(graph, device=args.device or "cpu", options=opts, graph_id=args.graph_id)
    dt = time.perf_counter() - t0
    out = Path(args.output)
    with progress.task(f"writing {out}"):
        model.save(out)
    facts = _facts(Loaded(model, args.model, graph, dt))
    if args.format == "json":
        _print_json({**facts, "output": str(out), "output_bytes": out.stat().st_size})
        return 0
    print(f"compiled {args.model} -> {out} ({human_bytes(out.stat().st_size)})")
    print(key_values(_facts_rows(facts)[1:], indent="  "))
    return 0


# -- pyge run ---------------------------------------------------------------------------------

def _timed_runs(model, feeds, runs: int, warmup: int) -> tuple[list[float], dict]:
    with progress.bar(warmup + runs, "running") as bar:
        for _ in range(warmup):
            model.run(feeds)
            bar.advance()
        times, outputs = [], {}
        for _ in range(runs):
            t0 = time.perf_counter()
            outputs = model.run(feeds)
            times.append(time.perf_counter() - t0)
            bar.advance()
    return times, outputs


def _timing_text(times: list[float], warmup: int) -> str:
    t = np.asarray(times)
    s = f"{len(t)} run(s) after {warmup} warm-up: "
    if len(t) == 1:
        return s + ms(t[0])
    return s + f"median {ms(float(np.median(t)))}, mean {ms(t.mean())}, min {ms(t.min())}, max {ms(t.max())}"


def _dtype(v) -> str:
    return str(getattr(v, "dtype", type(v).__name__)).replace("torch.", "")


def cmd_run(args: argparse.Namespace) -> int:
    loaded = obtain_model(args)
    model = loaded.model
    feeds, note = make_feeds(args, loaded)
    times, outputs = _timed_runs(model, feeds, args.runs, args.warmup)
    rows = [array_row(k, v) for k, v in outputs.items()]
    written, manifest = [], None
    if args.save_outputs:
        folder = Path(args.save_outputs)
        written, manifest = save_outputs(folder, outputs, input_files(args, [str(folder / MANIFEST)]))
    prof = _profile(model, feeds, args.runs, args.warmup, args.trace, args.timeline) \
        if args.trace or args.timeline else None
    if args.format == "json":
        t = np.asarray(times)
        _print_json({**_facts(loaded),
                     "inputs": [{"name": k, "dtype": _dtype(v), "shape": list(np.shape(v))} for k, v in feeds.items()],
                     "inputs_from": note,
                     "run": {"runs": len(t), "warmup": args.warmup, "median_s": float(np.median(t)),
                             "mean_s": float(t.mean()), "min_s": float(t.min()), "max_s": float(t.max())},
                     "outputs": [_output_json(k, v) for k, v in outputs.items()],
                     "profile": prof[0] if prof else None,
                     "files": {"outputs": written, "outputs_manifest": manifest, **(prof[1] if prof else {})}})
        return 0
    rows_facts = _facts_rows(_facts(loaded))
    rows_facts.append(("inputs", ", ".join(f"{k} {_dtype(v)}{shape_str(np.shape(v))}" for k, v in feeds.items())
                       + f" ({note})"))
    rows_facts.append(("run", _timing_text(times, args.warmup)))
    print(key_values(rows_facts))
    print()
    print(table(["output", "dtype", "shape", "min", "max", "mean", "values"], rows))
    for p in written:
        print(f"wrote {p}")
    if manifest:
        print(f"wrote {manifest} (output name -> file)")
    if prof:
        print()
        _print_profile(*prof)
    return 0


def _output_json(name: str, value) -> dict[str, Any]:
    a = np.asarray(value)
    stats: dict[str, Any] = {"min": None, "max": None, "mean": None}
    if a.size and a.dtype.kind in "fiub" and np.isfinite(a.astype(np.float64)).any():
        x = a.astype(np.float64).ravel()
        stats = {"min": float(np.nanmin(x)), "max": float(np.nanmax(x)), "mean": float(np.nanmean(x))}
    return {"name": name, "dtype": str(a.dtype), "shape": list(a.shape), **stats}


# -- pyge streams -----------------------------------------------------------------------------

def _parts(model) -> list:
    """What `pyge streams` shows, one entry per part: (part or None, an object with the
    part's plan and the device, as profiling.report reads it). A static model is one part."""
    if not model.partitioned:
        return [(None, model)]
    return [(p, SimpleNamespace(plan=p.plan, device=model.device)) for p in model.submodels]


def _part_title(part, model) -> str:
    last = part.stream_offset + part.num_streams - 1
    where = f"model streams {part.stream_offset}..{last}" if last > part.stream_offset \
        else f"model stream {part.stream_offset}"
    return f"part {part.name!r} ({part.kind}; its streams are {where})"


def cmd_streams(args: argparse.Namespace) -> int:
    from ..profiling.report import streams_json, streams_table
    loaded = obtain_model(args)
    model = loaded.model
    parts = _parts(model)
    if args.format == "json":
        doc = streams_json(model if not model.partitioned else SimpleNamespace(plan=model.flat_plan,
                                                                               device=model.device))
        if model.partitioned:
            doc["submodels"] = [{"name": p.name, "kind": p.kind, "stream_offset": p.stream_offset,
                                 **streams_json(view)} for p, view in parts]
        if args.plan:
            doc["plan"] = [line for _, view in parts for line in view.plan.format().splitlines()]
        _print_json(doc)
        return 0
    print(key_values(_facts_rows(_facts(loaded))))
    for part, view in parts:
        print()
        if part is not None:
            print(_part_title(part, model))
        print(streams_table(view))
        if args.plan:
            print()
            print(view.plan.format())
    return 0


# -- pyge profile (and pyge run --trace/--timeline) -------------------------------------------

def cmd_profile(args: argparse.Namespace) -> int:
    loaded = obtain_model(args)
    feeds, _ = make_feeds(args, loaded)
    summary, files = _profile(loaded.model, feeds, args.runs, args.warmup, args.trace, args.timeline)
    if args.format == "json":
        _print_json({**summary, "model": _facts(loaded), "files": files})
        return 0
    print(key_values(_facts_rows(_facts(loaded))))
    print()
    _print_profile(summary, files)
    return 0


def _profile(model, feeds, runs: int, warmup: int, trace: str | None, timeline: str | None):
    """Profile `runs` runs; write the trace and the timeline asked for.
    Returns (summary, {"trace": path, "timeline": path} for those written)."""
    with progress.task(f"profiling {runs} run(s)"):
        prof = model.profile(feeds, runs=runs, warmup=warmup)
    files = {}
    if trace:
        files["trace"] = str(prof.save_trace(trace))
    if timeline:
        files["timeline"] = str(prof.plot(timeline))
    return prof.summary(), files


def _print_profile(summary, files: dict[str, str]) -> None:
    print(summary)
    if "trace" in files:
        print(f"wrote trace {files['trace']} (open in ui.perfetto.dev or chrome://tracing)")
    if "timeline" in files:
        print(f"wrote timeline {files['timeline']}")


# -- pyge demo --------------------------------------------------------------------------------

def cmd_demo(args: argparse.Namespace) -> int:
    from ..demo import run_demo
    return run_demo(out=args.out, runs=args.runs)


__all__ = ["cmd_compile", "cmd_run", "cmd_streams", "cmd_profile", "cmd_demo"]
