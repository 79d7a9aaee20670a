"""Compile-time scaling on random DAGs of 1k/10k/100k nodes.

    python benchmarks/bench_events_scaling.py [--sizes 1000,10000,100000] [--streams 4,16]
        [--compile-sizes 1000,10000,100000] [--modes LoadBalance:4,random:16]
        [--skip-passes] [--skip-compile] [--force-memory-events]

Random DAGs: each node reads up to 3 of the previous 64 nodes (networks are local), 5% of
nodes carry a control edge. Three tables:

1. the synchronisation passes (insert_events, assign_event_ids, verify_plan) on plans made
   directly (pyge.testing.random_dags.spec_to_plan), streams uniform at random (the worst
   case for events): seconds per pass, events kept against cross-stream edges, physical ids;
2. the memory plan (plan_memory, then verify_plan again) on the same plans, every value a
   (2, 3) float32 tensor (256 B in the arena), nodes nobody reads being graph outputs:
   seconds, arena, memory events added;
3. a full `pyge.compile` of the same DAG built as a graph (Relu/Abs/Identity/Add/Sum on a
   (2, 3) tensor, pyge.testing.random_dags.spec_to_graph): seconds per compiler pass, from
   model.compile_timings. Modes: `LoadBalance:N` (ge.autoMultistreamParallelMode) or
   `random:N` (a custom stream pass putting each node on one of N streams at random).

No cap on events anywhere (pyge.maxEventNum's default, as in GE): 100,000 nodes on 16
streams need thousands of physical ids, which a compile-time cap used to refuse.

Times are process CPU seconds for tables 1-2 and wall seconds (the pipeline's timer) for 3;
`us/node` relative to the smallest size is flat when a pass is linear.
`--force-memory-events` sets memory.SLACK to 0, so the 256-byte values of these graphs
trigger memory events wherever the arena exceeds 1.15x the single-stream one (it would not
otherwise: the savings are far below the 1 MiB slack).
"""
from __future__ import annotations

import argparse
import random
import time

from pyge.passes.sync.event_ids import assign_event_ids
from pyge.passes.sync.events import insert_events
from pyge.testing.random_dags import fixed_streams_pass, random_spec, spec_to_graph, spec_to_plan
from pyge.passes.verify.checks import verify_plan
from pyge.plan.plan import value_nbytes

SHORT = {"clone": "clone", "check_ops": "check", "infer_types": "infer", "fold_constants": "fold",
         "fuse_conv_bn": "fuse_bn", "fuse_conv_act": "fuse_act", "fuse_affine": "affine",
         "fuse_shuffle": "shuffle", "assign_engines": "eng", "allocate_streams": "streams",
         "stream_policy": "policy", "custom_passes": "custom", "renumber_streams": "renum",
         "build_plan": "build", "insert_events": "events", "assign_event_ids": "ids",
         "plan_memory": "memory", "verify": "verify"}


def cross_edges(spec) -> int:
    return sum(1 for v, (ps, cs) in enumerate(zip(spec.preds, spec.ctrl))
               for u in set(ps) | set(cs) if spec.streams[u] != spec.streams[v])


def run_events(n: int, streams: int, seed: int = 0) -> dict:
    spec = random_spec(random.Random(seed), n, streams)
    plan = spec_to_plan(spec)
    t0 = time.process_time()
    kept = insert_events(plan)
    t1 = time.process_time()
    ids = assign_event_ids(plan)            # no cap (pyge.maxEventNum's default, as in GE)
    t2 = time.process_time()
    verify_plan(plan)
    t3 = time.process_time()
    return {"n": n, "streams": streams, "cross": cross_edges(spec), "events": kept, "ids": ids,
            "insert": t1 - t0, "ids_s": t2 - t1, "verify": t3 - t2, "total": t3 - t0,
            "plan": plan, "spec": spec}


def run_memory(r: dict) -> dict:
    from pyge.passes.memory.planner import plan_memory
    plan, spec = r["plan"], r["spec"]
    read = {p for ps in spec.preds for p in ps}
    for v in plan.values:
        v.nbytes = value_nbytes(v.dtype, v.shape)
        v.is_output = v.producer >= 0 and v.producer not in read
    t0 = time.process_time()
    mem = plan_memory(plan)
    t1 = time.process_time()
    verify_plan(plan)
    t2 = time.process_time()
    return {"memory": t1 - t0, "verify": t2 - t1, "peak": mem.peak_bytes,
            "no_reuse": mem.no_reuse_bytes, "mem_events": plan.meta.get("memory_events", 0)}


def compile_random(n: int, mode: str, seed: int = 0):
    """pyge.compile of a random DAG; `mode` is LoadBalance:N, MainStream:N or random:N."""
    import pyge
    kind, k = mode.split(":")
    spec = random_spec(random.Random(seed), n, int(k))
    g = spec_to_graph(spec, f"random{n}")
    opts: dict[str, str] = {}            # no event cap: pyge.maxEventNum defaults to none, as in GE
    if kind != "random":
        return pyge.compile(g, "cpu", {**opts, "ge.autoMultistreamParallelMode": mode})
    from pyge.passes.custom import custom_passes_scope
    wanted = {node.name: node.stream_id for node in g.nodes}
    assign = fixed_streams_pass(wanted)

    with custom_passes_scope():
        pyge.register_custom_pass("BenchRandomStreams").custom_allocate_stream_pass_fn(assign)
        return pyge.compile(g, "cpu", opts)


def passes_tables(sizes: list[int], streams: list[int]) -> None:
    print("events: insert_events / assign_event_ids / verify_plan on spec_to_plan plans")
    print(f"{'nodes':>7} {'streams':>7} {'cross':>7} {'events':>7} {'ids':>4} "
          f"{'insert s':>9} {'ids s':>7} {'verify s':>9} {'total s':>8} {'us/node':>8} {'vs min':>6}")
    mem_rows = []
    for s in streams:
        base = None
        for n in sizes:
            r = run_events(n, s)
            per = r["total"] / n * 1e6
            base = base or per
            print(f"{n:>7} {s:>7} {r['cross']:>7} {r['events']:>7} {r['ids']:>4} "
                  f"{r['insert']:>9.3f} {r['ids_s']:>7.3f} {r['verify']:>9.3f} {r['total']:>8.3f} "
                  f"{per:>8.1f} {per / base:>6.2f}", flush=True)
            mem_rows.append((n, s, run_memory(r)))
            del r
    print("\nmemory: plan_memory, then verify_plan with the memory checks, same plans")
    print(f"{'nodes':>7} {'streams':>7} {'memory s':>9} {'verify s':>9} {'arena B':>9} "
          f"{'no reuse B':>11} {'mem ev':>7} {'us/node':>8}")
    for n, s, m in mem_rows:
        print(f"{n:>7} {s:>7} {m['memory']:>9.3f} {m['verify']:>9.3f} {m['peak']:>9} "
              f"{m['no_reuse']:>11} {m['mem_events']:>7} {(m['memory'] + m['verify']) / n * 1e6:>8.1f}")


def compile_table(sizes: list[int], modes: list[str]) -> None:
    from pyge.compiler import PIPELINE
    print("\nfull pyge.compile (seconds per pass, model.compile_timings; total CPU seconds)")
    cols = [SHORT.get(p.name, p.name[:7]) for p in PIPELINE]
    print(f"{'nodes':>7} {'mode':>14} " + " ".join(f"{c:>7}" for c in cols)
          + f" {'total':>7} {'events':>7} {'mem ev':>6}")
    for mode in modes:
        for n in sizes:
            c0 = time.process_time()
            m = compile_random(n, mode)
            cpu = time.process_time() - c0
            t = {SHORT.get(k, k[:7]): dt for k, dt in m.compile_timings}
            mem_ev = sum(1 for e in m.plan.events if e.reason == "memory")
            print(f"{n:>7} {mode:>14} " + " ".join(f"{t.get(c, 0.0):>7.2f}" for c in cols)
                  + f" {sum(t.values()):>7.2f} {len(m.plan.events):>7} {mem_ev:>6}"
                  f"  (cpu {cpu:.2f} s, {m.num_physical_events} physical ids)", flush=True)
            del m


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--sizes", default="1000,10000,100000")
    ap.add_argument("--streams", default="4,16")
    ap.add_argument("--compile-sizes", default="1000,10000,100000")
    ap.add_argument("--modes", default="LoadBalance:4,random:16")
    ap.add_argument("--skip-passes", action="store_true", help="only the full-compile table")
    ap.add_argument("--skip-compile", action="store_true", help="no full-compile table")
    ap.add_argument("--force-memory-events", action="store_true",
                    help="memory.SLACK = 0: add memory events past 1.15x however few bytes")
    args = ap.parse_args()
    if args.force_memory_events:
        from pyge.passes.memory import planner as memory
        memory.SLACK = 0
    ints = lambda s: [int(x) for x in s.split(",") if x]  # noqa: E731
    if not args.skip_passes:
        passes_tables(ints(args.sizes), ints(args.streams))
    if not args.skip_compile:
        compile_table(ints(args.compile_sizes), [m for m in args.modes.split(",") if m])


if __name__ == "__main__":
    main()
