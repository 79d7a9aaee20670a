"""Where the CPU time goes: pyge against onnxruntime, per kind of operator.

bench_cpu.py says how far apart the two engines are; this says where. Each engine profiles
the same model in a child process of its own (pyge: `model.profile`, single stream;
onnxruntime: its own profiler, sequential), and the per-operator times are summed per run
into kinds:

    conv      Conv, FusedConv, ConvTranspose (onnxruntime: its NCHWc convolutions too)
    layout    onnxruntime's ReorderInput/ReorderOutput (NCHW <-> NCHWc around its convs;
              pyge's packed convolutions read and write channels-last, so it has none)
    pool      MaxPool, AveragePool, GlobalAveragePool, GlobalMaxPool
    gemm      Gemm, MatMul (onnxruntime: FusedGemm, FusedMatMul too)
    shuffle   Reshape, Transpose, Flatten, ChannelShuffle
    concat    Concat
    lrn       LRN
    other     Relu, Add, Sum, Mul, MulAdd, BatchNormalization, Dropout, Softmax, ...
    (host)    the run's wall time less its operators: the executor's own work

With --onednn, a third child runs pyge with ONEDNN_VERBOSE=1 (no profiler) and adds up the
execution times oneDNN itself reports for its convolution primitives: the column
"onednn conv" against pyge's "conv" says how much of a convolution call is the kernel and
how much is the call around it (torch's binding builds oneDNN descriptors on every call).

Both profilers add a little to every operator, so the wall times here sit above
bench_cpu.py's; the kinds are what to compare. Figures: medians over runs of each run's sum,
then medians over rounds (each round a fresh pair of child processes, in random order).

    python benchmarks/bench_ops_cpu.py --models shufflenet,squeezenet,inception_v2
    python benchmarks/bench_ops_cpu.py --models all --rounds 3 --onednn
    python benchmarks/bench_ops_cpu.py --models shufflenet --nodes     # and per node
"""
from __future__ import annotations

import argparse
import json
import random
import statistics
import subprocess
import sys
from pathlib import Path

from light import child_env

ALL = ["bvlc_alexnet", "densenet121", "inception_v1", "inception_v2", "resnet50", "shufflenet",
       "squeezenet", "vgg19", "zfnet512"]
KINDS = ["conv", "layout", "pool", "gemm", "shuffle", "concat", "lrn", "other", "(host)"]

CHILD = r'''
import collections, json, os, statistics, sys, tempfile, time
from light import model_path, random_feeds
engine, names, runs = sys.argv[1], sys.argv[2].split(","), int(sys.argv[3])
KIND = {"Conv": "conv", "FusedConv": "conv", "ConvTranspose": "conv",
        "ReorderInput": "layout", "ReorderOutput": "layout",
        "MaxPool": "pool", "AveragePool": "pool", "GlobalAveragePool": "pool", "GlobalMaxPool": "pool",
        "Gemm": "gemm", "MatMul": "gemm", "FusedGemm": "gemm", "FusedMatMul": "gemm", "LRN": "lrn", "Reshape": "shuffle", "Transpose": "shuffle",
        "Flatten": "shuffle", "ChannelShuffle": "shuffle", "Concat": "concat"}
out = {}
for name in names:
    path = model_path(name)
    feeds = random_feeds(path)
    per_run = collections.defaultdict(lambda: collections.defaultdict(float))   # run -> kind -> us
    per_node = collections.defaultdict(list)                      # (name, op) -> us per run
    walls = []
    if engine == "onednn":      # ONEDNN_VERBOSE=1: oneDNN prints each primitive's exec time
        import pyge
        cm = pyge.compile(pyge.load_onnx(path), device="cpu", options={"ge.enableSingleStream": "true"})
        for _ in range(5):
            cm.run(feeds)
        sys.stdout.flush()
        print(f"@@start {name}", flush=True)
        for _ in range(runs):
            cm.run(feeds)
        sys.stdout.flush()
        print(f"@@end {name} {runs}", flush=True)
        continue
    if engine == "pyge":
        import pyge
        cm = pyge.compile(pyge.load_onnx(path), device="cpu", options={"ge.enableSingleStream": "true"})
        for _ in range(5):
            cm.run(feeds)
        prof = cm.profile(feeds, runs=runs)
        for r in prof.records:
            per_run[r.run][KIND.get(r.op_type, "other")] += r.duration * 1e6
            per_node[(r.name, r.op_type)].append(r.duration * 1e6)
        walls = [rr.duration * 1e6 for rr in prof.runs]
    else:
        import onnxruntime as ort
        so = ort.SessionOptions()
        so.execution_mode = ort.ExecutionMode.ORT_SEQUENTIAL
        so.log_severity_level = 3
        so.enable_profiling = True
        so.profile_file_prefix = os.path.join(tempfile.mkdtemp(), name)
        s = ort.InferenceSession(path, so, providers=["CPUExecutionProvider"])
        for _ in range(5):
            s.run(None, feeds)
        for _ in range(runs):
            s.run(None, feeds)
        events = json.load(open(s.end_profiling()))
        seq = [e for e in events if e.get("cat") == "Session" and e["name"] == "model_run"]
        walls = [e["dur"] for e in seq[5:]]
        starts = [e["ts"] for e in seq]
        for e in events:
            if e.get("cat") == "Node" and e["name"].endswith("_kernel_time"):
                run = sum(1 for t in starts if t <= e["ts"]) - 1
                if run >= 5:
                    per_run[run][KIND.get(e["args"]["op_name"], "other")] += e["dur"]
                    per_node[(e["name"][:-len("_kernel_time")], e["args"]["op_name"])].append(e["dur"])
    rows = list(per_run.values())
    kinds = sorted({k for r in rows for k in r})
    res = {k: statistics.median(r.get(k, 0.0) for r in rows) for k in kinds}
    res["wall"] = statistics.median(walls)
    res["(host)"] = statistics.median(w - sum(r.values()) for w, r in zip(walls, rows))
    res["nodes"] = [[k[0], k[1], statistics.median(v)] for k, v in per_node.items()]
    out[name] = res
print(json.dumps(out))
'''


def _child(engine: str, names: list[str], runs: int) -> dict:
    env = child_env({"ONEDNN_VERBOSE": "1"} if engine == "onednn" else None)
    p = subprocess.run([sys.executable, "-c", CHILD, engine, ",".join(names), str(runs)],
                       env=env, capture_output=True, text=True, timeout=1800)
    if p.returncode:
        raise SystemExit(f"{engine} child failed:\n{p.stderr[-3000:]}")
    lines = p.stdout.strip().splitlines()
    if engine != "onednn":
        return json.loads(lines[-1])
    out, name, total = {}, None, 0.0
    for line in lines:
        if line.startswith("@@start "):
            name, total = line.split()[1], 0.0
        elif line.startswith("@@end "):
            out[name] = {"conv": total * 1e3 / int(line.split()[2])}     # ms -> us per run
            name = None
        elif name and line.startswith("onednn_verbose") and ",exec," in line \
                and ",convolution," in line:
            total += float(line.rsplit(",", 1)[1])
    return out


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--models", default="shufflenet,squeezenet", help="comma list or 'all'")
    ap.add_argument("--rounds", type=int, default=3, help="child processes per engine (default 3)")
    ap.add_argument("--runs", type=int, default=20, help="profiled runs per child (default 20)")
    ap.add_argument("--onednn", action="store_true",
                    help="also oneDNN's own convolution time under pyge (ONEDNN_VERBOSE)")
    ap.add_argument("--nodes", action="store_true",
                    help="also every node's median us per run, in run order, for both engines")
    ap.add_argument("--json", help="write the figures as JSON here")
    a = ap.parse_args(argv)
    names = ALL if a.models == "all" else a.models.split(",")
    engines = ["pyge", "ort"] + (["onednn"] if a.onednn else [])
    rounds = []
    rng = random.Random(0)
    for r in range(a.rounds):
        res = {}
        for engine in rng.sample(engines, len(engines)):
            res[engine] = _child(engine, names, a.runs)
        rounds.append(res)
        print(f"round {r + 1}/{a.rounds} done", file=sys.stderr, flush=True)
    table = {}
    for n in names:
        table[n] = {e: {k: statistics.median(x[e][n].get(k, 0.0) for x in rounds)
                        for k in KINDS + ["wall"]} for e in engines}
    print("ms per run, pyge / onnxruntime (sequential); both profiled")
    extra = ["onednn conv"] if a.onednn else []
    print(f"{'model':<14}{'wall':>16}" + "".join(f"{k:>16}" for k in KINDS + extra))
    for n, t in table.items():
        cells = [f"{t['pyge'][k] / 1e3:.2f}/{t['ort'][k] / 1e3:.2f}" for k in ["wall"] + KINDS]
        cells += [f"{t['onednn']['conv'] / 1e3:.2f}"] if a.onednn else []
        print(f"{n:<14}" + "".join(f"{c:>16}" for c in cells))
    if a.nodes:
        for n in names:
            for e in ("pyge", "ort"):
                per = {}
                for x in rounds:
                    for name, op, us in x[e][n]["nodes"]:
                        per.setdefault((name, op), []).append(us)
                print(f"\n{n}, {e}: us per node (median over rounds)")
                print("  ".join(f"{name}:{op}:{statistics.median(v):.0f}" for (name, op), v in per.items()))
    if a.json:
        Path(a.json).write_text(json.dumps(table, indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())
