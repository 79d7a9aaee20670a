"""base.fast_feeds: the common call's cheap path, and the general one for everything else."""
from __future__ import annotations

import types

import numpy as np
import pytest
import torch

import pyge
from pyge.executors.base import fast_feeds


def _model(shape=(2, 3)):
    b = pyge.GraphBuilder("feeds")
    x = b.input("x", "float32", shape)
    y = b.input("y", "int64", (3,))
    b.output(b.op("Relu", [x], name="R"), "r")
    b.output(b.op("Neg", [y], name="N"), "n")
    return pyge.compile(b.build(), "cpu", {"ge.enableSingleStream": "true"})


def test_exact_feeds_become_tensors_sharing_memory():
    cm = _model()
    x, y = np.ones((2, 3), np.float32), np.arange(3)
    got = fast_feeds(cm.plan)({"x": x, "y": y})
    assert [t.__class__ for t in got] == [torch.Tensor, torch.Tensor]
    x[0, 0] = 5
    assert got[0][0, 0].item() == 5                  # no copy


@pytest.mark.parametrize("change", ["dtype", "shape", "missing", "extra", "strided", "readonly",
                                    "list", "mapping", "tensor"])
def test_anything_else_takes_the_general_path_with_its_errors(change):
    cm = _model()
    x, y = np.ones((2, 3), np.float32), np.arange(3)
    feeds = {"x": x, "y": y}
    if change == "dtype":
        feeds["x"] = x.astype(np.float64)
    elif change == "shape":
        feeds["x"] = np.ones((3, 2), np.float32)
    elif change == "missing":
        del feeds["y"]
    elif change == "extra":
        feeds["z"] = x
    elif change == "strided":
        feeds["x"] = np.ones((3, 2), np.float32).T
    elif change == "readonly":
        x.flags.writeable = False
    elif change == "list":
        feeds["y"] = [0, 1, 2]
    elif change == "mapping":
        feeds = types.MappingProxyType(feeds)
    elif change == "tensor":
        feeds["x"] = torch.ones(2, 3)
    assert fast_feeds(cm.plan)(feeds) is None
    ok = change in ("strided", "readonly", "list", "mapping", "tensor")
    if ok:
        out = cm.executor.run(feeds)
        np.testing.assert_array_equal(out["r"], np.ones((2, 3), np.float32))
        np.testing.assert_array_equal(out["n"], -np.arange(3))
    else:
        with pytest.raises(pyge.InputError):
            cm.executor.run(feeds)


def test_dynamic_shapes_always_take_the_general_path():
    b = pyge.GraphBuilder("dyn")
    x = b.input("x", "float32", (None, 3))
    b.output(b.op("Relu", [x], name="R"), "r")
    cm = pyge.compile(b.build(), "cpu", {})
    assert fast_feeds(cm.plan)({"x": np.ones((2, 3), np.float32)}) is None
