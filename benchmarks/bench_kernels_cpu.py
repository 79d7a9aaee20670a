"""CPU kernels: pyge's pooling and matrix-product paths against the plain torch calls they
replace.

The shapes are the light models' (bench_ops_cpu.py showed pyge's pools at 2-10x
onnxruntime's, and its Gemms at 1.3-1.8x). Each case times both forms in one process,
interleaved call by call, and prints the median of each and their ratio (plain / pyge's:
above 1, pyge's path is faster):

    max      torch's max_pool2d (on the -inf-padded input where ONNX pads are asymmetric)
             vs nn_pool._separable_max; "picked" is what the MaxPool kernel uses
    avg-sum  a 7x7 AveragePool padded on one side: the sum by a conv of ones vs torch's
             pooling with divisor 1
    gap      GlobalAveragePool of channels-last input: copy to NCHW + adaptive_avg_pool2d
             vs avg_pool2d over the whole plane
    gemm     Gemm (transB=1, bias, weight an initializer), batch 1 and 8: torch.addmm (MKL)
             vs pyge's Gemm kernel (oneDNN on the packed weight), the FC layers of the models

    python benchmarks/bench_kernels_cpu.py
"""
from __future__ import annotations

import argparse
import math
import sys
import time
from pathlib import Path

import torch
import torch.nn.functional as F

# Importing pyge sets the process-wide OpenMP wait policy, as in a pyge run.
try:
    from pyge.frontends import load_onnx
except ImportError:                        # a bare checkout: use the source tree
    sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "src"))
    from pyge.frontends import load_onnx
from pyge.kernels import nn_pool  # noqa: E402
from pyge.executors.interpreter import compile_reference  # noqa: E402

from light import timed_calls  # noqa: E402

# (model, K, N): the fully connected layers, weight N x K.
GEMM_CASES = [("alexnet fc6", 9216, 4096), ("alexnet fc7", 4096, 4096), ("alexnet fc8", 4096, 1000),
              ("vgg19 fc6", 25088, 4096), ("resnet50 fc", 2048, 1000), ("shufflenet fc", 544, 1000)]

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
            t = timed_calls({"plain": plain,
                             "pyge": lambda x=x: nn_pool._separable_max(x, pa, out, pb)},
                            a.calls, time.perf_counter)
            explicit = None if sym is not None else (fpad, pb)
            pick = "separable" if nn_pool._use_separable(x, out, explicit) else "torch"
            name = f"max {model} {shape[1]}x{shape[2]}x{shape[3]} k{k}s{s} {layout}"
            print(f"{name:<44}{t['plain']:>10.1f}{t['pyge']:>10.1f}{t['plain'] / t['pyge']:>8.2f}  {pick}")

    # inception_v1's last AveragePool: 7x7 on its 6x6 map, padded by one row and column at
    # the end (count_include_pad=0).
    attrs = {"kernel_shape": [7, 7], "pads": [0, 0, 1, 1]}
    pa = nn_pool._Attrs(_Ctx(attrs))
    x = torch.randn(1, 1024, 6, 6).contiguous(memory_format=torch.channels_last)
    t = timed_calls({"plain": lambda: nn_pool._sum_pool(F.pad(x, [0, 1, 0, 1]), pa),
                     "pyge": lambda: F.avg_pool2d(F.pad(x, [0, 1, 0, 1]), 7, 1, 0, False, True, 1)},
                    a.calls, time.perf_counter)
    print(f"{'avg-sum inception_v1 1024x6x6 k7 pads 0,0,1,1 cl':<44}{t['plain']:>10.1f}{t['pyge']:>10.1f}"
          f"{t['plain'] / t['pyge']:>8.2f}  pooled sum")
    for c, h, model in ((1000, 13, "squeezenet"), (1024, 7, "densenet121"), (2048, 7, "resnet50-like")):
        x = torch.randn(1, c, h, h).contiguous(memory_format=torch.channels_last)
        t = timed_calls({"plain": lambda x=x: F.adaptive_avg_pool2d(x.contiguous(), 1),
                         "pyge": lambda x=x: F.avg_pool2d(x, tuple(x.shape[2:]))},
                        a.calls, time.perf_counter)
        name = f"gap {model} {c}x{h}x{h} cl"
        print(f"{name:<44}{t['plain']:>10.1f}{t['pyge']:>10.1f}{t['plain'] / t['pyge']:>8.2f}  avg_pool2d")
    for model, k, n in GEMM_CASES:
        w = torch.randn(n, k) / math.sqrt(k)
        bias = torch.randn(n)
        run = compile_reference(load_onnx(_gemm_model(w.numpy(), bias.numpy())))
        for batch in (1, 8):
            x = torch.randn(batch, k)
            got, want = run([x], {})[0], torch.addmm(bias, x, w.T)
            if not torch.allclose(got, want, rtol=1e-4, atol=1e-4):
                raise SystemExit(f"gemm {model}: pyge's kernel disagrees with addmm")
            t = timed_calls({"plain": lambda x=x: torch.addmm(bias, x, w.T),
                             "pyge": lambda x=x: run([x], {})},
                            max(10, a.calls // 10), time.perf_counter)
            name = f"gemm {model} {k}x{n} batch {batch}"
            print(f"{name:<44}{t['plain']:>10.1f}{t['pyge']:>10.1f}{t['plain'] / t['pyge']:>8.2f}  onednn")
    return 0


def _gemm_model(w, bias):
    import onnx
    from onnx import helper, numpy_helper
    node = helper.make_node("Gemm", ["x", "w", "b"], ["y"], transB=1)
    g = helper.make_graph([node], "gemm", [helper.make_tensor_value_info("x", onnx.TensorProto.FLOAT,
                                                                            ["n", w.shape[1]])],
                          [helper.make_tensor_value_info("y", onnx.TensorProto.FLOAT, None)],
                          [numpy_helper.from_array(w, "w"), numpy_helper.from_array(bias, "b")])
    m = helper.make_model(g, opset_imports=[helper.make_opsetid("", 13)])
    m.ir_version = 8
    return m


if __name__ == "__main__":
    sys.exit(main())
