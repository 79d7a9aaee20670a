"""RoiAlign on the CPU: pyge against onnxruntime, side by side in one process.

A detection head's shape (a 256-channel stride-4 feature map of 50x50, rois of 8-60 pixels,
7x7 bins), sampling_ratio 2 (torchvision's exported Faster/Mask R-CNN) and 0 (adaptive, the
ONNX default). Calls alternate between the two engines, a fresh order each round; medians.

    python benchmarks/bench_roi_align.py [--rois 300] [--rounds 15]
"""
from __future__ import annotations

import argparse
import random
import statistics
import time

import numpy as np
import onnxruntime as ort
from onnx import TensorProto as TP
from onnx import helper

import pyge


def model(n: int, ratio: int):
    node = helper.make_node("RoiAlign", ["x", "rois", "bi"], ["y"], output_height=7, output_width=7,
                            sampling_ratio=ratio, spatial_scale=0.25, mode="avg")
    g = helper.make_graph([node], "roi_align",
                          [helper.make_tensor_value_info("x", TP.FLOAT, [1, 256, 50, 50]),
                           helper.make_tensor_value_info("rois", TP.FLOAT, [n, 4]),
                           helper.make_tensor_value_info("bi", TP.INT64, [n])],
                          [helper.make_tensor_value_info("y", TP.FLOAT, None)])
    return helper.make_model(g, opset_imports=[helper.make_opsetid("", 16)])


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--rois", type=int, default=300)
    ap.add_argument("--rounds", type=int, default=15)
    a = ap.parse_args()
    rng = np.random.default_rng(0)
    corner = rng.uniform(0, 150, (a.rois, 2))
    rois = np.concatenate([corner, corner + rng.uniform(8, 60, (a.rois, 2))], 1).astype(np.float32)
    feeds = {"x": rng.standard_normal((1, 256, 50, 50)).astype(np.float32), "rois": rois,
             "bi": np.zeros(a.rois, np.int64)}
    so = ort.SessionOptions()
    so.intra_op_num_threads = 2
    print(f"RoiAlign avg, x 1x256x50x50, {a.rois} rois, 7x7; ms, median of {a.rounds} rounds")
    for ratio in (2, 0):
        m = model(a.rois, ratio)
        engines = {"onnxruntime": ort.InferenceSession(m.SerializeToString(), so,
                                                        providers=["CPUExecutionProvider"]).run,
                   "pyge": pyge.compile(pyge.load_onnx(m), "cpu").run}
        calls = {"onnxruntime": lambda f=engines["onnxruntime"]: f(None, feeds)[0],
                 "pyge": lambda f=engines["pyge"]: f(feeds)["y"]}
        diff = float(np.abs(calls["pyge"]() - calls["onnxruntime"]()).max())
        times: dict[str, list[float]] = {k: [] for k in calls}
        for _ in range(a.rounds):
            for k in random.sample(list(calls), len(calls)):
                t = time.perf_counter()
                calls[k]()
                times[k].append((time.perf_counter() - t) * 1e3)
        med = {k: statistics.median(v) for k, v in times.items()}
        print(f"sampling_ratio={ratio}: pyge {med['pyge']:.1f}, onnxruntime {med['onnxruntime']:.1f}, "
              f"pyge/onnxruntime {med['pyge'] / med['onnxruntime']:.2f}; max |diff| {diff:.1e}")


if __name__ == "__main__":
    main()
