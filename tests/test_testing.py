"""pyge.testing: random weights for the light models, intermediates as outputs."""
from __future__ import annotations

import os

import numpy as np
import onnx
import pytest

import pyge
from pyge.testing import light_path, random_weights, relative_errors, with_intermediates


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
