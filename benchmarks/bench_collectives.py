"""Communication overlapping compute: the tensor-parallel block (pyge.tensor_parallel) on
two ranks, pyge's default plan against ge.enableSingleStream=true.

    python benchmarks/bench_collectives.py [--device cpu|cuda] [--quick] [--out DIR]

The script relaunches itself on every rank with torchrun (python -m torch.distributed.run
--standalone --nproc-per-node 2); started under torchrun, it runs as one rank. Both plans
are compiled on every rank and timed side by side in alternating rounds; before each timed
run the ranks meet at a barrier, and a run's time is the slower rank's; the time ratio is
taken per round, then its median. Overlap is read
from a profile of each plan: the time the AllReduce ran while an operator of another stream
ran. Rank 0 writes bench_collectives.txt / .json and the default plan's trace to --out
(default benchmarks/results).

Process group: gloo on the cpu (pyge initialises it from torchrun's environment); on cuda,
NCCL with one GPU per rank, and with fewer GPUs than ranks gloo on CUDA tensors (NCCL
refuses two ranks on one GPU; gloo stages through host memory and is not capturable, so
that plan runs eagerly).
"""
from __future__ import annotations

import argparse
import json
import os
import platform
import statistics
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "src"))


def _args(argv=None):
    import torch
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--device", default="cuda" if torch.cuda.is_available() else "cpu")
    ap.add_argument("--quick", action="store_true", help="a small block and few rounds")
    ap.add_argument("--rounds", type=int, default=0, help="timed rounds per plan (0: 30, quick 6)")
    ap.add_argument("--ranks", type=int, default=2)
    ap.add_argument("--out", default=str(ROOT / "benchmarks" / "results"))
    return ap.parse_args(argv)


def relaunch(argv: list[str], ranks: int) -> None:
    """Become torchrun (exec: a signal to this process, e.g. from `timeout`, reaches torchrun,
    which stops the ranks)."""
    cmd = [sys.executable, "-m", "torch.distributed.run", "--standalone", f"--nproc-per-node={ranks}",
           str(Path(__file__).resolve()), *argv]
    env = {**os.environ, "PYTHONPATH": str(ROOT / "src") + os.pathsep + os.environ.get("PYTHONPATH", "")}
    sys.stdout.flush()
    os.execve(sys.executable, cmd, env)


def _group(device: str) -> str:
    """Initialise the group where pyge would not pick the right one; returns its backend."""
    import torch
    import torch.distributed as dist
    world = int(os.environ["WORLD_SIZE"])
    if device.startswith("cuda") and torch.cuda.device_count() < world:
        dist.init_process_group("gloo")
        torch.cuda.set_device(0)
        return "gloo (CUDA tensors, ranks share one GPU)"
    return "nccl" if device.startswith("cuda") else "gloo"


def _timed(models: dict, feeds, rounds: int, order: list[str]) -> dict[str, list[float]]:
    import torch
    import torch.distributed as dist
    times: dict[str, list[float]] = {k: [] for k in models}
    for r in range(rounds):
        for name in (order if r % 2 == 0 else order[::-1]):
            dist.barrier()
            t0 = time.perf_counter()
            models[name].run(feeds)
            t = torch.tensor([time.perf_counter() - t0], dtype=torch.float64)
            dist.all_reduce(t, op=dist.ReduceOp.MAX)
            times[name].append(float(t))
    return times


def _overlap(model, feeds, runs: int) -> dict:
    prof = model.profile(feeds, runs=runs)
    ar = next(n for n in model.plan.nodes if n.op_type == "AllReduce")
    others = [n.name for n in model.plan.nodes if n.stream != ar.stream]
    ar_s = statistics.median(prof.durations(ar.name))
    both = sum(prof.overlap(ar.name, n) for n in others) if others else 0.0
    return {"allreduce_ms": 1e3 * ar_s, "overlapped_ms": 1e3 * both,
            "overlap_fraction": both / ar_s if ar_s > 0 else 0.0,
            "streams": model.num_streams, "profile": prof}


def worker(a) -> int:
    import numpy as np
    import torch
    import torch.distributed as dist
    import pyge
    from pyge import tensor_parallel as tp
    rank, world = int(os.environ["RANK"]), int(os.environ["WORLD_SIZE"])
    backend = _group(a.device)
    shape = (tp.BlockShape(batch=64, model=256, hidden=1024, branch=512) if a.quick else
             tp.BlockShape(batch=256, model=1024, hidden=4096, branch=2048))
    rounds = a.rounds or (6 if a.quick else 30)
    g = tp.block_graph(shape, rank, world)
    device = a.device if not a.device.startswith("cuda") else "cuda"
    models = {"default": pyge.compile(g, device), "single": pyge.compile(g, device, {"ge.enableSingleStream": "true"})}
    feeds = tp.block_inputs(shape)
    want = tp.reference(feeds["x"], tp.full_weights(shape))
    errs = {k: float(np.max(np.abs(m.run(feeds)["out"] - want["out"]))) for k, m in models.items()}
    for m in models.values():          # warm-up (CUDA: capture where the backend allows it)
        m.run(feeds)
    times = _timed(models, feeds, rounds, ["default", "single"])
    over = {k: _overlap(m, feeds, max(3, rounds // 2)) for k, m in models.items()}
    if rank == 0:
        med = {k: statistics.median(v) for k, v in times.items()}
        res = {"meta": {"ranks": world, "device": a.device, "backend": backend, "shape": vars(shape),
                        "rounds": rounds, "cores": os.cpu_count(), "torch": torch.__version__,
                        "python": platform.python_version(), "date": time.strftime("%Y-%m-%d"),
                        "load_average": [round(x, 1) for x in os.getloadavg()],
                        "command": "python benchmarks/bench_collectives.py " + " ".join(sys.argv[1:])},
               "median_ms": {k: 1e3 * v for k, v in med.items()},
               # a ratio per round, then the median (below 1: the default plan is faster)
               "time_ratio_default_over_single": statistics.median(
                   d / s for d, s in zip(times["default"], times["single"])),
               "max_abs_error": errs,
               "overlap": {k: {kk: vv for kk, vv in o.items() if kk != "profile"} for k, o in over.items()}}
        out = Path(a.out)
        out.mkdir(parents=True, exist_ok=True)
        over["default"]["profile"].save_trace(out / "bench_collectives_trace.json")
        (out / "bench_collectives.json").write_text(json.dumps(res, indent=2))
        text = _report(res)
        (out / "bench_collectives.txt").write_text(text + "\n")
        print(text)
    dist.barrier()
    dist.destroy_process_group()
    return 0 if max(errs.values()) < 1e-3 else 1


def _report(res: dict) -> str:
    m, o = res["meta"], res["overlap"]
    lines = [f"bench_collectives {m['date']}: tensor-parallel block {m['shape']} on {m['ranks']} ranks, "
             f"{m['device']}, {m['backend']}, torch {m['torch']}, {m['cores']} cores "
             f"(load average {m['load_average'][0]} when it ended)",
             f"  command: {m['command']}",
             f"  median run (slower rank, {m['rounds']} alternating rounds):  default "
             f"{res['median_ms']['default']:.2f} ms ({o['default']['streams']} streams), single stream "
             f"{res['median_ms']['single']:.2f} ms; default / single {res['time_ratio_default_over_single']:.3f} "
             "(median of per-round ratios)",
             f"  AllReduce overlapping another stream's operators (profile, median): default "
             f"{o['default']['overlapped_ms']:.2f} of {o['default']['allreduce_ms']:.2f} ms "
             f"({100 * o['default']['overlap_fraction']:.0f}%), single stream "
             f"{o['single']['overlapped_ms']:.2f} of {o['single']['allreduce_ms']:.2f} ms",
             f"  outputs vs the unsharded model, max |error|: {res['max_abs_error']}"]
    return "\n".join(lines)


def main() -> int:
    a = _args()
    if "RANK" not in os.environ:
        relaunch(sys.argv[1:], a.ranks)
    return worker(a)


if __name__ == "__main__":
    sys.exit(main())
