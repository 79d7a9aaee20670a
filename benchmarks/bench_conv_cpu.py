"""CPU convolutions of the conv-heavy light models: pyge's Conv kernel against the other entry
points torch offers for the same convolution, and against onnxruntime's Conv.

For each distinct convolution of the models (input shape, weight, strides, pads, groups; a
ReLU after it, as the fused models run it) one process times, interleaved call by call:

    pyge        pyge's Conv kernel (kernels/nn_conv.py): oneDNN's _convolution_pointwise on a
                weight packed once, the ReLU as its post-op, channels-last in and out
    prepacked   torch.ops.mkldnn_prepacked.conv2d_prepack / conv2d_run, the context that
                torch.jit freezing makes (weight prepacked with the input size)
    F.conv2d    torch's own convolution on the channels-last input, then ReLU
    blocked     torch.mkldnn_convolution on oneDNN's own blocked tensor layout (Tensor.to_mkldnn,
                the weight by mkldnn_reorder_conv2d_weight), then ReLU on that layout: a
                model kept in oneDNN's layout between operators, as onnxruntime keeps NCHWc;
                the input's conversion is outside the timing
    gemm        1x1 convolutions with one group only: torch.addmm on the channels-last
                activation viewed as a [N*H*W, C] matrix, then ReLU

onnxruntime's Conv + Relu of the same shape runs in a child process of its own (its thread
pool would otherwise share the cores with torch's). Each column is the median per call in
microseconds; the last columns are each form's time over pyge's (below 1: faster than
pyge's kernel). The "fixed cost" row is a 16-channel 2x2 convolution: the cost of a call.

    python benchmarks/bench_conv_cpu.py                          # shufflenet, squeezenet
    python benchmarks/bench_conv_cpu.py --threads 1 --clock cpu  # a shared machine: CPU time
"""
from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import time
from pathlib import Path

import numpy as np
import onnx
import torch
import torch.nn.functional as F

from light import child_env, model_path, timed_calls

try:
    import pyge  # noqa: F401  (sets the OpenMP wait policy, as in a pyge run)
except ImportError:                        # a bare checkout: use the source tree
    sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "src"))
    import pyge  # noqa: F401
from pyge.executors.host_memory import tune_host_malloc  # noqa: E402
from pyge.frontends import load_onnx  # noqa: E402
from pyge.kernels import nn_conv  # noqa: E402
from pyge.kernels.registry import KernelContext  # noqa: E402
from pyge.testing import one_node_model  # noqa: E402

ORT_CHILD = r'''
import json, statistics, sys, time
import numpy as np, onnx, onnxruntime as ort
from onnx import TensorProto as T, helper, numpy_helper
cases, calls, threads, clock = json.loads(sys.argv[1]), int(sys.argv[2]), int(sys.argv[3]), sys.argv[4]
tick = time.thread_time if clock == "cpu" else time.perf_counter
out = []
for c in cases:
    rng = np.random.default_rng(0)
    w = rng.standard_normal(c["w"]).astype(np.float32)
    b = rng.standard_normal(c["w"][0]).astype(np.float32)
    conv = helper.make_node("Conv", ["x", "w", "b"], ["c"], group=c["group"], strides=c["strides"],
                            pads=c["pads"])
    g = helper.make_graph([conv, helper.make_node("Relu", ["c"], ["y"])], "conv",
                          [helper.make_tensor_value_info("x", T.FLOAT, c["x"])],
                          [helper.make_tensor_value_info("y", T.FLOAT, None)],
                          [numpy_helper.from_array(w, "w"), numpy_helper.from_array(b, "b")])
    m = helper.make_model(g, opset_imports=[helper.make_opsetid("", 13)], ir_version=8)
    so = ort.SessionOptions()
    so.log_severity_level, so.intra_op_num_threads = 3, threads
    s = ort.InferenceSession(m.SerializeToString(), so, providers=["CPUExecutionProvider"])
    feeds = {"x": rng.standard_normal(c["x"]).astype(np.float32)}
    for _ in range(5):
        s.run(None, feeds)
    ts = []
    for _ in range(calls):
        t0 = tick()
        s.run(None, feeds)
        ts.append(tick() - t0)
    out.append(statistics.median(ts) * 1e6)
print(json.dumps(out))
'''


def conv_cases(names: list[str]) -> list[dict]:
    """The distinct 2-D convolutions of the models, with their input shapes (from onnx's
    shape inference), in model order."""
    seen, out = set(), []
    for name in names:
        m = onnx.shape_inference.infer_shapes(onnx.load(model_path(name)))
        shapes = {v.name: [d.dim_value for d in v.type.tensor_type.shape.dim]
                  for v in list(m.graph.value_info) + list(m.graph.input)}
        init = {i.name: list(i.dims) for i in m.graph.initializer}
        for n in m.graph.node:
            if n.op_type != "Conv":
                continue
            at = {a.name: onnx.helper.get_attribute_value(a) for a in n.attribute}
            c = {"model": name, "x": shapes[n.input[0]],
                 "w": init.get(n.input[1]) or shapes[n.input[1]],
                 "strides": list(at.get("strides", [1, 1])), "pads": list(at.get("pads", [0] * 4)),
                 "group": int(at.get("group", 1))}
            key = json.dumps({k: v for k, v in c.items() if k != "model"})
            if key not in seen and len(c["x"]) == 4:
                seen.add(key)
                out.append(c)
    return out


def _forms(c: dict) -> dict:
    """The callables of one case, each computing relu(conv(x, w, b)) channels-last; checked
    to agree with each other."""
    rng = np.random.default_rng(0)
    x = torch.from_numpy(rng.standard_normal(c["x"]).astype(np.float32))
    x = x.contiguous(memory_format=torch.channels_last)
    w = torch.from_numpy(rng.standard_normal(c["w"]).astype(np.float32))
    b = torch.from_numpy(rng.standard_normal(c["w"][0]).astype(np.float32))
    s, p, g = c["strides"], c["pads"][:2], c["group"]
    node = load_onnx(one_node_model("FusedConv", {"x": x.numpy(), "w": w.numpy(), "b": b.numpy()},
                                    {"activation": "Relu", "group": g, "strides": s,
                                     "pads": c["pads"]}, opset=13, domain="com.microsoft",
                                    consts=("w", "b"))).nodes[0]
    kernel = nn_conv.fused_conv(KernelContext(node=node, opset=13, device=torch.device("cpu")))
    forms = {"pyge": lambda: kernel([x, w, b])[0]}
    if nn_conv._PACKED_OK:
        ctx = torch.ops.mkldnn_prepacked.conv2d_prepack(w, b, s, p, [1, 1], g, list(x.shape),
                                                        "relu")
        forms["prepacked"] = lambda: torch.ops.mkldnn_prepacked.conv2d_run(x, ctx)
    forms["F.conv2d"] = lambda: torch.relu_(F.conv2d(x, w, b, s, p, 1, g))
    if torch.backends.mkldnn.is_available():
        xm = x.to_mkldnn()
        wm = torch._C._nn.mkldnn_reorder_conv2d_weight(w.to_mkldnn(), p, s, [1, 1], g)
        forms["blocked"] = lambda: torch.relu(torch.mkldnn_convolution(xm, wm, b, p, s, [1, 1], g))
    k, cin = c["w"][0], c["x"][1]
    if c["w"][2:] == [1, 1] and g == 1 and s == [1, 1] and not any(c["pads"]):
        wt = w.reshape(k, cin).t().contiguous()
        n, _, h, wd = x.shape

        def gemm():
            y = torch.addmm(b, x.permute(0, 2, 3, 1).reshape(-1, cin), wt)
            return torch.relu_(y).view(n, h, wd, k).permute(0, 3, 1, 2)
        forms["gemm"] = gemm
    want = forms["pyge"]()
    for name, f in forms.items():
        got = f()
        if got.layout == torch._mkldnn:
            got = got.to_dense()
        if not torch.allclose(got, want, rtol=1e-3, atol=1e-3):
            raise SystemExit(f"{c}: {name} disagrees with pyge's kernel")
    return forms


def _ort(cases: list[dict], calls: int, threads: int, clock: str) -> list[float] | None:
    try:
        import onnxruntime  # noqa: F401
    except ImportError:
        return None
    p = subprocess.run([sys.executable, "-c", ORT_CHILD, json.dumps(cases), str(calls),
                        str(threads), clock], env=child_env(), capture_output=True, text=True,
                       timeout=1800)
    if p.returncode:
        raise SystemExit(f"onnxruntime child failed:\n{p.stderr[-3000:]}")
    return json.loads(p.stdout.strip().splitlines()[-1])


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__,
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--models", default="shufflenet,squeezenet")
    ap.add_argument("--calls", type=int, default=100, help="timed calls per form per case")
    ap.add_argument("--threads", type=int, default=torch.get_num_threads())
    ap.add_argument("--clock", choices=("wall", "cpu"), default="wall",
                    help="cpu: the calling thread's CPU time (with --threads 1, immune to "
                         "other processes taking the core)")
    ap.add_argument("--out", default=str(Path(__file__).parent / "results" / "bench_conv_cpu.txt"),
                    help="results file ('' for none)")
    a = ap.parse_args(argv)
    torch.set_num_threads(a.threads)
    tune_host_malloc()                 # as a pyge run does: no page faults on every call
    tick = time.thread_time if a.clock == "cpu" else time.perf_counter
    cases = conv_cases(a.models.split(","))
    tiny = {"model": "fixed cost", "x": [1, 16, 2, 2], "w": [16, 16, 1, 1], "strides": [1, 1],
            "pads": [0, 0, 0, 0], "group": 1}
    cases.append(tiny)
    ort_us = _ort(cases, a.calls, a.threads, a.clock)
    forms = ["pyge", "prepacked", "F.conv2d", "blocked", "gemm"]
    lines = [f"{'case':<50}" + "".join(f"{f:>11}" for f in forms + ["ort"])
             + "".join(f"{f + '/pyge':>15}" for f in forms[1:] + ["ort"])]
    sums = dict.fromkeys(forms + ["ort"], 0.0)
    for i, c in enumerate(cases):
        t = timed_calls(_forms(c), a.calls, tick)
        if ort_us is not None:
            t["ort"] = ort_us[i]
        name = (f"{c['model']} {'x'.join(map(str, c['x'][1:]))} w{'x'.join(map(str, c['w']))} "
                f"s{c['strides'][0]} g{c['group']}")
        lines.append(f"{name:<50}" + "".join(f"{t[f]:>11.1f}" if f in t else f"{'-':>11}"
                                             for f in forms + ["ort"])
                     + "".join(f"{t[f] / t['pyge']:>15.2f}" if f in t else f"{'-':>15}"
                               for f in forms[1:] + ["ort"]))
        if c is not tiny:
            for f in sums:
                sums[f] += t.get(f, t["pyge"])
    lines.append(f"{'sum over the cases (gemm: pyge where it does not apply)':<50}"
                 + "".join(f"{sums[f]:>11.0f}" for f in forms + ["ort"]))
    load = os.getloadavg()
    lines.append(f"(median us per call, {a.calls} calls, {a.threads} thread(s), {a.clock} clock; "
                 f"load average {load[0]:.2f} {load[1]:.2f} {load[2]:.2f}; "
                 f"{os.cpu_count()} CPUs)")
    text = "\n".join(lines)
    print(text)
    if a.out:
        Path(a.out).write_text(text + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
