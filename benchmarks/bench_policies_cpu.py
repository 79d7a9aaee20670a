"""CPU: pyge's stream policies against single stream and onnxruntime, side by side.

For each light model of the onnx package (`<onnx>/backend/test/data/light/`), in one
process, interleaved round by round in a fresh random order each round (machine noise hits
all alike; onnxruntime's threads are told not to spin, which would slow the next one):

    ort_seq, ort_par          onnxruntime, ExecutionMode ORT_SEQUENTIAL / ORT_PARALLEL
    single                    pyge, ge.enableSingleStream=true
    default                   pyge.compile with no option (whatever the default is)
    critical_path:K, min_streams:K, list_schedule:K   pyge policies on static costs
    tuned                     `pyge tune` (measured costs, its own budget) -> policy file

Reported per model: median latency (ms) and the median over rounds of each configuration's
time divided by single stream's in the same round (< 1: faster than single stream).
Writes a JSON file and a PNG bar plot of those ratios; records the machine's load average,
since on a shared machine it moves the numbers more than anything else.

    python benchmarks/bench_policies_cpu.py                          # all light models
    python benchmarks/bench_policies_cpu.py --models inception_v1 --rounds 20 --no-tune
    python benchmarks/bench_policies_cpu.py --out results/cpu      # cpu.json, cpu.png, cpu.txt
"""
from __future__ import annotations

import argparse
import json
import os
import platform
import random
import statistics
import sys
import tempfile
import time
from pathlib import Path

import numpy as np
import onnx
import torch

import pyge
from pyge.tuning import random_feeds, tune

LIGHT = Path(os.path.dirname(onnx.__file__)) / "backend" / "test" / "data" / "light"
MODELS = sorted(p.stem.replace("light_", "") for p in LIGHT.glob("light_*.onnx"))
POLICIES = ("critical_path", "min_streams", "list_schedule")


def _ort(path: Path, parallel: bool):
    import onnxruntime as ort
    so = ort.SessionOptions()
    so.execution_mode = ort.ExecutionMode.ORT_PARALLEL if parallel else ort.ExecutionMode.ORT_SEQUENTIAL
    # ORT's pool threads spin after a run by default, taking the cores from whatever runs
    # next in the same process; side by side that would slow the next configuration down.
    so.add_session_config_entry("session.intra_op.allow_spinning", "0")
    so.add_session_config_entry("session.inter_op.allow_spinning", "0")
    sess = ort.InferenceSession(str(path), so, providers=["CPUExecutionProvider"])
    return lambda feeds: sess.run(None, feeds)


def _pyge(graph, options: dict):
    m = pyge.compile(graph, device="cpu", options=options)
    return m.run, m


def runners_for(name: str, k: int, tune_budget: float, tmp: Path) -> tuple[dict, dict, dict]:
    path = LIGHT / f"light_{name}.onnx"
    graph = pyge.load_onnx(path)
    feeds = random_feeds(graph)
    runners, info = {}, {}
    runners["ort_seq"] = _ort(path, False)
    runners["ort_par"] = _ort(path, True)
    configs = {"single": {"ge.enableSingleStream": "true"}, "default": {}}
    for p in POLICIES:
        configs[f"{p}:{k}"] = {"pyge.streamPolicy": p, "pyge.maxStreams": str(k)}
    if tune_budget > 0:
        t0 = time.perf_counter()
        res = tune(graph, "cpu", feeds, budget_s=tune_budget)
        policy = tmp / f"{name}.policy.json"
        res.write(policy)
        configs["tuned"] = {"pyge.policyFile": str(policy)}
        info["tuned_choice"] = res.best.name
        info["tune_s"] = round(time.perf_counter() - t0, 1)
    for label, opts in configs.items():
        runners[label], m = _pyge(graph, opts)
        info[f"streams_{label}"] = m.num_streams
    return runners, feeds, info


def bench_model(name: str, rounds: int, k: int, tune_budget: float, tmp: Path) -> dict:
    runners, feeds, info = runners_for(name, k, tune_budget, tmp)
    for fn in runners.values():                 # warm up: threads, allocator, primitives
        fn(feeds)
        fn(feeds)
    labels = list(runners)
    times: dict[str, list[float]] = {lb: [] for lb in labels}
    rng = random.Random(0)
    for _ in range(rounds):
        # A fresh order every round: no configuration always runs right after another one
        # whose threads may still be spinning down.
        for lb in rng.sample(labels, len(labels)):
            t0 = time.perf_counter()
            runners[lb](feeds)
            times[lb].append(time.perf_counter() - t0)
    row = {"model": name, **info, "ms": {}, "vs_single": {}, "vs_ort_seq": {}}
    for lb, ts in times.items():
        row["ms"][lb] = round(statistics.median(ts) * 1e3, 3)
        row["vs_single"][lb] = round(statistics.median(t / s for t, s in zip(ts, times["single"])), 3)
        row["vs_ort_seq"][lb] = round(statistics.median(t / s for t, s in zip(ts, times["ort_seq"])), 3)
    return row


def format_table(rows: list[dict], meta: dict) -> str:
    labels = list(rows[0]["ms"])
    out = [f"CPU, {meta['cores']} cores, torch {meta['torch']} ({meta['threads']} threads), "
           f"load average {meta['load_before']} -> {meta['load_after']}; {meta['rounds']} interleaved rounds",
           "median time / single-stream time in the same round (< 1 is faster); single-stream ms last"]
    out.append(f"{'model':<14}" + "".join(f"{lb:>17}" for lb in labels) + f"{'single ms':>11}")
    for r in rows:
        out.append(f"{r['model']:<14}" + "".join(f"{r['vs_single'][lb]:>17.3f}" for lb in labels)
                   + f"{r['ms']['single']:>11.2f}")
    geo = {lb: float(np.exp(np.mean([np.log(r["vs_single"][lb]) for r in rows]))) for lb in labels}
    out.append(f"{'geomean':<14}" + "".join(f"{geo[lb]:>17.3f}" for lb in labels))
    worst = {lb: max(r["vs_single"][lb] for r in rows) for lb in labels}
    out.append(f"{'worst':<14}" + "".join(f"{worst[lb]:>17.3f}" for lb in labels))
    tuned = [f"{r['model']}: {r['tuned_choice']} ({r['tune_s']} s)" for r in rows if "tuned_choice" in r]
    if tuned:
        out.append("tuned choices: " + "; ".join(tuned))
    return "\n".join(out)


def plot(rows: list[dict], path: Path, title: str) -> None:
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    labels = list(rows[0]["vs_single"])
    fig, ax = plt.subplots(figsize=(max(8, 1.3 * len(rows) + 3), 4.5))
    width = 0.8 / len(labels)
    for j, lb in enumerate(labels):
        ax.bar([i + j * width for i in range(len(rows))], [r["vs_single"][lb] for r in rows], width, label=lb)
    ax.axhline(1.0, color="black", linewidth=0.8)
    ax.set_xticks([i + 0.4 - width / 2 for i in range(len(rows))], [r["model"] for r in rows], rotation=20)
    ax.set_ylabel("time / pyge single-stream time (lower is faster)")
    ax.set_title(title)
    ax.legend(fontsize=7, ncol=3)
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--models", default="all", help="comma list of light model names, or 'all'")
    ap.add_argument("--rounds", type=int, default=15)
    ap.add_argument("--streams", type=int, default=2, help="stream budget K of the policies (default 2)")
    ap.add_argument("--tune-budget", type=float, default=20.0, help="seconds of `pyge tune` per model")
    ap.add_argument("--no-tune", action="store_true")
    ap.add_argument("--out", default="bench_policies_cpu", help="output prefix (.json, .txt, .png)")
    a = ap.parse_args(argv)
    names = MODELS if a.models == "all" else a.models.split(",")
    meta = {"cores": os.cpu_count(), "threads": torch.get_num_threads(), "torch": torch.__version__,
            "python": platform.python_version(), "rounds": a.rounds, "streams": a.streams,
            "load_before": [round(x, 2) for x in os.getloadavg()],
            "command": " ".join(["python benchmarks/bench_policies_cpu.py", *(sys.argv[1:] if argv is None else argv)])}
    rows = []
    with tempfile.TemporaryDirectory() as tmp:
        for n in names:
            rows.append(bench_model(n, a.rounds, a.streams, 0.0 if a.no_tune else a.tune_budget, Path(tmp)))
            print(f"{n}: " + ", ".join(f"{k} {v:.3f}" for k, v in rows[-1]["vs_single"].items()), flush=True)
    meta["load_after"] = [round(x, 2) for x in os.getloadavg()]
    text = format_table(rows, meta)
    print(text)
    out = Path(a.out)
    out.parent.mkdir(parents=True, exist_ok=True)
    Path(f"{out}.json").write_text(json.dumps({"meta": meta, "rows": rows}, indent=1) + "\n")
    Path(f"{out}.txt").write_text(text + "\n")
    plot(rows, Path(f"{out}.png"), f"pyge on CPU ({meta['cores']} cores): ratio to single stream")
    return 0


if __name__ == "__main__":
    sys.exit(main())
