"""A busy machine: how much pyge slows down, against onnxruntime, when another process keeps
one core busy (issue 22 item 2).

Every measurement is a child process of its own (an engine, one of pyge's settings, quiet or
busy); in a busy one, a hog process spins on one core (pinned to the last core this process
may use) for the whole time the child runs. The children of one round run in a fresh random
order. Per model and engine: the median of `--calls` runs, quiet and busy; the slowdown is
busy / quiet, within a round; printed: medians over rounds, and pyge's slowdown divided by
onnxruntime's (target: at most 1.5). The load average before each child is kept, since other
work on the machine moves these numbers as much as the hog does: run it on a quiet machine.

Settings (pyge's): "default" is pyge as installed (its bounded spin, and teams that shrink
while the machine is busy: executors/contention.py); the others change one thing, to find
out what pyge's OpenMP settings do under a busy core:
    passive       OMP_WAIT_POLICY=PASSIVE (idle OpenMP threads sleep at once)
    spin-1k       GOMP_SPINCOUNT=1000 (a tenth of pyge's bounded spin)
    spin-300k     GOMP_SPINCOUNT=300000 (libgomp's own default spin)
    threads-1     torch.set_num_threads(1)
    fixed-team    pyge.intraOpThreads=<torch's threads>: the team never shrinks (what pyge did
                  before executors/contention.py)

    python benchmarks/bench_busy.py --rounds 3 --out benchmarks/results/busy.txt
    python benchmarks/bench_busy.py --settings default,passive --models squeezenet
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

from light import child_env

MODELS = "squeezenet,inception_v1,resnet50"
SETTINGS = {
    "default": {},
    "passive": {"OMP_WAIT_POLICY": "PASSIVE"},
    "spin-1k": {"GOMP_SPINCOUNT": "1000"},
    "spin-300k": {"GOMP_SPINCOUNT": "300000"},
    "threads-1": {"PYGE_BENCH_THREADS": "1"},
    "fixed-team": {"PYGE_BENCH_FIXED": "1"},
}
_OMP_KEYS = ("OMP_WAIT_POLICY", "GOMP_SPINCOUNT", "KMP_BLOCKTIME", "OMP_NUM_THREADS")

CHILD = r'''
import json, os, statistics, sys, time
from light import model_path, random_feeds
engine, names, calls = sys.argv[1], sys.argv[2].split(","), int(sys.argv[3])
out = {}
if engine == "pyge":
    import pyge, torch
    if os.environ.get("PYGE_BENCH_THREADS"):
        torch.set_num_threads(int(os.environ["PYGE_BENCH_THREADS"]))
else:
    import onnxruntime as ort
for name in names:
    path = model_path(name)
    feeds = random_feeds(path)
    if engine == "pyge":
        fixed = {"pyge.intraOpThreads": str(torch.get_num_threads())} \
            if os.environ.get("PYGE_BENCH_FIXED") else {}
        m = pyge.compile(pyge.load_onnx(path), "cpu", fixed)
        run = lambda: m.run(feeds)
    else:
        sess = ort.InferenceSession(path, providers=["CPUExecutionProvider"])
        run = lambda: sess.run(None, feeds)
    for _ in range(5):
        run()
    ts = []
    for _ in range(calls):
        t = time.perf_counter(); run(); ts.append(time.perf_counter() - t)
    out[name] = statistics.median(ts) * 1e3
print(json.dumps(out))
'''

HOG = "import os, sys\nos.sched_setaffinity(0, {int(sys.argv[1])})\nwhile True:\n    pass\n"


def _child(engine: str, setting: str, models: str, calls: int, busy: bool) -> dict:
    env = {k: v for k, v in child_env().items() if k not in _OMP_KEYS or setting == "default"}
    env.update(SETTINGS.get(setting, {}))
    hog = None
    if busy:
        core = max(os.sched_getaffinity(0))
        hog = subprocess.Popen([sys.executable, "-c", HOG, str(core)])
    try:
        p = subprocess.run([sys.executable, "-c", CHILD, engine, models, str(calls)], env=env,
                           capture_output=True, text=True, timeout=1800)
    finally:
        if hog is not None:
            hog.kill()
            hog.wait()
    if p.returncode:
        raise SystemExit(f"{engine} {setting}: {p.stderr[-2000:]}")
    return json.loads(p.stdout.strip().splitlines()[-1])


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--calls", type=int, default=30)
    ap.add_argument("--models", default=MODELS)
    ap.add_argument("--settings", default="default", help=f"pyge's, of: {', '.join(SETTINGS)}")
    ap.add_argument("--out", default=None, help="also write the table to this file")
    a = ap.parse_args(argv)
    settings = a.settings.split(",")
    unknown = [s for s in settings if s not in SETTINGS]
    if unknown:
        raise SystemExit(f"unknown setting {unknown[0]!r}; known: {', '.join(SETTINGS)}")
    jobs = [("onnxruntime", "-")] + [("pyge", s) for s in settings]
    times: dict[tuple, list[dict]] = {(e, s, b): [] for e, s in jobs for b in (False, True)}
    loads = []
    rng = random.Random(0)
    for r in range(a.rounds):
        order = [(e, s, b) for e, s in jobs for b in (False, True)]
        for e, s, b in rng.sample(order, len(order)):
            loads.append(os.getloadavg()[0])
            times[(e, s, b)].append(_child(e, s, a.models, a.calls, b))
        print(f"round {r + 1} done", file=sys.stderr, flush=True)
    models = a.models.split(",")

    def slowdown(e, s, m) -> float:
        return statistics.median(busy[m] / quiet[m] for quiet, busy
                                 in zip(times[(e, s, False)], times[(e, s, True)]))
    lines = [f"{os.cpu_count()} cores; hog on core {max(os.sched_getaffinity(0))}; median of "
             f"{a.calls} runs per child, medians over {a.rounds} rounds; ms; load average before "
             f"the children: {min(loads):.2f}-{max(loads):.2f} (median {statistics.median(loads):.2f})",
             f"{'model':<14}{'engine':<22}{'quiet':>9}{'busy':>9}{'slowdown':>10}{'vs ort':>8}"]
    for m in models:
        ort_slow = slowdown("onnxruntime", "-", m)
        for e, s in jobs:
            q = statistics.median(x[m] for x in times[(e, s, False)])
            b = statistics.median(x[m] for x in times[(e, s, True)])
            label = e if e == "onnxruntime" else f"pyge {s}"
            lines.append(f"{m:<14}{label:<22}{q:>9.2f}{b:>9.2f}{slowdown(e, s, m):>10.2f}"
                         f"{slowdown(e, s, m) / ort_slow:>8.2f}")
    text = "\n".join(lines)
    print(text)
    if a.out:
        Path(a.out).parent.mkdir(parents=True, exist_ok=True)
        Path(a.out).write_text(text + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
