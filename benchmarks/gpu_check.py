"""GPU check: multi-stream CUDA graph replay against single stream and against torch, then
single- vs multi-stream replay latency at batch 1 and 8. One script, under 5 minutes on one
GPU. Writes $OUT/gpu_check.json and $OUT/gpu_check.txt ($OUT defaults to ./out).

    python benchmarks/gpu_check.py                       # on a GPU machine
    python benchmarks/gpu_check.py --device cpu --quick  # the same flow on the CPU executors
    python benchmarks/gpu_check.py --thread-policy --reps 40   # CPU intra-op thread rules
    python benchmarks/gpu_check.py --sensitivity          # how much the checked outputs depend on the input

Models: the ONNX light models shipped with the onnx package, and GoogLeNet / Inception v3
with random weights exported to ONNX (opset 17) from torchvision, or from the copies in
benchmarks/tv_nets.py where torchvision is missing (said so in the output).
Variants: `single` (ge.enableSingleStream=true), `auto4` (ge.autoMultistreamParallelMode=
LoadBalance:4), `branch4` (GE-like branch round-robin over 4 streams, set by hand), and on
CUDA `branch4-arena` (the same plan with the CUDA executor's arena memory strategy).
Latency: median of interleaved rounds (one run of every variant per round), feeds already
on the device, outputs left there (`output_device="cuda"`).
"""
from __future__ import annotations

import argparse
import importlib.util
import io
import json
import os
import statistics
import sys
import time
import warnings
from pathlib import Path

import numpy as np
import onnx
import torch

import pyge
from pyge.model import CompiledModel
from pyge.replan import branch_streams, replan
from pyge.testing import LIGHT_MODELS, light_path, random_weights, relative_errors, with_intermediates

LIGHT = list(LIGHT_MODELS)
QUICK = ["inception_v1", "squeezenet"]
# Largest |difference| allowed, relative to each output's largest |value|. Multi-stream
# against single stream runs the same kernels; against the references the kernels differ
# (CPU vs GPU, BatchNorm folded or not). TF32 is turned off for the check (main) so that
# FP32 rounding is all that differs.
TOL_SINGLE, TOL_REF = 1e-4, 1e-3
TV = ["googlenet", "inception_v3"]


def say(*a) -> None:
    print(*a, flush=True)


# -- building models ---------------------------------------------------------------------

def variants(graph: pyge.Graph, device: str) -> dict[str, CompiledModel]:
    single = pyge.compile(graph, device, {"ge.enableSingleStream": "true"})
    out = {"single": single}
    try:
        auto = pyge.compile(graph, device, {"ge.autoMultistreamParallelMode": "LoadBalance:4"})
        if auto.num_streams > 1:
            out["auto4"] = auto
    except pyge.PygeError as err:
        say(f"    auto4: not available ({err})")
    out["branch4"] = replan(single, branch_streams(4), device)
    if device.startswith("cuda"):
        from pyge.executors.cuda import CudaExecutor
        b = out["branch4"]
        arena = CompiledModel(b.graph, b.plan, device, b.options)
        arena._executor = CudaExecutor(b.graph, b.plan, device, b.options, memory="arena")
        out["branch4-arena"] = arena
    return out


def light_graph(name: str, batch: int, random: bool = True) -> pyge.Graph:
    """A light model, at `batch`, with random weights (pyge.testing.random_weights) unless told not."""
    mp = onnx.load(light_path(name))
    if random:
        random_weights(mp)
    if batch != 1:
        mp.graph.input[0].type.tensor_type.shape.dim[0].dim_value = batch
        for o in mp.graph.output:
            if o.type.tensor_type.shape.dim:
                o.type.tensor_type.shape.dim[0].dim_value = batch
        del mp.graph.value_info[:]
        _batch_reshapes(mp.graph)
    return pyge.load_onnx(mp)


def _batch_reshapes(g: onnx.GraphProto) -> None:
    """Reshape targets written for batch 1 ([1, N], e.g. before the classifier) -> [-1, N]."""
    from onnx import numpy_helper
    init = {t.name: t for t in g.initializer}
    for n in g.node:
        if n.op_type == "Reshape" and len(n.input) > 1 and n.input[1] in init:
            shape = numpy_helper.to_array(init[n.input[1]]).copy()
            if shape.ndim == 1 and shape.size > 1 and shape[0] == 1 and -1 not in shape:
                shape[0] = -1
                init[n.input[1]].CopyFrom(numpy_helper.from_array(shape, n.input[1]))


def torchvision_builder():
    """(build(name) -> (module, resolution), source label): tv_nets.build takes torchvision's
    models when torchvision is installed and its own copies otherwise."""
    sys.path.insert(0, str(Path(__file__).resolve().parent))
    import tv_nets
    if importlib.util.find_spec("torchvision") is not None:
        return tv_nets.build, "torchvision"
    return tv_nets.build, "benchmarks/tv_nets.py (torchvision is not installed)"


def export(module: torch.nn.Module, x: torch.Tensor) -> pyge.Graph:
    x = x.to(next(module.parameters()).device)      # the module may be on the GPU already
    f = io.BytesIO()
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        torch.onnx.export(module, (x,), f, opset_version=17, dynamo=False,
                          input_names=["input"], output_names=["output"])
    return pyge.load_onnx(onnx.load_from_string(f.getvalue()))


# -- checking and timing -----------------------------------------------------------------

def _sync(device: str) -> None:
    if device.startswith("cuda"):
        torch.cuda.synchronize()


def make_feeds(model: CompiledModel, seed: int, device: str) -> dict:
    rng = np.random.default_rng(seed)
    out = {}
    for vi in model.plan.inputs:
        v = model.plan.values[vi]
        a = rng.standard_normal(v.shape).astype(v.dtype)
        out[v.name] = torch.from_numpy(a).to(device) if device.startswith("cuda") else a
    return out


def runner(model: CompiledModel, feeds: dict, device: str):
    if device.startswith("cuda"):
        return lambda: model.run(feeds, output_device="cuda")
    return lambda: model.run(feeds)


def _np(x) -> np.ndarray:
    return x.detach().float().cpu().numpy() if isinstance(x, torch.Tensor) else np.asarray(x, dtype=np.float64)


def rel_err(got: dict, want: dict) -> float:
    return max(relative_errors(got, want).values(), default=0.0)


def timed(fns: dict, reps: int, device: str) -> dict[str, float]:
    """Median wall time (ms) per function, rounds interleaved so drift hits all alike."""
    times: dict[str, list[float]] = {k: [] for k in fns}
    for _ in range(reps):
        for k, fn in fns.items():
            _sync(device)
            t0 = time.perf_counter()
            fn()
            _sync(device)
            times[k].append((time.perf_counter() - t0) * 1e3)
    return {k: statistics.median(v) for k, v in times.items()}


def check_case(name: str, batch: int, graph: pyge.Graph, device: str, reps: int,
               torch_ref=None) -> list[dict]:
    """Compile every variant, check outputs, time them; one result row per variant."""
    models = variants(graph, device)
    feeds = make_feeds(models["single"], batch, device)
    rows, fns = [], {}
    first = {}
    for label, m in models.items():
        if device.startswith("cuda"):
            torch.cuda.reset_peak_memory_stats()
            base = torch.cuda.memory_allocated()
        first[label] = m.run(feeds, output_device="cuda") if device.startswith("cuda") else m.run(feeds)
        ex = m.executor
        row = {"model": name, "batch": batch, "variant": label, "streams": m.num_streams,
               "events": len(m.events), "mode": getattr(ex, "mode", type(ex).__name__),
               "capture_error": getattr(ex, "capture_error", None),
               "plan_peak_mb": m.memory.peak_bytes / 2**20,
               "no_reuse_mb": m.memory.no_reuse_bytes / 2**20}
        if device.startswith("cuda"):
            row["first_run_peak_alloc_mb"] = (torch.cuda.max_memory_allocated() - base) / 2**20
        rows.append(row)
        fns[label] = runner(m, feeds, device)
    refs, torch_fn = _references(models["single"], feeds, torch_ref)
    if torch_fn is not None:
        fns["torch-eager"] = torch_fn
    for row in rows:
        got = first[row["variant"]]
        row["vs_single"] = rel_err(got, first["single"])
        for label, want in refs.items():
            row["vs_" + label] = rel_err(got, want)
        row["ok"] = row["vs_single"] <= TOL_SINGLE and all(row["vs_" + k] <= TOL_REF for k in refs)
    for fn in fns.values():       # warm-up: the first run of a graph variant captured it
        fn()
    med = timed(fns, reps, device)
    for row in rows:
        row["median_ms"] = med[row["variant"]]
        row["speedup_vs_single"] = med["single"] / med[row["variant"]]
    if "torch-eager" in med:
        rows.append({"model": name, "batch": batch, "variant": "torch-eager", "median_ms": med["torch-eager"],
                     "speedup_vs_single": med["single"] / med["torch-eager"], "ok": True})
    return rows


def _references(single: CompiledModel, feeds: dict, module):
    """What the outputs should be: {"cpu": every output (intermediates too) from torch's CPU
    kernels through pyge's one-thread reference executor, "torch": the torch module's output
    (googlenet, inception_v3)}, and a timing function for the torch module (or None)."""
    cpu = {k: (_np(v).astype(np.float32) if isinstance(v, torch.Tensor) else v) for k, v in feeds.items()}
    refs = {"cpu": CompiledModel(single.graph, single.plan, "cpu", single.options).run(cpu)}
    if module is None:
        return refs, None
    x = feeds["input"]
    x = x if isinstance(x, torch.Tensor) else torch.from_numpy(x)
    refs["torch"] = {single.plan.values[single.plan.outputs[0]].name: _no_grad(module, x)}
    return refs, lambda: _no_grad(module, x)


def _tf32_state() -> dict:
    return {"cudnn": torch.backends.cudnn.allow_tf32, "matmul": torch.backends.cuda.matmul.allow_tf32}


def _no_grad(module, x):
    with torch.no_grad():
        return module(x)


# -- the run -----------------------------------------------------------------------------

def cases(args, notes: list[str]):
    """(name, batch, graph builder, torch module or None), lazily (exports cost time); every
    model at batch 1 first, so a run cut short by its budget still covers each model once."""
    build, src = torchvision_builder()
    notes.append(f"googlenet / inception_v3 from {src}")
    say(f"googlenet / inception_v3 from {src}")
    batches = (1,) if args.quick else (1, 8)
    modules = {}
    for batch in batches:
        for name in (QUICK if args.quick else LIGHT):
            yield name, batch, (lambda n=name, b=batch: with_intermediates(light_graph(n, b))), None
        for name in (TV[:1] if args.quick else TV):
            if name not in modules:
                modules[name] = build(name)
                modules[name][0].eval()
            module, size = modules[name]
            x = torch.zeros(batch, 3, size, size)
            yield name, batch, (lambda m=module, x=x: with_intermediates(export(m, x))), module


def run_all(args) -> dict:
    device = args.device
    notes: list[str] = []
    failures: list[str] = []
    rows: list[dict] = []
    t_start = time.perf_counter()
    for name, batch, make_graph, module in cases(args, notes):
        if time.perf_counter() - t_start > args.budget:
            notes.append(f"time budget {args.budget}s spent: skipped {name} batch {batch} and later cases")
            say(notes[-1])
            break
        t0 = time.perf_counter()
        try:
            graph = make_graph()
            ref = module.to(device) if module is not None else None
            got = check_case(name, batch, graph, device, args.reps, ref)
        except Exception as err:  # noqa: BLE001 - one model failing must not stop the check
            msg = f"{name} batch {batch}: {type(err).__name__}: {str(err).splitlines()[0] if str(err) else ''}"
            notes.append(msg)
            failures.append(msg)
            say("  FAILED:", msg)
            continue
        rows.extend(got)
        for r in got:
            say("  " + fmt_row(r))
        say(f"  ({name} batch {batch}: {time.perf_counter() - t0:.1f} s)")
        # On disk after every case: a run cut short by the device's time limit keeps its rows.
        out = Path(args.out)
        out.mkdir(parents=True, exist_ok=True)
        (out / "gpu_check.partial.json").write_text(json.dumps({"notes": notes, "results": rows},
                                                               indent=1, default=str))
    info = {"device": device, "torch": torch.__version__, "pyge": pyge.__version__,
            "gpu": torch.cuda.get_device_name() if device.startswith("cuda") else None,
            "reps": args.reps, "elapsed_s": time.perf_counter() - t_start, "notes": notes,
            "tf32": _tf32_state(), "failures": failures,
            "all_ok": all(r.get("ok", False) for r in rows) and bool(rows) and not failures,
            "results": rows}
    return info


HEAD = (f"{'model':13s} {'b':>2s} {'variant':14s} {'str':>3s} {'ev':>4s} {'mode':6s} "
        f"{'vs_single':>9s} {'vs_ref':>9s} {'ok':>4s} {'ms':>8s} {'x_single':>8s} {'peakMB':>7s}")


def fmt_row(r: dict) -> str:
    ref = max((r[k] for k in r if k.startswith("vs_") and k != "vs_single"), default=float("nan"))
    return (f"{r['model']:13s} {r['batch']:>2d} {r['variant']:14s} {r.get('streams', 0):>3d} "
            f"{r.get('events', 0):>4d} {str(r.get('mode', '-'))[:6]:6s} "
            f"{r.get('vs_single', float('nan')):9.1e} {ref:9.1e} {'ok' if r.get('ok') else 'FAIL':>4s} "
            f"{r['median_ms']:8.3f} {r['speedup_vs_single']:8.2f} {r.get('plan_peak_mb', float('nan')):7.1f}")


def thread_policy(reps: int) -> int:
    """CPU only: the intra-op thread rule (ceil(C / p) threads per stream) against the even
    split (C // k), on inception_v1 and resnet50, interleaved with pauses so one
    configuration's spinning OpenMP teams do not slow the next."""
    from pyge.executors.cpu import CpuExecutor
    from pyge.executors.sequential import SequentialExecutor
    for name in ("inception_v1", "resnet50"):
        g = light_graph(name, 1, random=False)
        single = pyge.compile(g, "cpu", {"ge.enableSingleStream": "true"})
        feeds = make_feeds(single, 0, "cpu")
        cands = {"single": SequentialExecutor(single.graph, single.plan)}
        for label, m in (("branch2", replan(single, branch_streams(2), "cpu")),
                         ("auto4", pyge.compile(g, "cpu", {"ge.autoMultistreamParallelMode": "LoadBalance:4"}))):
            ex = CpuExecutor(m.graph, m.plan, "cpu", m.options)
            k = len(ex.busy)
            cands[f"{label} k={k} ceil(C/p)={ex.threads}"] = ex
            cands[f"{label} k={k} C//k={max(1, torch.get_num_threads() // k)}"] = CpuExecutor(
                m.graph, m.plan, "cpu", m.options.merged({"pyge.intraOpThreads": str(max(1, torch.get_num_threads() // k))}))
        times: dict[str, list[float]] = {k: [] for k in cands}
        for ex in cands.values():
            ex.run(feeds)
        for _ in range(reps):
            for k, ex in cands.items():
                time.sleep(0.02)
                t0 = time.perf_counter()
                ex.run(feeds)
                times[k].append(time.perf_counter() - t0)
        b_min, b_med = min(times["single"]), statistics.median(times["single"])
        for k, ts in times.items():
            say(f"{name:13s} {k:24s} best {min(ts) * 1e3:7.1f} ms (x{b_min / min(ts):.2f})  "
                f"median {statistics.median(ts) * 1e3:7.1f} ms (x{b_med / statistics.median(ts):.2f})")
    return 0


def sensitivity() -> int:
    """CPU only: how far each checked output moves between two seeded inputs, relative to its
    largest value (a check tolerance must sit well below what a wrong input would change)."""
    build, _ = torchvision_builder()
    graphs = [(n, lambda n=n: light_graph(n, 1)) for n in LIGHT]
    for name in TV:
        module, size = build(name)
        graphs.append((name, lambda m=module.eval(), s=size: export(m, torch.zeros(1, 3, s, s))))
    say(f"{'model':13s} {'outputs':>7s} {'min':>9s} {'median':>9s} {'max':>9s}   (|out(seed 0) - out(seed 1)| / max|out|)")
    for name, make in graphs:
        m = pyge.compile(with_intermediates(make()), "cpu", {"ge.enableSingleStream": "true"})
        a, b = m.run(make_feeds(m, 0, "cpu")), m.run(make_feeds(m, 1, "cpu"))
        d = sorted(relative_errors(a, b).values())
        say(f"{name:13s} {len(d):7d} {d[0]:9.1e} {d[len(d) // 2]:9.1e} {d[-1]:9.1e}")
    return 0


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--device", default="cuda", help="cuda (default) or cpu")
    ap.add_argument("--quick", action="store_true", help="two light models and googlenet, batch 1")
    ap.add_argument("--reps", type=int, default=None, help="timed rounds (default 30, quick 5)")
    ap.add_argument("--budget", type=float, default=240.0, help="seconds before later cases are skipped")
    ap.add_argument("--out", default=os.environ.get("OUT", "out"), help="output folder (default $OUT or ./out)")
    ap.add_argument("--thread-policy", action="store_true",
                    help="CPU only: compare the intra-op thread rules of the threaded executor")
    ap.add_argument("--sensitivity", action="store_true",
                    help="CPU only: how much each checked output changes between two inputs")
    args = ap.parse_args(argv)
    args.reps = args.reps or (5 if args.quick else 30)
    if args.sensitivity:
        return sensitivity()
    if args.thread_policy:
        return thread_policy(max(args.reps, 10))
    if args.device.startswith("cuda") and not torch.cuda.is_available():
        say("CUDA is not available: nothing to check on the GPU (try --device cpu)")
        return 2
    if args.device.startswith("cuda"):        # FP32 throughout: see TOL_REF
        torch.backends.cudnn.allow_tf32 = False
        torch.backends.cuda.matmul.allow_tf32 = False
    say(f"pyge gpu_check on {args.device}, torch {torch.__version__}")
    say(HEAD)
    info = run_all(args)
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    (out / "gpu_check.json").write_text(json.dumps(info, indent=1, default=str))
    lines = [f"pyge gpu_check: {info['device']} {info['gpu'] or ''} torch {info['torch']}, "
             f"{info['reps']} interleaved rounds, {info['elapsed_s']:.0f} s", HEAD]
    lines += [fmt_row(r) for r in info["results"]]
    lines += [f"note: {n}" for n in info["notes"]]
    lines.append("ALL OK" if info["all_ok"] else "SOME CHECKS FAILED (see ok column and notes)")
    (out / "gpu_check.txt").write_text("\n".join(lines) + "\n")
    say(lines[-1])
    say(f"wrote {out / 'gpu_check.json'} and {out / 'gpu_check.txt'}")
    return 0 if info["all_ok"] else 1


if __name__ == "__main__":
    sys.exit(main())
