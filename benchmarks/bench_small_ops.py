"""Small operators: where pyge's cost per operator shows (issue 22 item 1).

The graph: 4 branches x 20 (MatMul [1,64] x [64,64] + Tanh), summed: 161 nodes, each a few
microseconds of work. Engines, each in a child process of its own, in a fresh random order
every round:

    pyge          pyge.compile defaults (one stream: the generated straight-line program)
    pyge lb4      ge.autoMultistreamParallelMode=LoadBalance:4 (a worker thread per branch)
    onnxruntime   an InferenceSession with default options (CPU)
    torch loop    the same torch calls in a plain Python loop (torch.matmul, torch.tanh, +):
                  what the operators cost with no engine around them

Each child times `--calls` runs (median); a ratio is taken within a round and the medians
over rounds are printed. Targets: pyge <= 3x onnxruntime and <= 1.5x the torch loop.

`--gemm` instead times, in this process, torch.matmul against oneDNN's packed product
(torch.ops.mkldnn._linear_pointwise on a weight packed once) for rows x K times K x N and
prints where the packed path wins: the table nn_matmul.PACKED_MIN_WEIGHT was read from.
`--codegen` times what the executors' generated code costs to build for random DAGs.

    python benchmarks/bench_small_ops.py --rounds 5 --out benchmarks/results/small_ops.txt
    python benchmarks/bench_small_ops.py --gemm --out benchmarks/results/small_ops_gemm.txt
    python benchmarks/bench_small_ops.py --codegen
"""
from __future__ import annotations

import argparse
import json
import random
import statistics
import subprocess
import sys
import time
from pathlib import Path

from light import child_env

ENGINES = ["pyge", "pyge lb4", "onnxruntime", "torch loop"]

CHILD = r'''
import json, statistics, sys, time
import numpy as np
from onnx import TensorProto, helper, numpy_helper
engine, calls, branches, depth, dim = sys.argv[1], int(sys.argv[2]), *map(int, sys.argv[3:6])
rng = np.random.default_rng(0)
weights = [(rng.standard_normal((dim, dim)) / np.sqrt(dim)).astype(np.float32)
           for _ in range(branches * depth)]
x = rng.standard_normal((1, dim)).astype(np.float32)
nodes, inits, ends = [], [], []
for b in range(branches):
    prev = "x"
    for i in range(depth):
        w = f"w{b}_{i}"
        inits.append(numpy_helper.from_array(weights[b * depth + i], w))
        nodes.append(helper.make_node("MatMul", [prev, w], [f"m{b}_{i}"], name=f"MatMul_{b}_{i}"))
        nodes.append(helper.make_node("Tanh", [f"m{b}_{i}"], [f"t{b}_{i}"], name=f"Tanh_{b}_{i}"))
        prev = f"t{b}_{i}"
    ends.append(prev)
nodes.append(helper.make_node("Sum", ends, ["y"], name="Sum"))
graph = helper.make_graph(nodes, "small_ops", [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, dim])],
                          [helper.make_tensor_value_info("y", TensorProto.FLOAT, [1, dim])], inits)
model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
if engine.startswith("pyge"):
    import pyge
    opts = {"ge.autoMultistreamParallelMode": "LoadBalance:4"} if engine == "pyge lb4" else {}
    cm = pyge.compile(pyge.load_onnx(model), "cpu", opts)
    run = lambda: cm.run({"x": x})["y"]
elif engine == "onnxruntime":
    import onnxruntime as ort
    sess = ort.InferenceSession(model.SerializeToString(), providers=["CPUExecutionProvider"])
    run = lambda: sess.run(None, {"x": x})[0]
else:
    import torch
    ws = [torch.from_numpy(w) for w in weights]
    def run():
        h0 = torch.from_numpy(x)
        outs = []
        for b in range(branches):
            h = h0
            for w in ws[b * depth:(b + 1) * depth]:
                h = torch.tanh(torch.matmul(h, w))
            outs.append(h)
        y = outs[0]
        for o in outs[1:]:
            y = y + o
        return y.numpy()
for _ in range(30):
    y = run()
ts = []
for _ in range(calls):
    t = time.perf_counter(); run(); ts.append(time.perf_counter() - t)
print(json.dumps({"us": statistics.median(ts) * 1e6, "y0": float(np.asarray(y).reshape(-1)[0])}))
'''


def graph_ratios(a) -> str:
    times: dict[str, list[float]] = {e: [] for e in ENGINES}
    check: dict[str, float] = {}
    rng = random.Random(0)
    for r in range(a.rounds):
        for eng in rng.sample(ENGINES, len(ENGINES)):
            p = subprocess.run([sys.executable, "-c", CHILD, eng, str(a.calls), str(a.branches),
                                str(a.depth), str(a.dim)], env=child_env(), capture_output=True,
                               text=True, timeout=900)
            if p.returncode:
                raise SystemExit(f"{eng}: {p.stderr[-2000:]}")
            res = json.loads(p.stdout.strip().splitlines()[-1])
            times[eng].append(res["us"])
            check[eng] = res["y0"]
        print(f"round {r + 1} done", flush=True, file=sys.stderr)
    if max(check.values()) - min(check.values()) > 1e-4:
        raise SystemExit(f"the engines disagree on y[0]: {check}")

    def ratio(e: str, base: str) -> float:
        return statistics.median(t / b for t, b in zip(times[e], times[base]))
    n = a.branches * a.depth * 2 + 1
    lines = [f"{a.branches} branches x {a.depth} (MatMul [1,{a.dim}]x[{a.dim},{a.dim}] + Tanh) + Sum: "
             f"{n} nodes; median of {a.calls} calls per child, medians over {a.rounds} rounds",
             f"{'engine':<14}{'us/run':>10}{'us/op':>8}{'vs onnxruntime':>16}{'vs torch loop':>15}"]
    for e in ENGINES:
        us = statistics.median(times[e])
        lines.append(f"{e:<14}{us:>10.1f}{us / n:>8.2f}{ratio(e, 'onnxruntime'):>16.2f}"
                     f"{ratio(e, 'torch loop'):>15.2f}")
    return "\n".join(lines)


def _median_us(fn, calls: int) -> float:
    for _ in range(20):
        fn()
    ts = []
    for _ in range(calls):
        t = time.perf_counter_ns()
        fn()
        ts.append(time.perf_counter_ns() - t)
    return statistics.median(ts) / 1e3


def gemm_table(a) -> str:
    import torch
    from pyge.kernels.nn_matmul import PACKED_MIN_WEIGHT, packed_wins
    mk = torch.ops.mkldnn
    shapes = [(64, 64), (128, 128), (256, 256), (384, 384), (512, 512), (512, 768), (768, 768),
              (1024, 1024), (64, 1024), (1024, 64), (256, 1024), (1024, 256)]
    lines = [f"torch threads {torch.get_num_threads()}; us, median of {a.calls} calls, "
             "interleaved per shape; ratio = packed / matmul (below 1: packed wins)",
             f"PACKED_MIN_WEIGHT (K*N from which pyge packs) = {PACKED_MIN_WEIGHT} for 1 row / "
             "2-63 rows / 64 or more",
             f"{'rows':>5}{'K':>6}{'N':>6}{'matmul':>10}{'packed':>10}{'ratio':>8}  pyge picks"]
    for rows in (1, 2, 4, 16, 64):
        for k, n in shapes:
            x, w = torch.randn(rows, k), torch.randn(k, n)
            wp = mk._reorder_linear_weight(w.t().contiguous(), rows)
            tm, tp = [], []
            for _ in range(3):              # interleaved, so that noise hits both alike
                tm.append(_median_us(lambda: torch.matmul(x, w), a.calls // 3 + 1))
                tp.append(_median_us(lambda: mk._linear_pointwise(x, wp, None, "none", [], ""),
                                     a.calls // 3 + 1))
            m, p = statistics.median(tm), statistics.median(tp)
            pick = "packed" if packed_wins(rows, k, n) else "matmul"
            lines.append(f"{rows:>5}{k:>6}{n:>6}{m:>10.1f}{p:>10.1f}{p / m:>8.2f}  {pick}")
    return "\n".join(lines)


def codegen_cost(a) -> str:
    sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
    import pyge
    from tests.executors.helpers import random_graph
    lines = ["random window DAGs (tests/executors/helpers.random_graph), one stream; seconds",
             f"{'nodes':>8}{'compile':>10}{'executor':>10}{'codegen':>10}{'us/node':>9}{'hooked':>9}"]
    for n in (2000, 20000, 100000):
        g = random_graph(random.Random(0), n)
        t = time.perf_counter()
        m = pyge.compile(g, "cpu", {"ge.enableSingleStream": "true"})
        tc = time.perf_counter() - t
        t = time.perf_counter()
        ex = m.executor
        te = time.perf_counter() - t
        ex._programs.clear()
        t = time.perf_counter()
        ex.program(False)
        tg = time.perf_counter() - t
        t = time.perf_counter()
        ex.program(True)
        th = time.perf_counter() - t
        lines.append(f"{n:>8}{tc:>10.2f}{te:>10.2f}{tg:>10.2f}{tg / n * 1e6:>9.1f}{th:>9.2f}")
    return "\n".join(lines)


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--rounds", type=int, default=5)
    ap.add_argument("--calls", type=int, default=300)
    ap.add_argument("--branches", type=int, default=4)
    ap.add_argument("--depth", type=int, default=20)
    ap.add_argument("--dim", type=int, default=64)
    ap.add_argument("--gemm", action="store_true", help="the GEMM path table instead")
    ap.add_argument("--codegen", action="store_true", help="the generated code's build cost instead")
    ap.add_argument("--out", default=None, help="also write the table to this file")
    a = ap.parse_args(argv)
    text = gemm_table(a) if a.gemm else codegen_cost(a) if a.codegen else graph_ratios(a)
    print(text)
    if a.out:
        Path(a.out).parent.mkdir(parents=True, exist_ok=True)
        Path(a.out).write_text(text + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
