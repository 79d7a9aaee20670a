"""Signal kernels (kernels/nn_signal.py) against the ONNX reference and onnxruntime, on
cases the node tests do not cover: dft_length padding/truncation, every axis, IRFFT,
complex STFT, windows in other output types, MelWeightMatrix arguments."""
from __future__ import annotations

import numpy as np
import pytest
from onnx.reference import ReferenceEvaluator

from pyge.errors import GraphError, PygeError
from pyge.frontends import load_onnx
from pyge.executors.interpreter import run_reference
from pyge.testing import one_node_model

RNG = np.random.default_rng(5)


def _model(op, inputs, attrs, opset, consts):
    return one_node_model(op, inputs, attrs, opset=opset, outputs=["y"], consts=consts)


def check(op, inputs, attrs=None, opset=17, consts=(), ref="onnx", atol=1e-5):
    m = _model(op, inputs, attrs or {}, opset, consts)
    feeds = {n: np.asarray(a) for n, a in inputs.items() if a is not None and n not in consts}
    if ref == "ort":
        ort = pytest.importorskip("onnxruntime")
        exp = ort.InferenceSession(m.SerializeToString(),
                                   providers=["CPUExecutionProvider"]).run(None, feeds)[0]
    else:
        exp = ReferenceEvaluator(m).run(None, feeds)[0]
    g = load_onnx(m)
    got = run_reference(g, feeds)[g.outputs[0].name]
    assert got.shape == exp.shape and got.dtype == exp.dtype, (got.shape, exp.shape, got.dtype)
    np.testing.assert_allclose(got, exp, rtol=1e-4, atol=atol)


def i64(v):
    return np.array(v, np.int64)


# A one-sided forward DFT (RFFT) takes real input only: complex inputs are not combined with it.
_DFT_CASES = [(shape, axis, inverse, onesided)
              for shape, axis in [((2, 16, 1), 1), ((3, 12, 2), 1), ((2, 5, 6, 2), 2),
                                  ((2, 5, 6, 2), -2), ((2, 5, 6, 1), 0)]
              for inverse, onesided in [(0, 0), (0, 1), (1, 0), (1, 1)]
              if not (onesided and not inverse and shape[-1] == 2)]


@pytest.mark.parametrize("opset", [17, 20])
@pytest.mark.parametrize("shape,axis,inverse,onesided", _DFT_CASES)
@pytest.mark.parametrize("length", [None, 7, 20])
@pytest.mark.parametrize("const", [True, False])
def test_dft_matches_reference(opset, shape, axis, inverse, onesided, length, const):
    x = RNG.standard_normal(shape).astype(np.float32)
    consts = ("n", "a") if const else ()
    n = None if length is None else i64(length)
    if opset == 17:
        check("DFT", {"x": x, "n": n}, {"inverse": inverse, "onesided": onesided, "axis": axis},
              17, consts)
    else:
        check("DFT", {"x": x, "n": n, "a": i64(axis)}, {"inverse": inverse, "onesided": onesided},
              20, consts)


@pytest.mark.parametrize("inverse,onesided", [(0, 0), (0, 1), (1, 0)])
def test_dft_matches_onnxruntime(inverse, onesided):
    # (onnxruntime's IRFFT disagrees with the reference on dft_length: not compared here.)
    x = RNG.standard_normal((3, 10, 4, 1)).astype(np.float64)
    check("DFT", {"x": x, "n": i64(12), "a": i64(1)}, {"inverse": inverse, "onesided": onesided},
          20, ("n", "a"), ref="ort", atol=1e-9)


def test_dft_default_axis_opset20_and_float16():
    x = RNG.standard_normal((2, 3, 8, 2)).astype(np.float16)
    check("DFT", {"x": x}, {}, 20, atol=2e-2)


def test_dft_refuses_the_complex_axis():
    x = RNG.standard_normal((2, 8, 2)).astype(np.float32)
    g = load_onnx(_model("DFT", {"x": x}, {"axis": -1}, 17, ()))
    with pytest.raises(PygeError, match=r"\(DFT\).*axis -1 is out of range"):
        run_reference(g, {"x": x})


@pytest.mark.parametrize("onesided,last", [(0, 1), (0, 2), (1, 1)])   # onesided: real input only
@pytest.mark.parametrize("window,flen", [(None, 8), (8, None), (8, 8), (None, None)])
@pytest.mark.parametrize("const", [True, False])
def test_stft(onesided, last, window, flen, const):
    x = RNG.standard_normal((2, 37, last)).astype(np.float32)
    w = None if window is None else RNG.random(window).astype(np.float32)
    inputs = {"x": x, "s": i64(3), "w": w, "fl": None if flen is None else i64(flen)}
    check("STFT", inputs, {"onesided": onesided}, 17, ("s", "fl", "w") if const else ())
    if flen is not None or window is not None:  # (onnxruntime fails without both)
        check("STFT", inputs, {"onesided": onesided}, 17, ("s", "fl", "w") if const else (),
              ref="ort")


def test_stft_refuses_a_window_of_another_length():
    x = RNG.standard_normal((1, 20, 1)).astype(np.float32)
    inputs = {"x": x, "s": i64(2), "w": np.ones(6, np.float32), "fl": i64(8)}
    g = load_onnx(_model("STFT", inputs, {}, 17, ("s", "w", "fl")))
    with pytest.raises(PygeError, match=r"\(STFT\).*frame_length 8 differs from the window"):
        run_reference(g, {"x": x})


# A symmetric window of size 1 is 0/0 in the formula (the reference gives nan, pyge 1 as
# torch and scipy do): compared in test_symmetric_window_of_one instead.
@pytest.mark.parametrize("op", ["HannWindow", "HammingWindow", "BlackmanWindow"])
@pytest.mark.parametrize("periodic,size", [(0, 10), (0, 257), (1, 1), (1, 10), (1, 257)])
@pytest.mark.parametrize("dtype", [1, 11, 7, 10])
def test_windows(op, periodic, dtype, size):
    check(op, {"n": i64(size)}, {"periodic": periodic, "output_datatype": dtype}, 17,
          ref="ort", atol=1e-3 if dtype == 10 else 1e-6)


@pytest.mark.parametrize("op", ["HannWindow", "HammingWindow", "BlackmanWindow"])
def test_symmetric_window_of_one(op):
    got = run_reference(load_onnx(_model(op, {"n": i64(1)}, {"periodic": 0}, 17, ("n",))), {})
    np.testing.assert_array_equal(next(iter(got.values())), np.ones(1, np.float32))


def test_window_refuses_a_string_output_type():
    with pytest.raises(GraphError, match=r"\(HannWindow\): attribute output_datatype=8"):
        run_reference(load_onnx(_model("HannWindow", {"n": i64(4)}, {"output_datatype": 8}, 17,
                                       ("n",))), {})


@pytest.mark.parametrize("args", [(8, 256, 16000, 0.0, 8000.0), (20, 512, 22050, 30.0, 8000.0),
                                  (3, 64, 8000, 100.0, 3000.0), (40, 400, 16000, 20.0, 7600.0)])
@pytest.mark.parametrize("const", [True, False])
def test_mel_weight_matrix(args, const):
    inputs = {"a": i64(args[0]), "b": i64(args[1]), "c": i64(args[2]),
              "d": np.float32(args[3]), "e": np.float32(args[4])}
    check("MelWeightMatrix", inputs, {}, 17, tuple(inputs) if const else (), ref="ort")
    check("MelWeightMatrix", inputs, {"output_datatype": 11}, 17, tuple(inputs) if const else ())
