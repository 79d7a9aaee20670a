"""What each fusion pass buys on the CPU: the same light model compiled with all fusions, with
one fusion pass switched off, and with ge.exec.enableFusion=false (no folding, no fusion);
single stream, interleaved in one process (a fresh random order each round), median ms.

    python benchmarks/bench_fusion.py                      # resnet50 shufflenet densenet121 inception_v2
    python benchmarks/bench_fusion.py --models inception_v1 --rounds 30
    python benchmarks/bench_fusion.py --models shufflenet,squeezenet --threads 1 --clock cpu
"""
from __future__ import annotations

import argparse
import os
import random
import statistics
import sys
import time

import numpy as np
import onnx
import torch

import pyge
import pyge.passes.graph.fuse_affine as fa
import pyge.passes.graph.fuse_concat_relu as fcr
import pyge.passes.graph.fuse_conv_act as fca
import pyge.passes.graph.fuse_conv_bn as fcb
import pyge.passes.graph.fuse_dropout as fdr
import pyge.passes.graph.fuse_shuffle as fsh
import pyge.passes.graph.place_shuffle as psh
import pyge.passes.graph.pool_concat as pco

LIGHT = os.path.join(os.path.dirname(onnx.__file__), "backend", "test", "data", "light")
SINGLE = {"ge.enableSingleStream": "true"}
PASSES = {"no conv+affine": (fcb, "fuse_conv_bn"), "no conv+add+relu": (fca, "fuse_conv_act"),
          "no affine chain": (fa, "fuse_affine"), "no shuffle": (fsh, "fuse_channel_shuffle"),
          "no shuffle placing": (psh, "place_channel_shuffle"),
          "no concat+relu": (fcr, "fuse_concat_relu"), "no dropout removal": (fdr, "fuse_dropout"),
          "no pool before concat": (pco, "pool_before_concat")}


def _compile_without(graph, module, name):
    orig = getattr(module, name)
    setattr(module, name, lambda g: 0)    # the compiler looks the pass up at call time
    try:
        return pyge.compile(graph, options=SINGLE)
    finally:
        setattr(module, name, orig)


def bench(name: str, rounds: int, tick=time.perf_counter) -> dict[str, float]:
    g = pyge.load_onnx(os.path.join(LIGHT, f"light_{name}.onnx"))
    feeds = {v.name: np.random.default_rng(0).random(v.shape, dtype=np.float32) for v in g.inputs}
    models = {"all fusions": pyge.compile(g, options=SINGLE)}
    for label, (module, fn) in PASSES.items():
        models[label] = _compile_without(g, module, fn)
    models["nothing"] = pyge.compile(g, options={**SINGLE, "ge.exec.enableFusion": "false"})
    for m in models.values():
        m.run(feeds)
    times: dict[str, list[float]] = {k: [] for k in models}
    order = list(models.items())
    rng = random.Random(0)
    for _ in range(rounds):
        rng.shuffle(order)                # a fresh order per round: no fixed neighbour
        for k, m in order:
            t0 = tick()
            m.run(feeds)
            times[k].append(tick() - t0)
    return {k: statistics.median(v) * 1e3 for k, v in times.items()}


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--models", default="resnet50,shufflenet,densenet121,inception_v2")
    ap.add_argument("--rounds", type=int, default=20)
    ap.add_argument("--threads", type=int, default=0, help="torch's intra-op threads (0: as is)")
    ap.add_argument("--clock", choices=("wall", "cpu"), default="wall",
                    help="cpu: the calling thread's CPU time; with --threads 1 a single-stream run "
                         "computes on that thread alone, so other processes do not move it")
    a = ap.parse_args(argv)
    if a.threads:
        torch.set_num_threads(a.threads)
    tick = time.thread_time if a.clock == "cpu" else time.perf_counter
    cols = ["all fusions", *PASSES, "nothing"]
    print(f"{'model':<14}" + "".join(f"{c:>22}" for c in cols) + f"   (median ms, single stream, {a.clock} clock)")
    for name in a.models.split(","):
        r = bench(name, a.rounds, tick)
        print(f"{name:<14}" + "".join(f"{r[c]:>22.2f}" for c in cols), flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
