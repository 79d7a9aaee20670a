"""A rewrite by a custom graph pass at each stage changes the numbers exactly as the rewrite
should: pyge running the model its pass rewrote agrees with onnxruntime running the rewritten
model, written out by hand here (and differs from the model as it was)."""
from __future__ import annotations

import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper, numpy_helper

import pyge
from pyge import GRAPH_SUCCESS, CustomPassStage, Node, Value

ort = pytest.importorskip("onnxruntime")

pytestmark = pytest.mark.usefixtures("no_custom_passes")

RNG = np.random.default_rng(7)
W1, B1 = RNG.standard_normal((8, 16)).astype(np.float32), RNG.standard_normal(16).astype(np.float32)
W2, B2 = RNG.standard_normal((16, 4)).astype(np.float32), RNG.standard_normal(4).astype(np.float32)
X = RNG.standard_normal((4, 8)).astype(np.float32)


def model(act="Relu", gemm=False, neg=False, last="Sigmoid") -> onnx.ModelProto:
    """x -> [MatMul, Add | Gemm(alpha 0.5)] -> act -> [MatMul, Add | Gemm] -> [Neg] -> last -> y."""
    nodes = []

    def affine(i, src):
        if gemm:
            nodes.append(helper.make_node("Gemm", [src, f"w{i}", f"b{i}"], [f"h{i}"], name=f"mm{i}",
                                          alpha=0.5))
        else:
            nodes.append(helper.make_node("MatMul", [src, f"w{i}"], [f"m{i}"], name=f"mm{i}"))
            nodes.append(helper.make_node("Add", [f"m{i}", f"b{i}"], [f"h{i}"], name=f"add{i}"))
        return f"h{i}"
    h = affine(0, "x")
    attrs = {"alpha": 0.1} if act == "LeakyRelu" else {}
    nodes.append(helper.make_node(act, [h], ["a"], name="act", **attrs))
    h = affine(1, "a")
    if neg:
        nodes.append(helper.make_node("Neg", [h], ["n"], name="neg"))
        h = "n"
    attrs = {"alpha": 0.3, "beta": 0.4} if last == "HardSigmoid" else {}
    nodes.append(helper.make_node(last, [h], ["y"], name="last", **attrs))
    inits = [numpy_helper.from_array(a, n) for a, n in ((W1, "w0"), (B1, "b0"), (W2, "w1"), (B2, "b1"))]
    g = helper.make_graph(nodes, "mlp", [helper.make_tensor_value_info("x", TensorProto.FLOAT, [4, 8])],
                          [helper.make_tensor_value_info("y", TensorProto.FLOAT, None)], inits)
    return helper.make_model(g, opset_imports=[helper.make_opsetid("", 17)])


def onnxruntime_runs(mp: onnx.ModelProto) -> np.ndarray:
    sess = ort.InferenceSession(mp.SerializeToString(), providers=["CPUExecutionProvider"])
    return sess.run(["y"], {"x": X})[0]


# -- the rewrites, one per stage ----------------------------------------------------------

def leaky_relu(graph, ctx):
    """Relu -> LeakyRelu(0.1): a new node whose output has no type yet (inference follows)."""
    relu = graph.find_node("act")
    leaky = Node("LeakyRelu", graph.unique_node_name("act_leaky"), attrs={"alpha": 0.1})
    leaky.set_inputs(relu.inputs)
    leaky.add_output(Value(graph.unique_value_name("a_leaky")))
    graph.add_node(leaky)
    graph.replace_value(relu.outputs[0], leaky.outputs[0])
    graph.remove_node(relu)
    return GRAPH_SUCCESS


def half_gemm(graph, ctx):
    """MatMul + Add (of a constant bias, 2-D input) -> Gemm(alpha=0.5): a fusion that also
    halves the product, so that the numbers show it."""
    for add in graph.nodes:
        if add.op_type != "Add":
            continue
        mm = add.inputs[0].producer
        if mm is None or mm.op_type != "MatMul" or len(add.inputs[0].uses) != 1:
            continue
        a, w = mm.inputs
        if not (w.is_initializer and add.inputs[1].is_initializer and len(a.shape) == 2):
            continue
        gemm = Node("Gemm", graph.unique_node_name(f"{mm.name}_gemm"), attrs={"alpha": 0.5})
        gemm.set_inputs([a, w, add.inputs[1]])
        gemm.add_output(Value(graph.unique_value_name(f"{mm.name}_gemm_out")))
        graph.add_node(gemm)
        graph.replace_value(add.outputs[0], gemm.outputs[0])
        graph.remove_node(add)
        graph.remove_node(mm)
    return GRAPH_SUCCESS


def negate_logits(graph, ctx):
    """Insert Neg before the last node: y = last(-h)."""
    last = graph.find_node("last")
    h = last.inputs[0]
    neg = Node("Neg", graph.unique_node_name("neg"))
    neg.append_input(h)
    neg.add_output(Value(graph.unique_value_name("n"), h.dtype, h.shape))
    graph.add_node(neg)
    graph.replace_value(h, neg.outputs[0])           # every reader of h but Neg itself
    return GRAPH_SUCCESS


def hard_sigmoid(graph, ctx):
    """Sigmoid -> HardSigmoid(0.3, 0.4), after engine assignment (the new node gets one)."""
    sig = graph.find_node("last")
    hs = Node("HardSigmoid", graph.unique_node_name("last_hard"), attrs={"alpha": 0.3, "beta": 0.4})
    hs.set_inputs(sig.inputs)
    hs.add_output(Value(graph.unique_value_name("y_hard")))
    graph.add_node(hs)
    graph.replace_value(sig.outputs[0], hs.outputs[0])
    graph.remove_node(sig)
    return GRAPH_SUCCESS


REWRITES = {
    CustomPassStage.BEFORE_INFER_SHAPE: (leaky_relu, {"act": "LeakyRelu"}),
    CustomPassStage.AFTER_INFER_SHAPE: (half_gemm, {"gemm": True}),
    CustomPassStage.AFTER_BUILTIN_FUSION_PASS: (negate_logits, {"neg": True}),
    CustomPassStage.AFTER_ORIGIN_GRAPH_OPTIMIZE: (hard_sigmoid, {"last": "HardSigmoid"}),
}


def _pyge_runs(**options) -> tuple[np.ndarray, pyge.CompiledModel]:
    m = pyge.compile(pyge.load_onnx(model()), options=options or None)
    return m.run({"x": X})["y"], m


def test_without_passes_pyge_and_onnxruntime_agree():
    got, _ = _pyge_runs()
    np.testing.assert_allclose(got, onnxruntime_runs(model()), rtol=1e-5, atol=1e-6)


@pytest.mark.parametrize("stage", list(REWRITES), ids=lambda s: s.name)
def test_a_rewrite_at_each_stage_gives_the_rewritten_models_numbers(stage):
    fn, variant = REWRITES[stage]
    pyge.register_custom_pass(fn.__name__).custom_pass_fn(fn).stage(stage)
    got, m = _pyge_runs()
    want = onnxruntime_runs(model(**variant))
    np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-6)
    assert not np.allclose(want, onnxruntime_runs(model()), atol=1e-3)   # the rewrite shows
    assert m.graph.outputs[0].name == "y"                                 # the output kept its name
    assert m.graph.outputs[0].dtype == "float32" and m.graph.outputs[0].shape == (4, 4)
    m.verify()


def test_the_four_rewrites_together_in_stage_order():
    for stage, (fn, _) in reversed(list(REWRITES.items())):   # registered last stage first
        pyge.register_custom_pass(fn.__name__).custom_pass_fn(fn).stage(stage)
    got, m = _pyge_runs(**{"ge.enableSingleStream": "false", "ge.streamMaxParallelNum": "2"})
    want = onnxruntime_runs(model(act="LeakyRelu", gemm=True, neg=True, last="HardSigmoid"))
    np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-6)
    assert sorted(n.op_type for n in m.graph.nodes) == ["Gemm", "Gemm", "HardSigmoid", "LeakyRelu", "Neg"]
    assert all(n.engine for n in m.graph.nodes)
