"""pyge from two source trees on the same light models: a before/after of a change.

bench_cpu.py times pyge against onnxruntime; on a shared machine onnxruntime's own time moves
most (its pool threads spin), so a change to pyge is measured against pyge instead. Each
source tree runs in child processes of its own (PYTHONPATH=<tree>/src), single stream, the two
taking turns in a fresh random order each round; a child compiles each model, warms it up and
reports the median of `--calls` runs. The figure is the median over rounds of B / A within a
round (below 1: B is faster), with each side's median time.

    python benchmarks/bench_src_ab.py /work/main /work/wt/branch --models shufflenet,squeezenet
    python benchmarks/bench_src_ab.py A B --threads 1 --clock cpu    # a shared machine
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

HERE = Path(__file__).resolve().parent

CHILD = r'''
import json, statistics, sys, time
from light import model_path, random_feeds
import pyge
import torch
names, calls, threads, clock = sys.argv[1].split(","), int(sys.argv[2]), int(sys.argv[3]), sys.argv[4]
if threads:
    torch.set_num_threads(threads)
tick = time.thread_time if clock == "cpu" else time.perf_counter
out = {"pyge": pyge.__file__}
for name in names:
    path = model_path(name)
    feeds = random_feeds(path)
    cm = pyge.compile(pyge.load_onnx(path), device="cpu", options={"ge.enableSingleStream": "true"})
    for _ in range(5):
        cm.run(feeds)
    ts = []
    for _ in range(calls):
        t0 = tick()
        cm.run(feeds)
        ts.append(tick() - t0)
    out[name] = statistics.median(ts) * 1e3
print(json.dumps(out))
'''


def _child(tree: str, names: list[str], calls: int, threads: int, clock: str) -> dict:
    env = dict(os.environ)
    env["PYTHONPATH"] = os.pathsep.join([str(Path(tree) / "src"), str(HERE)])
    p = subprocess.run([sys.executable, "-c", CHILD, ",".join(names), str(calls), str(threads),
                        clock], env=env,
                       capture_output=True, text=True, timeout=1800)
    if p.returncode:
        raise SystemExit(f"child for {tree} failed:\n{p.stderr[-3000:]}")
    out = json.loads(p.stdout.strip().splitlines()[-1])
    if not out.pop("pyge").startswith(str(Path(tree).resolve())):
        raise SystemExit(f"the child for {tree} imported another pyge")
    return out


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__,
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("a", help="source tree A (the reference)")
    ap.add_argument("b", help="source tree B")
    ap.add_argument("--models", default="shufflenet,squeezenet")
    ap.add_argument("--rounds", type=int, default=7)
    ap.add_argument("--calls", type=int, default=30)
    ap.add_argument("--threads", type=int, default=0, help="torch's intra-op threads (0: as is)")
    ap.add_argument("--clock", choices=("wall", "cpu"), default="wall",
                    help="cpu: the calling thread's CPU time (with --threads 1 the whole run)")
    a = ap.parse_args(argv)
    names = a.models.split(",")
    rows: dict[str, dict[str, list[float]]] = {n: {"a": [], "b": [], "ratio": []} for n in names}
    loads = []
    for r in range(a.rounds):
        order = ["a", "b"]
        random.shuffle(order)
        got = {side: _child(getattr(a, side), names, a.calls, a.threads, a.clock) for side in order}
        loads.append(os.getloadavg()[0])
        for n in names:
            rows[n]["a"].append(got["a"][n])
            rows[n]["b"].append(got["b"][n])
            rows[n]["ratio"].append(got["b"][n] / got["a"][n])
        print(f"round {r + 1}/{a.rounds} done", file=sys.stderr, flush=True)
    print(f"A = {a.a}\nB = {a.b}")
    print(f"{'model':<16}{'A ms':>10}{'B ms':>10}{'B / A':>10}{'B / A range':>18}")
    for n in names:
        rr = rows[n]["ratio"]
        print(f"{n:<16}{statistics.median(rows[n]['a']):>10.3f}{statistics.median(rows[n]['b']):>10.3f}"
              f"{statistics.median(rr):>10.3f}{min(rr):>9.3f}-{max(rr):.3f}")
    print(f"(single stream, {a.clock} clock, threads {a.threads or 'as is'}, median of {a.calls} "
          f"runs per child, {a.rounds} rounds; load average "
          f"after each round {min(loads):.2f}-{max(loads):.2f})")
    return 0


if __name__ == "__main__":
    sys.exit(main())
