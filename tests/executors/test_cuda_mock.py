"""The CUDA executor's host-side logic on the CPU, with torch.cuda replaced by a fake.

No GPU here: these tests catch what a GPU run would hit first (the flow of fork / issue /
join, capture and its fallback, static inputs and outputs, the arena), not GPU semantics.
The fake records every stream call so the ordering rules can be checked.
"""
from __future__ import annotations

import random

import numpy as np
import pytest
import torch

import pyge
from pyge.executors import cuda as cuda_mod
from pyge.kernels import register

from .fake_cuda import FakeCuda, TorchProxy
from .helpers import compile_with_streams, random_feeds, random_graph, random_streams, replan

ACTIVE: dict = {"fake": None}   # the fake of the running test, for TestCaptureSync


@pytest.fixture
def fake_cuda(monkeypatch):
    fake = FakeCuda()
    monkeypatch.setitem(ACTIVE, "fake", fake)
    monkeypatch.setattr(cuda_mod, "torch", TorchProxy(fake))
    monkeypatch.setattr(cuda_mod, "_device", lambda device: torch.device("cpu"))
    return fake


@register("TestCaptureSync", domain="pyge.test")
def _capture_sync(ctx):
    def fn(xs):
        if ACTIVE["fake"] is not None and ACTIVE["fake"].capturing is not None:
            raise RuntimeError("operation not permitted when stream is capturing")
        return [xs[0] * 2.0]
    return fn


def _models(seed=4, k=3, nodes=18, **opts):
    single = pyge.compile(random_graph(random.Random(seed), nodes), "cpu", {"ge.enableSingleStream": "true"})
    multi = replan(single, random_streams(k, seed), device="cpu", options=opts)
    return single, multi


def _close(a, b):
    for k in b:
        np.testing.assert_allclose(np.asarray(a[k]), b[k], rtol=1e-6, atol=1e-6)


def _check_fork_join(log, n_streams):
    """Every logical stream waits on the caller first and is waited on by it last."""
    forks = [e for e in log if e[0] == "wait_stream" and e[2] in ("caller", "cap")]
    joins = [e for e in log if e[0] == "wait_stream" and e[1] in ("caller", "cap")]
    assert {e[1] for e in forks} == {f"s{i}" for i in range(n_streams)}
    assert {e[2] for e in joins} == {f"s{i}" for i in range(n_streams)}
    first_join = log.index(joins[0])
    assert all(log.index(f) < first_join for f in forks)
    recorded = set()
    for e in log:                       # a wait is issued after its record
        if e[0] == "record":
            recorded.add(e[2])
        elif e[0] == "wait_event":
            assert e[2] in recorded


@pytest.mark.parametrize("memory", ["pool", "arena"])
def test_eager_flow(fake_cuda, memory):
    single, multi = _models(**{"pyge.cudaGraph": "false"})
    ex = cuda_mod.CudaExecutor(multi.graph, multi.plan, "cuda", multi.options, memory=memory)
    assert ex.mode == "eager" and ex.eager_reason == "pyge.cudaGraph=false"
    feeds = random_feeds(single)
    _close(ex.run(feeds), single.run(feeds))
    _check_fork_join(fake_cuda.log, multi.num_streams)
    out = ex.run(feeds, output_device="cuda")
    assert all(isinstance(t, torch.Tensor) for t in out.values())


@pytest.mark.parametrize("memory", ["pool", "arena"])
def test_capture_then_replay_flow(fake_cuda, memory):
    single, multi = _models()
    ex = cuda_mod.CudaExecutor(multi.graph, multi.plan, "cuda", multi.options, memory=memory)
    assert ex.mode == "graph"
    feeds = random_feeds(single, 0)
    _close(ex.run(feeds), single.run(feeds))          # warm-up + capture + first replay
    graph = ex._graph
    assert graph is not None and ex.capture_error is None

    # The fake cannot replay kernels: re-run the captured issue function on the static
    # buffers, as a replay would, and copy into the static outputs.
    def replay():
        for o, n in zip(ex._static_out, ex._issue_run(ex._static_in, None)):
            o.copy_(n)
    graph.replay_fn = replay
    for seed in (1, 2):
        feeds = random_feeds(single, seed)
        _close(ex.run(feeds), single.run(feeds))       # feeds reach the static inputs
    first = ex.run(random_feeds(single, 1), output_device="cuda")
    keep = {k: t.clone() for k, t in first.items()}
    ex.run(random_feeds(single, 2))
    for k in keep:                                     # device outputs are copies
        assert torch.equal(keep[k], first[k])
    assert graph.replays == 5


def test_capture_failure_falls_back(fake_cuda, caplog):
    b = pyge.GraphBuilder("sync")
    x = b.input("x", "float32", (3, 3))
    t = b.op("TestCaptureSync", [x], name="Sync", domain="pyge.test")
    b.output(b.op("Relu", [t], name="R"), "y")
    m = compile_with_streams(b.build(), {"Sync": 0, "R": 1})
    for v in m.plan.values:               # custom op: give it the static shapes inference cannot
        v.dtype = v.dtype or "float32"
        v.shape = v.shape or (3, 3)
    ex = cuda_mod.CudaExecutor(m.graph, m.plan, "cuda", m.options)
    assert ex.mode == "graph"
    x = np.arange(9, dtype=np.float32).reshape(3, 3) - 4
    np.testing.assert_allclose(ex.run({"x": x})["y"], np.maximum(2 * x, 0))
    assert ex.mode == "eager" and "capturing" in ex.capture_error
    np.testing.assert_allclose(ex.run({"x": x})["y"], np.maximum(2 * x, 0))


def test_kernel_error_names_node_and_joins(fake_cuda):
    b = pyge.GraphBuilder("err")
    x = b.input("x", "float32", (2, 2))
    a = b.op("Relu", [x], name="A")
    # z's dims are unknown at compile time (known, the compile itself refuses 2x2 @ 3x3)
    bad = b.op("MatMul", [a, b.input("z", "float32", ("n", "n"))], name="BadMatMul")
    b.output(bad, "y")
    m = compile_with_streams(b.build(), {"A": 1, "BadMatMul": 0}, options={"pyge.cudaGraph": "false"})
    ex = cuda_mod.CudaExecutor(m.graph, m.plan, "cuda", m.options)
    with pytest.raises(pyge.ExecutionError, match="BadMatMul"):
        ex.run({"x": np.ones((2, 2), np.float32), "z": np.ones((3, 3), np.float32)})
    joins = [e for e in fake_cuda.log if e[0] == "wait_stream" and e[1] == "caller"]
    assert len(joins) == m.num_streams     # joined even though a kernel raised


@pytest.mark.parametrize("graphed", ["true", "false"])
def test_output_names_and_return_torch_through_the_model(fake_cuda, graphed):
    """pyge.compile(device="cuda") with the fake standing in for the GPU; run(output_names=)
    picks outputs on both paths (a replay's static outputs, an eager run's own tensors), and
    return_torch keeps them as device tensors."""
    single = pyge.compile(random_graph(random.Random(4), 18), "cpu", {"ge.enableSingleStream": "true"})
    model = pyge.compile(single.graph, "cuda", {"pyge.cudaGraph": graphed, "ge.streamMaxParallelNum": "3",
                                                "pyge.streamAllocation": "nodes"})   # several streams
    assert model.device == "cuda"
    feeds = random_feeds(single, 0)
    want = single.run(feeds)
    names = list(want)[::-1][:2]
    for _ in range(2):                                 # (graph mode: capture, then a replay)
        got = model.run(feeds, output_names=names)
        assert list(got) == names and all(isinstance(v, np.ndarray) for v in got.values())
    model.return_torch = True
    got = model.run(feeds, output_names=names)
    assert list(got) == names and all(isinstance(v, torch.Tensor) for v in got.values())
    _close({k: v.numpy() for k, v in got.items()}, {k: want[k] for k in names})
    with pytest.raises(pyge.InputError, match="unknown output 'nope'"):
        model.run(feeds, output_names=["nope"])
