"""ai.onnx.ml kernels (kernels/tensor_ml.py) against onnxruntime on seeded random models,
for what the onnx node cases do not cover (they test only ArrayFeatureExtractor, Binarizer,
LabelEncoder and TreeEnsemble)."""
from __future__ import annotations

import numpy as np
import pytest
from onnx import TensorProto, helper, numpy_helper

from pyge.errors import GraphError
from pyge.frontends import load_onnx
from pyge.kernels.runtime import run_reference

ort = pytest.importorskip("onnxruntime")
RNG = np.random.default_rng(0)
_NP2ONNX = {np.dtype(np.float32): TensorProto.FLOAT, np.dtype(np.float64): TensorProto.DOUBLE,
            np.dtype(np.int64): TensorProto.INT64, np.dtype(np.int32): TensorProto.INT32,
            np.dtype(object): TensorProto.STRING}


def ml_model(op, feeds, outs, attrs, ml_opset=3):
    """outs: list of (name, onnx elem type)."""
    ins = [helper.make_tensor_value_info(k, _NP2ONNX[v.dtype], None) for k, v in feeds.items()]
    ovi = [helper.make_tensor_value_info(n, t, None) for n, t in outs]
    node = helper.make_node(op, list(feeds), [n for n, _ in outs], domain="ai.onnx.ml", **attrs)
    g = helper.make_graph([node], "g", ins, ovi)
    return helper.make_model(g, opset_imports=[helper.make_opsetid("", 17),
                                               helper.make_opsetid("ai.onnx.ml", ml_opset)],
                             ir_version=8)


def run_both(model, feeds):
    so = ort.SessionOptions()
    so.log_severity_level = 3
    sess = ort.InferenceSession(model.SerializeToString(), so, providers=["CPUExecutionProvider"])
    exp = sess.run(None, feeds)
    g = load_onnx(model)
    got = run_reference(g, feeds)
    return [got[v.name] for v in g.outputs], exp


def check(op, feeds, outs, attrs, ml_opset=3, atol=1e-5):
    got, exp = run_both(ml_model(op, feeds, outs, attrs, ml_opset), feeds)
    for r, e in zip(got, exp):
        r, e = np.asarray(r), np.asarray(e)
        assert r.shape == e.shape, (r.shape, e.shape)
        if e.dtype == object or e.dtype.kind in "iub":
            np.testing.assert_array_equal(r.astype(e.dtype), e)
            assert r.dtype == e.dtype or e.dtype == object
        else:
            assert r.dtype == e.dtype, (r.dtype, e.dtype)
            np.testing.assert_allclose(r, e, rtol=1e-4, atol=atol)
    return got


F, I, S = TensorProto.FLOAT, TensorProto.INT64, TensorProto.STRING


@pytest.mark.parametrize("dtype", [np.float32])  # ORT: float only
@pytest.mark.parametrize("targets", [1, 3])
def test_linear_regressor(dtype, targets):
    x = (RNG.standard_normal((7, 4)) * 3).astype(dtype)
    attrs = dict(coefficients=RNG.standard_normal(4 * targets).tolist(),
                 intercepts=RNG.standard_normal(targets).tolist(), targets=targets)
    check("LinearRegressor", {"x": x}, [("y", F)], attrs, atol=1e-4)


@pytest.mark.parametrize("post", ["NONE", "LOGISTIC", "SOFTMAX", "SOFTMAX_ZERO"])
@pytest.mark.parametrize("ncls,rows,strs", [(3, 3, False), (3, 3, True), (2, 2, False),
                                            (2, 1, False), (2, 1, True)])
def test_linear_classifier(post, ncls, rows, strs):
    x = RNG.standard_normal((9, 4)).astype(np.float32)
    attrs = dict(coefficients=RNG.standard_normal(4 * rows).tolist(),
                 intercepts=RNG.standard_normal(rows).tolist(), post_transform=post)
    if strs:
        attrs["classlabels_strings"] = [f"c{i}" for i in range(ncls)]
    else:
        attrs["classlabels_ints"] = [10 + i for i in range(ncls)]
    check("LinearClassifier", {"x": x}, [("y", S if strs else I), ("z", F)], attrs)


def test_scaler_normalizer_binarizer_imputer():
    x = RNG.standard_normal((6, 3)).astype(np.float32)
    check("Scaler", {"x": x}, [("y", F)], dict(offset=[0.5, -1.0, 2.0], scale=[2.0, 3.0, 0.5]))
    check("Scaler", {"x": x.astype(np.float64)}, [("y", F)], dict(offset=[0.5], scale=[2.0]))
    for norm in ("MAX", "L1", "L2"):
        xa = np.abs(x) if norm == "MAX" else x   # MAX of an all-negative row: see below
        check("Normalizer", {"x": xa}, [("y", F)], dict(norm=norm))
    check("Binarizer", {"x": x}, [("y", F)], dict(threshold=0.3))
    xn = x.copy()
    xn[RNG.random(x.shape) < 0.3] = np.nan
    check("Imputer", {"x": xn}, [("y", F)],
          dict(imputed_value_floats=[1.0, 2.0, 3.0], replaced_value_float=float("nan")))
    xi = RNG.integers(0, 3, (6, 3)).astype(np.int64)
    check("Imputer", {"x": xi}, [("y", I)],
          dict(imputed_value_int64s=[7], replaced_value_int64=1))


def test_label_encoder_opsets():
    xs = np.array(["a", "b", "zz", "c"], dtype=object)
    check("LabelEncoder", {"x": xs}, [("y", I)],
          dict(keys_strings=["a", "b", "c"], values_int64s=[1, 2, 3], default_int64=-9), 2)
    xi = np.array([[1, 5], [3, 2]], np.int64)
    check("LabelEncoder", {"x": xi}, [("y", S)],
          dict(keys_int64s=[1, 2, 3], values_strings=["x", "y", "z"], default_string="?"), 2)
    check("LabelEncoder", {"x": xi}, [("y", F)],
          dict(keys_int64s=[3, 1, 2], values_floats=[0.5, 1.5, 2.5], default_float=-1.0), 2)
    xf = np.array([0.5, np.nan, 2.0, 7.0], np.float32)
    check("LabelEncoder", {"x": xf}, [("y", I)],
          dict(keys_floats=[0.5, float("nan"), 2.0], values_int64s=[1, 2, 3]), 4)  # NaN: opset 4
    check("LabelEncoder", {"x": xi}, [("y", TensorProto.DOUBLE)],
          dict(keys_tensor=numpy_helper.from_array(np.array([1, 2, 3], np.int64)),
               values_tensor=numpy_helper.from_array(np.array([7.5, 8, 9], np.float64)),
               default_tensor=numpy_helper.from_array(np.array([-5.0], np.float64))), 4)
    check("LabelEncoder", {"x": xf.astype(np.float64)}, [("y", S)],
          dict(keys_tensor=numpy_helper.from_array(np.array([0.5, 2.0])),
               values_tensor=numpy_helper.from_array(np.array(["p", "q"], object))), 4)
    check("LabelEncoder", {"x": np.array(["a", "q", "c"], object)}, [("y", I)],
          dict(classes_strings=["a", "b", "c"]), 1)


def test_one_hot_encoder():
    xi = np.array([[1, 5], [3, 2]], np.int64)
    check("OneHotEncoder", {"x": xi}, [("y", F)], dict(cats_int64s=[1, 2, 3, 4]))
    xs = np.array([["a", "c"], ["q", "b"]], object)
    check("OneHotEncoder", {"x": xs}, [("y", F)], dict(cats_strings=["a", "b", "c"]))


def test_array_feature_extractor_strings():
    xs = np.array([["a", "b", "c"], ["d", "e", "f"]], object)
    check("ArrayFeatureExtractor", {"x": xs, "i": np.array([2, 0], np.int64)}, [("y", S)], {})


def test_refusals_name_node_and_attribute():
    m = ml_model("Normalizer", {"x": np.zeros((2, 2), np.float32)}, [("y", F)],
                 dict(norm="L3"))
    with pytest.raises(GraphError, match=r"Normalizer.*norm='L3'"):
        run_reference(load_onnx(m), {"x": np.zeros((2, 2), np.float32)})
    m = ml_model("LinearRegressor", {"x": np.zeros((2, 2), np.float32)}, [("y", F)],
                 dict(coefficients=[1.0, 2.0], post_transform="SOFTMAX"))
    with pytest.raises(GraphError, match=r"post_transform='SOFTMAX'"):
        run_reference(load_onnx(m), {"x": np.zeros((2, 2), np.float32)})
