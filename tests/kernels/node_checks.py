"""One-node checks shared by the kernel unit tests: build a one-node model, run it with
pyge and with a reference (onnx's ReferenceEvaluator or onnxruntime), compare every output.

Tolerances: rtol=1e-3, atol=1e-7 for float results (the onnx backend runner's defaults);
convolutions use atol=CONV_ATOL=1e-5 instead, because their outputs are float32 sums of
~100 products of magnitude ~1 that can cancel to near zero, where the summation order
alone moves the result by ~1e-6. Integer and boolean results must match exactly.
"""
from __future__ import annotations

import numpy as np
import pytest
from onnx.reference import ReferenceEvaluator

from pyge.frontends import load_onnx
from pyge.executors.interpreter import run_reference
from pyge.testing import one_node_model

RTOL, ATOL = 1e-3, 1e-7
CONV_ATOL = 1e-5


def _model(op, inputs, attrs=None, opset=17, n_out=1, consts=(), domain=""):
    return one_node_model(op, inputs, attrs, opset=opset, n_out=n_out, consts=consts, domain=domain)


def _feeds(inputs, consts):
    return {n: np.asarray(a) for n, a in inputs.items() if a is not None and n not in consts}


def _pyge(m, feeds):
    g = load_onnx(m)
    out = run_reference(g, feeds)
    return [out[v.name] for v in g.outputs]


def _compare(got, exp, exact=False, atol=ATOL):
    assert len(got) == len(exp)
    for a, b in zip(got, exp):
        b = np.asarray(b)
        assert a.shape == b.shape, (a.shape, b.shape)
        assert a.dtype == b.dtype, (a.dtype, b.dtype)
        if exact or b.dtype.kind in "iub" or b.dtype == object:
            np.testing.assert_array_equal(a, b)
        else:
            np.testing.assert_allclose(a, b, rtol=RTOL, atol=atol)


def check(op, inputs, attrs=None, opset=17, n_out=1, consts=(), ref="onnx", domain="",
          atol=ATOL):
    """Run one node with pyge and with the reference; compare every output."""
    m = _model(op, inputs, attrs, opset, n_out, consts, domain)
    feeds = _feeds(inputs, consts)
    if ref == "ort":
        ort = pytest.importorskip("onnxruntime")
        so = ort.SessionOptions()
        so.log_severity_level = 3
        sess = ort.InferenceSession(m.SerializeToString(), so, providers=["CPUExecutionProvider"])
        exp = sess.run(None, feeds)
    else:
        exp = ReferenceEvaluator(m).run(None, feeds)
    _compare(_pyge(m, feeds), exp, atol=atol)
