"""CPU pooling: pyge's pooling paths against the plain torch calls they replace.

The shapes are the light models' pools (bench_ops_cpu.py showed pyge's pools at 2-10x
onnxruntime's). Each case times both forms in one process, interleaved call by call, and
prints the median of each and their ratio (plain / pyge's: above 1, pyge's path is faster):

    max      torch's max_pool2d (on the -inf-padded input where ONNX pads are asymmetric)
             vs nn_pool._separable_max; "picked" is what the MaxPool kernel uses
    avg-sum  a 7x7 AveragePool padded on one side: the sum by a conv of ones vs torch's
             pooling with divisor 1
    gap      GlobalAveragePool of channels-last input: copy to NCHW + adaptive_avg_pool2d
             vs avg_pool2d over the whole plane

    python benchmarks/bench_pool_cpu.py
"""
from __future__ import annotations

import argparse
import math
import statistics
import sys
import time
from pathlib import Path

import torch
import torch.nn.functional as F

try:
    import pyge  # noqa: F401  (sets the process-wide OpenMP wait policy, as in a pyge run)
except ImportError:                        # a bare checkout: use the source tree
    sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "src"))
    import pyge  # noqa: F401
from pyge.kernels import nn_pool  # noqa: E402

# (model, input shape, kernel, stride, pads [hb, wb, he, we], ceil)
MAX_CASES = [
    ("inception_v1", (1, 64, 112, 112), 3, 2, [0, 0, 0, 0], 0),
    ("inception_v1", (1, 192, 55, 55), 3, 2, [0, 0, 0, 0], 0),
    ("inception_v1", (1, 256, 27, 27), 3, 1, [1, 1, 1, 1], 0),
    ("inception_v1", (1, 832, 6, 6), 3, 1, [1, 1, 1, 1], 0),
    ("inception_v2", (1, 64, 112, 112), 3, 2, [0, 0, 1, 1], 0),
    ("inception_v2", (1, 320, 28, 28), 3, 2, [0, 0, 1, 1], 0),
    ("squeezenet", (1, 96, 109, 109), 3, 2, [0, 0, 0, 0], 0),
    ("squeezenet", (1, 256, 27, 27), 3, 2, [0, 0, 0, 0], 0),
    ("shufflenet", (1, 24, 112, 112), 3, 2, [1, 1, 1, 1], 0),
    ("resnet50", (1, 64, 112, 112), 3, 2, [1, 1, 1, 1], 0),
]


class _Ctx:
    def __init__(self, attrs):
        self.attrs = attrs

    def attr(self, key, default=None):
        return self.attrs.get(key, default)


def _timed(fns: dict, calls: int) -> dict:
    for f in fns.values():
        for _ in range(5):
            f()
    times = {k: [] for k in fns}
    for _ in range(calls):
        for k, f in fns.items():
            t0 = time.perf_counter()
            f()
            times[k].append(time.perf_counter() - t0)
    return {k: statistics.median(v) * 1e6 for k, v in times.items()}


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--calls", type=int, default=200, help="timed calls per form per case")
    a = ap.parse_args(argv)
    print(f"{'case':<44}{'plain us':>10}{'pyge us':>10}{'ratio':>8}  picked")
    for model, shape, k, s, pads, ceil in MAX_CASES:
        attrs = {"kernel_shape": [k, k], "strides": [s, s], "pads": pads, "ceil_mode": ceil}
        pa = nn_pool._Attrs(_Ctx(attrs))
        out, pb, _ = nn_pool._geometry(pa, shape[2:])
        fpad = nn_pool._fpad(nn_pool._explicit_pads(pa, shape[2:], out, pb))
        sym = nn_pool._torch_mode(pa, shape[2:], out, pb, pb, symmetric_only=False)
        for layout in ("nchw", "cl"):
            x = torch.randn(shape)
            if layout == "cl":
                x = x.contiguous(memory_format=torch.channels_last)
            if sym is not None:
                def plain(x=x, sym=sym):
                    return F.max_pool2d(x, k, s, pb, 1, sym)
            else:
                def plain(x=x, fpad=fpad):
                    return F.max_pool2d(F.pad(x, fpad, value=-math.inf), k, s, 0, 1, False)
            t = _timed({"plain": plain, "pyge": lambda x=x: nn_pool._separable_max(x, pa, out, pb)},
                       a.calls)
            explicit = None if sym is not None else (fpad, pb)
            pick = "separable" if nn_pool._use_separable(x, out, explicit) else "torch"
            name = f"max {model} {shape[1]}x{shape[2]}x{shape[3]} k{k}s{s} {layout}"
            print(f"{name:<44}{t['plain']:>10.1f}{t['pyge']:>10.1f}{t['plain'] / t['pyge']:>8.2f}  {pick}")

    # inception_v1's last AveragePool: 7x7 on its 6x6 map, padded by one row and column at
    # the end (count_include_pad=0).
    attrs = {"kernel_shape": [7, 7], "pads": [0, 0, 1, 1]}
    pa = nn_pool._Attrs(_Ctx(attrs))
    x = torch.randn(1, 1024, 6, 6).contiguous(memory_format=torch.channels_last)
    t = _timed({"plain": lambda: nn_pool._sum_pool(F.pad(x, [0, 1, 0, 1]), pa),
                "pyge": lambda: F.avg_pool2d(F.pad(x, [0, 1, 0, 1]), 7, 1, 0, False, True, 1)}, a.calls)
    print(f"{'avg-sum inception_v1 1024x6x6 k7 pads 0,0,1,1 cl':<44}{t['plain']:>10.1f}{t['pyge']:>10.1f}"
          f"{t['plain'] / t['pyge']:>8.2f}  pooled sum")
    for c, h, model in ((1000, 13, "squeezenet"), (1024, 7, "densenet121"), (2048, 7, "resnet50-like")):
        x = torch.randn(1, c, h, h).contiguous(memory_format=torch.channels_last)
        t = _timed({"plain": lambda x=x: F.adaptive_avg_pool2d(x.contiguous(), 1),
                    "pyge": lambda x=x: F.avg_pool2d(x, tuple(x.shape[2:]))}, a.calls)
        name = f"gap {model} {c}x{h}x{h} cl"
        print(f"{name:<44}{t['plain']:>10.1f}{t['pyge']:>10.1f}{t['plain'] / t['pyge']:>8.2f}  avg_pool2d")
    return 0


if __name__ == "__main__":
    sys.exit(main())
