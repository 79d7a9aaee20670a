"""Random generators (kernels/tensor_random.py): shapes, dtypes, ranges and statistics (no
reference can match torch's values), the seed semantics, and that they are never folded."""
from __future__ import annotations

import numpy as np
import pytest
from onnx import TensorProto

import pyge
from pyge.errors import GraphError
from pyge.frontends import load_onnx
from pyge.executors.interpreter import compile_reference
from pyge.kernels.convert import to_numpy, to_torch
from pyge.testing import one_node_model


def _model(op, attrs, x=None, opset=17, n_in=None):
    return one_node_model(op, {} if x is None else {"x": x}, attrs, opset=opset, outputs=["y"])


class _Runner:
    """One compiled model (one "session"): run() draws the next values."""

    def __init__(self, m):
        self.g = load_onnx(m)
        self.run_fn = compile_reference(self.g)

    def run(self, x=None):
        ins = [] if x is None else [to_torch(x)]
        return to_numpy(self.run_fn(ins, {})[0])


@pytest.mark.parametrize("dtype,npdt", [(TensorProto.FLOAT, np.float32),
                                        (TensorProto.DOUBLE, np.float64),
                                        (TensorProto.FLOAT16, np.float16)])
def test_random_normal_statistics(dtype, npdt):
    y = _Runner(_model("RandomNormal", {"shape": [200, 100], "mean": 3.0, "scale": 0.5,
                                        "dtype": dtype})).run()
    assert y.shape == (200, 100) and y.dtype == npdt
    y = y.astype(np.float64)
    assert abs(y.mean() - 3.0) < 0.02 and abs(y.std() - 0.5) < 0.02


def test_random_uniform_range_and_statistics():
    y = _Runner(_model("RandomUniform", {"shape": [50000], "low": -2.0, "high": 6.0})).run()
    assert y.shape == (50000,) and y.dtype == np.float32
    assert y.min() >= -2.0 and y.max() < 6.0
    assert abs(y.mean() - 2.0) < 0.05 and abs(y.var() - 64 / 12) < 0.1


@pytest.mark.parametrize("op", ["RandomNormalLike", "RandomUniformLike"])
def test_like_ops_take_the_input_shape_and_dtype(op):
    x = np.zeros((3, 0, 4), np.float64)
    assert _Runner(_model(op, {}, x)).run(x).dtype == np.float64
    x = np.zeros((30, 40), np.int32)  # a non-float input needs the dtype attribute
    y = _Runner(_model(op, {"dtype": TensorProto.FLOAT}, x)).run(x)
    assert y.shape == (30, 40) and y.dtype == np.float32 and np.unique(y).size > 1000
    with pytest.raises(GraphError, match=r"\(" + op + r"\).*no dtype attribute"):
        _Runner(_model(op, {}, x))


def test_seeded_node_repeats_its_sequence_per_compiled_model():
    # onnxruntime's semantics: a seeded node's generator is made (seeded) once per session;
    # every run draws the next values; a new session repeats the sequence.
    m = _model("RandomNormal", {"shape": [4, 5], "seed": 7.0})
    a, b = _Runner(m), _Runner(m)
    a1, a2 = a.run(), a.run()
    assert not np.array_equal(a1, a2)
    np.testing.assert_array_equal(b.run(), a1)
    np.testing.assert_array_equal(b.run(), a2)
    other = _Runner(_model("RandomNormal", {"shape": [4, 5], "seed": 8.0})).run()
    assert not np.array_equal(other, a1)


def test_unseeded_node_draws_fresh_values():
    m = _model("RandomUniform", {"shape": [16]})
    a, b = _Runner(m), _Runner(m)
    r = [a.run(), a.run(), b.run()]
    assert not np.array_equal(r[0], r[1]) and not np.array_equal(r[0], r[2])


def test_random_ops_are_not_folded_and_run_every_time():
    model = pyge.compile(load_onnx(_model("RandomUniform", {"shape": [8], "seed": 1.0})))
    y1, y2 = (list(model.run({}).values())[0] for _ in range(2))
    assert y1.shape == (8,) and not np.array_equal(y1, y2)


@pytest.mark.parametrize("dtype,npdt", [(None, np.float32), (TensorProto.BOOL, np.bool_),
                                        (TensorProto.INT64, np.int64)])
def test_bernoulli(dtype, npdt):
    p = np.tile(np.array([0.0, 1.0, 0.25], np.float32), (20000, 1))
    attrs = {"seed": 0.0} if dtype is None else {"dtype": dtype}
    y = _Runner(_model("Bernoulli", attrs, p, opset=15)).run(p)
    assert y.shape == p.shape and y.dtype == npdt
    y = y.astype(np.float64)
    assert (y[:, 0] == 0).all() and (y[:, 1] == 1).all()
    assert set(np.unique(y)) <= {0.0, 1.0} and abs(y[:, 2].mean() - 0.25) < 0.02


def test_bernoulli_refuses_probabilities_out_of_range():
    p = np.array([0.5, 1.5], np.float32)
    with pytest.raises(Exception, match="Bernoulli.*probabilities"):
        _Runner(_model("Bernoulli", {}, p, opset=15)).run(p)


@pytest.mark.parametrize("dtype,npdt", [(None, np.int32), (TensorProto.INT64, np.int64)])
def test_multinomial_frequencies(dtype, npdt):
    # The input holds unnormalised log-probabilities: row 0 -> [0.1, 0.2, 0.7].
    logits = np.log(np.array([[0.1, 0.2, 0.7], [1, 1, 1e-30]], np.float32)) + 5
    attrs = {"sample_size": 20000, **({"dtype": dtype} if dtype else {})}
    y = _Runner(_model("Multinomial", attrs, logits, opset=7)).run(logits)
    assert y.shape == (2, 20000) and y.dtype == npdt
    freq = np.bincount(y[0], minlength=3) / 20000
    np.testing.assert_allclose(freq, [0.1, 0.2, 0.7], atol=0.015)
    assert set(np.unique(y[1])) == {0, 1}


def test_refusals_name_node_and_attribute():
    with pytest.raises(GraphError, match=r"\(RandomNormal\): attribute dtype=6 is not a float"):
        _Runner(_model("RandomNormal", {"shape": [2], "dtype": TensorProto.INT32}))
    x = np.zeros((2, 3), np.float32)
    with pytest.raises(GraphError, match=r"\(Multinomial\): attribute dtype=1 is not supported"):
        _Runner(_model("Multinomial", {"dtype": TensorProto.FLOAT}, x, opset=7))
