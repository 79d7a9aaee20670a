"""A Whisper-like audio encoder on the CPU: torch eager, pyge (from_torch and ONNX), onnxruntime.

The model is built here, in torch, with seeded random weights (nothing is downloaded): two
Conv1d + GELU stem layers (80 mel bins, the second with stride 2), sinusoidal positions,
pre-LN encoder layers with `F.scaled_dot_product_attention` and a GELU MLP, a final LayerNorm;
the defaults are whisper-tiny's width with L = 1500 frames (4 layers, d_model 384, 6 heads).

Engines, each in a child process of its own (so no engine's threads spin beside another's):
    torch        the module in eager mode under torch.inference_mode()
    pyge_torch   pyge.from_torch(module) compiled and run by pyge
    pyge_onnx    the module exported by torch.onnx.export (TorchScript exporter, opset 17:
                 attention as MatMul/Softmax/MatMul) loaded by pyge.load_onnx
    ort          onnxruntime on that ONNX file
    pyge_onnx_nofusion  (only when named in --engines) pyge_onnx with ge.exec.enableFusion=false
(torch.onnx.export's dynamo exporter needs onnxscript, which is not installed here; the
TorchScript exporter works offline.)
Children take turns in a fresh random order each round; within a child the calls are timed
back to back and the child reports its median. Printed: per engine the median over rounds in
ms, and the median over rounds of each engine's time divided by torch's in the same round; the
largest |difference| of each engine's output from torch eager's; the machine's load (uptime)
before and after, because other processes on a shared machine skew every figure.

    python benchmarks/bench_attention.py [--layers 4] [--d-model 384] [--heads 6]
        [--frames 1500] [--rounds 5] [--calls 5] [--threads N] [--out results.txt]
"""
from __future__ import annotations

import argparse
import json
import math
import os
import random
import statistics
import subprocess
import sys
import tempfile
from pathlib import Path

import torch
import torch.nn as nn
import torch.nn.functional as F

HERE = Path(__file__).resolve().parent
ENGINES = ("torch", "pyge_torch", "pyge_onnx", "ort")
N_MELS = 80


def sinusoids(length: int, channels: int) -> torch.Tensor:
    """Whisper's fixed positional embedding: sin and cos of log-spaced timescales."""
    inc = math.log(10000) / (channels // 2 - 1)
    inv = torch.exp(-inc * torch.arange(channels // 2))
    t = torch.arange(length)[:, None] * inv[None, :]
    return torch.cat([torch.sin(t), torch.cos(t)], dim=1)


class Layer(nn.Module):
    """Pre-LN self-attention (keys without bias, as in Whisper) and a GELU MLP."""

    def __init__(self, d: int, heads: int):
        super().__init__()
        self.heads = heads
        self.attn_ln, self.mlp_ln = nn.LayerNorm(d), nn.LayerNorm(d)
        self.query, self.key, self.value = nn.Linear(d, d), nn.Linear(d, d, bias=False), nn.Linear(d, d)
        self.out = nn.Linear(d, d)
        self.mlp = nn.Sequential(nn.Linear(d, 4 * d), nn.GELU(), nn.Linear(4 * d, d))

    def forward(self, x):
        b, t, d = x.shape
        y = self.attn_ln(x)
        q, k, v = (lin(y).view(b, t, self.heads, d // self.heads).transpose(1, 2)
                   for lin in (self.query, self.key, self.value))
        a = F.scaled_dot_product_attention(q, k, v)
        x = x + self.out(a.transpose(1, 2).reshape(b, t, d))
        return x + self.mlp(self.mlp_ln(x))


class Encoder(nn.Module):
    def __init__(self, layers: int, d: int, heads: int, frames: int):
        super().__init__()
        self.conv1 = nn.Conv1d(N_MELS, d, 3, padding=1)
        self.conv2 = nn.Conv1d(d, d, 3, stride=2, padding=1)
        self.register_buffer("pos", sinusoids(frames, d))
        self.layers = nn.ModuleList(Layer(d, heads) for _ in range(layers))
        self.ln_post = nn.LayerNorm(d)

    def forward(self, mel):
        x = F.gelu(self.conv2(F.gelu(self.conv1(mel))))
        x = x.permute(0, 2, 1) + self.pos
        for layer in self.layers:
            x = layer(x)
        return self.ln_post(x)


def build(cfg: dict) -> tuple[Encoder, torch.Tensor]:
    """The seeded model and input: every process builds the same ones."""
    torch.manual_seed(0)
    model = Encoder(cfg["layers"], cfg["d_model"], cfg["heads"], cfg["frames"]).eval()
    mel = torch.randn(1, N_MELS, 2 * cfg["frames"])
    return model, mel


def export_onnx(cfg: dict, path: str) -> None:
    import warnings
    model, mel = build(cfg)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # the TorchScript exporter is deprecated
        torch.onnx.export(model, (mel,), path, dynamo=False, opset_version=17,
                          input_names=["mel"], output_names=["y"])


def child(engine: str, cfg: dict, onnx_path: str, calls: int, out_npy: str) -> dict:
    import time

    import numpy as np
    torch.set_num_threads(cfg["threads"])
    model, mel = build(cfg)
    x = mel.numpy()
    if engine == "torch":
        def call():
            with torch.inference_mode():
                return model(mel).numpy()
    elif engine.startswith("pyge"):
        import pyge
        g = pyge.from_torch(model, (mel,)) if engine == "pyge_torch" else pyge.load_onnx(onnx_path)
        opts = {"ge.exec.enableFusion": "false"} if engine.endswith("nofusion") else {}
        t0 = time.perf_counter()
        cm = pyge.compile(g, device="cpu", options=opts)
        compile_s = time.perf_counter() - t0
        name, out = g.inputs[0].name, g.outputs[0].name

        def call():
            return cm.run({name: x})[out]
    else:
        import onnxruntime as ort
        so = ort.SessionOptions()
        so.intra_op_num_threads = cfg["threads"]
        so.log_severity_level = 3
        sess = ort.InferenceSession(onnx_path, so, providers=["CPUExecutionProvider"])

        def call():
            return sess.run(None, {"mel": x})[0]
    y = call()
    call()
    times = []
    for _ in range(calls):
        t0 = time.perf_counter()
        call()
        times.append(time.perf_counter() - t0)
    np.save(out_npy, y)
    res = {"ms": statistics.median(times) * 1e3}
    if engine.startswith("pyge"):
        res["compile_s"] = compile_s
        res["ops"] = sorted({s for s in (n.op_type for n in cm.graph.nodes)})
    return res


def _uptime() -> str:
    try:
        return subprocess.run(["uptime"], capture_output=True, text=True).stdout.strip()
    except OSError:
        return "(uptime not available)"


def _run_child(engine: str, cfg: dict, onnx_path: str, calls: int, out_npy: str) -> dict:
    env = dict(os.environ)
    env["PYTHONPATH"] = os.pathsep.join([str(HERE.parent / "src"), str(HERE)]
                                        + ([env["PYTHONPATH"]] if env.get("PYTHONPATH") else []))
    code = ("import json, sys; from bench_attention import child; "
            "print(json.dumps(child(sys.argv[1], json.loads(sys.argv[2]), sys.argv[3], "
            "int(sys.argv[4]), sys.argv[5])))")
    p = subprocess.run([sys.executable, "-c", code, engine, json.dumps(cfg), onnx_path, str(calls),
                        out_npy], env=env, capture_output=True, text=True, timeout=3600)
    if p.returncode:
        raise SystemExit(f"{engine} child failed:\n{p.stderr[-3000:]}")
    return json.loads(p.stdout.strip().splitlines()[-1])


def main(argv=None) -> int:
    import numpy as np
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--layers", type=int, default=4)
    ap.add_argument("--d-model", type=int, default=384)
    ap.add_argument("--heads", type=int, default=6)
    ap.add_argument("--frames", type=int, default=1500)
    ap.add_argument("--rounds", type=int, default=5, help="child processes per engine")
    ap.add_argument("--calls", type=int, default=5, help="timed calls per child")
    ap.add_argument("--threads", type=int, default=torch.get_num_threads())
    ap.add_argument("--engines", default=",".join(ENGINES))
    ap.add_argument("--out", help="also write the report to this file")
    a = ap.parse_args(argv)
    cfg = {"layers": a.layers, "d_model": a.d_model, "heads": a.heads, "frames": a.frames,
           "threads": a.threads}
    engines = a.engines.split(",")
    lines = [f"Whisper-like encoder: {a.layers} layers, d_model {a.d_model}, {a.heads} heads, "
             f"L={a.frames}, batch 1, {a.threads} threads; {a.rounds} rounds x {a.calls} calls",
             f"load before: {_uptime()}"]
    rounds = []
    diffs: dict[str, float] = {}
    info: dict[str, dict] = {}
    rng = random.Random(0)
    with tempfile.TemporaryDirectory() as tmp:
        onnx_path = str(Path(tmp) / "encoder.onnx")
        export_onnx(cfg, onnx_path)
        for r in range(a.rounds):
            res = {}
            for e in rng.sample(engines, len(engines)):
                res[e] = _run_child(e, cfg, onnx_path, a.calls, str(Path(tmp) / f"{e}.npy"))
                info[e] = res[e]
            rounds.append(res)
            print(f"round {r + 1}/{a.rounds} done", file=sys.stderr, flush=True)
        if "torch" in engines:
            want = np.load(Path(tmp) / "torch.npy")
            for e in engines:
                diffs[e] = float(np.abs(np.load(Path(tmp) / f"{e}.npy") - want).max())
    lines.append(f"load after:  {_uptime()}")
    lines.append(f"{'engine':<20}{'ms':>10}{'/ torch':>10}{'max |diff|':>12}   notes")
    for e in engines:
        ms = statistics.median(r[e]["ms"] for r in rounds)
        ratio = statistics.median(r[e]["ms"] / r["torch"]["ms"] for r in rounds) \
            if "torch" in engines else float("nan")
        note = ""
        if "compile_s" in info[e]:
            ops = info[e]["ops"]
            note = f"compile {info[e]['compile_s']:.2f} s; Attention node: {'Attention' in ops}"
        lines.append(f"{e:<20}{ms:>10.1f}{ratio:>10.2f}{diffs.get(e, float('nan')):>12.1e}   {note}")
    text = "\n".join(lines)
    print(text)
    if a.out:
        Path(a.out).write_text(text + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
