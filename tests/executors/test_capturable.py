"""Static models run without a single host sync inside a kernel, so a CUDA graph capture of
them cannot fail and fall back to eager mode (which would give up most of the GPU speed).

A kernel that reads a tensor's value on the host (.item(), .tolist(), .numpy(), bool(t),
int(t), np.asarray(t)) waits for the device on CUDA, and capture forbids that. These tests
run the kernels on the CPU (no GPU needed) with those entry points instrumented; the CUDA
executor builds the same kernels. (Convolutions take a oneDNN path on the CPU only; on CUDA
they call F.conv*, which does not sync.)
"""
from __future__ import annotations

import threading

import pytest
import torch

import pyge
from pyge.executors.cuda_memory import graph_blocker
from pyge.executors.sequential import SequentialExecutor
from pyge.testing import LIGHT_MODELS

from .helpers import cached_light_model, random_feeds


_SYNCS = ("item", "tolist", "numpy", "__bool__", "__int__", "__float__", "__index__", "__array__")


class _SyncSpy:
    """Counts host reads of tensor values made while a kernel runs on this thread."""

    def __init__(self):
        self.inside = threading.local()
        self.calls: list[tuple[str, str]] = []
        self.saved = {}

    def wrap_kernel(self, fn, label: str):
        def run(xs):
            self.inside.label = label
            try:
                return fn(xs)
            finally:
                self.inside.label = None
        return run

    def __enter__(self):
        for name in _SYNCS:
            orig = getattr(torch.Tensor, name)
            self.saved[name] = orig

            def spy(t, *a, _orig=orig, _name=name, **k):
                label = getattr(self.inside, "label", None)
                if label is not None:
                    self.calls.append((label, _name))
                return _orig(t, *a, **k)
            setattr(torch.Tensor, name, spy)
        return self

    def __exit__(self, *exc):
        for name, orig in self.saved.items():
            setattr(torch.Tensor, name, orig)


def _host_reads(model) -> list[tuple[str, str]]:
    ex = SequentialExecutor(model.graph, model.plan, "cpu")
    feeds = random_feeds(model)
    with _SyncSpy() as spy:
        ex.kernels = [spy.wrap_kernel(k, f"{pn.name} ({pn.op_type})")
                      for k, pn in zip(ex.kernels, model.plan.nodes)]
        ex.run(feeds)
    return spy.calls


def test_the_spy_sees_a_host_read():
    b = pyge.GraphBuilder("reads")
    x = b.input("x", "float32", (2, 3))
    b.output(b.op("TestItem", [x], name="peek", domain="pyge.test"), "y")
    from . import test_cuda  # noqa: F401 - registers pyge.test.TestItem
    model = pyge.compile(b.build(), "cpu")
    assert ("peek (TestItem)", "item") in _host_reads(model)


@pytest.mark.parametrize("name", LIGHT_MODELS)
def test_light_models_are_capturable(name):
    model = cached_light_model(name)
    assert graph_blocker(model.plan) is None
    assert _host_reads(model) == []


@pytest.mark.parametrize("training", [None, False])
def test_inference_dropout_reads_nothing_on_the_host(training):
    """Opset 12+ Dropout takes ratio and training_mode as inputs; in inference (no
    training_mode, or a constant false) the kernel must not read the ratio (a device value)."""
    import numpy as np
    from onnx import TensorProto, helper, numpy_helper
    inits = [numpy_helper.from_array(np.array(0.3, np.float32), "ratio")]
    ins = ["x", "ratio"]
    if training is not None:
        inits.append(numpy_helper.from_array(np.array(training), "training"))
        ins.append("training")
    g = helper.make_graph([helper.make_node("Dropout", ins, ["y"], name="drop")], "d",
                          [helper.make_tensor_value_info("x", TensorProto.FLOAT, [2, 3])],
                          [helper.make_tensor_value_info("y", TensorProto.FLOAT, [2, 3])],
                          initializer=inits)
    model = pyge.compile(pyge.load_onnx(helper.make_model(g, opset_imports=[helper.make_opsetid("", 13)])),
                         "cpu", {"ge.exec.enableFusion": "false"})
    assert [n.op_type for n in model.plan.nodes] == ["Dropout"]
    assert _host_reads(model) == []
    x = np.arange(6, dtype=np.float32).reshape(2, 3)
    np.testing.assert_array_equal(model.run({"x": x})["y"], x)
