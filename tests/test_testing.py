"""pyge.testing: random weights for the light models, intermediates as outputs, one-node models."""
from __future__ import annotations

import os

import numpy as np
import onnx
import pytest

import pyge
from pyge.testing import light_path, one_node_model, random_weights, relative_errors, with_intermediates


def _outputs(mp: onnx.ModelProto, seed: int) -> dict:
    m = pyge.compile(with_intermediates(pyge.load_onnx(mp)), "cpu", {"ge.enableSingleStream": "true"})
    rng = np.random.default_rng(seed)
    feeds = {m.plan.values[i].name: rng.standard_normal(m.plan.values[i].shape).astype(np.float32)
             for i in m.plan.inputs}
    return m.run(feeds)


@pytest.mark.parametrize("name", ["squeezenet", "inception_v2"])
def test_random_weights_make_outputs_depend_on_the_input(name):
    path = light_path(name)
    if not os.path.exists(path):
        pytest.skip(f"{path} is not shipped with this onnx version")
    plain, rand = onnx.load(path), random_weights(onnx.load(path))
    assert sum(n.op_type == "ConstantOfShape" for n in rand.graph.node) \
        < sum(n.op_type == "ConstantOfShape" for n in plain.graph.node)
    onnx.checker.check_model(rand)
    final = plain.graph.output[0].name
    a, b = _outputs(plain, 0), _outputs(plain, 1)
    assert relative_errors(a, b)[final] < 1e-5                 # constant fills: same softmax for any input
    ra, rb = _outputs(rand, 0), _outputs(rand, 1)
    assert len(ra) > 10                               # the intermediates came out too
    assert max(relative_errors(ra, rb).values()) > 1e-2


def test_one_node_model_builds_inputs_initializers_and_absent_slots():
    x, w = np.ones((1, 2, 4, 4), np.float32), np.ones((3, 2, 1, 1), np.float32)
    m = one_node_model("Conv", {"x": x, "w": w, "b": None}, {"group": 1}, consts=("w",), name="c0")
    node, g = m.graph.node[0], m.graph
    assert (node.name, list(node.input), list(node.output)) == ("c0", ["x", "w", ""], ["y0"])
    assert [i.name for i in g.input] == ["x"] and [t.name for t in g.initializer] == ["w"]
    assert [(o.domain, o.version) for o in m.opset_import] == [("", 17)] and m.ir_version == 8
    assert one_node_model("Conv", {"x": x, "w": w, "b": None}, trim=True).graph.node[0].input == ["x", "w"]
    y = pyge.compile(pyge.load_onnx(m), "cpu").run({"x": x})["y0"]
    np.testing.assert_allclose(np.asarray(y), np.full((1, 3, 4, 4), 2, np.float32))


def test_one_node_model_custom_domain_and_named_outputs():
    m = one_node_model("Split", {"x": np.zeros(4, np.float32)}, outputs=["a", "", "c"], opset=13,
                       domain="com.example", domain_opset=2, ir_version=9)
    assert list(m.graph.node[0].output) == ["a", "", "c"] and m.graph.node[0].domain == "com.example"
    assert [o.name for o in m.graph.output] == ["a", "c"]
    assert [(o.domain, o.version) for o in m.opset_import] == [("", 13), ("com.example", 2)]
    assert m.ir_version == 9
