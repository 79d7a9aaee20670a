"""A partitioned model on the fake CUDA device (tests/executors/fake_cuda.py): each static
sub-model is captured into a CUDA graph of its own and replayed, the dynamic root runs
eagerly, and the race checker sees no unordered access across the boundary."""
from __future__ import annotations

import logging
import sys
from pathlib import Path

import numpy as np
import pytest
import torch

import pyge
from pyge.executors import cuda as cuda_mod

from . import models
from .conftest import graph_of

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
from executors.fake_cuda import FakeCuda, TorchProxy  # noqa: E402

ACTIVE: dict = {"fake": None}


@pytest.fixture
def fake_cuda(monkeypatch):
    fake = FakeCuda()
    monkeypatch.setitem(ACTIVE, "fake", fake)
    monkeypatch.setattr(cuda_mod, "torch", TorchProxy(fake))
    monkeypatch.setattr(cuda_mod, "_device", lambda device: torch.device("cpu"))
    return fake


def _replays_for_real(executor) -> None:
    """The fake cannot replay kernels: make each captured sub-model's replay re-run its captured
    issue function on the static buffers and copy into the static outputs, as a replay would
    (tests/executors/test_cuda_mock.py does the same for one executor)."""
    for ex in executor.subs.values():
        if ex._graph is not None:
            def replay(ex=ex):
                for o, n in zip(ex._static_out, ex._issue_run(ex._static_in, None)):
                    o.copy_(n)
            ex._graph.replay_fn = replay


@pytest.mark.parametrize("name, key", [("detection", "det"), ("nonzero_middle", "mid"),
                                       ("symbolic_batch", "symb"), ("control_flow", "cf")])
@pytest.mark.parametrize("opts", [{}, {"ge.streamMaxParallelNum": "3", "pyge.streamAllocation": "nodes"}],
                         ids=["default", "streams"])
def test_static_parts_are_captured_and_the_root_runs_eagerly(fake_cuda, name, key, opts):
    model = pyge.compile(graph_of(name), "cuda", opts)
    cpu = pyge.compile(graph_of(name), "cpu", {"ge.exec.static_model_ops_lower_limit": "-1"})
    ex = model.executor
    statics = model.submodels[1:]
    assert statics and ex.root.mode == "eager"
    for seed in range(3):
        feeds = models.FEEDS[key](np.random.default_rng(seed))
        got, want = model.run(feeds), cpu.run(feeds)
        _replays_for_real(ex)
        for k in want:
            np.testing.assert_allclose(np.asarray(got[k]), want[k], rtol=1e-5, atol=1e-5)
    for p in statics:
        assert ex.subs[p.name].mode == "graph", p.name
        assert p.capture_error is None
    assert fake_cuda.n_captures == len(statics)          # captured once, then replayed
    assert fake_cuda.violations == []


def test_a_root_output_from_a_replayed_graph_survives_the_next_replay(fake_cuda):
    model = pyge.compile(graph_of("detection"), "cuda")
    a = models.FEEDS["det"](np.random.default_rng(0))
    b = models.FEEDS["det"](np.random.default_rng(1))
    first = model.run(a)["boxes0"].copy()
    _replays_for_real(model.executor)
    kept = model.run(a, output_device="cuda")["boxes0"] if _takes_device(model) else None
    model.run(b)
    np.testing.assert_array_equal(model.run(a)["boxes0"], first)
    if kept is not None:                                   # not overwritten by the replay for b
        np.testing.assert_array_equal(np.asarray(kept), first)
    assert fake_cuda.violations == []


def _takes_device(model) -> bool:
    try:
        model.run(models.FEEDS["det"](np.random.default_rng(0)), output_device="cuda")
        return True
    except TypeError:
        return False


def test_a_failed_capture_falls_back_to_eager_naming_the_sub_model(fake_cuda, monkeypatch, caplog):
    model = pyge.compile(graph_of("detection"), "cuda")
    failing = model.submodels[2]

    real_graph = fake_cuda.graph

    def graph(g, stream=None, capture_error_mode=None):      # only this sub-model's capture fails
        if fake_cuda.n_captures == 1:
            raise RuntimeError("operation not permitted when stream is capturing")
        return real_graph(g, stream=stream, capture_error_mode=capture_error_mode)

    monkeypatch.setattr(fake_cuda, "graph", graph)
    cpu = pyge.compile(graph_of("detection"), "cpu")
    with caplog.at_level(logging.WARNING, logger="pyge"):
        for seed in range(3):
            feeds = models.FEEDS["det"](np.random.default_rng(seed))
            got, want = model.run(feeds), cpu.run(feeds)
            _replays_for_real(model.executor)
            for k in want:
                np.testing.assert_allclose(np.asarray(got[k]), want[k], rtol=1e-5, atol=1e-5)
    subs = model.executor.subs
    assert subs[failing.name].mode == "eager" and subs[model.submodels[1].name].mode == "graph"
    assert "operation not permitted" in failing.capture_error
    assert model.submodels[1].capture_error is None
    assert any(failing.name in r.getMessage() and "capture" in r.getMessage() for r in caplog.records)
    assert fake_cuda.violations == []


def test_a_multi_stream_root_joins_each_call_without_a_race(fake_cuda, monkeypatch):
    """ENABLE_DYNAMIC_SHAPE_MULTI_STREAM=1: the root's call nodes sit on streams of their own,
    so two captured sub-models are replayed from two root streams."""
    monkeypatch.setenv("ENABLE_DYNAMIC_SHAPE_MULTI_STREAM", "1")
    opts = {"ge.streamMaxParallelNum": "4", "pyge.streamAllocation": "nodes"}
    model = pyge.compile(graph_of("detection"), "cuda", opts)
    root = model.submodels[0]
    calls = [k for k, names in enumerate(root.streams) if any(n.startswith("PartitionedCall") for n in names)]
    assert root.num_streams > 1 and len(calls) == 2
    cpu = pyge.compile(graph_of("detection"), "cpu")
    for seed in range(3):
        feeds = models.FEEDS["det"](np.random.default_rng(seed))
        got, want = model.run(feeds), cpu.run(feeds)
        _replays_for_real(model.executor)
        for k in want:
            np.testing.assert_allclose(np.asarray(got[k]), want[k], rtol=1e-5, atol=1e-5)
    assert all(model.executor.subs[p.name].mode == "graph" for p in model.submodels[1:])
    assert fake_cuda.violations == []
