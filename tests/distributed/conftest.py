"""Process groups inside the test process, for the tests that need no second rank."""
from __future__ import annotations

import numpy as np
import pytest

import pyge
from pyge.kernels.collective_group import ENV_VARS

MS = "com.microsoft"


@pytest.fixture
def no_env(monkeypatch):
    """Neither torchrun's variables nor a process group."""
    import torch.distributed as dist
    for k in ENV_VARS:
        monkeypatch.delenv(k, raising=False)
    if dist.is_initialized():
        dist.destroy_process_group()


def _group(backend: str, world: int):
    import torch.distributed as dist
    if backend == "fake":
        from torch.testing._internal.distributed.fake_pg import FakeStore
        store = FakeStore()
    else:
        store = dist.HashStore()
    dist.init_process_group(backend, store=store, rank=0, world_size=world)
    return dist.group.WORLD


@pytest.fixture
def group(no_env):
    """A one-rank gloo group: collectives really run (and return their input)."""
    import torch.distributed as dist
    yield _group("gloo", 1)
    if dist.is_initialized():
        dist.destroy_process_group()


@pytest.fixture
def group2(no_env):
    """torch's fake backend with two ranks: for compile-time checks that need a world of 2
    (its collectives do nothing)."""
    import torch.distributed as dist
    yield _group("fake", 2)
    if dist.is_initialized():
        dist.destroy_process_group()


def one_collective(op_type: str = "AllReduce", dtype: str = "float32", shape=(4, 6), **attrs):
    """x -> Relu -> <collective> -> y, with a Tanh branch to z."""
    b = pyge.GraphBuilder(f"one_{op_type}")
    x = b.input("x", dtype, shape)
    r = b.op("Relu", [x], name="relu") if dtype.startswith("float") else x
    c = b.op(op_type, [r], name=op_type, domain=MS, **attrs)
    b.output(c, "y")
    if dtype.startswith("float"):
        b.output(b.op("Tanh", [x], name="branch"), "z")
    return b.build()


def feeds_for(g: pyge.Graph, seed: int = 0) -> dict:
    rng = np.random.default_rng(seed)
    return {v.name: rng.standard_normal(v.shape).astype(v.dtype) for v in g.inputs}
