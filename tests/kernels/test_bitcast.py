"""BitCast (kernels/elementwise.py) against numpy's view (and onnxruntime where it has
the op), and its refusals."""
from __future__ import annotations

import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper

from pyge.errors import GraphError
from pyge.frontends import load_onnx
from pyge.executors.interpreter import run_reference
from pyge.testing import one_node_model

RNG = np.random.default_rng(3)


def _model(op, inputs, attrs, opset, n_out=1):
    return one_node_model(op, inputs, attrs, opset=opset, n_out=n_out, ir_version=10)


def _run(m, feeds):
    g = load_onnx(m)
    out = run_reference(g, feeds)
    return [out[v.name] for v in g.outputs]


@pytest.mark.parametrize("src,to,npdt", [
    (np.float32, TensorProto.UINT32, np.uint32), (np.uint64, TensorProto.DOUBLE, np.float64),
    (np.int16, TensorProto.FLOAT16, np.float16), (np.float16, TensorProto.UINT16, np.uint16),
    (np.complex64, TensorProto.INT64, np.int64), (np.uint8, TensorProto.INT8, np.int8),
    (np.int64, TensorProto.COMPLEX64, np.complex64)])
def test_bitcast_matches_numpy_view(src, to, npdt):
    x = RNG.integers(0, 255, (3, 4, 2 * np.dtype(src).itemsize)).astype(np.uint8).view(src)
    got = _run(_model("BitCast", {"x": x}, {"to": to}, 26), {"x": x})[0]
    assert got.dtype == npdt and got.shape == x.shape
    assert got.tobytes() == x.view(npdt).tobytes()
    ort = pytest.importorskip("onnxruntime")
    m = _model("BitCast", {"x": x}, {"to": to}, 26)
    try:
        sess = ort.InferenceSession(m.SerializeToString(), providers=["CPUExecutionProvider"])
    except Exception:  # noqa: BLE001 - a type pair onnxruntime has no kernel for
        return
    exp = sess.run(None, {"x": x})[0]
    assert exp.dtype == got.dtype and exp.tobytes() == got.tobytes()


def test_bitcast_refuses_another_width():
    x = np.zeros((2,), np.float32)
    with pytest.raises(GraphError, match=r"\(BitCast\): attribute to=11 .* differ in bit width"):
        _run(_model("BitCast", {"x": x}, {"to": TensorProto.DOUBLE}, 26), {"x": x})
    with pytest.raises(GraphError, match=r"\(BitCast\): attribute to=8 \(string\)"):
        _run(_model("BitCast", {"x": x}, {"to": TensorProto.STRING}, 26), {"x": x})


def _tfidf_attrs(rng, strings, mode, lo, hi, skip, weighted):
    # A pool of 6 unigrams, 5 bigrams, 3 trigrams over a vocabulary of 5 tokens.
    voc = list(range(1, 6))
    uni = rng.permutation(voc).tolist() + [6]
    bi = [tuple(rng.choice(voc, 2)) for _ in range(5)]
    tri = [tuple(rng.choice(voc, 3)) for _ in range(3)]
    bi, tri = list(dict.fromkeys(bi)), list(dict.fromkeys(tri))
    pool = uni + [v for g in bi for v in g] + [v for g in tri for v in g]
    n = len(uni) + len(bi) + len(tri)
    attrs = {"mode": mode, "min_gram_length": lo, "max_gram_length": hi, "max_skip_count": skip,
             "ngram_counts": [0, len(uni), len(uni) + 2 * len(bi)],
             "ngram_indexes": rng.permutation(n).tolist()}
    if strings:
        attrs["pool_strings"] = [f"w{v}" for v in pool]
    else:
        attrs["pool_int64s"] = pool
    if weighted:
        attrs["weights"] = (rng.random(n) + 0.5).astype(np.float32).tolist()
    return attrs


@pytest.mark.parametrize("strings", [False, True])
@pytest.mark.parametrize("mode", ["TF", "IDF", "TFIDF"])
@pytest.mark.parametrize("lo,hi,skip", [(1, 1, 0), (1, 3, 2), (2, 3, 0), (2, 2, 3), (3, 3, 1)])
@pytest.mark.parametrize("weighted", [False, True])
def test_tfidf_vectorizer_matches_onnxruntime(strings, mode, lo, hi, skip, weighted):
    ort = pytest.importorskip("onnxruntime")
    rng = np.random.default_rng(lo * 100 + hi * 10 + skip)
    attrs = _tfidf_attrs(rng, strings, mode, lo, hi, skip, weighted)
    for shape in [(12,), (3, 9)]:
        x = rng.integers(1, 6, shape)
        x = np.array([f"w{v}" for v in x.reshape(-1)], dtype=object).reshape(shape) if strings \
            else x.astype(np.int64)
        ins = [helper.make_tensor_value_info("x", TensorProto.STRING if strings else
                                             TensorProto.INT64, shape)]
        node = helper.make_node("TfIdfVectorizer", ["x"], ["y0"], **attrs)
        g = helper.make_graph([node], "t", ins, [onnx.ValueInfoProto(name="y0")])
        m = helper.make_model(g, opset_imports=[helper.make_opsetid("", 9)])
        m.ir_version = 8
        exp = ort.InferenceSession(m.SerializeToString(),
                                   providers=["CPUExecutionProvider"]).run(None, {"x": x})[0]
        got = _run(m, {"x": x})[0]
        assert got.dtype == exp.dtype and got.shape == exp.shape
        np.testing.assert_allclose(got, exp, rtol=1e-6)


def test_tfidf_vectorizer_refuses_a_bad_mode():
    x = np.array([1, 2], np.int64)
    with pytest.raises(GraphError, match=r"\(TfIdfVectorizer\): attribute mode='BM25'"):
        _run(_model("TfIdfVectorizer", {"x": x}, {
            "mode": "BM25", "min_gram_length": 1, "max_gram_length": 1, "max_skip_count": 0,
            "ngram_counts": [0], "ngram_indexes": [0], "pool_int64s": [1]}, 9), {"x": x})
