"""ai.onnx.ml kernels (kernels/tensor_ml*.py) against onnxruntime on seeded random models,
for what the onnx node cases do not cover (they test only ArrayFeatureExtractor, Binarizer,
LabelEncoder and TreeEnsemble)."""
from __future__ import annotations

import numpy as np
import pytest
from onnx import TensorProto, helper, numpy_helper
from onnx.reference import ReferenceEvaluator

from pyge.errors import GraphError
from pyge.frontends import load_onnx
from pyge.executors.interpreter import run_reference

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


def run_both(model, feeds, ref="ort"):
    if ref == "onnx":
        exp = ReferenceEvaluator(model).run(None, feeds)
    else:
        so = ort.SessionOptions()
        so.log_severity_level = 3
        sess = ort.InferenceSession(model.SerializeToString(), so,
                                    providers=["CPUExecutionProvider"])
        exp = sess.run(None, feeds)
    g = load_onnx(model)
    got = run_reference(g, feeds)
    return [got[v.name] for v in g.outputs], exp


def check(op, feeds, outs, attrs, ml_opset=3, atol=1e-5, ref="ort"):
    got, exp = run_both(ml_model(op, feeds, outs, attrs, ml_opset), feeds, ref)
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


# ---------------------------------------------------------------------------------------
# tree ensembles: random forests of random trees


def random_forest(n_trees, n_feat, n_out, rng, modes=("BRANCH_LEQ",), leaf_outs=1,
                  max_depth=4):
    """ml opset 1/3 attribute lists; node ids shuffled-free but children after parents."""
    a = {k: [] for k in ("nodes_treeids", "nodes_nodeids", "nodes_featureids", "nodes_modes",
                         "nodes_values", "nodes_truenodeids", "nodes_falsenodeids",
                         "nodes_missing_value_tracks_true")}
    leaves = []
    for t in range(n_trees):
        nodes = [(0, 0)]  # (id, depth)
        nid = 1
        i = 0
        while i < len(nodes):
            node, d = nodes[i]
            i += 1
            a["nodes_treeids"].append(t)
            a["nodes_nodeids"].append(node)
            if d >= max_depth or (d > 0 and rng.random() < 0.25):
                a["nodes_modes"].append("LEAF")
                for k in ("nodes_featureids", "nodes_truenodeids", "nodes_falsenodeids",
                          "nodes_missing_value_tracks_true"):
                    a[k].append(0)
                a["nodes_values"].append(0.0)
                for c in rng.choice(n_out, size=leaf_outs, replace=False):
                    leaves.append((t, node, int(c), float(rng.standard_normal())))
                continue
            a["nodes_modes"].append(str(rng.choice(modes)))
            a["nodes_featureids"].append(int(rng.integers(n_feat)))
            a["nodes_values"].append(float(np.round(rng.standard_normal(), 1)))
            a["nodes_truenodeids"].append(nid)
            a["nodes_falsenodeids"].append(nid + 1)
            a["nodes_missing_value_tracks_true"].append(int(rng.integers(2)))
            nodes += [(nid, d + 1), (nid + 1, d + 1)]
            nid += 2
    return a, leaves


def _x(rng, n, f, nan=True):
    x = np.round(rng.standard_normal((n, f)), 1).astype(np.float32)  # ties hit EQ / LEQ
    if nan:
        x[rng.random(x.shape) < 0.1] = np.nan
    return x


ALL_MODES = ("BRANCH_LEQ", "BRANCH_LT", "BRANCH_GTE", "BRANCH_GT", "BRANCH_EQ", "BRANCH_NEQ")


@pytest.mark.parametrize("agg", ["SUM", "AVERAGE", "MIN", "MAX"])
@pytest.mark.parametrize("post", ["NONE", "LOGISTIC", "SOFTMAX"])
@pytest.mark.parametrize("n_targets", [1, 3])
def test_tree_ensemble_regressor(agg, post, n_targets):
    rng = np.random.default_rng(hash((agg, post, n_targets)) % 2**32)
    # every leaf writes every target: onnxruntime leaves out the base value of a target no
    # tree wrote (the spec and the onnx reference add it)
    a, leaves = random_forest(5, 4, n_targets, rng, ALL_MODES, leaf_outs=n_targets)
    a.update(target_treeids=[l[0] for l in leaves], target_nodeids=[l[1] for l in leaves],
             target_ids=[l[2] for l in leaves], target_weights=[l[3] for l in leaves],
             n_targets=n_targets, aggregate_function=agg, post_transform=post,
             base_values=rng.standard_normal(n_targets).tolist())
    x = _x(rng, 50, 4)
    if n_targets == 1 and post != "NONE":
        # onnxruntime ignores post_transform (but PROBIT) on a single target, the onnx
        # reference refuses it; the spec applies it (SOFTMAX of one score: 1)
        raw = check("TreeEnsembleRegressor", {"x": x}, [("y", F)], {**a, "post_transform": "NONE"})
        got, _ = run_both(ml_model("TreeEnsembleRegressor", {"x": x}, [("y", F)], a), {"x": x})
        exp = 1 / (1 + np.exp(-raw[0])) if post == "LOGISTIC" else np.ones_like(raw[0])
        np.testing.assert_allclose(got[0], exp, rtol=1e-5)
        return
    check("TreeEnsembleRegressor", {"x": x}, [("y", F)], a)


@pytest.mark.parametrize("post", ["NONE", "LOGISTIC", "SOFTMAX", "SOFTMAX_ZERO"])
@pytest.mark.parametrize("ncls,binary,strs", [(3, False, False), (3, False, True),
                                              (2, False, False), (2, True, False),
                                              (2, True, True)])
def test_tree_ensemble_classifier(post, ncls, binary, strs):
    rng = np.random.default_rng(hash((post, ncls, binary, strs)) % 2**32)
    a, leaves = random_forest(4, 3, 1 if binary else ncls, rng, ALL_MODES)
    a.update(class_treeids=[l[0] for l in leaves], class_nodeids=[l[1] for l in leaves],
             class_ids=[l[2] for l in leaves], class_weights=[l[3] for l in leaves],
             post_transform=post)
    if binary:
        a["base_values"] = [0.3]
    else:
        a["base_values"] = rng.standard_normal(ncls).tolist()
    if strs:
        a["classlabels_strings"] = [f"k{i}" for i in range(ncls)]
    else:
        a["classlabels_int64s"] = [3 * i + 1 for i in range(ncls)]
    # two classes, both with weights: onnxruntime keeps class 1's score only (and negates it
    # for class 0); the spec and the onnx reference score each class
    ref = "onnx" if ncls == 2 and not binary else "ort"
    check("TreeEnsembleClassifier", {"x": _x(rng, 60, 3, nan=ref == "ort")},
          [("y", S if strs else I), ("z", F)], a, ref=ref)


def test_tree_ensemble_classifier_binary_positive_weights():
    rng = np.random.default_rng(5)
    a, leaves = random_forest(3, 3, 1, rng)
    a.update(class_treeids=[l[0] for l in leaves], class_nodeids=[l[1] for l in leaves],
             class_ids=[0] * len(leaves), class_weights=[abs(l[3]) / 3 for l in leaves],
             classlabels_int64s=[0, 1])
    check("TreeEnsembleClassifier", {"x": _x(rng, 60, 3)}, [("y", I), ("z", F)], a)


def test_tree_ensemble_double_thresholds():
    rng = np.random.default_rng(6)
    a, leaves = random_forest(3, 3, 2, rng, ALL_MODES)
    vals = np.asarray(a.pop("nodes_values")) + 1e-9   # not float32-representable
    a["nodes_values_as_tensor"] = numpy_helper.from_array(vals)
    a.update(target_treeids=[l[0] for l in leaves], target_nodeids=[l[1] for l in leaves],
             target_ids=[l[2] for l in leaves], target_weights=[l[3] for l in leaves],
             n_targets=2)
    x = _x(rng, 40, 3).astype(np.float64)
    check("TreeEnsembleRegressor", {"x": x}, [("y", F)], a)


def to_v5(a, leaves, n_targets, rng, members=False, dtype=np.float32):
    """ml opset 1/3 forest (one weight per leaf) -> TreeEnsemble (ml opset 5) attributes."""
    code = {m: i for i, m in enumerate(ALL_MODES)}
    key = list(zip(a["nodes_treeids"], a["nodes_nodeids"]))
    is_leaf = {k: m == "LEAF" for k, m in zip(key, a["nodes_modes"])}
    inner = [k for k in key if not is_leaf[k]]
    leaf_list = [k for k in key if is_leaf[k]]
    ni = {k: i for i, k in enumerate(inner)}
    li = {k: i for i, k in enumerate(leaf_list)}
    pos = {k: i for i, k in enumerate(key)}
    w = {(t, n): (c, v) for t, n, c, v in leaves}
    modes, mv = [], []
    for k in inner:
        m = code[a["nodes_modes"][pos[k]]]
        if members and rng.random() < 0.3:
            m = 6
            mv += sorted(set(rng.integers(0, 4, 3).astype(float).tolist())) + [np.nan]  # ORT: small non-negative ints only
        modes.append(m)
    out = dict(
        nodes_featureids=[a["nodes_featureids"][pos[k]] for k in inner],
        nodes_splits=numpy_helper.from_array(
            np.array([a["nodes_values"][pos[k]] for k in inner], dtype)),
        nodes_modes=numpy_helper.from_array(np.array(modes, np.uint8)),
        nodes_truenodeids=[], nodes_falsenodeids=[], nodes_trueleafs=[], nodes_falseleafs=[],
        nodes_missing_value_tracks_true=[a["nodes_missing_value_tracks_true"][pos[k]]
                                         for k in inner],
        leaf_targetids=[w[k][0] for k in leaf_list],
        leaf_weights=numpy_helper.from_array(np.array([w[k][1] for k in leaf_list], dtype)),
        tree_roots=[ni[(t, 0)] for t in sorted(set(a["nodes_treeids"]))], n_targets=n_targets)
    for k in inner:
        for side in ("true", "false"):
            child = (k[0], a[f"nodes_{side}nodeids"][pos[k]])
            leaf = is_leaf[child]
            out[f"nodes_{side}nodeids"].append(li[child] if leaf else ni[child])
            out[f"nodes_{side}leafs"].append(int(leaf))
    if mv:
        out["membership_values"] = numpy_helper.from_array(np.array(mv, dtype))
    return out


@pytest.mark.parametrize("agg", [0, 1, 2, 3])
@pytest.mark.parametrize("post", [0, 1, 2])
@pytest.mark.parametrize("dtype", [np.float32, np.float64])
def test_tree_ensemble_v5(agg, post, dtype):
    rng = np.random.default_rng(agg * 10 + post + (dtype == np.float64))
    a, leaves = random_forest(5, 4, 3, rng, ALL_MODES)
    v5 = to_v5(a, leaves, 3, rng, members=True, dtype=dtype)
    v5.update(aggregate_function=agg)
    x = _x(rng, 50, 4).astype(dtype)
    x[:, :2] = np.abs(np.round(x[:, :2] * 2))  # small integers: some hit the sets
    out = [("y", _NP2ONNX[np.dtype(dtype)])]
    raw = check("TreeEnsemble", {"x": x}, out, v5, ml_opset=5)
    assert raw[0].dtype == dtype
    # post_transform: onnxruntime reads 1 as LOGISTIC, 2 as SOFTMAX; the spec (and the onnx
    # reference's enum) says 1 SOFTMAX, 2 LOGISTIC
    got, _ = run_both(ml_model("TreeEnsemble", {"x": x}, out, {**v5, "post_transform": post}, 5),
                      {"x": x}, ref="onnx")
    r = raw[0].astype(np.float64)
    exp = {0: r, 1: np.exp(r) / np.exp(r).sum(1, keepdims=True), 2: 1 / (1 + np.exp(-r))}[post]
    np.testing.assert_allclose(got[0], exp, rtol=1e-5, atol=1e-7)


@pytest.mark.parametrize("kernel", ["LINEAR", "POLY", "RBF", "SIGMOID"])
@pytest.mark.parametrize("one_class", [0, 1])
def test_svm_regressor(kernel, one_class):
    rng = np.random.default_rng(len(kernel) + one_class)
    x = rng.standard_normal((20, 4)).astype(np.float32)
    attrs = dict(coefficients=rng.standard_normal(5).tolist(), n_supports=5,
                 support_vectors=rng.standard_normal(20).tolist(), rho=[0.3],
                 kernel_type=kernel, kernel_params=[0.4, 0.2, 3.0], one_class=one_class)
    check("SVMRegressor", {"x": x}, [("y", F)], attrs, atol=1e-4)
    lin = dict(coefficients=rng.standard_normal(4).tolist(), n_supports=0, rho=[0.3],
               kernel_params=[0.4, 0.2, 3.0])  # (onnxruntime requires them)
    check("SVMRegressor", {"x": x}, [("y", F)], lin, atol=1e-4)


def test_category_mapper():
    attrs = dict(cats_int64s=[1, 2, 3], cats_strings=["a", "b", "c"], default_int64=-7,
                 default_string="??")
    check("CategoryMapper", {"x": np.array([["a", "q"], ["c", "b"]], object)}, [("y", I)],
          attrs)
    check("CategoryMapper", {"x": np.array([1, 9, 3], np.int64)}, [("y", S)], attrs)


def svc_attrs(rng, k, vpc, n_feat, proba, kernel="RBF", strs=False):
    nv = sum(vpc)
    npair = k * (k - 1) // 2
    a = dict(vectors_per_class=vpc, support_vectors=rng.standard_normal(nv * n_feat).tolist(),
             coefficients=rng.standard_normal((k - 1) * nv).tolist(),
             rho=rng.standard_normal(npair).tolist(), kernel_type=kernel,
             kernel_params=[0.3, 0.1, 2.0])
    if proba:
        a.update(prob_a=(-1 - rng.random(npair)).tolist(), prob_b=rng.standard_normal(npair).tolist())
    if strs:
        a["classlabels_strings"] = [f"s{i}" for i in range(k)]
    else:
        a["classlabels_ints"] = [5 * i for i in range(k)]
    return a


@pytest.mark.parametrize("k", [2, 3, 4])
@pytest.mark.parametrize("proba", [False, True])
@pytest.mark.parametrize("post", ["NONE", "LOGISTIC"])
def test_svm_classifier(k, proba, post):
    rng = np.random.default_rng(k * 4 + proba * 2 + (post == "NONE"))
    a = svc_attrs(rng, k, [3, 2, 4, 1][:k], 3, proba, strs=k == 3)
    a["post_transform"] = post
    x = rng.standard_normal((30, 3)).astype(np.float32)
    check("SVMClassifier", {"x": x}, [("y", S if k == 3 else I), ("z", F)], a, atol=1e-4)


@pytest.mark.parametrize("kernel", ["LINEAR", "POLY", "SIGMOID"])
def test_svm_classifier_kernels_and_linear_mode(kernel):
    rng = np.random.default_rng(len(kernel))
    x = rng.standard_normal((30, 3)).astype(np.float32)
    check("SVMClassifier", {"x": x}, [("y", I), ("z", F)],
          svc_attrs(rng, 3, [2, 2, 3], 3, False, kernel), atol=1e-4)
    lin = dict(coefficients=rng.standard_normal(9).tolist(), rho=[0.2],
               classlabels_ints=[1, 2, 3], kernel_params=[0.3, 0.1, 2.0])
    check("SVMClassifier", {"x": x}, [("y", I), ("z", F)], lin, atol=1e-4)


def test_pipeline_through_compile_matches_onnxruntime():
    """Scaler -> TreeEnsembleClassifier (string labels) -> LabelEncoder, beside a default
    domain op, through pyge.compile (all passes), the way sklearn-onnx models import both
    domains."""
    import pyge
    rng = np.random.default_rng(11)
    # every leaf scores every class (as sklearn's forests do): onnxruntime picks the label
    # among the classes some leaf scored only; the spec (and pyge) among all
    a, leaves = random_forest(10, 4, 3, rng, ALL_MODES, leaf_outs=3)
    a.update(class_treeids=[l[0] for l in leaves], class_nodeids=[l[1] for l in leaves],
             class_ids=[l[2] for l in leaves], class_weights=[l[3] for l in leaves],
             classlabels_strings=["a", "b", "c"], post_transform="SOFTMAX")
    nodes = [helper.make_node("Scaler", ["x"], ["xs"], domain="ai.onnx.ml",
                              offset=[0.1, 0.2, 0.3, 0.4], scale=[2.0, 1.0, 0.5, 1.0]),
             helper.make_node("TreeEnsembleClassifier", ["xs"], ["lab", "prob"],
                              domain="ai.onnx.ml", **a),
             helper.make_node("LabelEncoder", ["lab"], ["code"], domain="ai.onnx.ml",
                              keys_strings=["a", "b", "c"], values_int64s=[7, 8, 9]),
             helper.make_node("ArgMax", ["prob"], ["am"], axis=1, keepdims=0)]
    vi = helper.make_tensor_value_info
    g = helper.make_graph(nodes, "g", [vi("x", F, ["N", 4])],
                          [vi("lab", S, ["N"]), vi("prob", F, ["N", 3]), vi("code", I, ["N"]),
                           vi("am", I, ["N"])])
    m = helper.make_model(g, opset_imports=[helper.make_opsetid("", 17),
                                            helper.make_opsetid("ai.onnx.ml", 2)], ir_version=8)
    x = _x(rng, 64, 4)
    got = pyge.compile(pyge.load_onnx(m), "cpu").run({"x": x})
    exp = ort.InferenceSession(m.SerializeToString(),
                               providers=["CPUExecutionProvider"]).run(None, {"x": x})
    for name, e in zip(["lab", "prob", "code", "am"], exp):
        if e.dtype.kind == "f":
            np.testing.assert_allclose(got[name], e, rtol=1e-5, atol=1e-6)
        else:
            np.testing.assert_array_equal(got[name], e)


def test_map_ops_are_refused_as_unsupported():
    from pyge.errors import UnsupportedOperatorError
    mp = helper.make_sequence_type_proto(helper.make_map_type_proto(
        I, helper.make_tensor_type_proto(F, [])))
    n1 = helper.make_node("LinearClassifier", ["x"], ["lab", "prob"], domain="ai.onnx.ml",
                          coefficients=[1.0, 2.0, 3.0, 4.0], classlabels_ints=[0, 1])
    n2 = helper.make_node("ZipMap", ["prob"], ["zm"], domain="ai.onnx.ml",
                          classlabels_int64s=[0, 1])
    g = helper.make_graph([n1, n2], "g", [helper.make_tensor_value_info("x", F, [None, 2])],
                          [helper.make_tensor_value_info("lab", I, [None]),
                           helper.make_value_info("zm", mp)])
    m = helper.make_model(g, opset_imports=[helper.make_opsetid("", 17),
                                            helper.make_opsetid("ai.onnx.ml", 1)])
    with pytest.raises(UnsupportedOperatorError, match="ai.onnx.ml.ZipMap"):
        run_reference(load_onnx(m), {"x": np.zeros((2, 2), np.float32)})


def test_tree_refusals_name_node_and_attribute():
    rng = np.random.default_rng(0)
    a, leaves = random_forest(2, 3, 1, rng)
    a["nodes_modes"] = ["BRANCH_XX" if m != "LEAF" else m for m in a["nodes_modes"]]
    a.update(target_treeids=[l[0] for l in leaves], target_nodeids=[l[1] for l in leaves],
             target_ids=[l[2] for l in leaves], target_weights=[l[3] for l in leaves])
    x = np.zeros((2, 3), np.float32)
    m = ml_model("TreeEnsembleRegressor", {"x": x}, [("y", F)], a)
    with pytest.raises(GraphError, match=r"TreeEnsembleRegressor.*nodes_modes.*BRANCH_XX"):
        run_reference(load_onnx(m), {"x": x})
    a["nodes_modes"] = ["BRANCH_LEQ" if m != "LEAF" else m for m in a["nodes_modes"]]
    m = ml_model("TreeEnsembleRegressor", {"x": x}, [("y", F)],
                 {**a, "aggregate_function": "MEDIAN"})
    with pytest.raises(GraphError, match=r"aggregate_function='MEDIAN'"):
        run_reference(load_onnx(m), {"x": x})
