"""NonMaxSuppression: pyge against onnxruntime, 1,000 to 60,000 boxes, and 80 classes.

One NonMaxSuppression node (one batch, one class, max_output_boxes_per_class = every box,
iou_threshold 0.5, score_threshold 0), on three kinds of scene:

    uniform    boxes 10-60 wide anywhere in a square that grows with the count (about two
               boxes over each point): most boxes are kept
    dense      the same boxes in a fixed 1000 x 1000 square: many overlaps, half or more
               suppressed at 20,000 boxes and up
    clustered  a detector's output: 20 jittered boxes around each object, most suppressed
    classes    a detector's output with 80 classes, as YOLO-style exports call NMS: the
               clustered scene's boxes (100 to 1,000 of them, --class-sizes), a score per
               class (uniform**4: most low), score_threshold 0.05, at most 100 per class

Each engine runs in a child process of its own; the children take turns in a fresh random
order each round. Within a child each case is timed over several calls (median). The figure
is the median over rounds of pyge / onnxruntime in the same round (below 1: pyge faster);
both engines' kept counts are checked to agree.

    python benchmarks/bench_nms.py                     # writes benchmarks/results/bench_nms.txt
    python benchmarks/bench_nms.py --rounds 5 --sizes 1000,5000 --families clustered,classes
"""
from __future__ import annotations

import argparse
import json
import os
import random
import statistics
import subprocess
import sys
from pathlib import Path

from light import child_env

FAMILIES = ["uniform", "dense", "clustered", "classes"]
SIZES = [1000, 5000, 20000, 60000]
CLASS_SIZES = [100, 300, 1000]

CHILD = r'''
import json, statistics, sys, time
import numpy as np
from onnx import TensorProto as T, helper
engine, families, sizes = sys.argv[1], sys.argv[2].split(","), [int(s) for s in sys.argv[3].split(",")]
class_sizes = [int(s) for s in sys.argv[4].split(",")]

def scene(family, n, seed=0):
    rng = np.random.default_rng(seed)
    if family in ("clustered", "classes"):
        k = max(n // 20, 1)
        c = rng.uniform(0, 60 * np.sqrt(k), (k, 2))
        size = rng.uniform(20, 80, (k, 1))
        pick = rng.integers(0, k, n)
        xy = c[pick] + rng.normal(0, 3, (n, 2))
        wh = size[pick] * rng.uniform(0.8, 1.25, (n, 2))
        lo, hi = xy - wh / 2, xy + wh / 2
    else:
        side = 30 * np.sqrt(n) if family == "uniform" else 1000.0
        lo = rng.uniform(0, side, (n, 2))
        hi = lo + rng.uniform(10, 60, (n, 2))
    boxes = np.concatenate([lo[:, ::-1], hi[:, ::-1]], 1)[None].astype(np.float32)
    if family == "classes":
        scores = (rng.uniform(0, 1, (1, 80, n)) ** 4).astype(np.float32)
        return {"boxes": boxes, "scores": scores, "m": np.array([100], np.int64),
                "iou": np.array([0.5], np.float32), "st": np.array([0.05], np.float32)}
    scores = rng.uniform(0, 1, (1, 1, n)).astype(np.float32)
    return {"boxes": boxes, "scores": scores, "m": np.array([n], np.int64),
            "iou": np.array([0.5], np.float32), "st": np.array([0.0], np.float32)}

def model():
    f, i = T.FLOAT, T.INT64
    ins = [helper.make_tensor_value_info("boxes", f, [1, "n", 4]),
           helper.make_tensor_value_info("scores", f, [1, "c", "n"]),
           helper.make_tensor_value_info("m", i, [1]), helper.make_tensor_value_info("iou", f, [1]),
           helper.make_tensor_value_info("st", f, [1])]
    node = helper.make_node("NonMaxSuppression", ["boxes", "scores", "m", "iou", "st"], ["y"])
    g = helper.make_graph([node], "nms", ins, [helper.make_tensor_value_info("y", i, None)])
    return helper.make_model(g, opset_imports=[helper.make_opsetid("", 11)], ir_version=8)

if engine == "pyge":
    import pyge
    cm = pyge.compile(pyge.load_onnx(model()), device="cpu")
    run = lambda feeds: cm.run(feeds)["y"]
else:
    import onnxruntime as ort
    so = ort.SessionOptions()
    so.log_severity_level = 3
    s = ort.InferenceSession(model().SerializeToString(), so, providers=["CPUExecutionProvider"])
    run = lambda feeds: s.run(None, feeds)[0]
out = {}
for fam in families:
    for n in (class_sizes if fam == "classes" else sizes):
        feeds = scene(fam, n)
        kept = len(run(feeds))
        times, spent = [], 0.0
        while len(times) < 3 or (spent < 1.0 and len(times) < 15):
            t0 = time.perf_counter()
            run(feeds)
            times.append(time.perf_counter() - t0)
            spent += times[-1]
        out[f"{fam} {n}"] = {"ms": statistics.median(times) * 1e3, "kept": kept}
print(json.dumps(out))
'''


def _child(engine: str, families: list[str], sizes: list[int], class_sizes: list[int]) -> dict:
    p = subprocess.run([sys.executable, "-c", CHILD, engine, ",".join(families),
                        ",".join(map(str, sizes)), ",".join(map(str, class_sizes))],
                       env=child_env(), capture_output=True, text=True, timeout=3600)
    if p.returncode:
        raise SystemExit(f"{engine} child failed:\n{p.stderr[-3000:]}")
    return json.loads(p.stdout.strip().splitlines()[-1])


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__,
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--families", default=",".join(FAMILIES))
    ap.add_argument("--sizes", default=",".join(map(str, SIZES)))
    ap.add_argument("--class-sizes", default=",".join(map(str, CLASS_SIZES)),
                    help="boxes of the 80-class scenes")
    ap.add_argument("--rounds", type=int, default=3, help="child processes per engine")
    ap.add_argument("--out", default=str(Path(__file__).parent / "results" / "bench_nms.txt"),
                    help="results file ('' for none)")
    a = ap.parse_args(argv)
    families, sizes = a.families.split(","), [int(s) for s in a.sizes.split(",")]
    class_sizes = [int(s) for s in a.class_sizes.split(",")]
    rng = random.Random(0)
    rounds = []
    for r in range(a.rounds):
        res = {}
        for engine in rng.sample(["ort", "pyge"], 2):
            res[engine] = _child(engine, families, sizes, class_sizes)
        rounds.append(res)
        print(f"round {r + 1}/{a.rounds} done", file=sys.stderr, flush=True)
    lines = [f"{'case':<18}{'kept':>8}{'ort ms':>11}{'pyge ms':>11}{'pyge/ort':>10}"]
    for case in rounds[0]["ort"]:
        kept = {x[e][case]["kept"] for x in rounds for e in ("ort", "pyge")}
        if len(kept) != 1:
            raise SystemExit(f"{case}: the engines kept different counts {sorted(kept)}")
        ort_ms = statistics.median(x["ort"][case]["ms"] for x in rounds)
        pyge_ms = statistics.median(x["pyge"][case]["ms"] for x in rounds)
        ratio = statistics.median(x["pyge"][case]["ms"] / x["ort"][case]["ms"] for x in rounds)
        lines.append(f"{case:<18}{kept.pop():>8}{ort_ms:>11.2f}{pyge_ms:>11.2f}{ratio:>10.3f}")
    load = os.getloadavg()
    lines.append(f"(median of {a.rounds} rounds; load average at the end "
                 f"{load[0]:.2f} {load[1]:.2f} {load[2]:.2f}; {os.cpu_count()} CPUs)")
    text = "\n".join(lines)
    print(text)
    if a.out:
        Path(a.out).write_text(text + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
