"""Compile-time scaling of the synchronisation passes (11 insert_events, 12 assign_event_ids,
14 verify_plan) on random DAGs of 1k/10k/100k nodes over several streams.

    python benchmarks/bench_events_scaling.py [--sizes 1000,10000,100000] [--streams 4,16]

Random DAGs: each node reads up to 3 of the previous 64 nodes (networks are local), 5% of
nodes carry a control edge, streams uniform at random (the worst case for events). Prints
seconds per pass, the events kept against the cross-stream edges there were, physical ids,
and the time per node relative to the smallest size (flat = linear).
"""
from __future__ import annotations

import argparse
import random
import time

from pyge.passes.event_ids import assign_event_ids
from pyge.passes.events import insert_events
from pyge.passes.events_random import random_spec, spec_to_plan
from pyge.passes.verify import verify_plan


def cross_edges(spec) -> int:
    return sum(1 for v, (ps, cs) in enumerate(zip(spec.preds, spec.ctrl))
               for u in set(ps) | set(cs) if spec.streams[u] != spec.streams[v])


def run_one(n: int, streams: int, seed: int = 0) -> dict:
    spec = random_spec(random.Random(seed), n, streams)
    plan = spec_to_plan(spec)
    t0 = time.process_time()
    kept = insert_events(plan)
    t1 = time.process_time()
    ids = assign_event_ids(plan, 1 << 20)
    t2 = time.process_time()
    verify_plan(plan)
    t3 = time.process_time()
    return {"n": n, "streams": streams, "cross": cross_edges(spec), "events": kept, "ids": ids,
            "insert": t1 - t0, "ids_s": t2 - t1, "verify": t3 - t2, "total": t3 - t0}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--sizes", default="1000,10000,100000")
    ap.add_argument("--streams", default="4,16")
    args = ap.parse_args()
    sizes = [int(x) for x in args.sizes.split(",")]
    print(f"{'nodes':>7} {'streams':>7} {'cross':>7} {'events':>7} {'ids':>4} "
          f"{'insert s':>9} {'ids s':>7} {'verify s':>9} {'total s':>8} {'us/node':>8} {'vs min':>6}")
    for s in (int(x) for x in args.streams.split(",")):
        base = None
        for n in sizes:
            r = run_one(n, s)
            per = r["total"] / n * 1e6
            base = base or per
            print(f"{n:>7} {s:>7} {r['cross']:>7} {r['events']:>7} {r['ids']:>4} "
                  f"{r['insert']:>9.3f} {r['ids_s']:>7.3f} {r['verify']:>9.3f} {r['total']:>8.3f} "
                  f"{per:>8.1f} {per / base:>6.2f}")


if __name__ == "__main__":
    main()
