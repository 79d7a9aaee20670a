"""GE's multi-stream autotune sample, ported: try stream modes, time them, recommend one.

    python examples/multi_stream_autotune/run.py [--steps 12] [--dim 512]
        [--configs default,LoadBalance:2,LoadBalance:4,MainStream:2,MainStream:4]

The workload (`four_branches`, as GE's sample_run.py) is a static graph of four independent
pointwise branches joined by one Sum. The tuning pass is a plugin, installed as GE installs its
library: opp/vendors/ge_ms_autotune/custom_fusion_passes/ge_ms_autotune_pass.py beside this
file. For each candidate the driver sets $GE_AUTO_MULTISTREAM_PARALLEL_MODE, compiles the same
graph (the pass turns the variable into the graph attribute ge.autoMultistreamParallelMode,
which overrides the option), checks that the mode took effect and that the outputs equal the
default's, runs `steps` timed steps after one warm-up, and ranks candidates by median step time.
As in GE's driver, a candidate is recommended when its median beats the default's by 5 % or
more; otherwise the default is kept.

GE runs one process per candidate, because a compiled-in pass reads the variable once per
process; here the pass reads it at every compilation, so one process compiles them all. To use
the pass with another program instead, point $PYGE_OPP_PATH at the opp folder and set the
variable when starting that program. The plugin rules apply to the folder (plugins.md): a file
or folder that group or others may write to is refused (a checkout made with umask 002 needs
`chmod -R go-w opp`). Timings depend on the machine and its load.
"""
from __future__ import annotations

import argparse
import os
import statistics
import time
from dataclasses import dataclass
from pathlib import Path

import numpy as np

import pyge
from pyge.passes.custom.plugins import load_plugins

OPP = Path(__file__).resolve().parent / "opp"
MODE_ENV = "GE_AUTO_MULTISTREAM_PARALLEL_MODE"
MODE_OPTION = "ge.autoMultistreamParallelMode"
CONFIGS = ("default", "LoadBalance:2", "LoadBalance:4", "MainStream:2", "MainStream:4")
IMPROVES = 1.05                       # GE's driver: a speedup of 5 % or more counts


def four_branches(dim: int = 512) -> pyge.Graph:
    """Four independent branches of three pointwise operators, joined by one Sum."""
    b = pyge.GraphBuilder("four_branches")
    x = b.input("x", "float32", (dim, dim))
    heads = []
    for i, ops in enumerate((("Relu", "Exp"), ("Abs", "Sqrt"), ("Neg", "Sigmoid"), ("Tanh", "Abs"))):
        h = x
        for j, op in enumerate(ops + ("Neg",)):
            h = b.op(op, [h], name=f"b{i}_{j}_{op}")
        heads.append(h)
    b.output(b.op("Sum", heads, name="join"), "y")
    return b.build()


@dataclass
class Trial:
    config: str
    mode: object              # the mode the model was built with (None: no automatic mode)
    streams: int
    times_ms: list[float]
    same: bool                # outputs identical to the default's

    @property
    def median(self) -> float:
        return statistics.median(self.times_ms)


def trial(graph: pyge.Graph, config: str, feeds: dict, steps: int, reference=None) -> Trial:
    """Compile `graph` with `config` in the tuning variable, run it and time it."""
    old = os.environ.pop(MODE_ENV, None)
    try:
        if config != "default":
            os.environ[MODE_ENV] = config
        model = pyge.compile(graph)
    finally:
        os.environ.pop(MODE_ENV, None)
        if old is not None:
            os.environ[MODE_ENV] = old
    out = model.run(feeds)["y"]                       # warm-up, and the numbers to compare
    times = []
    for _ in range(steps):
        t0 = time.perf_counter()
        model.run(feeds)
        times.append((time.perf_counter() - t0) * 1e3)
    same = True if reference is None else bool(np.array_equal(out, reference))
    return Trial(config, model.options[MODE_OPTION], model.num_streams, times, same), out


def tune(configs=CONFIGS, steps: int = 12, dim: int = 512, opp=OPP) -> tuple[list[Trial], str]:
    """Every candidate's Trial (default first) and the recommended configuration, with the
    tuning pass loaded from the plugin folder `opp`."""
    graph = four_branches(dim)
    feeds = {"x": np.random.default_rng(0).standard_normal((dim, dim)).astype(np.float32)}
    configs = ["default", *(c for c in configs if c != "default")]
    with pyge.custom_passes_scope():          # the plugin's pass is registered for the tuning only
        load_plugins(opp, entry_points=False)
        base, ref = trial(graph, "default", feeds, steps)
        trials = [base] + [trial(graph, c, feeds, steps, ref)[0] for c in configs[1:]]
    valid = [t for t in trials[1:] if t.same]
    best = min(valid, key=lambda t: t.median, default=None)
    pick = best.config if best is not None and base.median / best.median >= IMPROVES else "default"
    return trials, pick


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--steps", type=int, default=12)
    ap.add_argument("--dim", type=int, default=512)
    ap.add_argument("--configs", default=",".join(CONFIGS))
    ap.add_argument("--opp", default=str(OPP), help="the plugin folder holding the tuning pass")
    args = ap.parse_args(argv)
    trials, pick = tune(args.configs.split(","), args.steps, args.dim, args.opp)
    base = trials[0].median
    print(f"{'config':<16}{'mode':<20}{'streams':>8}{'median ms':>11}{'speedup':>9}  outputs")
    for t in sorted(trials, key=lambda t: t.median):
        print(f"{t.config:<16}{str(t.mode):<20}{t.streams:>8}{t.median:>11.3f}"
              f"{base / t.median:>9.3f}  {'same' if t.same else 'DIFFER'}")
    print(f"recommended: {pick}")
    if pick != "default":
        print(f"reproduce: {MODE_ENV}={pick} PYGE_OPP_PATH={args.opp} <your program>")
    return 0 if all(t.same for t in trials) else 1


if __name__ == "__main__":
    raise SystemExit(main())
