"""Constant folding: Shape and Size of values whose dims are known become initializers."""
from __future__ import annotations

import numpy as np
import pytest

import pyge
from pyge.passes.graph.fold_constants import fold_constants


def _graph(shape, op="Shape", **attrs):
    b = pyge.GraphBuilder("shape", opset=17)
    x = b.input("x", "float32", shape)
    y = b.op("Relu", [x], name="relu")
    s = b.op(op, [y], name="probe", **attrs)
    b.output(b.op("Cast", [s], name="cast", to=1))
    return b.build()


@pytest.mark.parametrize("attrs,want", [({}, [2, 3, 5]), (dict(start=-1), [5]),
                                        (dict(start=1, end=2), [3]), (dict(end=-1), [2, 3]),
                                        (dict(start=-9, end=9), [2, 3, 5])])
def test_shape_of_a_static_value_folds(attrs, want):
    g = _graph((2, 3, 5), **attrs)
    g.value("relu_out").shape = (2, 3, 5)
    assert fold_constants(g) == 2                    # Shape, then the Cast that reads it
    np.testing.assert_array_equal(g.initializers["cast_out"].const, np.float32(want))
    assert [n.op_type for n in g.nodes] == ["Relu"]


def test_size_folds():
    g = _graph((2, 3, 5), op="Size")
    g.value("relu_out").shape = (2, 3, 5)
    fold_constants(g)
    assert g.initializers["cast_out"].const == np.float32(30)


@pytest.mark.parametrize("attrs,folds", [({}, False), (dict(start=1), True)])
def test_symbolic_dims_fold_only_when_not_read(attrs, folds):
    g = _graph(("n", 3, 5), **attrs)
    g.value("relu_out").shape = ("n", 3, 5)
    fold_constants(g)
    assert ("probe" in g.metadata.get("folded", "")) is folds


def test_unknown_shape_does_not_fold():
    g = _graph((2, 3, 5))
    assert fold_constants(g) == 0


def test_compiled_model_gives_the_same_numbers():
    g = _graph((2, 3, 5), start=1)
    x = np.random.default_rng(0).standard_normal((2, 3, 5)).astype(np.float32)
    got = pyge.compile(g).run({"x": x})
    np.testing.assert_array_equal(got["cast_out"], np.float32([3, 5]))
