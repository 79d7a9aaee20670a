"""Compile time against graph size, over several graph families (issue 22, item 6).

    python benchmarks/bench_compile_scaling.py [--sizes 2000,20000,100000]
        [--families window,fanout,skipchain,transformer] [--mode LoadBalance:4]
        [--out benchmarks/results/compile_scaling.txt]

Families (tiny tensors: only the compiler's work counts):

    window       each node reads one or two of the 12 most recent values (Relu / Add)
    fanout       a node feeds 64 branches of 3 nodes, a Sum joins them; repeated
    skipchain    a chain, every node also reading one value 8..512 nodes back (residuals)
    transformer  repeated blocks: MatMul q/k/v, Reshape/Transpose heads, MatMul, Softmax,
                 MatMul, Transpose/Reshape back, MatMul out, Add residual, ReduceMean norm,
                 MatMul/Relu/MatMul MLP, Add residual (views are skip-engine nodes)

Each graph is compiled once under `ge.autoMultistreamParallelMode=<mode>`; the table gives
process CPU seconds for the whole compile (time.process_time: the machine may be shared),
its wall seconds, and the growth against the smallest size (`x`: CPU time ratio; `x/n`: that
ratio over the size ratio, 1.0 = linear). The pass columns split the wall time so that they
add up to it: the heavier passes one each (model.compile_timings), `fusions` the constant
folding and every fuse_* pass, `others` every other pass, and `checks` what runs between the
passes (the requires/ensures conditions and the graph checks) and around them (turning the
cyclic GC back on at the end), the wall time less the passes'.
"""
from __future__ import annotations

import argparse
import os
import random
import time

import numpy as np

import pyge

WINDOW = 12


def window(n: int, seed: int = 0) -> pyge.Graph:
    rng = random.Random(seed)
    b = pyge.GraphBuilder(f"window{n}")
    vals = [b.input("x", "float32", (2, 3))]
    for i in range(n):
        pool = vals[-WINDOW:]
        if len(pool) > 1 and rng.random() < 0.5:
            a, c = rng.sample(pool, 2)
            vals.append(b.op("Add", [a, c], name=f"n{i}"))
        else:
            vals.append(b.op("Relu", [rng.choice(pool)], name=f"n{i}"))
    b.output(vals[-1], "y")
    return b.build()


def fanout(n: int, width: int = 64, depth: int = 3) -> pyge.Graph:
    b = pyge.GraphBuilder(f"fanout{n}")
    v = b.input("x", "float32", (2, 3))
    k = 0
    while k < n:
        root = b.op("Relu", [v], name=f"r{k}")
        ends = []
        for w in range(width):
            u = root
            for d in range(depth):
                u = b.op("Abs" if d % 2 else "Neg", [u], name=f"b{k}_{w}_{d}")
            ends.append(u)
        v = b.op("Sum", ends, name=f"j{k}")
        k += 2 + width * depth
    b.output(v, "y")
    return b.build()


def skipchain(n: int, seed: int = 0) -> pyge.Graph:
    rng = random.Random(seed)
    b = pyge.GraphBuilder(f"skipchain{n}")
    vals = [b.input("x", "float32", (2, 3))]
    for i in range(n):
        back = rng.randint(8, 512)
        if back < len(vals):
            vals.append(b.op("Add", [vals[-1], vals[-back]], name=f"n{i}"))
        else:
            vals.append(b.op("Relu", [vals[-1]], name=f"n{i}"))
    b.output(vals[-1], "y")
    return b.build()


def transformer(n: int, d: int = 8, heads: int = 2, seq: int = 4) -> pyge.Graph:
    rng = np.random.default_rng(0)
    b = pyge.GraphBuilder(f"transformer{n}")
    x = b.input("x", "float32", (seq, d))
    dh = d // heads

    def w(name, shape):
        return b.initializer(name, rng.standard_normal(shape).astype(np.float32) * 0.1)

    def heads_of(v, name):
        r = b.op("Reshape", [v, b.constant(np.array([seq, heads, dh], np.int64), f"{name}_s")], name=f"{name}_r")
        return b.op("Transpose", [r], name=f"{name}_t", perm=[1, 0, 2])

    blk = 0
    while len(b.graph) < n:
        p = f"L{blk}"
        q, k, v = (heads_of(b.op("MatMul", [x, w(f"{p}_w{c}", (d, d))], name=f"{p}_{c}"), f"{p}_{c}h")
                   for c in "qkv")
        kt = b.op("Transpose", [k], name=f"{p}_kt", perm=[0, 2, 1])
        att = b.op("Softmax", [b.op("MatMul", [q, kt], name=f"{p}_qk")], name=f"{p}_sm", axis=-1)
        o = b.op("MatMul", [att, v], name=f"{p}_av")
        o = b.op("Transpose", [o], name=f"{p}_ot", perm=[1, 0, 2])
        o = b.op("Reshape", [o, b.constant(np.array([seq, d], np.int64), f"{p}_os")], name=f"{p}_or")
        h = b.op("Add", [x, b.op("MatMul", [o, w(f"{p}_wo", (d, d))], name=f"{p}_o")], name=f"{p}_res1")
        mu = b.op("ReduceMean", [h], name=f"{p}_mu", axes=[-1])
        h = b.op("Sub", [h, mu], name=f"{p}_norm")
        m = b.op("Relu", [b.op("MatMul", [h, w(f"{p}_w1", (d, 2 * d))], name=f"{p}_m1")], name=f"{p}_act")
        x = b.op("Add", [h, b.op("MatMul", [m, w(f"{p}_w2", (2 * d, d))], name=f"{p}_m2")], name=f"{p}_res2")
        blk += 1
    b.output(x, "y")
    return b.build()


FAMILIES = {"window": window, "fanout": fanout, "skipchain": skipchain, "transformer": transformer}
HEAVY = ("clone", "infer_types", "partition", "allocate_streams", "custom_passes", "build_plan",
         "insert_events", "assign_event_ids", "plan_memory", "verify")
COLUMNS = HEAVY + ("fusions", "others", "checks")


def split_passes(timings: list[tuple[str, float]], wall: float) -> dict[str, float]:
    """Wall seconds per column of COLUMNS (module doc); a pass run twice counts twice."""
    out = dict.fromkeys(COLUMNS, 0.0)
    for name, dt in timings:
        key = name if name in HEAVY else "fusions" if name.startswith(("fuse_", "fold_")) else "others"
        out[key] += dt
    out["checks"] = wall - sum(dt for _, dt in timings)
    return out


def measure(family: str, n: int, mode: str) -> dict:
    g = FAMILIES[family](n)
    c0, w0 = time.process_time(), time.perf_counter()
    m = pyge.compile(g, options={"ge.autoMultistreamParallelMode": mode})
    cpu, wall = time.process_time() - c0, time.perf_counter() - w0
    return {"nodes": len(g), "cpu": cpu, "wall": wall, "streams": m.num_streams,
            "pairs": m.num_event_pairs, "ids": m.num_physical_events,
            "passes": split_passes(m.compile_timings, wall)}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--sizes", default="2000,20000,100000")
    ap.add_argument("--families", default=",".join(FAMILIES))
    ap.add_argument("--mode", default="LoadBalance:4")
    ap.add_argument("--out", default="")
    args = ap.parse_args()
    sizes = [int(s) for s in args.sizes.split(",") if s]
    lines = [f"pyge.compile under ge.autoMultistreamParallelMode={args.mode}; CPU seconds "
             f"(time.process_time), per-pass wall seconds; load average {os.getloadavg()[0]:.1f} "
             f"on {os.cpu_count()} cores at the start; pass columns: wall s, adding up to `wall s`",
             f"{'family':>11} {'nodes':>7} {'cpu s':>7} {'wall s':>7} {'x':>6} {'x/n':>5} {'streams':>7} "
             f"{'pairs':>7} {'ids':>4} " + " ".join(f"{p[:7]:>7}" for p in COLUMNS)]
    print(lines[0], lines[1], sep="\n", flush=True)
    measure("window", 10, args.mode)   # imports the compiler and its passes: not a size's cost
    for family in [f for f in args.families.split(",") if f]:
        base = None
        for n in sizes:
            r = measure(family, n, args.mode)
            base = base or r
            x = r["cpu"] / base["cpu"]
            line = (f"{family:>11} {r['nodes']:>7} {r['cpu']:>7.2f} {r['wall']:>7.2f} {x:>6.1f} "
                    f"{x / (r['nodes'] / base['nodes']):>5.2f} {r['streams']:>7} {r['pairs']:>7} {r['ids']:>4} "
                    + " ".join(f"{r['passes'][p]:>7.2f}" for p in COLUMNS))
            print(line, flush=True)
            lines.append(line)
    lines.append(f"load average {os.getloadavg()[0]:.1f} at the end")
    print(lines[-1])
    if args.out:
        with open(args.out, "w") as f:
            f.write("\n".join(lines) + "\n")


if __name__ == "__main__":
    main()
