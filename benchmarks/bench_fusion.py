"""What each fusion pass buys on the CPU: the same light model compiled with all fusions, with
one fusion pass switched off, and with ge.exec.enableFusion=false (no folding, no fusion);
single stream, interleaved in one process (a fresh random order each round), median ms.

    python benchmarks/bench_fusion.py                      # resnet50 shufflenet densenet121 inception_v2
    python benchmarks/bench_fusion.py --models inception_v1 --rounds 30
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

import pyge
import pyge.passes.graph.fuse_affine as fa
import pyge.passes.graph.fuse_concat_relu as fcr
import pyge.passes.graph.fuse_conv_act as fca
import pyge.passes.graph.fuse_conv_bn as fcb
import pyge.passes.graph.fuse_dropout as fdr
import pyge.passes.graph.fuse_shuffle as fsh
import pyge.passes.graph.place_shuffle as psh

LIGHT = os.path.join(os.path.dirname(onnx.__file__), "backend", "test", "data", "light")
SINGLE = {"ge.enableSingleStream": "true"}
PASSES = {"no conv+affine": (fcb, "fuse_conv_bn"), "no conv+add+relu": (fca, "fuse_conv_act"),
          "no affine chain": (fa, "fuse_affine"), "no shuffle": (fsh, "fuse_channel_shuffle"),
          "no shuffle placing": (psh, "place_channel_shuffle"),
          "no concat+relu": (fcr, "fuse_concat_relu"), "no dropout removal": (fdr, "fuse_dropout")}


def _compile_without(graph, module, name):
    orig = getattr(module, name)
    setattr(module, name, lambda g: 0)    # the compiler looks the pass up at call time
    try:
        return pyge.compile(graph, options=SINGLE)
    finally:
        setattr(module, name, orig)


def bench(name: str, rounds: int) -> dict[str, float]:
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
            t0 = time.perf_counter()
            m.run(feeds)
            times[k].append(time.perf_counter() - t0)
    return {k: statistics.median(v) * 1e3 for k, v in times.items()}


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--models", default="resnet50,shufflenet,densenet121,inception_v2")
    ap.add_argument("--rounds", type=int, default=20)
    a = ap.parse_args(argv)
    cols = ["all fusions", *PASSES, "nothing"]
    print(f"{'model':<14}" + "".join(f"{c:>20}" for c in cols) + "   (median ms, single stream)")
    for name in a.models.split(","):
        r = bench(name, a.rounds)
        print(f"{name:<14}" + "".join(f"{r[c]:>20.2f}" for c in cols), flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
