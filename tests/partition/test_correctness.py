"""Partitioned models give onnxruntime's outputs and those of the unpartitioned one-stream run.

The unpartitioned run is `ge.exec.static_model_ops_lower_limit=-1` with one stream: the whole
model is one dynamic part, which is GE's fully dynamic execution.
"""
from __future__ import annotations

import numpy as np
import onnxruntime as ort
import pytest
import torch

import pyge
from pyge.executors.partitioned import CallKernel

from . import models

MODELS = {"det": models.detection, "mid": models.nonzero_middle,
          "unique": lambda: models.nonzero_middle(unique=True), "symb": models.symbolic_batch,
          "cf": models.control_flow}
FEED_OF = {"unique": "mid"}
ONE_PART = {"ge.exec.static_model_ops_lower_limit": "-1", "ge.enableSingleStream": "true"}


def _feeds(key, seed=0):
    return models.FEEDS[FEED_OF.get(key, key)](np.random.default_rng(seed))


def _close(got, want):
    assert set(got) == set(want)
    for k in want:
        np.testing.assert_allclose(np.asarray(got[k], dtype=np.float64),
                                   np.asarray(want[k], dtype=np.float64), rtol=1e-5, atol=1e-5, err_msg=k)


@pytest.mark.parametrize("key", sorted(MODELS))
@pytest.mark.parametrize("opts", [{}, {"ge.streamMaxParallelNum": "3", "pyge.streamAllocation": "nodes"}],
                         ids=["default", "streams"])
def test_partitioned_matches_onnxruntime_and_the_unpartitioned_run(key, opts):
    proto = MODELS[key]()
    model = pyge.compile(pyge.load_onnx(proto), "cpu", opts)
    kinds = [p.kind for p in model.submodels]
    assert kinds[0] == "dynamic" and "static" in kinds, model.submodels
    flat = pyge.compile(pyge.load_onnx(proto), "cpu", ONE_PART)
    assert [p.kind for p in flat.submodels] == ["dynamic"]
    sess = ort.InferenceSession(proto.SerializeToString())
    names = [o.name for o in sess.get_outputs()]
    for seed in range(3):
        feeds = _feeds(key, seed)
        want = dict(zip(names, sess.run(None, feeds)))
        got = model.run(feeds)
        _close(got, want)
        _close(flat.run(feeds), got)
    model.verify()


def test_a_symbolic_batch_takes_any_size_per_run():
    model = pyge.compile(pyge.load_onnx(models.symbolic_batch()), "cpu")
    sess = ort.InferenceSession(models.symbolic_batch().SerializeToString())
    rng = np.random.default_rng(3)
    for n in (1, 5, 9):
        feeds = {"x": rng.standard_normal((n, 4)).astype(np.float32),
                 "z": rng.standard_normal((2, 3)).astype(np.float32)}
        np.testing.assert_allclose(model.run(feeds)["y"], sess.run(None, feeds)[0], rtol=1e-5, atol=1e-6)
    root, static = model.submodels
    assert {"dyn_mm", "dyn_relu", "dyn_add", "dyn_sig", "dmean"} <= set(root.streams[0])
    assert {"st_mm", "st_relu", "st_add", "st_sig", "join"} == {n for s in static.streams for n in s}


def test_multi_stream_root_with_the_env_switch(monkeypatch):
    proto = models.detection()
    monkeypatch.setenv("ENABLE_DYNAMIC_SHAPE_MULTI_STREAM", "1")
    opts = {"ge.streamMaxParallelNum": "4", "pyge.streamAllocation": "nodes"}
    multi = pyge.compile(pyge.load_onnx(proto), "cpu", opts)
    monkeypatch.delenv("ENABLE_DYNAMIC_SHAPE_MULTI_STREAM")
    single = pyge.compile(pyge.load_onnx(proto), "cpu", opts)
    assert single.submodels[0].num_streams == 1
    assert multi.submodels[0].num_streams > 1
    feeds = _feeds("det")
    _close(multi.run(feeds), single.run(feeds))
    multi.verify()


class _TorchBatch(torch.nn.Module):
    """A static branch on z [2, 3] and a branch on x [N, 4] whose batch is a torch.export symbol."""

    def __init__(self):
        super().__init__()
        self.a, self.b = torch.nn.Linear(4, 3), torch.nn.Linear(3, 3)

    def forward(self, x, z):
        s = torch.tanh(torch.sigmoid(self.b(torch.relu(z)))) * 2 + 1
        return s + torch.relu(self.a(x)).mean(0, keepdim=True)


def test_a_torch_export_symbol_is_a_symbolic_batch():
    torch.manual_seed(0)
    module = _TorchBatch()
    z = torch.randn(2, 3)
    g = pyge.from_torch(module, (torch.randn(5, 4), z), dynamic_shapes=({0: torch.export.Dim("N", min=2, max=64)}, None))
    model = pyge.compile(g, "cpu")
    assert [p.kind for p in model.submodels] == ["dynamic", "static"]
    flat = pyge.compile(g, "cpu", ONE_PART)
    names = [v.name for v in g.inputs]
    for n in (2, 3, 9):
        x = torch.randn(n, 4)
        feeds = dict(zip(names, (x.numpy(), z.numpy())))
        [got] = model.run(feeds).values()
        np.testing.assert_allclose(got, module(x, z).detach().numpy(), rtol=1e-5, atol=1e-6)
        [ref] = flat.run(feeds).values()
        np.testing.assert_allclose(got, ref, rtol=1e-6, atol=1e-6)


def test_a_call_node_runs_its_sub_model_on_tensors(monkeypatch):
    proto = models.detection()
    model = pyge.compile(pyge.load_onnx(proto), "cpu")
    feeds = models.FEEDS["det"](np.random.default_rng(0))
    want = model.run(feeds)
    calls = list(model.executor.calls.values())
    assert calls and all(isinstance(k, CallKernel) and k.run_tensors is not None for k in calls)
    slow = []
    for k in calls:
        run = k.executor.run
        monkeypatch.setattr(k.executor, "run", lambda *a, _r=run, **kw: slow.append(1) or _r(*a, **kw))
    got = model.run(feeds)
    assert slow == []                  # every call took the tensor path
    for name in want:
        np.testing.assert_array_equal(got[name], want[name])
