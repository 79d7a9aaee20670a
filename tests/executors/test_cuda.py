"""CUDA executor. GPU tests carry the `gpu` marker and skip without CUDA; the rest (what
decides eager vs graph mode, the merged issue order, errors without CUDA) run anywhere."""
from __future__ import annotations

import os
import random
import subprocess
import sys

import numpy as np
import pytest
import torch

import pyge
from pyge.executors import make_executor
from pyge.executors.base import merged_steps
from pyge.executors.cuda_memory import graph_blocker
from pyge.kernels import register
from pyge.plan.plan import LAUNCH, RECORD, WAIT
from pyge.testing import relative_errors

from .helpers import (branch_streams, cached_light_model, compile_with_streams, random_feeds,
                      random_graph, random_streams, replan)

HAS_CUDA = torch.cuda.is_available()
FAIL = {"on": True}


@register("TestRaiseCuda", domain="pyge.test")
def _raise(ctx):
    def fn(xs):
        if FAIL["on"]:
            raise RuntimeError("cuda boom")
        return [xs[0] * 1.0]
    return fn


@register("TestItem", domain="pyge.test")
def _item(ctx):
    # Reads a device value on the host: legal eagerly, forbidden inside a CUDA graph capture.
    return lambda xs: [xs[0] + float(xs[0].reshape(-1)[0].item() * 0.0)]


def _small_multi(seed: int = 3, k: int = 3, **opts):
    single = pyge.compile(random_graph(random.Random(seed), 20), "cpu", {"ge.enableSingleStream": "true"})
    return single, replan(single, random_streams(k, seed), device="cuda", options=opts)


def _close(a: dict, b: dict, rtol=1e-5, atol=1e-5):
    assert a.keys() == b.keys()
    for k in a:
        np.testing.assert_allclose(np.asarray(a[k]), np.asarray(b[k]), rtol=rtol, atol=atol, err_msg=k)


# -- anywhere ------------------------------------------------------------------------------

def test_graph_blocker_reasons():
    single = pyge.compile(random_graph(random.Random(3), 8), "cpu")
    assert graph_blocker(single.plan) is None
    assert graph_blocker(single.plan, enabled=False) == "pyge.cudaGraph=false"
    b = pyge.GraphBuilder("dyn")
    x = b.input("x", "float32", ("N", 4))
    b.output(b.op("Relu", [x], name="r"), "y")
    dyn = pyge.compile(b.build(), "cpu")
    assert "dynamic shape" in graph_blocker(dyn.plan)


def test_merged_steps_wait_after_record():
    single = pyge.compile(random_graph(random.Random(9), 25), "cpu", {"ge.enableSingleStream": "true"})
    plan = replan(single, random_streams(4, 9)).plan
    seen, launched = set(), []
    pos = [0] * plan.num_streams
    for s, kind, a in merged_steps(plan):
        assert plan.streams[s][pos[s]].kind == kind and plan.streams[s][pos[s]].arg == a
        pos[s] += 1
        if kind == RECORD:
            seen.add(a)
        elif kind == WAIT:
            assert a in seen
        elif kind == LAUNCH:
            launched.append(a)
    assert sorted(launched) == list(range(len(plan.nodes)))


@pytest.mark.skipif(HAS_CUDA, reason="checks the error without CUDA")
def test_cuda_device_without_cuda_is_a_clear_error():
    single = pyge.compile(random_graph(random.Random(1), 4), "cpu")
    with pytest.raises(pyge.OptionError, match="CUDA is not available"):
        make_executor(single.graph, single.plan, "cuda")


# -- on a GPU ------------------------------------------------------------------------------

@pytest.mark.parametrize("memory", ["pool", "arena"])
@pytest.mark.gpu
@pytest.mark.skipif(not HAS_CUDA, reason="needs a CUDA device")
def test_graph_replay_matches_cpu(memory):
    from pyge.executors.cuda import CudaExecutor
    single, multi = _small_multi()
    ex = CudaExecutor(multi.graph, multi.plan, "cuda", multi.options, memory=memory)
    assert ex.mode == "graph"
    for seed in range(3):              # capture on the first run, replay after
        feeds = random_feeds(single, seed)
        _close(ex.run(feeds), single.run(feeds))
    assert ex._graph is not None and ex.capture_error is None
    _close(ex.run_eager(random_feeds(single, 7)), single.run(random_feeds(single, 7)))


@pytest.mark.parametrize("name", ["inception_v1", "resnet50"])
@pytest.mark.gpu
@pytest.mark.skipif(not HAS_CUDA, reason="needs a CUDA device")
def test_light_models_multi_stream_replay(name, monkeypatch):
    # cuDNN convolutions default to TF32 (10-bit mantissa): FP32 throughout for the CPU comparison.
    monkeypatch.setattr(torch.backends.cudnn, "allow_tf32", False)
    monkeypatch.setattr(torch.backends.cuda.matmul, "allow_tf32", False)
    single = cached_light_model(name, random=True)
    feeds = random_feeds(single)
    cuda_single = replan(single, {}, device="cuda")
    cuda_multi = replan(single, branch_streams(3), device="cuda")
    a, b = cuda_single.run(feeds), cuda_multi.run(feeds)
    _close(a, b, rtol=1e-4, atol=1e-6)                       # same kernels, same device
    errs = relative_errors(b, single.run(feeds))             # GPU FP32 vs CPU FP32 kernels
    assert max(errs.values()) <= 1e-3, errs


@pytest.mark.gpu
@pytest.mark.skipif(not HAS_CUDA, reason="needs a CUDA device")
def test_eager_option_and_device_outputs():
    single, multi = _small_multi(**{"pyge.cudaGraph": "false"})
    assert multi.executor.mode == "eager"
    feeds = random_feeds(single)
    _close(multi.run(feeds), single.run(feeds))
    _, graphed = _small_multi()
    out1 = graphed.run(feeds, output_device="cuda")
    assert all(t.is_cuda for t in out1.values())
    keep = {k: t.clone() for k, t in out1.items()}
    graphed.run(random_feeds(single, 5), output_device="cuda")   # must not overwrite out1
    for k in keep:
        assert torch.equal(keep[k], out1[k])


@pytest.mark.gpu
@pytest.mark.timeout(60)
@pytest.mark.skipif(not HAS_CUDA, reason="needs a CUDA device")
def test_fault_names_node_and_model_recovers():
    b = pyge.GraphBuilder("cfault")
    x = b.input("x", "float32", (4, 4))
    r = b.op("TestRaiseCuda", [x], name="Boom", domain="pyge.test")
    a = b.op("Relu", [x], name="A")
    b.output(b.op("Add", [a, r], name="S"), "y")
    m = compile_with_streams(b.build(), {"Boom": 1, "A": 0, "S": 0}, device="cuda")
    x = np.ones((4, 4), np.float32)
    FAIL["on"] = True
    with pytest.raises(pyge.ExecutionError, match="Boom"):
        m.run({"x": x})
    FAIL["on"] = False
    np.testing.assert_allclose(m.run({"x": x})["y"], 2 * x)


@pytest.mark.gpu
@pytest.mark.skipif(not HAS_CUDA, reason="needs a CUDA device")
def test_capture_failure_falls_back_to_eager():
    b = pyge.GraphBuilder("item")
    x = b.input("x", "float32", (4, 4))
    t = b.op("TestItem", [x], name="Sync", domain="pyge.test")
    b.output(b.op("Relu", [t], name="R"), "y")
    m = compile_with_streams(b.build(), {"Sync": 0, "R": 1}, device="cuda")
    for v in m.plan.values:          # a custom op: give it the static shapes inference cannot
        v.dtype, v.shape = v.dtype or "float32", v.shape or (4, 4)
    from pyge.executors.cuda import CudaExecutor
    ex = CudaExecutor(m.graph, m.plan, "cuda", m.options)
    assert ex.mode == "graph"
    x = np.random.default_rng(0).standard_normal((4, 4)).astype(np.float32)
    caller = torch.cuda.current_stream()
    for _ in range(2):
        np.testing.assert_allclose(ex.run({"x": x})["y"], np.maximum(x, 0), rtol=1e-6)
    assert ex.mode == "eager" and ex.capture_error
    assert torch.cuda.current_stream() == caller


class _StreamHooks:
    def __init__(self, ex):
        self.ex, self.bad, self.count = ex, [], 0

    def before(self, node, stream):
        self.count += 1
        if torch.cuda.current_stream() != self.ex.streams[stream]:
            self.bad.append(node)

    def after(self, node, stream):
        pass


@pytest.mark.gpu
@pytest.mark.skipif(not HAS_CUDA, reason="needs a CUDA device")
def test_hooks_run_eagerly_on_the_logical_stream():
    single, multi = _small_multi()
    hooks = _StreamHooks(multi.executor)
    feeds = random_feeds(single)
    _close(multi.executor.run(feeds, hooks=hooks), single.run(feeds))
    assert hooks.count == len(multi.plan.nodes) and not hooks.bad


@pytest.mark.gpu
@pytest.mark.timeout(100)
@pytest.mark.skipif(not HAS_CUDA, reason="needs a CUDA device")
def test_torch_cuda_sanitizer_finds_no_race():
    """PyTorch's CUDA sanitizer over multi-stream eager runs (csan_check.py, a child process)."""
    script = os.path.join(os.path.dirname(__file__), "csan_check.py")
    done = subprocess.run([sys.executable, script], capture_output=True, text=True, timeout=90)
    assert "CSAN-LIVE" in done.stdout, done.stdout + done.stderr[-3000:]
    assert done.returncode == 0 and "CSAN-CLEAN" in done.stdout, done.stderr[-3000:]
