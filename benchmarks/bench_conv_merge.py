"""Graph-level convolution merges for the conv-heavy light models, timed as kernels first.

Two rewrites issue 22 item 5 proposes, each against what pyge runs today, on the models'
own shapes (from onnx shape inference), one process, forms interleaved call by call:

squeezenet's Fire modules: expand 1x1 -> Relu and expand 3x3 (pad 1) -> Relu read the same
squeeze output and are concatenated.
    two+cat     what pyge runs: two packed oneDNN calls (ReLU as post-op), torch.cat
    two         the two calls alone: what a Concat written in place could reach at best
    merged      one packed 3x3 call whose weight stacks the 1x1 weight zero-padded to 3x3 on
                the 3x3 weight (output channels), so it writes the Concat's result; the same
                values up to summation order, 9x the 1x1 part's products

shufflenet's first grouped 1x1 of a unit, followed (after its folded BN and ReLU) by the
channel shuffle; the shuffle is absorbed into that convolution's output channels only if it
becomes dense (block-diagonal weight, rows permuted, 4x the products).
    grouped+shuf  what pyge runs: the packed grouped call, then torch's channel shuffle
    dense         one packed dense call with the permuted block-diagonal weight
    dense addmm   the same weight as torch.addmm on the channels-last activation, then ReLU
    bmm+shuf      torch.baddbmm over the groups on an NCHW input, ReLU, shuffle (NCHW result)

Each column is the median per call in microseconds; the last columns are each form over
pyge's current one (below 1: the rewrite is faster there).

    python benchmarks/bench_conv_merge.py                          # 2 threads, wall clock
    python benchmarks/bench_conv_merge.py --threads 1 --clock cpu  # a shared machine
"""
from __future__ import annotations

import argparse
import os
import sys
import time
from pathlib import Path

import onnx
import torch
import torch.nn.functional as F

from light import model_path, timed_calls

try:
    import pyge  # noqa: F401  (sets the OpenMP wait policy, as in a pyge run)
except ImportError:                        # a bare checkout: use the source tree
    sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "src"))
    import pyge  # noqa: F401
from pyge.executors.host_memory import tune_host_malloc  # noqa: E402

MK = torch.ops.mkldnn


def _model(name: str):
    m = onnx.shape_inference.infer_shapes(onnx.load(model_path(name)))
    shapes = {v.name: [d.dim_value for d in v.type.tensor_type.shape.dim]
              for v in list(m.graph.value_info) + list(m.graph.input)}
    init = {i.name: list(i.dims) for i in m.graph.initializer}
    producer = {o: n for n in m.graph.node for o in n.output}
    return m, shapes, init, producer


def _attrs(n) -> dict:
    return {a.name: onnx.helper.get_attribute_value(a) for a in n.attribute}


def fire_pairs() -> list[dict]:
    """squeezenet's Concat(Relu(Conv 1x1 (x)), Relu(Conv 3x3 (x))) sites: x's shape, both
    widths; each distinct one once."""
    m, shapes, init, producer = _model("squeezenet")
    out: list[dict] = []
    for n in m.graph.node:
        if n.op_type != "Concat" or len(n.input) != 2:
            continue
        convs = [producer[producer[i].input[0]] for i in n.input]
        if all(c.op_type == "Conv" for c in convs) and convs[0].input[0] == convs[1].input[0]:
            w1, w3 = (init.get(c.input[1]) or shapes[c.input[1]] for c in convs)
            c = {"x": shapes[convs[0].input[0]], "e1": w1[0], "e3": w3[0]}
            if c not in out:
                out.append(c)
    return out


def shuffled_gconvs() -> list[dict]:
    """shufflenet's grouped 1x1 Convs whose result reaches a channel shuffle (a Reshape)."""
    m, shapes, init, producer = _model("shufflenet")
    out, seen = [], set()
    for n in m.graph.node:
        if n.op_type != "Reshape" or not shapes.get(n.input[0]) or len(shapes[n.input[0]]) != 4:
            continue
        p = producer.get(n.input[0])
        while p is not None and p.op_type in ("Relu", "BatchNormalization"):
            p = producer.get(p.input[0])
        if p is None or p.op_type != "Conv" or _attrs(p).get("group", 1) == 1:
            continue
        c = {"x": shapes[p.input[0]], "w": init.get(p.input[1]) or shapes[p.input[1]],
             "group": _attrs(p)["group"]}
        if c["w"][2:] == [1, 1] and str(c) not in seen:
            seen.add(str(c))
            out.append(c)
    return out


def _cl(t):
    return t.contiguous(memory_format=torch.channels_last)


def fire_forms(c: dict) -> dict:
    torch.manual_seed(0)
    x = _cl(torch.randn(c["x"]))
    cin = c["x"][1]
    w1, b1 = torch.randn(c["e1"], cin, 1, 1), torch.randn(c["e1"])
    w3, b3 = torch.randn(c["e3"], cin, 3, 3), torch.randn(c["e3"])
    shape = list(x.shape)
    p1 = MK._reorder_convolution_weight(w1, [0, 0], [1, 1], [1, 1], 1, shape)
    p3 = MK._reorder_convolution_weight(w3, [1, 1], [1, 1], [1, 1], 1, shape)
    pm = MK._reorder_convolution_weight(torch.cat([F.pad(w1, (1, 1, 1, 1)), w3]), [1, 1], [1, 1],
                                        [1, 1], 1, shape)
    bm = torch.cat([b1, b3])

    def two():
        return (MK._convolution_pointwise(x, p1, b1, [0, 0], [1, 1], [1, 1], 1, "relu", [], ""),
                MK._convolution_pointwise(x, p3, b3, [1, 1], [1, 1], [1, 1], 1, "relu", [], ""))
    return {"two+cat": lambda: torch.cat(two(), 1), "two": two,
            "merged": lambda: MK._convolution_pointwise(x, pm, bm, [1, 1], [1, 1], [1, 1], 1,
                                                        "relu", [], "")}


def gconv_forms(c: dict) -> dict:
    torch.manual_seed(0)
    x = _cl(torch.randn(c["x"]))
    xn = x.contiguous()
    n, cin, h, wd = c["x"]
    k, g = c["w"][0], c["group"]
    cg, kg = cin // g, k // g
    w, b = torch.randn(c["w"]), torch.randn(k)
    shape = list(x.shape)
    pg = MK._reorder_convolution_weight(w, [0, 0], [1, 1], [1, 1], g, shape)
    dense = torch.zeros(k, cin)
    for j in range(g):
        dense[j * kg:(j + 1) * kg, j * cg:(j + 1) * cg] = w[j * kg:(j + 1) * kg, :, 0, 0]
    src = torch.arange(k).view(g, kg).t().reshape(-1)   # shuffled channel i -> source src[i]
    dperm, bperm = dense[src], b[src]
    pd = MK._reorder_convolution_weight(dperm.reshape(k, cin, 1, 1), [0, 0], [1, 1], [1, 1], 1, shape)
    dt = dperm.t().contiguous()
    wg, bg = w.reshape(g, kg, cg).contiguous(), b.reshape(g, kg, 1)

    def addmm():
        y = torch.addmm(bperm, x.permute(0, 2, 3, 1).reshape(-1, cin), dt)
        return torch.relu_(y).view(n, h, wd, k).permute(0, 3, 1, 2)

    def bmm():
        y = torch.relu_(torch.baddbmm(bg, wg, xn.view(g, cg, h * wd))).view(n, k, h, wd)
        return torch.native_channel_shuffle(y, g)
    return {"grouped+shuf": lambda: torch.native_channel_shuffle(MK._convolution_pointwise(
                x, pg, b, [0, 0], [1, 1], [1, 1], g, "relu", [], ""), g),
            "dense": lambda: MK._convolution_pointwise(x, pd, bperm, [0, 0], [1, 1], [1, 1], 1,
                                                       "relu", [], ""),
            "dense addmm": addmm, "bmm+shuf": bmm}


def _check(forms: dict, skip=("two",)) -> None:
    ref = None
    for name, f in forms.items():
        if name in skip:
            continue
        got = f()
        ref = got if ref is None else ref
        if not torch.allclose(got, ref, rtol=1e-3, atol=1e-3):
            raise SystemExit(f"{name} disagrees with {next(iter(forms))}")


def _table(title: str, cases: list[tuple[str, dict]], calls: int, tick) -> list[str]:
    names = list(cases[0][1])
    lines = [title, f"{'case':<40}" + "".join(f"{f:>14}" for f in names)
             + "".join(f"{f + '/now':>18}" for f in names[1:])]
    sums = dict.fromkeys(names, 0.0)
    for label, forms in cases:
        _check(forms)
        t = timed_calls(forms, calls, tick)
        for f in names:
            sums[f] += t[f]
        lines.append(f"{label:<40}" + "".join(f"{t[f]:>14.1f}" for f in names)
                     + "".join(f"{t[f] / t[names[0]]:>18.2f}" for f in names[1:]))
    lines.append(f"{'sum':<40}" + "".join(f"{sums[f]:>14.0f}" for f in names)
                 + "".join(f"{sums[f] / sums[names[0]]:>18.2f}" for f in names[1:]))
    return lines


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__,
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--calls", type=int, default=100, help="timed calls per form per case")
    ap.add_argument("--threads", type=int, default=torch.get_num_threads())
    ap.add_argument("--clock", choices=("wall", "cpu"), default="wall",
                    help="cpu: the calling thread's CPU time (with --threads 1, immune to "
                         "other processes taking the core)")
    ap.add_argument("--out", default="", help="also write the tables to this file")
    a = ap.parse_args(argv)
    torch.set_num_threads(a.threads)
    tune_host_malloc()
    tick = time.thread_time if a.clock == "cpu" else time.perf_counter
    fires = [(f"squeezenet {'x'.join(map(str, c['x'][1:]))} e1 {c['e1']} e3 {c['e3']}", fire_forms(c))
             for c in fire_pairs()]
    gconvs = [(f"shufflenet {'x'.join(map(str, c['x'][1:]))} w{'x'.join(map(str, c['w']))} "
               f"g{c['group']}", gconv_forms(c)) for c in shuffled_gconvs()]
    lines = _table("Fire expand pair: two calls + Concat against one merged 3x3", fires, a.calls, tick)
    lines += [""] + _table("grouped 1x1 + channel shuffle against the shuffle in the weights", gconvs,
                           a.calls, tick)
    load = os.getloadavg()
    lines.append(f"(median us per call, {a.calls} calls, {a.threads} thread(s), {a.clock} clock; "
                 f"load average {load[0]:.2f} {load[1]:.2f} {load[2]:.2f}; {os.cpu_count()} CPUs)")
    text = "\n".join(lines)
    print(text)
    if a.out:
        Path(a.out).write_text(text + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
