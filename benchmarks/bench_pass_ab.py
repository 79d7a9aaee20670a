"""One graph pass, on and off, on a light model: the two compiled models in one process,
alternating call by call (which goes first alternates too), single stream.

bench_fusion.py times every fusion pass at once, each configuration a model of its own, so
each run finds the caches holding another model's weights; a pass worth 1% sinks in that.
Here only the two models alternate, and the figure is the median over pairs of the ratio
with / without (below 1: the pass pays). With --threads 1 --clock cpu the run computes on
the calling thread alone and its CPU time is what is timed, which other processes on the
machine barely move.

    python benchmarks/bench_pass_ab.py squeezenet pyge.passes.graph.pool_concat pool_before_concat
    python benchmarks/bench_pass_ab.py shufflenet pyge.passes.graph.place_shuffle \\
        place_channel_shuffle --threads 1 --clock cpu
"""
from __future__ import annotations

import argparse
import importlib
import os
import statistics
import sys
import time

import numpy as np
import torch

from light import model_path, random_feeds

try:
    import pyge
except ImportError:                        # a bare checkout: use the source tree
    sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "src"))
    import pyge

SINGLE = {"ge.enableSingleStream": "true"}


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__,
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("model", help="light model name (shufflenet, squeezenet, ...)")
    ap.add_argument("module", help="the pass's module, e.g. pyge.passes.graph.pool_concat")
    ap.add_argument("function", help="the function the compiler calls, e.g. pool_before_concat")
    ap.add_argument("--pairs", type=int, default=300)
    ap.add_argument("--threads", type=int, default=0, help="torch's intra-op threads (0: as is)")
    ap.add_argument("--clock", choices=("wall", "cpu"), default="wall")
    a = ap.parse_args(argv)
    if a.threads:
        torch.set_num_threads(a.threads)
    tick = time.thread_time if a.clock == "cpu" else time.perf_counter
    mod = importlib.import_module(a.module)
    path = model_path(a.model)
    feeds = random_feeds(path)
    g = pyge.load_onnx(path)
    on = pyge.compile(g, device="cpu", options=SINGLE)
    orig = getattr(mod, a.function)
    setattr(mod, a.function, lambda graph: 0)     # the compiler looks the pass up at call time
    try:
        off = pyge.compile(g, device="cpu", options=SINGLE)
    finally:
        setattr(mod, a.function, orig)
    r_on, r_off = on.run(feeds), off.run(feeds)
    err = max(float(np.abs(r_on[k] - r_off[k]).max()) for k in r_on)
    for _ in range(10):
        on.run(feeds)
        off.run(feeds)
    ts: dict[str, list[float]] = {"with": [], "without": []}
    for i in range(a.pairs):
        for k, m in (("with", on), ("without", off)) if i % 2 else (("without", off), ("with", on)):
            t0 = tick()
            m.run(feeds)
            ts[k].append(tick() - t0)
    ratios = sorted(w / o for w, o in zip(ts["with"], ts["without"]))
    load = os.getloadavg()
    print(f"{a.model} {a.module}.{a.function}: plan {len(off.plan.nodes)} -> {len(on.plan.nodes)} "
          f"nodes, outputs differ by at most {err:.3g}")
    print(f"  with {statistics.median(ts['with']) * 1e3:.3f} ms, without "
          f"{statistics.median(ts['without']) * 1e3:.3f} ms, median pair ratio "
          f"{ratios[len(ratios) // 2]:.4f} ({a.pairs} pairs, {a.clock} clock, "
          f"{torch.get_num_threads()} thread(s), load average {load[0]:.2f})")
    return 0


if __name__ == "__main__":
    sys.exit(main())
