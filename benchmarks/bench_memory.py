"""Planned memory: multi-stream peak over single-stream peak on the light models, and how many
memory events the planner added; plus the cost of profiling a run (profiled / plain time).

    python benchmarks/bench_memory.py
"""
from __future__ import annotations

import os
import statistics
import sys
import time

import numpy as np
import onnx

import pyge

LIGHT = os.path.join(os.path.dirname(onnx.__file__), "backend", "test", "data", "light")
MODELS = ["bvlc_alexnet", "densenet121", "inception_v1", "inception_v2", "resnet50", "shufflenet",
          "squeezenet", "vgg19", "zfnet512"]
MODES = {"LoadBalance:4": {"ge.autoMultistreamParallelMode": "LoadBalance:4"},
         "MainStream:4": {"ge.autoMultistreamParallelMode": "MainStream:4"},
         "parallel:4": {"ge.streamMaxParallelNum": "4"}}


def memory_table(fusion: str) -> None:
    print(f"ge.exec.enableFusion={fusion}: multi-stream peak / single-stream peak (memory events, streams)")
    print(f"{'model':<14}" + "".join(f"{m:>24}" for m in MODES))
    for name in MODELS:
        g = pyge.load_onnx(os.path.join(LIGHT, f"light_{name}.onnx"))
        base = {"ge.exec.enableFusion": fusion}
        single = pyge.compile(g, options={**base, "ge.enableSingleStream": "true"}).memory.peak_bytes
        cells = []
        for opts in MODES.values():
            m = pyge.compile(g, options={**base, **opts})
            mem_events = sum(e.reason == "memory" for e in m.events)
            cells.append(f"{m.memory.peak_bytes / single:.3f} ({mem_events} ev, {m.num_streams} st)")
        print(f"{name:<14}" + "".join(f"{c:>24}" for c in cells), flush=True)


def profile_cost(name: str = "inception_v1", rounds: int = 20) -> None:
    g = pyge.load_onnx(os.path.join(LIGHT, f"light_{name}.onnx"))
    feeds = {v.name: np.random.default_rng(0).random(v.shape, dtype=np.float32) for v in g.inputs}
    for label, opts in (("1 stream", {}), ("LoadBalance:2", {"ge.autoMultistreamParallelMode": "LoadBalance:2"})):
        m = pyge.compile(g, options=opts)
        m.run(feeds)
        ratios = []
        for _ in range(rounds):
            t0 = time.perf_counter()
            m.run(feeds)
            t1 = time.perf_counter()
            m.profile(feeds, runs=1, warmup=0)
            ratios.append((time.perf_counter() - t1) / (t1 - t0))
        print(f"profiling {name}, {label}: profiled / plain run, median of {rounds}: "
              f"{statistics.median(ratios):.3f}")


def main() -> int:
    memory_table("true")
    memory_table("false")
    profile_cost()
    return 0


if __name__ == "__main__":
    sys.exit(main())
