"""Process-wide CPU runtime settings: how torch's idle OpenMP threads wait (pyge's default, a
bounded spin, against sleeping at once with OMP_WAIT_POLICY=PASSIVE and spinning without bound
with ACTIVE), and pyge's glibc malloc thresholds (default, against PYGE_CPU_MALLOC=system).

OpenMP and glibc read these once, at start-up, so each setting runs in a child process of
its own; the settings take turns round by round (a fresh order each round) so that machine
noise hits them alike. Each child times, per light model, pyge single stream and LoadBalance:2
(median of `--calls` runs), and the CPU time the process burns in the 5 ms after one run
while its caller sleeps (median of 20): what anything else on the machine pays for the
spinning. Each child also times one small operator alone (a global average pool of a
1x1024x7x7 tensor, median of 250 calls): what a wake-up of the OpenMP team costs it.

    python benchmarks/bench_omp_wait.py                       # 3 rounds, five models
    python benchmarks/bench_omp_wait.py --rounds 5 --models shufflenet,resnet50
"""
from __future__ import annotations

import argparse
import json
import os
import random
import statistics
import subprocess
import sys
from pathlib import Path

SETTINGS = {
    "default (bounded spin)": {},
    "PASSIVE": {"OMP_WAIT_POLICY": "PASSIVE"},
    "ACTIVE": {"OMP_WAIT_POLICY": "ACTIVE"},
    "malloc left alone": {"PYGE_CPU_MALLOC": "system"},
}
MODELS = "shufflenet,squeezenet,inception_v1,resnet50,densenet121"

CHILD = r'''
import json, os, sys, time, statistics
import numpy as np, onnx
import pyge
light = os.path.join(os.path.dirname(onnx.__file__), "backend", "test", "data", "light")
out = {}
for name in sys.argv[1].split(","):
    g = pyge.load_onnx(os.path.join(light, f"light_{name}.onnx"))
    feeds = {v.name: np.random.default_rng(0).random(v.shape).astype(np.float32) for v in g.inputs}
    res = {}
    for label, opts in (("single", {"ge.enableSingleStream": "true"}),
                        ("lb2", {"ge.autoMultistreamParallelMode": "LoadBalance:2"})):
        m = pyge.compile(g, "cpu", opts)
        for _ in range(3):
            m.run(feeds)
        ts = []
        for _ in range(int(sys.argv[2])):
            t = time.perf_counter(); m.run(feeds); ts.append(time.perf_counter() - t)
        res[label] = statistics.median(ts) * 1e3
        if label == "single":
            idle = []
            for _ in range(20):
                m.run(feeds)
                c0 = time.process_time()
                time.sleep(0.005)            # the caller sleeps: any CPU used now is spinning
                idle.append(time.process_time() - c0)
            res["idle_cpu_ms"] = max(0.0, statistics.median(idle) * 1e3)
    out[name] = res
import torch
import torch.nn.functional as F
x = torch.randn(1, 1024, 7, 7)        # one small operator: what a team wake-up costs it
ts = []
for _ in range(300):
    t = time.perf_counter(); F.adaptive_avg_pool2d(x, 1); ts.append(time.perf_counter() - t)
out["_pool_us"] = statistics.median(ts[50:]) * 1e6
print(json.dumps(out))
'''


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--calls", type=int, default=15)
    ap.add_argument("--models", default=MODELS)
    ap.add_argument("--out", default=str(Path(__file__).parent / "results" / "omp_wait.txt"))
    a = ap.parse_args(argv)
    src = str(Path(__file__).resolve().parent.parent / "src")
    runs: dict[str, list[dict]] = {k: [] for k in SETTINGS}
    rng = random.Random(0)
    for r in range(a.rounds):
        for label in rng.sample(list(SETTINGS), len(SETTINGS)):
            env = {k: v for k, v in os.environ.items()
                   if k not in ("OMP_WAIT_POLICY", "GOMP_SPINCOUNT", "KMP_BLOCKTIME", "PYGE_CPU_MALLOC")}
            env.update(SETTINGS[label])
            env["PYTHONPATH"] = src + os.pathsep + env.get("PYTHONPATH", "")
            p = subprocess.run([sys.executable, "-c", CHILD, a.models, str(a.calls)], env=env,
                               capture_output=True, text=True, timeout=900)
            if p.returncode:
                print(p.stderr[-2000:], file=sys.stderr)
                return 1
            runs[label].append(json.loads(p.stdout.strip().splitlines()[-1]))
            print(f"round {r + 1}: {label} done", flush=True)
    models = a.models.split(",")
    lines = [f"median over {a.rounds} rounds of per-child medians ({a.calls} calls); ms; "
             "idle = CPU burnt in the 5 ms after a run"]
    header = f"{'model':<14}{'setting':<24}{'single':>9}{'lb2':>9}{'idle':>8}{'single vs PASSIVE':>19}"
    # PASSIVE and ACTIVE rows keep pyge's malloc setting; the last row keeps pyge's OpenMP one.
    lines.append(header)
    for m in models:
        base = statistics.median(x[m]["single"] for x in runs["PASSIVE"])
        for label in SETTINGS:
            single = statistics.median(x[m]["single"] for x in runs[label])
            lb2 = statistics.median(x[m]["lb2"] for x in runs[label])
            idle = statistics.median(x[m]["idle_cpu_ms"] for x in runs[label])
            lines.append(f"{m:<14}{label:<24}{single:>9.2f}{lb2:>9.2f}{idle:>8.2f}{single / base:>19.3f}")
    lines.append("global average pool of 1x1024x7x7, us: " + ", ".join(
        f"{label} {statistics.median(x['_pool_us'] for x in runs[label]):.1f}" for label in SETTINGS))
    text = "\n".join(lines)
    print(text)
    Path(a.out).parent.mkdir(parents=True, exist_ok=True)
    Path(a.out).write_text(text + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
