"""The onnx package's `pytorch-converted` and `pytorch-operator` backend cases, run with
pyge's reference interpreter (`pyge.executors.interpreter.run_reference`).

Each case dir holds model.onnx and test_data_set_*/{input,output}_*.pb; the outputs were
produced by PyTorch when the cases were made (a reference no one here wrote).

Tolerances: rtol=1e-3, atol=1e-7, the onnx backend test runner's own defaults. No case
loosens them.
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

DATA = os.path.join(os.path.dirname(onnx.__file__), "backend", "test", "data")
RTOL, ATOL = 1e-3, 1e-7

# Cases that cannot pass, with the reason (strict: they must keep failing).
XFAIL: dict[str, str] = {}


def _cases():
    out = []
    for folder in ("pytorch-converted", "pytorch-operator"):
        for d in sorted(glob.glob(os.path.join(DATA, folder, "test_*"))):
            name = os.path.basename(d)
            marks = [pytest.mark.xfail(reason=XFAIL[name], strict=True)] if name in XFAIL else []
            out.append(pytest.param(d, id=f"{folder}/{name}", marks=marks))
    return out


def _read(path: str) -> np.ndarray:
    t = onnx.TensorProto()
    with open(path, "rb") as f:
        t.ParseFromString(f.read())
    return numpy_helper.to_array(t)


def _numbered(folder: str, prefix: str) -> list[str]:
    files = glob.glob(os.path.join(folder, f"{prefix}_*.pb"))
    return sorted(files, key=lambda p: int(p.rsplit("_", 1)[1].split(".")[0]))


@pytest.mark.parametrize("case_dir", _cases())
def test_case(case_dir):
    graph = load_onnx(os.path.join(case_dir, "model.onnx"))
    sets = sorted(glob.glob(os.path.join(case_dir, "test_data_set_*")))
    assert sets, f"no data sets in {case_dir}"
    for ds in sets:
        inputs = [_read(p) for p in _numbered(ds, "input")]
        expected = [_read(p) for p in _numbered(ds, "output")]
        feeds = {v.name: x for v, x in zip(graph.inputs, inputs)}
        got = run_reference(graph, feeds)
        assert len(got) == len(expected)
        for v, exp in zip(graph.outputs, expected):
            res = got[v.name]
            assert res.shape == exp.shape, f"{v.name}: shape {res.shape} != {exp.shape}"
            assert res.dtype == exp.dtype, f"{v.name}: dtype {res.dtype} != {exp.dtype}"
            np.testing.assert_allclose(res, exp, rtol=RTOL, atol=ATOL, err_msg=v.name)
