"""CPU latency of the light models: pyge against onnxruntime.

Each engine runs in a child process of its own, so neither sees the other's threads: after a
run, onnxruntime's pool threads keep spinning, and torch's OpenMP team briefly too; in one
process, whichever runs next shares a core with the spinner. Each child reports the CPU its
engine burns in the 100 ms after a run while the caller sleeps (last column). onnxruntime's
sequential and parallel sessions get a child each for the same reason. The children take turns, in a fresh random order each round, so
that the machine's drift hits both alike. Within a child the configurations are interleaved
call by call, back to back (steady state, as a served model runs), and each reports its median.
The figure is the median over rounds of (pyge / onnxruntime sequential) in the same round:
below 1 is faster.

    python benchmarks/bench_cpu.py                       # inception_v1, resnet50
    python benchmarks/bench_cpu.py --models all --rounds 5
    python benchmarks/bench_cpu.py --multi               # add pyge multi-stream and ORT parallel
    python benchmarks/bench_cpu.py --random-weights      # real-size random weights, not constant fills
"""
from __future__ import annotations

import argparse
import json
import random
import statistics
import subprocess
import sys
import tempfile
from pathlib import Path

from light import child_env, write_random_weight_models

ALL = ["bvlc_alexnet", "densenet121", "inception_v1", "inception_v2", "resnet50", "shufflenet",
       "squeezenet", "vgg19", "zfnet512"]

CHILD = r'''
import json, os, random, statistics, sys, time
from light import model_path, random_feeds
engine, names, calls, multi = sys.argv[1], sys.argv[2].split(","), int(sys.argv[3]), sys.argv[4] == "1"
if engine == "pyge":
    import pyge
else:
    import onnxruntime as ort
out = {}
for name in names:
    path = model_path(name)
    feeds = random_feeds(path)
    runners, info = {}, {}
    if engine == "pyge":
        g = pyge.load_onnx(path)
        configs = {"pyge_single": {"ge.enableSingleStream": "true"}}
        if multi:
            configs.update(pyge_default={}, pyge_lb2={"ge.autoMultistreamParallelMode": "LoadBalance:2"})
        for label, opts in configs.items():
            cm = pyge.compile(g, device="cpu", options=opts)
            runners[label] = (lambda cm: lambda: cm.run(feeds))(cm)
            info[f"streams_{label[5:]}"] = cm.num_streams
    else:   # one mode per child: a parallel session's spinning pool would slow the other
        modes = {"ort_seq": ort.ExecutionMode.ORT_SEQUENTIAL, "ort_par": ort.ExecutionMode.ORT_PARALLEL}
        for label, mode in ((engine, modes[engine]),):
            so = ort.SessionOptions()
            so.execution_mode = mode
            so.log_severity_level = 3
            s = ort.InferenceSession(path, so, providers=["CPUExecutionProvider"])
            runners[label] = (lambda s: lambda: s.run(None, feeds))(s)
    for f in runners.values():
        for _ in range(3):
            f()
    times = {k: [] for k in runners}
    order = list(runners.items())
    r = random.Random(0)
    for _ in range(calls):
        r.shuffle(order)
        for k, f in order:
            t0 = time.perf_counter()
            f()
            times[k].append(time.perf_counter() - t0)
    out[name] = {**{k: statistics.median(v) * 1e3 for k, v in times.items()}, **info}
    # CPU the engine's threads burn in the 100 ms after one run while the caller sleeps:
    # what a configuration timed next in the same process would compete with.
    first = next(iter(runners.values()))
    idle = []
    for _ in range(5):
        first()
        c0 = time.process_time()
        time.sleep(0.1)
        idle.append(time.process_time() - c0)
    out[name]["idle_" + next(iter(runners))] = statistics.median(idle) * 1e3
print(json.dumps(out))
'''


def _child(engine: str, names: list[str], calls: int, multi: bool, model_dir: str | None = None) -> dict:
    env = child_env({"PYGE_BENCH_MODEL_DIR": model_dir} if model_dir else None)
    p = subprocess.run([sys.executable, "-c", CHILD, engine, ",".join(names), str(calls),
                        "1" if multi else "0"], env=env, capture_output=True, text=True, timeout=1800)
    if p.returncode:
        raise SystemExit(f"{engine} child failed:\n{p.stderr[-3000:]}")
    return json.loads(p.stdout.strip().splitlines()[-1])


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--models", default="inception_v1,resnet50", help="comma list or 'all'")
    ap.add_argument("--rounds", type=int, default=5, help="child processes per engine (default 5)")
    ap.add_argument("--calls", type=int, default=15, help="timed calls per configuration per child")
    ap.add_argument("--multi", action="store_true", help="also pyge multi-stream and ORT parallel")
    ap.add_argument("--json", help="write the rows as JSON here")
    ap.add_argument("--random-weights", action="store_true",
                    help="the models with random weights of their real size in place of the shipped "
                         "constant fills (as a trained model file holds them)")
    a = ap.parse_args(argv)
    names = ALL if a.models == "all" else a.models.split(",")
    rounds: list[dict] = []
    rng = random.Random(0)
    with tempfile.TemporaryDirectory() as tmp:
        model_dir = None
        if a.random_weights:
            write_random_weight_models(names, tmp)
            model_dir = tmp
        for r in range(a.rounds):
            res = {}
            engines = ["ort_seq", "pyge"] + (["ort_par"] if a.multi else [])
            for engine in rng.sample(engines, len(engines)):
                res.update({(engine, k): v for k, v in _child(engine, names, a.calls, a.multi, model_dir).items()})
            rounds.append(res)
            print(f"round {r + 1}/{a.rounds} done", file=sys.stderr, flush=True)
    rows = []
    for n in names:
        per = [{k: v for (e, m), d in x.items() if m == n for k, v in d.items()} for x in rounds]
        order = ["ort_seq", "pyge_single", "ort_par", "pyge_default", "pyge_lb2"]
        keys = [k for k in order if k in per[0]]
        row = {"model": n, **{k: v for k, v in per[0].items() if k.startswith("streams_")}}
        for k in (k for k in per[0] if k.startswith("idle_")):
            row[f"{k}_cpu_ms"] = round(statistics.median(p[k] for p in per), 2)
        for k in keys:
            row[f"{k}_ms"] = round(statistics.median(p[k] for p in per), 3)
            row[f"{k}_ratio"] = round(statistics.median(p[k] / p["ort_seq"] for p in per), 3)
        rows.append(row)
    keys = [k for k in rows[0] if k.endswith("_ratio")]
    print(f"{'model':<14}" + "".join(f"{k.replace('_ratio', ''):>14}" for k in keys) + "   (median ratio to ort_seq)")
    for r in rows:
        idle = ", ".join(f"{k[5:-7]} {r[k]:.1f}" for k in r if k.startswith("idle_"))
        print(f"{r['model']:<14}" + "".join(f"{r[k]:>14.3f}" for k in keys)
              + f"   ort_seq {r['ort_seq_ms']:.2f} ms; CPU ms burnt in 100 ms idle after a run: {idle}")
    if a.json:
        Path(a.json).write_text(json.dumps(rows, indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())
