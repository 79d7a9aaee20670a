"""run_tensors: a CPU executor run on tensors in, tensors out, as a partitioned model's call
node runs its static sub-model (executors/partitioned.py); the same outputs and the same
no-sharing rule as `run`, and None (nothing run) for inputs `run` must check."""
from __future__ import annotations

import numpy as np
import pytest
import torch

import pyge
from pyge.executors.cpu import CpuExecutor
from pyge.executors.sequential import SequentialExecutor


def _graph():
    """y = relu(x) + c; x and c also come back unchanged (outputs sharing an input's and a
    constant's memory unless copied)."""
    b = pyge.GraphBuilder("rt")
    x = b.input("x", "float32", (2, 3))
    c = b.initializer("c", np.arange(6, dtype=np.float32).reshape(2, 3))
    b.output(b.op("Add", [b.op("Relu", [x], name="r"), c], name="a"), "y")
    b.output(b.op("Identity", [x], name="ix"), "x_again")
    b.output(b.op("Identity", [c], name="ic"), "c_again")
    return b.build()


def _executors():
    model = pyge.compile(_graph(), "cpu")
    yield SequentialExecutor(model.graph, model.plan)
    ex = CpuExecutor(model.graph, model.plan)
    yield ex
    ex.close()


@pytest.mark.parametrize("kind", [0, 1], ids=["sequential", "threads"])
def test_tensors_in_and_out_give_runs_outputs_and_share_nothing_owned(kind):
    ex = list(_executors())[kind]
    x = torch.randn(2, 3)
    names = [ex.plan.values[vi].name for vi in ex.plan.outputs]
    want = ex.run({"x": x.numpy().copy()})
    got = ex.run_tensors([x])
    assert all(isinstance(t, torch.Tensor) for t in got)
    for name, t in zip(names, got):
        np.testing.assert_array_equal(t.numpy(), want[name])
    consts = [t for t in ex.consts.values() if isinstance(t, torch.Tensor)]
    for t in got:                      # no output is the input's or a constant's memory
        ptr = t.untyped_storage().data_ptr()
        assert ptr != x.untyped_storage().data_ptr()
        assert all(ptr != c.untyped_storage().data_ptr() for c in consts)
    got[names.index("c_again")].add_(100.0)   # a caller writing into it changes no later run
    again = ex.run_tensors([x])
    np.testing.assert_array_equal(again[names.index("c_again")].numpy(), want["c_again"])


@pytest.mark.parametrize("bad", [torch.zeros(2, 3, dtype=torch.float64), torch.zeros(3, 2),
                                 np.zeros((2, 3), np.float32), torch.zeros(2, 3)[None]],
                         ids=["dtype", "shape", "numpy", "rank"])
def test_inputs_run_would_check_are_left_to_it(bad):
    for ex in _executors():
        assert ex.run_tensors([bad]) is None
        assert ex.run_tensors([]) is None
