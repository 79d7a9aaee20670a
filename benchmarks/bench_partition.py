"""What the dynamic-shape partition costs (CPU) or buys (GPU): a static backbone with a dynamic
head (NonMaxSuppression), timed whole, partitioned (the backbone a static sub-model behind a
call node; on a GPU captured into a CUDA graph) against the same model as one eager plan
(`ge.exec.static_model_ops_lower_limit=-1`: no static sub-model). Each measurement runs in a
process of its own, the two variants interleaved round by round (their order alternating), so
that neither gets a warmer machine; the figures per variant are the median over rounds of each
process's median run and the fastest run of all (on a loaded machine the medians are noise).

    python benchmarks/bench_partition.py                         # CPU, results in benchmarks/results/
    python benchmarks/bench_partition.py --device cuda --one-process --out out  # gpu_session.sh
    python benchmarks/bench_partition.py --quick                  # a smoke run
"""
from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import time

import numpy as np

HERE = os.path.dirname(os.path.abspath(__file__))
VARIANTS = {"partitioned": {}, "eager": {"ge.exec.static_model_ops_lower_limit": "-1"}}


def detection_model(rows: int, width: int, layers: int):
    """x [rows, width] -> `layers` x (MatMul, Add, Relu) -> boxes and scores heads -> NMS ->
    the picked boxes' sum: every node before the NMS has a static shape."""
    from onnx import TensorProto as T
    from onnx import helper as h
    from onnx import numpy_helper as nh
    rng = np.random.default_rng(0)
    inits, nodes, x = [], [], "x"
    for i in range(layers):
        inits += [nh.from_array((rng.standard_normal((width, width)) / np.sqrt(width)).astype(np.float32), f"w{i}"),
                  nh.from_array(rng.standard_normal(width).astype(np.float32) * 0.1, f"b{i}")]
        nodes += [h.make_node("MatMul", [x, f"w{i}"], [f"m{i}"], name=f"mm{i}"),
                  h.make_node("Add", [f"m{i}", f"b{i}"], [f"a{i}"], name=f"bias{i}"),
                  h.make_node("Relu", [f"a{i}"], [f"r{i}"], name=f"relu{i}")]
        x = f"r{i}"
    inits += [nh.from_array(rng.standard_normal((width, 4)).astype(np.float32), "wb"),
              nh.from_array(rng.standard_normal((width, 1)).astype(np.float32), "ws"),
              nh.from_array(np.array([0], np.int64), "ax"), nh.from_array(np.array([2], np.int64), "col"),
              nh.from_array(np.array([50], np.int64), "keep"),
              nh.from_array(np.array([0.5], np.float32), "iou"), nh.from_array(np.array([0.9], np.float32), "thr")]
    nodes += [h.make_node("MatMul", [x, "wb"], ["bm"], name="box_mm"),
              h.make_node("Sigmoid", ["bm"], ["boxes2"], name="box_sig"),
              h.make_node("Unsqueeze", ["boxes2", "ax"], ["boxes"], name="box_unsq"),
              h.make_node("MatMul", [x, "ws"], ["sm"], name="score_mm"),
              h.make_node("Sigmoid", ["sm"], ["s1"], name="score_sig"),
              h.make_node("Transpose", ["s1"], ["s2"], name="score_t", perm=[1, 0]),
              h.make_node("Unsqueeze", ["s2", "ax"], ["scores"], name="score_unsq"),
              h.make_node("NonMaxSuppression", ["boxes", "scores", "keep", "iou", "thr"], ["sel"], name="nms"),
              h.make_node("Gather", ["sel", "col"], ["idx2"], name="pick_col", axis=1),
              h.make_node("Squeeze", ["idx2", "col_ax"], ["idx"], name="pick_sq"),
              h.make_node("Gather", ["boxes2", "idx"], ["picked"], name="pick", axis=0),
              h.make_node("ReduceSum", ["picked"], ["y"], name="total", keepdims=0)]
    inits.append(nh.from_array(np.array([1], np.int64), "col_ax"))
    g = h.make_graph(nodes, "detbench", [h.make_tensor_value_info("x", T.FLOAT, [rows, width])],
                     [h.make_tensor_value_info("y", T.FLOAT, [])], inits)
    return h.make_model(g, opset_imports=[h.make_opsetid("", 17)])


def _compiled(args, variant: str):
    import pyge
    model = pyge.compile(pyge.load_onnx(detection_model(args.rows, args.width, args.layers)),
                         args.device, VARIANTS[variant])
    x = np.random.default_rng(1).standard_normal((args.rows, args.width)).astype(np.float32)
    for _ in range(args.warmup):
        model.run({"x": x})
    return model, {"x": x}


def _timed(model, feeds) -> tuple[float, float]:
    t0 = time.perf_counter()
    out = model.run(feeds)               # numpy out: a GPU run has finished when it returns
    return time.perf_counter() - t0, float(out["y"])


def _record(variant: str, model, times: list[float], y: float) -> dict:
    subs = getattr(model.executor, "subs", {})
    parts = [f"{p.name} ({p.kind}, {len(p.plan.nodes)} nodes, "
             f"{getattr(subs.get(p.name, model.executor), 'mode', 'eager')})" for p in model.submodels]
    return {"variant": variant, "median_ms": statistics.median(times) * 1e3,
            "min_ms": min(times) * 1e3, "y": y, "parts": parts}


def worker(args) -> None:
    """One process: compile the variant, run it, print one JSON line."""
    model, feeds = _compiled(args, args.worker)
    times, y = [], 0.0
    for _ in range(args.runs):
        t, y = _timed(model, feeds)
        times.append(t)
    print(json.dumps(_record(args.worker, model, times, y)))


def one_process(args) -> dict[str, list[dict]]:
    """Both variants in this process, run by run in alternation (--one-process: one start
    instead of two per round, for a short GPU session); one record per variant and round."""
    models = {v: _compiled(args, v) for v in VARIANTS}
    out: dict[str, list[dict]] = {v: [] for v in VARIANTS}
    for _ in range(args.rounds):
        times: dict[str, list[float]] = {v: [] for v in VARIANTS}
        ys = {}
        for i in range(args.runs):
            for v in (VARIANTS if i % 2 == 0 else list(VARIANTS)[::-1]):
                t, ys[v] = _timed(*models[v])
                times[v].append(t)
        for v in VARIANTS:
            out[v].append(_record(v, models[v][0], times[v], ys[v]))
    return out


def _one(args, variant: str) -> dict:
    cmd = [sys.executable, os.path.abspath(__file__), "--worker", variant, "--device", args.device,
           "--runs", str(args.runs), "--warmup", str(args.warmup), "--rows", str(args.rows),
           "--width", str(args.width), "--layers", str(args.layers)]
    done = subprocess.run(cmd, capture_output=True, text=True, timeout=300)
    if done.returncode != 0:
        raise SystemExit(f"{variant} worker failed:\n{done.stderr[-2000:]}")
    return json.loads(done.stdout.strip().splitlines()[-1])


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--device", default="cpu")
    p.add_argument("--rounds", type=int, default=8)
    p.add_argument("--runs", type=int, default=60)
    p.add_argument("--warmup", type=int, default=10)
    p.add_argument("--rows", type=int, default=256)
    p.add_argument("--width", type=int, default=256)
    p.add_argument("--layers", type=int, default=8)
    p.add_argument("--quick", action="store_true", help="2 rounds of 10 runs")
    p.add_argument("--one-process", action="store_true", help="both variants in this process")
    p.add_argument("--out", default=os.path.join(HERE, "results"))
    p.add_argument("--worker", choices=sorted(VARIANTS), help=argparse.SUPPRESS)
    args = p.parse_args(argv)
    if args.worker:
        worker(args)
        return 0
    if args.quick:
        args.rounds, args.runs, args.warmup = 2, 10, 2
    results: dict[str, list[dict]] = {v: [] for v in VARIANTS}
    if args.one_process:
        results = one_process(args)
    for r in range(0 if args.one_process else args.rounds):
        order = list(VARIANTS) if r % 2 == 0 else list(VARIANTS)[::-1]
        for v in order:
            results[v].append(_one(args, v))
    med = {v: statistics.median(x["median_ms"] for x in rs) for v, rs in results.items()}
    best = {v: min(x["min_ms"] for x in rs) for v, rs in results.items()}   # best of all rounds
    same = len({round(x["y"], 3) for rs in results.values() for x in rs}) == 1
    cost = (med["partitioned"] / med["eager"] - 1) * 100
    cost_best = (best["partitioned"] / best["eager"] - 1) * 100
    lines = [f"bench_partition on {args.device}: x [{args.rows}, {args.width}], {args.layers} layers "
             f"(MatMul+Add+Relu) + boxes/scores heads -> NonMaxSuppression -> Gather -> ReduceSum",
             f"{args.rounds} rounds x {args.runs} runs (warm-up {args.warmup}), "
             + ("both variants in one process, run by run in alternation" if args.one_process else
                "one process per variant and round, interleaved")
             + "; median over rounds of each round's median, and the fastest run of all",
             f"parts (partitioned): {', '.join(results['partitioned'][0]['parts'])}",
             f"parts (eager):       {', '.join(results['eager'][0]['parts'])}"]
    for v in VARIANTS:
        per = " ".join(f"{x['median_ms']:.3f}" for x in results[v])
        lines.append(f"  {v:<12} median {med[v]:9.3f} ms, fastest run {best[v]:8.3f} ms   (medians per round: {per})")
    lines.append(f"partitioned vs eager: {cost:+.1f}% on the medians, {cost_best:+.1f}% on the fastest runs "
                 f"(a loaded machine: trust the fastest runs)  (same outputs: {same})")
    text = "\n".join(lines)
    print(text)
    os.makedirs(args.out, exist_ok=True)
    stem = "bench_partition" if args.device == "cpu" else f"bench_partition_{args.device.split(':')[0]}"
    with open(os.path.join(args.out, f"{stem}.txt"), "w") as f:
        f.write(text + "\n")
    with open(os.path.join(args.out, f"{stem}.json"), "w") as f:
        json.dump({"args": vars(args), "median_ms": med, "fastest_ms": best, "cost_pct": cost,
                   "cost_fastest_pct": cost_best, "same_outputs": same,
                   "rounds": results}, f, indent=1)
    return 0 if same else 1


if __name__ == "__main__":
    sys.exit(main())
