"""ONNX backend 'simple' model tests, run through pyge's reference interpreter.

One case per folder of ``onnx/backend/test/data/simple``: the model is loaded with
``pyge.frontends.load_onnx`` and run with ``pyge.executors.interpreter.run_reference`` on every
``test_data_set_*``. Tolerances are the ONNX backend test defaults: ``rtol=1e-3``,
``atol=1e-7`` (``np.testing.assert_allclose``); dtypes and shapes must match exactly, string
tensors must be equal. Inputs/outputs typed as sequences are read as ``SequenceProto``,
optionals as ``OptionalProto``.
"""
from __future__ import annotations

import glob
import os

import numpy as np
import onnx
import pytest
from onnx import numpy_helper

from pyge.frontends import load_onnx
from pyge.executors.interpreter import run_reference

SIMPLE = os.path.join(os.path.dirname(onnx.__file__), "backend", "test", "data", "simple")

# Cases that cannot pass for a reason other than a missing kernel: name -> reason.
UNSUPPORTED: dict[str, str] = {}


def _cases():
    params = []
    for d in sorted(os.listdir(SIMPLE)) if os.path.isdir(SIMPLE) else []:
        path = os.path.join(SIMPLE, d)
        if not os.path.exists(os.path.join(path, "model.onnx")):
            continue
        marks = []
        if d in UNSUPPORTED:
            marks.append(pytest.mark.xfail(strict=True, reason=UNSUPPORTED[d]))
        params.append(pytest.param(d, id=d, marks=marks))
    return params


def _load_value(path: str, tp: onnx.TypeProto):
    data = open(path, "rb").read()
    which = tp.WhichOneof("value")
    if which == "sequence_type":
        proto = onnx.SequenceProto()
        proto.ParseFromString(data)
        return numpy_helper.to_list(proto)
    if which == "optional_type":
        proto = onnx.OptionalProto()
        proto.ParseFromString(data)
        return numpy_helper.to_optional(proto)
    proto = onnx.TensorProto()
    proto.ParseFromString(data)
    return numpy_helper.to_array(proto)


def _as_str(a: np.ndarray) -> np.ndarray:
    return np.vectorize(lambda s: s.decode() if isinstance(s, bytes) else s, otypes=[object])(a)


def assert_same(got, expected, what: str) -> None:
    if isinstance(expected, list):
        assert isinstance(got, list), f"{what}: expected a sequence, got {type(got).__name__}"
        assert len(got) == len(expected), f"{what}: sequence length {len(got)} != {len(expected)}"
        for i, (g, e) in enumerate(zip(got, expected)):
            assert_same(g, e, f"{what}[{i}]")
        return
    if expected is None:
        assert got is None, f"{what}: expected an empty optional"
        return
    expected, got = np.asarray(expected), np.asarray(got)
    assert got.shape == expected.shape, f"{what}: shape {got.shape} != {expected.shape}"
    if expected.dtype == object:
        assert _as_str(got).tolist() == _as_str(expected).tolist(), what
        return
    assert got.dtype == expected.dtype, f"{what}: dtype {got.dtype} != {expected.dtype}"
    np.testing.assert_allclose(got, expected, rtol=1e-3, atol=1e-7, err_msg=what)


@pytest.mark.parametrize("case", _cases())
def test_simple_model(case):
    folder = os.path.join(SIMPLE, case)
    model = onnx.load(os.path.join(folder, "model.onnx"))
    graph = load_onnx(os.path.join(folder, "model.onnx"))
    inits = {t.name for t in model.graph.initializer}
    inputs = [vi for vi in model.graph.input if vi.name not in inits]
    data_sets = sorted(glob.glob(os.path.join(folder, "test_data_set_*")))
    assert data_sets, f"{case}: no test data"
    for ds in data_sets:
        feeds = {}
        for i, vi in enumerate(inputs):
            f = os.path.join(ds, f"input_{i}.pb")
            if os.path.exists(f):
                feeds[vi.name] = _load_value(f, vi.type)
        outs = run_reference(graph, feeds)
        for i, vo in enumerate(model.graph.output):
            expected = _load_value(os.path.join(ds, f"output_{i}.pb"), vo.type)
            assert_same(outs[vo.name], expected, f"{os.path.basename(ds)}/{vo.name}")
