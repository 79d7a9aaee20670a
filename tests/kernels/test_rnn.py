"""LSTM / GRU / RNN beyond the onnx node cases (which cover defaults, bias, peepholes,
layout 1, reverse and bidirectional): activations with alpha/beta, clip, input_forget,
linear_before_reset=0, variable sequence_lens, both layouts, the fused torch path against the
per-step loop, half precision, old opsets and compile-time refusals. References: onnxruntime
(which has no layout=1 CPU kernel and uses 0 as the default alpha of ThresholdedRelu /
Affine / ScaledTanh, so those are always given here) and numpy formulas."""
from __future__ import annotations

import numpy as np
import onnx
import pytest
from onnx import helper

from pyge.errors import GraphError
from pyge.frontends import load_onnx
from pyge.kernels import nn_rnn
from pyge.executors.interpreter import compile_reference, run_reference
from pyge.testing import one_node_model

GATES = {"LSTM": 4, "GRU": 3, "RNN": 1}
N_ACTS = {"LSTM": 3, "GRU": 2, "RNN": 1}
BOUNDED = ["Sigmoid", "HardSigmoid", "Tanh", "Softsign", "ScaledTanh"]
ANY = BOUNDED + ["Relu", "Affine", "LeakyRelu", "ThresholdedRelu", "Elu", "Softplus"]
TAKES_ALPHA = {"Affine", "LeakyRelu", "ThresholdedRelu", "ScaledTanh", "HardSigmoid", "Elu"}
TAKES_BETA = {"Affine", "ScaledTanh", "HardSigmoid"}
LAYOUT_TRANSPOSED = ("X", "initial_h", "initial_c")


def _model(op, inputs, attrs, opset=14, consts=()):
    return one_node_model(op, dict(inputs), attrs, opset=opset, consts=consts, trim=True,
                          outputs=["Y", "Y_h", "Y_c"][:3 if op == "LSTM" else 2])


def _feeds(inputs, consts=()):
    return {n: v for n, v in inputs if v is not None and n not in consts}


def _pyge(m, feeds):
    g = load_onnx(m)
    out = run_reference(g, feeds)
    return [out[v.name] for v in g.outputs]


def _ort(m, feeds):
    ort = pytest.importorskip("onnxruntime")
    so = ort.SessionOptions()
    so.log_severity_level = 3
    return ort.InferenceSession(m.SerializeToString(), so,
                                providers=["CPUExecutionProvider"]).run(None, feeds)


def _close(got, exp, tol=1e-5):
    assert len(got) == len(exp)
    for a, b in zip(got, exp):
        assert a.shape == b.shape and a.dtype == b.dtype, (a.shape, b.shape, a.dtype, b.dtype)
        np.testing.assert_allclose(a, b, rtol=tol, atol=tol)


def _random_case(rng, op, *, default=False, lens="random", direction=None):
    """(inputs, attrs) of one random node; activations keep the state bounded."""
    t, b, i, h = (int(v) for v in rng.integers(1, 6, 4))
    direction = direction or str(rng.choice(["forward", "reverse", "bidirectional"]))
    d, g = (2 if direction == "bidirectional" else 1), GATES[op]
    f = lambda *s: (0.7 * rng.standard_normal(s)).astype(np.float32)  # noqa: E731
    attrs = {"direction": direction, "hidden_size": h}
    if not default:
        acts = []
        for _ in range(d):
            acts += [str(rng.choice(BOUNDED if k == 0 and op != "RNN" else ANY))
                     for k in range(N_ACTS[op])]
        attrs["activations"] = acts
        alphas = [float(rng.uniform(0.2, 1.2)) for a in acts if a in TAKES_ALPHA]
        betas = [float(rng.uniform(-0.5, 0.8)) for a in acts if a in TAKES_BETA]
        if alphas:
            attrs["activation_alpha"] = alphas
        if betas:
            attrs["activation_beta"] = betas
        if rng.random() < 0.5:
            attrs["clip"] = float(rng.uniform(0.5, 3.0))
        if op == "LSTM" and rng.random() < 0.3:
            attrs["input_forget"] = 1
    if op == "GRU":
        attrs["linear_before_reset"] = int(rng.integers(0, 2))
    if lens == "random":
        lens = rng.integers(0, t + 1, b).astype(np.int32) if rng.random() < 0.5 else None
    elif lens == "full":
        lens = np.full(b, t, np.int32)
    inputs = [("X", f(t, b, i)), ("W", f(d, g * h, i)), ("R", f(d, g * h, h)),
              ("B", f(d, 2 * g * h) if rng.random() < 0.8 else None), ("sequence_lens", lens),
              ("initial_h", f(d, b, h) if rng.random() < 0.6 else None)]
    if op == "LSTM":
        inputs += [("initial_c", f(d, b, h) if rng.random() < 0.6 else None),
                   ("P", f(d, 3 * h) if not default and rng.random() < 0.5 else None)]
    return inputs, attrs


def _layout1(inputs, attrs, outs):
    """The same node with layout=1: inputs and expected outputs transposed."""
    inputs = [(n, v.swapaxes(0, 1).copy() if v is not None and n in LAYOUT_TRANSPOSED else v)
              for n, v in inputs]
    outs = [outs[0].transpose(2, 0, 1, 3)] + [o.swapaxes(0, 1) for o in outs[1:]]
    return inputs, dict(attrs, layout=1), outs


@pytest.mark.parametrize("op", ["LSTM", "GRU", "RNN"])
def test_random_nodes_match_onnxruntime(op):
    # Both layouts (layout 1 against onnxruntime's layout 0, transposed), constant and
    # run-time weights, sequence_lens with zero-length entries, every activation.
    rng = np.random.default_rng({"LSTM": 1, "GRU": 2, "RNN": 3}[op])
    for k in range(16):
        inputs, attrs = _random_case(rng, op, default=k % 4 == 0)
        consts = ("W", "R", "B", "P") if k % 2 else ()
        exp = _ort(_model(op, inputs, attrs), _feeds(inputs))
        _close(_pyge(_model(op, inputs, attrs, consts=consts), _feeds(inputs, consts)), exp)
        inputs1, attrs1, exp1 = _layout1(inputs, attrs, exp)
        _close(_pyge(_model(op, inputs1, attrs1, consts=consts), _feeds(inputs1, consts)), exp1)


@pytest.mark.parametrize("op", ["LSTM", "GRU", "RNN"])
def test_fused_path_is_taken_and_matches_the_loop(op, monkeypatch):
    rng = np.random.default_rng(7)
    for k, direction in enumerate(["forward", "reverse", "bidirectional"] * 2):
        inputs, attrs = _random_case(rng, op, default=True, direction=direction,
                                     lens="full" if k >= 3 else None)
        if op == "GRU":
            attrs["linear_before_reset"] = 1
        consts = ("W", "R", "B", "sequence_lens") if k % 2 else ()
        m = _model(op, inputs, attrs, consts=consts)
        loop = _pyge(_model(op, inputs, dict(attrs, clip=1e30), consts=consts),
                     _feeds(inputs, consts))  # a clip forces the per-step loop
        with monkeypatch.context() as mp:
            mp.setattr(nn_rnn, "_run_loop", lambda *a: pytest.fail("fused path not taken"))
            fused = _pyge(m, _feeds(inputs, consts))
        _close(fused, loop)
        _close(fused, _ort(m, _feeds(inputs, consts)))


def test_rnn_relu_fused_and_variable_lengths():
    rng = np.random.default_rng(11)
    inputs, attrs = _random_case(rng, "RNN", default=True, direction="bidirectional", lens=None)
    attrs["activations"] = ["Relu", "Relu"]
    exp = _ort(_model("RNN", inputs, attrs), _feeds(inputs))
    _close(_pyge(_model("RNN", inputs, attrs, consts=("W", "R")), _feeds(inputs, ("W", "R"))), exp)
    # variable lengths (loop path): Y zero past each length, Y_h the last valid step
    t, b = inputs[0][1].shape[:2]
    lens = np.array([(j % t) + (j % 2) for j in range(b)], np.int32)
    inputs[4] = ("sequence_lens", lens)
    got = _pyge(_model("RNN", inputs, attrs), _feeds(inputs))
    _close(got, _ort(_model("RNN", inputs, attrs), _feeds(inputs)))
    for j, n in enumerate(lens):
        assert not got[0][n:, :, j].any()


def test_activation_alpha_beta_consumed_in_order_with_spec_defaults():
    # RNN with W=1, R=0: Y = f(x). activation_alpha/beta are consumed in order by the
    # activations that take them; a missing one is the ONNX operator's default
    # (ThresholdedRelu alpha=1, ScaledTanh 1/1, Affine 1/0).
    x = np.array([-2.0, -0.5, 0.5, 1.0, 1.5], np.float32).reshape(5, 1, 1)
    w, r = np.ones((2, 1, 1), np.float32), np.zeros((2, 1, 1), np.float32)
    inputs = [("X", x), ("W", w), ("R", r)]

    def y(acts, **ab):
        attrs = {"hidden_size": 1, "direction": "bidirectional", "activations": acts, **ab}
        return _pyge(_model("RNN", inputs, attrs, consts=("W", "R")), {"X": x})[0][:, :, 0, 0].T
    v = x.ravel()
    got = y(["LeakyRelu", "Affine"], activation_alpha=[0.1, 3.0], activation_beta=[0.5])
    np.testing.assert_allclose(got[0], np.where(v >= 0, v, 0.1 * v), rtol=1e-6)
    np.testing.assert_allclose(got[1], 3.0 * v + 0.5, rtol=1e-6)
    got = y(["ThresholdedRelu", "ScaledTanh"])
    np.testing.assert_allclose(got[0], np.where(v > 1.0, v, 0), rtol=1e-6)
    np.testing.assert_allclose(got[1], np.tanh(v), rtol=1e-6)
    got = y(["HardSigmoid", "Elu"], activation_alpha=[0.3, 2.0], activation_beta=[0.1])
    np.testing.assert_allclose(got[0], np.clip(0.3 * v + 0.1, 0, 1), rtol=1e-6)
    np.testing.assert_allclose(got[1], np.where(v >= 0, v, 2.0 * np.expm1(v)), rtol=1e-6)
    got = y(["softsign", "SOFTPLUS"])  # names in any case
    np.testing.assert_allclose(got[0], v / (1 + np.abs(v)), rtol=1e-6)
    np.testing.assert_allclose(got[1], np.log1p(np.exp(v)), rtol=1e-6)


@pytest.mark.parametrize("dtype", [np.float16, np.float64])
def test_other_float_types(dtype):
    rng = np.random.default_rng(5)
    for op in ("LSTM", "GRU", "RNN"):
        for default in (True, False):
            inputs, attrs = _random_case(rng, op, default=default)
            exp = _pyge(_model(op, inputs, attrs), _feeds(inputs))
            cast = [(n, v.astype(dtype) if v is not None and v.dtype == np.float32 else v)
                    for n, v in inputs]
            got = _pyge(_model(op, cast, attrs), _feeds(cast))
            for a, e in zip(got, exp):
                assert a.dtype == dtype
                tol = 2e-2 if dtype == np.float16 else 1e-5
                np.testing.assert_allclose(a.astype(np.float32), e, rtol=tol, atol=tol)


def test_old_opsets():
    rng = np.random.default_rng(9)
    for op, opset, extra in [("LSTM", 1, {"output_sequence": 1}), ("LSTM", 7, {}),
                             ("GRU", 3, {}), ("GRU", 7, {}), ("RNN", 1, {}), ("RNN", 7, {})]:
        inputs, attrs = _random_case(rng, op)
        attrs.pop("linear_before_reset", None) if opset < 3 else None
        exp = _pyge(_model(op, inputs, attrs, 14), _feeds(inputs))
        _close(_pyge(_model(op, inputs, {**attrs, **extra}, opset), _feeds(inputs)), exp)


def test_only_some_outputs():
    rng = np.random.default_rng(4)
    inputs, attrs = _random_case(rng, "LSTM", default=True)
    exp = _pyge(_model("LSTM", inputs, attrs), _feeds(inputs))
    node = helper.make_node("LSTM", [n if v is not None else "" for n, v in inputs],
                            ["", "", "Y_c"], **attrs)
    g_in = [helper.make_tensor_value_info(n, onnx.TensorProto.FLOAT, v.shape)
            for n, v in inputs if v is not None and n != "sequence_lens"]
    g_in += [helper.make_tensor_value_info("sequence_lens", onnx.TensorProto.INT32,
                                           inputs[4][1].shape)] if inputs[4][1] is not None else []
    g = helper.make_graph([node], "t", g_in, [onnx.ValueInfoProto(name="Y_c")])
    m = helper.make_model(g, opset_imports=[helper.make_opsetid("", 14)])
    m.ir_version = 8
    _close(_pyge(m, _feeds(inputs)), exp[2:])


@pytest.mark.parametrize("attrs,match", [
    ({"activations": ["Sigmoid", "Gelu", "Tanh"]}, "'activations': unsupported activation 'Gelu'"),
    ({"activations": ["Sigmoid", "Tanh"]}, "'activations' has 2 entries; expected 3"),
    ({"direction": "sideways"}, "'direction' is 'sideways'"),
    ({"layout": 2}, "'layout' is 2"),
    ({"hidden_size": 3}, "'hidden_size' is 3 but R has hidden size 2"),
])
def test_bad_attributes_are_refused_at_compile_time(attrs, match):
    x = np.zeros((3, 1, 2), np.float32)
    inputs = [("X", x), ("W", np.zeros((1, 8, 2), np.float32)),
              ("R", np.zeros((1, 8, 2), np.float32))]
    m = _model("LSTM", inputs, {"hidden_size": 2, **attrs}, consts=("W", "R"))
    with pytest.raises(GraphError, match=r"node 'LSTM_0' \(LSTM\): attribute " + match):
        compile_reference(load_onnx(m))
