"""Built-in models: what `pyge run` runs when no model is given.

`inception_block()` is an Inception-v1-style block (Szegedy et al., 2014): four parallel
branches over one input (1x1 conv; 1x1 -> 3x3 conv; 1x1 -> 5x5 conv; 3x3 max pool -> 1x1
conv) joined by Concat, then a classifier head (global average pool -> Gemm). The branches
share nothing but the input, which is the shape that logical streams are for: with an
automatic mode (`ge.autoMultistreamParallelMode`) or pyge's per-node rules with more than one
stream per engine (`pyge.streamAllocation=nodes`, `ge.streamMaxParallelNum`) they run
concurrently; GE's built-in rules keep the one-engine block on one stream. Weights are random but seeded, so
every run of `pyge run` prints the same numbers.
"""
from __future__ import annotations

import numpy as np

from .errors import InputError
from .ir.builder import GraphBuilder
from .ir.graph import Graph, Value

BUILTIN_NAME = "inception_block"


def _conv(b: GraphBuilder, rng: np.random.Generator, x: Value, cin: int, cout: int, k: int,
          name: str) -> Value:
    """Conv(k x k, same padding) + bias + Relu, He-initialised."""
    w = rng.standard_normal((cout, cin, k, k)).astype(np.float32) * np.float32(np.sqrt(2.0 / (cin * k * k)))
    bias = (rng.standard_normal(cout) * 0.01).astype(np.float32)
    wv = b.initializer(f"{name}.weight", w)
    bv = b.initializer(f"{name}.bias", bias)
    p = k // 2
    y = b.op("Conv", [x, wv, bv], name=f"{name}/Conv", kernel_shape=[k, k], pads=[p, p, p, p])
    return b.op("Relu", [y], name=f"{name}/Relu")


def inception_block(batch: int = 1, channels: int = 32, size: int = 32, classes: int = 10,
                    seed: int = 0) -> Graph:
    """An inception-like block: input [batch, channels, size, size] -> logits [batch, classes]."""
    rng = np.random.default_rng(seed)
    b = GraphBuilder(BUILTIN_NAME)
    x = b.input("input", "float32", (batch, channels, size, size))
    c = channels
    b1 = _conv(b, rng, x, c, c, 1, "branch1x1")
    b2 = _conv(b, rng, _conv(b, rng, x, c, c * 3 // 4, 1, "branch3x3_reduce"), c * 3 // 4, c, 3, "branch3x3")
    b3 = _conv(b, rng, _conv(b, rng, x, c, c // 4, 1, "branch5x5_reduce"), c // 4, c // 2, 5, "branch5x5")
    pool = b.op("MaxPool", [x], name="branch_pool/MaxPool", kernel_shape=[3, 3], strides=[1, 1],
                pads=[1, 1, 1, 1])
    b4 = _conv(b, rng, pool, c, c // 2, 1, "branch_pool")
    cat = b.op("Concat", [b1, b2, b3, b4], name="Concat", axis=1)
    width = c + c + c // 2 + c // 2
    gap = b.op("GlobalAveragePool", [cat], name="head/GlobalAveragePool")
    flat = b.op("Flatten", [gap], name="head/Flatten", axis=1)
    w = (rng.standard_normal((width, classes)) / np.sqrt(width)).astype(np.float32)
    fc = b.op("Gemm", [flat, b.initializer("head.weight", w), b.initializer("head.bias", np.zeros(classes, np.float32))],
              name="head/Gemm")
    b.output(fc, "logits")
    return b.build()


def random_inputs(graph: Graph, seed: int = 0, shapes: dict | None = None) -> dict[str, np.ndarray]:
    """Seeded random feeds for every graph input.

    Unknown or symbolic dimensions take their value from `shapes` (input name -> shape) or 1.
    Floats are standard normal, integers uniform in [0, 10), booleans fair coins, strings "pyge".
    """
    rng = np.random.default_rng(seed)
    feeds = {}
    for v in graph.inputs:
        shape = tuple((shapes or {}).get(v.name) or
                      [d if isinstance(d, int) and d >= 0 else 1 for d in (v.shape or ())])
        try:
            feeds[v.name] = _random_array(rng, v.dtype, shape)
        except (ValueError, TypeError, MemoryError) as err:   # a huge declared shape, an exotic dtype
            raise InputError(f"cannot make a random feed for input {v.name!r} (dtype {v.dtype}, shape "
                             f"{list(shape)}): {type(err).__name__}: {str(err).rstrip('.')}; "
                             "give it with --input NAME=FILE.npy") from err
    return feeds


def _random_array(rng: np.random.Generator, dtype: str | None, shape: tuple):
    if dtype == "object":
        return np.full(shape, "pyge", dtype=object)
    if dtype == "bfloat16":
        import torch
        return torch.from_numpy(rng.standard_normal(shape).astype(np.float32)).to(torch.bfloat16)
    dt = np.dtype(dtype or "float32")
    if dt.kind == "f":
        return rng.standard_normal(shape).astype(dt)
    if dt.kind in "iu":
        return rng.integers(0, 10, size=shape).astype(dt)
    if dt.kind == "b":
        return rng.random(shape) < 0.5
    return (rng.standard_normal(shape) + 1j * rng.standard_normal(shape)).astype(dt)


__all__ = ["inception_block", "random_inputs", "BUILTIN_NAME"]
