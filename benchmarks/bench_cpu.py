"""CPU latency of the light models: pyge against onnxruntime, measured side by side.

Every configuration runs in the same process, interleaved round by round in a fresh random
order each round, so machine noise hits them alike; the figure reported is the median
per-round ratio to onnxruntime's sequential mode (ratio < 1: pyge faster). Each timed call
starts after a 60 ms pause: onnxruntime's pool threads keep spinning for about 40 ms after a
run (measured here: 40 ms of CPU in a 100 ms sleep after one shufflenet run), and a
configuration timed while they spin shares a core with them (pyge single stream on
shufflenet: 7 ms alone, 17-28 ms right after onnxruntime).

    python benchmarks/bench_cpu.py                       # inception_v1, resnet50
    python benchmarks/bench_cpu.py --models all --rounds 30
    python benchmarks/bench_cpu.py --multi               # add pyge multi-stream and ORT parallel
"""
from __future__ import annotations

import argparse
import json
import os
import random
import statistics
import sys
import time
from pathlib import Path

import numpy as np
import onnx

import pyge

LIGHT = Path(os.path.dirname(onnx.__file__)) / "backend" / "test" / "data" / "light"
PAUSE_S = 0.06
ALL = ["bvlc_alexnet", "densenet121", "inception_v1", "inception_v2", "resnet50", "shufflenet",
       "squeezenet", "vgg19", "zfnet512"]


def _ort(path: Path, parallel: bool):
    import onnxruntime as ort
    so = ort.SessionOptions()
    so.execution_mode = ort.ExecutionMode.ORT_PARALLEL if parallel else ort.ExecutionMode.ORT_SEQUENTIAL
    s = ort.InferenceSession(str(path), so, providers=["CPUExecutionProvider"])
    return lambda feeds: s.run(None, feeds)


def _pyge(path: Path, options: dict):
    m = pyge.compile(pyge.load_onnx(path), device="cpu", options=options)
    return (lambda feeds: m.run(feeds)), m


def bench_model(name: str, rounds: int, multi: bool) -> dict:
    path = LIGHT / f"light_{name}.onnx"
    g = pyge.load_onnx(path)
    rng = np.random.default_rng(0)
    feeds = {v.name: rng.standard_normal([d if isinstance(d, int) else 1 for d in v.shape]).astype(v.dtype)
             for v in g.inputs}
    runners = {"ort_seq": _ort(path, False)}
    single, m1 = _pyge(path, {"ge.enableSingleStream": "true"})
    runners["pyge_single"] = single
    info = {"streams_single": m1.num_streams}
    if multi:
        runners["ort_par"] = _ort(path, True)
        default, m2 = _pyge(path, {})
        runners["pyge_default"] = default
        info["streams_default"] = m2.num_streams
        lb, m3 = _pyge(path, {"ge.autoMultistreamParallelMode": "LoadBalance:2"})
        runners["pyge_lb2"] = lb
        info["streams_lb2"] = m3.num_streams
    for fn in runners.values():          # warm up
        fn(feeds)
        fn(feeds)
    times: dict[str, list[float]] = {k: [] for k in runners}
    order = list(runners.items())
    rng = random.Random(0)
    for _ in range(rounds):
        rng.shuffle(order)
        for k, fn in order:
            time.sleep(PAUSE_S)
            t0 = time.perf_counter()
            fn(feeds)
            times[k].append(time.perf_counter() - t0)
    base = times["ort_seq"]
    out = {"model": name, **info}
    for k, ts in times.items():
        out[f"{k}_ms"] = round(statistics.median(ts) * 1e3, 3)
        out[f"{k}_ratio"] = round(statistics.median(t / b for t, b in zip(ts, base)), 3)
    return out


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--models", default="inception_v1,resnet50", help="comma list or 'all'")
    ap.add_argument("--rounds", type=int, default=20)
    ap.add_argument("--multi", action="store_true", help="also pyge multi-stream and ORT parallel")
    ap.add_argument("--json", help="write the rows as JSON here")
    a = ap.parse_args(argv)
    names = ALL if a.models == "all" else a.models.split(",")
    rows = [bench_model(n, a.rounds, a.multi) for n in names]
    keys = [k for k in rows[0] if k.endswith("_ratio")]
    print(f"{'model':<14}" + "".join(f"{k.replace('_ratio', ''):>14}" for k in keys) + "   (median ratio to ort_seq)")
    for r in rows:
        print(f"{r['model']:<14}" + "".join(f"{r[k]:>14.3f}" for k in keys)
              + f"   ort_seq {r['ort_seq_ms']:.2f} ms")
    if a.json:
        Path(a.json).write_text(json.dumps(rows, indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())
