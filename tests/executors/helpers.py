"""Helpers for executor and memory tests: plans with hand-made stream assignments.

The stream passes decide streams during pyge.compile; these tests need assignments of their
own (random, branch round-robin): pyge.replan re-plans a single-stream compile with them.
"""
from __future__ import annotations

import functools
import os
import random
from typing import Callable, Mapping

import numpy as np
import onnx
import pytest

import pyge
from pyge.executors.sequential import SequentialExecutor
from pyge.model import CompiledModel
from pyge.replan import Assignment, branch_streams, replan  # noqa: F401 - the tests import them from here
from pyge.testing import light_path, random_weights, with_intermediates

def compile_with_streams(graph: pyge.Graph, assign: Assignment, device: str = "cpu",
                         options: Mapping[str, str] | None = None) -> CompiledModel:
    base = pyge.compile(graph, "cpu", {**dict(options or {}), "ge.enableSingleStream": "true"})
    return replan(base, assign, device, options)


def random_streams(k: int, seed: int) -> Callable[[pyge.Graph], dict[str, int]]:
    def assign(g: pyge.Graph) -> dict[str, int]:
        rng = random.Random(seed)
        return {n.name: rng.randrange(k) for n in g.nodes}
    return assign


def reference(model: CompiledModel, feeds: Mapping[str, np.ndarray]) -> dict[str, np.ndarray]:
    """Outputs of the one-thread reference executor on the same plan."""
    return SequentialExecutor(model.graph, model.plan, "cpu", model.options).run(feeds)


def light_model(name: str, random: bool = False, **compile_opts: str) -> CompiledModel:
    """Compile a light model single-stream, with about 16 intermediates as extra outputs.

    The light models' weights are constant fills, so their final softmax is the same for every
    input and comparing it alone could not catch a race; the intermediates (pyge.testing.
    with_intermediates) do depend on the input. `random=True` also gives the model random
    weights (pyge.testing.random_weights), so every activation depends on the input: for
    tests that compare values (multi- against single-stream).
    """
    path = light_path(name)
    if not os.path.exists(path):
        pytest.skip(f"{path} is not shipped with this onnx version")
    mp = onnx.load(path)
    if random:
        random_weights(mp)
    g = with_intermediates(pyge.load_onnx(mp))
    return pyge.compile(g, "cpu", {"ge.enableSingleStream": "true", **compile_opts})


@functools.lru_cache(maxsize=None)
def cached_light_model(name: str, random: bool = False) -> CompiledModel:
    """light_model(name, random), compiled once per test session (tests must not mutate it)."""
    return light_model(name, random)


def random_feeds(model: CompiledModel, seed: int = 0) -> dict[str, np.ndarray]:
    rng = np.random.default_rng(seed)
    feeds = {}
    for vi in model.plan.inputs:
        v = model.plan.values[vi]
        feeds[v.name] = rng.standard_normal(v.shape).astype(v.dtype)
    return feeds


UNARY = ("Relu", "Abs", "Neg", "Sigmoid", "Tanh")
BINARY = ("Add", "Mul", "Sub")


def random_graph(rng: random.Random, num_nodes: int, shape=(4, 8), num_inputs: int = 2) -> pyge.Graph:
    """A random DAG of elementwise ops over `num_inputs` inputs; several outputs."""
    b = pyge.GraphBuilder(f"rand{num_nodes}")
    vals = [b.input(f"x{i}", "float32", shape) for i in range(num_inputs)]
    produced = []
    for i in range(num_nodes):
        window = vals[-6:] if rng.random() < 0.7 else vals   # mostly local: longer chains
        if rng.random() < 0.5:
            v = b.op(rng.choice(UNARY), [rng.choice(window)], name=f"n{i}")
        else:
            v = b.op(rng.choice(BINARY), [rng.choice(window), rng.choice(window)], name=f"n{i}")
        vals.append(v)
        produced.append(v)
    outs = {id(produced[-1]): produced[-1]}
    for v in rng.sample(produced, k=min(len(produced), rng.randrange(1, 4))):
        outs.setdefault(id(v), v)
    for k, v in enumerate(outs.values()):
        b.output(v, f"y{k}")
    return b.build()
