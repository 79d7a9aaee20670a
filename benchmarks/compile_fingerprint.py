"""A fingerprint of what pyge.compile makes of each bench_compile_scaling family, to check that
a compile-time change leaves every result as it was.

    python benchmarks/compile_fingerprint.py [--sizes 2000,20000] [--out FILE.json]

For each family and size: a SHA-256 of the plan's values (dtypes, shapes, buffers), nodes
(streams, inputs, release points), streams' steps, events (physical ids included) and
memory plan (offsets, sizes), with the stream, event-pair and physical-id counts. Run it
before and after a change (each with its own checkout's src on PYTHONPATH) and compare the
two files: any difference is a changed result.
"""
from __future__ import annotations

import argparse
import dataclasses
import hashlib
import json

import pyge
from bench_compile_scaling import FAMILIES

FIELDS = ("values", "nodes", "streams", "events", "inputs", "outputs", "memory", "custom_streams")


def fingerprint(family: str, n: int, mode: str = "LoadBalance:4") -> list:
    m = pyge.compile(FAMILIES[family](n), options={"ge.autoMultistreamParallelMode": mode})
    d = dataclasses.asdict(m.plan)
    text = json.dumps({k: d[k] for k in FIELDS}, sort_keys=True, default=str)
    return [hashlib.sha256(text.encode()).hexdigest(), m.num_streams, m.num_event_pairs,
            m.num_physical_events]


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--sizes", default="2000,20000")
    ap.add_argument("--out", default="")
    args = ap.parse_args()
    out = {}
    for family in FAMILIES:
        for n in [int(s) for s in args.sizes.split(",") if s]:
            out[f"{family}{n}"] = fingerprint(family, n)
            print(family, n, *out[f"{family}{n}"], flush=True)
    if args.out:
        with open(args.out, "w") as f:
            json.dump(out, f, indent=1, sort_keys=True)


if __name__ == "__main__":
    main()
