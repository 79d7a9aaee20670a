"""Loss kernels (kernels/nn_loss.py) against onnxruntime and the ONNX reference: random
N-D inputs, weights, ignore_index, every reduction, int32/int64 targets, the log_prob
output; plus the refusals."""
from __future__ import annotations

import numpy as np
import pytest
from onnx.reference import ReferenceEvaluator

from pyge.errors import GraphError, PygeError
from pyge.frontends import load_onnx
from pyge.executors.interpreter import run_reference
from pyge.testing import one_node_model

RNG = np.random.default_rng(11)


def _model(op, inputs, attrs, n_out, opset=13):
    return one_node_model(op, inputs, attrs, opset=opset, n_out=n_out)


def _run(m, feeds):
    g = load_onnx(m)
    out = run_reference(g, feeds)
    return [out[v.name] for v in g.outputs]


def _case(shape, tdtype, weighted, ignore, dtype=np.float32):
    n, c = shape[0], shape[1]
    x = RNG.standard_normal(shape).astype(dtype)
    t = RNG.integers(0, c, (n,) + shape[2:]).astype(tdtype)
    if ignore is not None:
        t.reshape(-1)[::3] = ignore
    inputs = {"x": x, "t": t}
    if weighted:
        inputs["w"] = RNG.random(c).astype(dtype) + 0.1
    return inputs


PARAMS = [((4, 5), np.int64, False, None), ((4, 5), np.int32, True, None),
          ((3, 4, 6), np.int64, True, 2), ((2, 3, 4, 5), np.int64, False, 1),
          ((2, 3, 2, 2, 3), np.int32, True, -1), ((5, 3, 7), np.int64, False, None)]


@pytest.mark.parametrize("shape,tdtype,weighted,ignore", PARAMS)
@pytest.mark.parametrize("reduction", ["none", "sum", "mean"])
@pytest.mark.parametrize("ref", ["ort", "onnx"])
def test_softmax_cross_entropy(shape, tdtype, weighted, ignore, reduction, ref):
    inputs = _case(shape, tdtype, weighted, ignore)
    attrs = {"reduction": reduction, **({} if ignore is None else {"ignore_index": ignore})}
    m = _model("SoftmaxCrossEntropyLoss", inputs, attrs, 2)
    if ref == "ort":
        ort = pytest.importorskip("onnxruntime")
        exp = ort.InferenceSession(m.SerializeToString(),
                                   providers=["CPUExecutionProvider"]).run(None, inputs)
    else:
        exp = ReferenceEvaluator(m).run(None, inputs)
    got = _run(m, inputs)
    for a, b in zip(got, exp):
        assert a.shape == b.shape and a.dtype == b.dtype
        np.testing.assert_allclose(a, b, rtol=1e-5, atol=1e-6)


@pytest.mark.parametrize("shape,tdtype,weighted,ignore", PARAMS)
@pytest.mark.parametrize("reduction", ["none", "sum", "mean"])
def test_negative_log_likelihood_matches_onnxruntime(shape, tdtype, weighted, ignore, reduction):
    ort = pytest.importorskip("onnxruntime")
    inputs = _case(shape, tdtype, weighted, ignore, np.float64)
    attrs = {"reduction": reduction, **({} if ignore is None else {"ignore_index": ignore})}
    m = _model("NegativeLogLikelihoodLoss", inputs, attrs, 1)
    exp = ort.InferenceSession(m.SerializeToString(),
                               providers=["CPUExecutionProvider"]).run(None, inputs)[0]
    got = _run(m, inputs)[0]
    assert got.shape == exp.shape and got.dtype == exp.dtype
    np.testing.assert_allclose(got, exp, rtol=1e-12, atol=1e-12)


def test_mean_over_only_ignored_targets_is_nan():
    x = RNG.standard_normal((2, 3)).astype(np.float32)
    t = np.array([1, 1], np.int64)
    got = _run(_model("NegativeLogLikelihoodLoss", {"x": x, "t": t}, {"ignore_index": 1}, 1),
               {"x": x, "t": t})[0]
    assert got.shape == () and np.isnan(got)


def test_refusals():
    x = RNG.standard_normal((2, 3)).astype(np.float32)
    t = np.array([0, 5], np.int64)
    with pytest.raises(GraphError, match=r"\(SoftmaxCrossEntropyLoss\): attribute reduction='avg'"):
        _run(_model("SoftmaxCrossEntropyLoss", {"x": x, "t": t}, {"reduction": "avg"}, 1),
             {"x": x, "t": t})
    with pytest.raises(PygeError, match=r"\(NegativeLogLikelihoodLoss\).*target values must lie in \[0, 3\)"):
        _run(_model("NegativeLogLikelihoodLoss", {"x": x, "t": t}, {}, 1), {"x": x, "t": t})
