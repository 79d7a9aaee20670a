"""Load and compile time of models with large weights: pyge against ONNX's own shape
inference of the whole model (which pyge's loader ran on every weight byte until it set
the large ones aside) and against creating an onnxruntime session.

The light models' weights are constant fills (ConstantOfShape nodes); pyge.testing.
random_weights turns them into initializers of their real size (vgg19: 550 MB), as in a
trained model file. Each round runs every step once, in a fresh random order; medians of
the rounds.

    python benchmarks/bench_load.py [--rounds 3] [--models vgg19,bvlc_alexnet,resnet50,inception_v1]
    python benchmarks/bench_load.py --memory     # resident memory of each engine, in a child each
"""
from __future__ import annotations

import argparse
import json
import os
import random
import statistics
import subprocess
import sys
import tempfile
import time

import onnx
import onnxruntime as ort

import pyge
from light import child_env
from pyge.frontends import onnx_proto
from pyge.testing import light_path, random_weights


def steps(mp: onnx.ModelProto, data: bytes) -> dict:
    def pyge_load():
        return pyge.load_onnx(mp)

    def pyge_load_compile():
        return pyge.compile(pyge.load_onnx(mp), "cpu")

    def pyge_all_weights():
        """The same, with every weight's data through shape inference (pyge before it set
        large weights aside): onnx_proto.keeps_shape_data says yes to everything."""
        saved = onnx_proto.keeps_shape_data
        onnx_proto.keeps_shape_data = lambda dtype, size: True
        try:
            return pyge.compile(pyge.load_onnx(mp), "cpu")
        finally:
            onnx_proto.keeps_shape_data = saved

    def onnx_infer():
        return onnx.shape_inference.infer_shapes(mp, check_type=False, strict_mode=False, data_prop=True)

    def ort_session():
        so = ort.SessionOptions()
        so.intra_op_num_threads = 2
        so.log_severity_level = 3          # quiet about unused initializers in the originals
        return ort.InferenceSession(data, so, providers=["CPUExecutionProvider"])
    return {"pyge.load_onnx": pyge_load, "load_onnx + compile": pyge_load_compile,
            "same, all weights": pyge_all_weights, "onnx infer_shapes": onnx_infer,
            "onnxruntime session": ort_session}


MEMORY_CHILD = r"""
import json, sys
from light import random_feeds
def rss_mb():
    with open("/proc/self/status") as f:
        return next(int(l.split()[1]) for l in f if l.startswith("VmRSS")) / 1024
engine, path = sys.argv[1], sys.argv[2]
feeds = random_feeds(path)
if engine == "pyge":
    import pyge
    base = rss_mb()
    m = pyge.compile(pyge.load_onnx(path), "cpu")
    run = lambda: m.run(feeds)
else:
    import onnxruntime as ort
    base = rss_mb()
    so = ort.SessionOptions()
    so.log_severity_level = 3
    s = ort.InferenceSession(path, so, providers=["CPUExecutionProvider"])
    run = lambda: s.run(None, feeds)
loaded = rss_mb()
run(); run()
print(json.dumps({"loaded": loaded - base, "after_runs": rss_mb() - base}))
"""


def memory(names: list[str]) -> None:
    """Resident memory each engine adds (after its import) to load the model and run it twice."""
    print("MB of resident memory added after the engine's import: loaded / after two runs")
    print(f"{'model':<14}{'MB':>7}{'pyge':>18}{'onnxruntime':>18}")
    with tempfile.TemporaryDirectory() as tmp:
        for name in names:
            path = os.path.join(tmp, f"{name}.onnx")
            onnx.save(random_weights(onnx.load(light_path(name))), path)
            cells = []
            for engine in ("pyge", "ort"):
                p = subprocess.run([sys.executable, "-c", MEMORY_CHILD, engine, path], capture_output=True,
                                   text=True, timeout=600, env=child_env())
                if p.returncode:
                    raise SystemExit(f"{engine} child failed:\n{p.stderr[-2000:]}")
                r = json.loads(p.stdout.strip().splitlines()[-1])
                cells.append(f"{r['loaded']:.0f} / {r['after_runs']:.0f}")
            print(f"{name:<14}{os.path.getsize(path) / 2**20:>7.0f}" + "".join(f"{c:>18}" for c in cells), flush=True)


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--models", default="vgg19,bvlc_alexnet,resnet50,inception_v1")
    ap.add_argument("--memory", action="store_true", help="resident memory instead of time")
    a = ap.parse_args(argv)
    if a.memory:
        memory(a.models.split(","))
        return 0
    rng = random.Random(0)
    print(f"seconds, median of {a.rounds} rounds (each step once per round, random order)")
    header = None
    for name in a.models.split(","):
        mp = random_weights(onnx.load(light_path(name)))
        data = mp.SerializeToString()
        fns = steps(mp, data)
        if header is None:
            header = f"{'model':<14}{'MB':>7}" + "".join(f"{k:>22}" for k in fns)
            print(header)
        times = {k: [] for k in fns}
        for _ in range(a.rounds):
            for k in rng.sample(list(fns), len(fns)):
                t0 = time.perf_counter()
                fns[k]()
                times[k].append(time.perf_counter() - t0)
        print(f"{name:<14}{len(data) / 2**20:>7.0f}" + "".join(f"{statistics.median(v):>22.3f}" for v in times.values()),
              flush=True)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
