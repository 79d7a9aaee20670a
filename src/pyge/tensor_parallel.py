"""A tensor-parallel MLP block beside an independent branch, for the example, the benchmark
and the tests of collectives (examples/tensor_parallel/run.py).

    out = AllReduce(Relu(x @ W1[:, cols_r] + b1[cols_r]) @ W2[rows_r, :]) + b2 + branch(x)
    branch(x) = Tanh(Relu(x @ V1) @ V2)

Rank r of W holds one column slice of W1 (column-parallel) and the matching row slice of
W2 (row-parallel), so the products summed by the AllReduce are the unsharded MLP's; every
rank's outputs equal the unsharded model's. The branch does not depend on the MLP, so on
the default plan it runs on the compute stream while the AllReduce waits on the
independent engine's stream: communication overlapping computation. The nodes are added in
that order (MLP, AllReduce, branch, the final adds), so the compute stream reaches the
branch before it needs the AllReduce's result.

`block_graph` builds the pyge graph (com.microsoft AllReduce); `TPBlock` is the same block
as a torch module calling torch's functional collectives, for pyge.from_torch.
"""
from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from .ir.builder import GraphBuilder
from .ir.graph import Graph


@dataclass(frozen=True)
class BlockShape:
    batch: int = 64
    model: int = 256          # d_model: x, the MLP's output and the branch's output
    hidden: int = 1024        # the MLP's hidden width, split over the ranks
    branch: int = 512         # the branch's hidden width


def full_weights(shape: BlockShape, seed: int = 0) -> dict[str, np.ndarray]:
    """The unsharded block's weights (the same on every rank for one seed)."""
    rng = np.random.default_rng(seed)
    d, h, k = shape.model, shape.hidden, shape.branch

    def w(*dims):
        return (rng.standard_normal(dims) / np.sqrt(dims[0])).astype(np.float32)
    return {"W1": w(d, h), "b1": w(1, h)[0], "W2": w(h, d), "b2": w(1, d)[0],
            "V1": w(d, k), "V2": w(k, d)}


def shard(weights: dict[str, np.ndarray], rank: int, world: int) -> dict[str, np.ndarray]:
    """Rank `rank`'s slices: W1 and b1 by columns, W2 by rows; the rest whole."""
    h = weights["W1"].shape[1]
    if h % world:
        raise ValueError(f"hidden width {h} cannot be split over {world} ranks")
    cols = slice(rank * h // world, (rank + 1) * h // world)
    out = dict(weights)
    out["W1"], out["b1"], out["W2"] = weights["W1"][:, cols], weights["b1"][cols], weights["W2"][cols, :]
    return out


def block_inputs(shape: BlockShape, seed: int = 1) -> dict[str, np.ndarray]:
    """The block's input, the same on every rank for one seed."""
    rng = np.random.default_rng(seed)
    return {"x": rng.standard_normal((shape.batch, shape.model), dtype=np.float32)}


def reference(x: np.ndarray, weights: dict[str, np.ndarray]) -> dict[str, np.ndarray]:
    """The unsharded block in numpy (float64 accumulation, float32 results)."""
    w = {k: v.astype(np.float64) for k, v in weights.items()}
    x = x.astype(np.float64)
    mlp = np.maximum(x @ w["W1"] + w["b1"], 0) @ w["W2"] + w["b2"]
    branch = np.tanh(np.maximum(x @ w["V1"], 0) @ w["V2"])
    return {"mlp": mlp.astype(np.float32), "out": (mlp + branch).astype(np.float32)}


def block_graph(shape: BlockShape, rank: int, world: int, seed: int = 0) -> Graph:
    """Rank `rank`'s graph of the block, with outputs `mlp` (the reduced MLP) and `out`."""
    p = shard(full_weights(shape, seed), rank, world)
    b = GraphBuilder(f"tp_block_r{rank}")
    b.graph.opset_imports["com.microsoft"] = 1
    x = b.input("x", "float32", (shape.batch, shape.model))
    h = b.op("MatMul", [x, b.initializer("W1", p["W1"])], name="ColumnParallel_MatMul")
    h = b.op("Add", [h, b.initializer("b1", p["b1"])], name="ColumnParallel_Bias")
    h = b.op("Relu", [h], name="Relu")
    part = b.op("MatMul", [h, b.initializer("W2", p["W2"])], name="RowParallel_MatMul")
    reduced = b.op("AllReduce", [part], name="AllReduce", domain="com.microsoft")
    z = b.op("MatMul", [x, b.initializer("V1", p["V1"])], name="Branch_MatMul_1")
    z = b.op("Relu", [z], name="Branch_Relu")
    z = b.op("MatMul", [z, b.initializer("V2", p["V2"])], name="Branch_MatMul_2")
    z = b.op("Tanh", [z], name="Branch_Tanh")
    mlp = b.op("Add", [reduced, b.initializer("b2", p["b2"])], name="Bias", outputs=["mlp"])
    b.op("Add", [mlp, z], name="Residual", outputs=["out"])
    b.graph.outputs.extend([b.graph.value("mlp"), b.graph.value("out")])
    return b.build()


def torch_block(shape: BlockShape, rank: int, world: int, seed: int = 0):
    """The same block as a torch.nn.Module with rank `rank`'s weights; its forward calls
    torch's functional all_reduce on the default group (as tensor-parallel code does)."""
    import torch
    import torch.distributed as dist
    import torch.distributed._functional_collectives as fc

    p = {k: torch.from_numpy(v.copy()) for k, v in shard(full_weights(shape, seed), rank, world).items()}

    class TPBlock(torch.nn.Module):
        def __init__(self):
            super().__init__()
            for k, v in p.items():
                self.register_buffer(k, v)

        def forward(self, x):
            h = torch.relu(x @ self.W1 + self.b1)
            reduced = fc.all_reduce(h @ self.W2, "sum", dist.group.WORLD)
            branch = torch.tanh(torch.relu(x @ self.V1) @ self.V2)   # before reduced is read
            mlp = reduced + self.b2
            return mlp, mlp + branch

    return TPBlock()
