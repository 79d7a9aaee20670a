"""A tensor-parallel MLP block on two ranks, its AllReduce overlapping an independent branch.

    torchrun --nproc-per-node 2 examples/tensor_parallel/run.py            # ONNX-style graph
    torchrun --nproc-per-node 2 examples/tensor_parallel/run.py --torch    # via pyge.from_torch

Each rank holds a column slice of the first MatMul's weight and the matching row slice of
the second's (pyge.tensor_parallel); a com.microsoft AllReduce sums the partial products,
so every rank's outputs equal the unsharded model's, which the script checks. pyge
initialises the gloo process group from torchrun's environment (or uses one the caller
made); the AllReduce sits on the independent engine's stream, the branch on the compute
stream, and the profile printed by rank 0 shows them running at the same time.
With --torch the block is a torch module calling torch's functional all_reduce, exported
by torch.export and converted by pyge.from_torch.
"""
from __future__ import annotations

import argparse
import os
import sys

import numpy as np

import pyge
from pyge import tensor_parallel as tp

def build(args, shape: tp.BlockShape, rank: int, world: int) -> pyge.Graph:
    if not args.torch:
        return tp.block_graph(shape, rank, world)
    import torch
    import torch.distributed as dist
    if not dist.is_initialized():
        dist.init_process_group("gloo")          # torch.export traces under the group
    x = torch.from_numpy(tp.block_inputs(shape)["x"])
    return pyge.from_torch(tp.torch_block(shape, rank, world), (x,))


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--torch", action="store_true", help="build the block with pyge.from_torch")
    ap.add_argument("--batch", type=int, default=128)
    args = ap.parse_args()
    if "RANK" not in os.environ:
        print("run me on every rank with: torchrun --nproc-per-node 2 " + " ".join(sys.argv),
              file=sys.stderr)
        return 2
    rank, world = int(os.environ["RANK"]), int(os.environ["WORLD_SIZE"])
    shape = tp.BlockShape(batch=args.batch, model=512, hidden=2048, branch=1024)
    model = pyge.compile(build(args, shape, rank, world))
    feeds = tp.block_inputs(shape)
    out = model.run(feeds)
    want = tp.reference(feeds["x"], tp.full_weights(shape))
    names = ("mlp", "out") if not args.torch else ("output_0", "output_1")
    err = max(float(np.max(np.abs(out[n] - want[k]))) for n, k in zip(names, ("mlp", "out")))
    print(f"rank {rank} of {world}: outputs equal the unsharded model's (max |error| {err:.2e})")
    prof = model.profile(feeds, runs=10)
    if rank == 0:
        for s, ops in enumerate(model.streams):
            print(f"  stream {s}: {', '.join(ops)}")
        for e in model.events:
            print(f"  event {e}")
        ar = next(n for n in model.plan.nodes if n.op_type == "AllReduce")
        both = sum(prof.overlap(ar.name, n.name) for n in model.plan.nodes if n.stream != ar.stream)
        print(f"  {ar.name} took {1e3 * np.median(prof.durations(ar.name)):.2f} ms, of which "
              f"{1e3 * both:.2f} ms overlapped compute on the other stream (median of 10 runs)")
        print(prof.summary())
    import torch.distributed as dist
    dist.destroy_process_group()         # leave no live group behind at exit
    return 0 if err < 1e-4 else 1


if __name__ == "__main__":
    sys.exit(main())
