"""The nine "light" model-zoo models shipped with the onnx package, run with pyge's reference
interpreter (`pyge.executors.interpreter.run_reference`).

Two references, neither written here:

1. The shipped `light_<name>_output_0.pb`. The light models replace every weight with
   ConstantOfShape(0.02); with all weights equal every class gets the same logit, so the
   softmax output is uniform (0.001) whatever the input. densenet121 ends without a
   softmax, but with these weights the input's influence dies out within its first dense
   blocks, so its output is a constant too. The shipped input is not part of the package, so
   the test feeds zeros and a seeded random image and checks that both reproduce the file. Tolerances: rtol=1e-3, atol=1e-7 (the onnx backend
   runner's defaults).

2. onnxruntime (CPU provider, sequential execution, all graph optimisations on) on a seeded
   random input in [0, 1). Because the final output is insensitive to the input, the models
   are also given up to 24 intermediate node outputs (evenly spaced over the graph) as extra
   graph outputs, which do depend on the input. Activations grow by about 10x per layer with
   these weights (up to ~1e10), so intermediates are compared relative to each tensor's
   largest magnitude: |pyge - ort| <= 1e-4 * max|ort| (float32 sums of up to ~4600 terms in a
   different order); final outputs use rtol=1e-3, atol=1e-7.
"""
from __future__ import annotations

import os

import numpy as np
import onnx
import pytest
from onnx import numpy_helper

from pyge.frontends import load_onnx
from pyge.executors.interpreter import compile_reference
from pyge.kernels.convert import to_numpy, to_torch
from pyge.testing import LIGHT_DIR, LIGHT_MODELS

LIGHT, NAMES = LIGHT_DIR, LIGHT_MODELS
RTOL, ATOL = 1e-3, 1e-7
REL_INTERMEDIATE = 1e-4
N_INTERMEDIATE = 24


def test_all_nine_models_are_found():
    assert len(NAMES) == 9, NAMES


class _Light:
    """One model, loaded once for all its tests: the ModelProto with extra intermediate
    outputs, their names, the pyge graph and its compiled reference runner."""

    def __init__(self, name: str):
        self.name = name
        mp = onnx.load(os.path.join(LIGHT, f"light_{name}.onnx"))
        nodes = [n for n in mp.graph.node if n.op_type not in ("ConstantOfShape", "Dropout")]
        step = max(1, len(nodes) // N_INTERMEDIATE)
        existing = {o.name for o in mp.graph.output}
        self.extra = [n.output[0] for n in nodes[::step][:N_INTERMEDIATE]
                      if n.output[0] not in existing]
        for e in self.extra:
            mp.graph.output.append(onnx.ValueInfoProto(name=e))
        self.proto = mp
        self.final = mp.graph.output[0].name
        self.graph = load_onnx(mp)
        self.runner = compile_reference(self.graph)

    def run(self, x: np.ndarray) -> dict[str, np.ndarray]:
        outs = self.runner([to_torch(x)], {})
        return {v.name: to_numpy(o) for v, o in zip(self.graph.outputs, outs)}

    def input(self, kind: str) -> np.ndarray:
        shape = tuple(self.graph.inputs[0].shape)
        if kind == "zeros":
            return np.zeros(shape, np.float32)
        return np.random.default_rng(0).random(shape, dtype=np.float32)

    def expected(self) -> np.ndarray:
        t = onnx.TensorProto()
        with open(os.path.join(LIGHT, f"light_{self.name}_output_0.pb"), "rb") as f:
            t.ParseFromString(f.read())
        return numpy_helper.to_array(t)


@pytest.fixture(scope="module", params=NAMES)
def light(request):
    # Module-scoped and parametrized: pytest runs every test of one model before loading
    # the next, so only one model's weights are held at a time (vgg19's are ~550 MB).
    return _Light(request.param)


@pytest.mark.parametrize("kind", ["zeros", "random"])
def test_shipped_output(light, kind):
    got = light.run(light.input(kind))[light.final]
    exp = light.expected()
    assert got.shape == exp.shape and got.dtype == exp.dtype
    np.testing.assert_allclose(got, exp, rtol=RTOL, atol=ATOL)


def test_against_onnxruntime(light):
    ort = pytest.importorskip("onnxruntime")
    x = light.input("random")
    so = ort.SessionOptions()
    so.execution_mode = ort.ExecutionMode.ORT_SEQUENTIAL
    so.log_severity_level = 3
    sess = ort.InferenceSession(light.proto.SerializeToString(), so,
                                providers=["CPUExecutionProvider"])
    names = [o.name for o in sess.get_outputs()]
    ref = dict(zip(names, sess.run(None, {light.graph.inputs[0].name: x})))
    got = light.run(x)
    np.testing.assert_allclose(got[light.final], ref[light.final], rtol=RTOL, atol=ATOL)
    assert light.extra, "no intermediate values to compare"
    for nm in light.extra:
        a, b = got[nm], ref[nm]
        assert a.shape == b.shape, f"{nm}: shape {a.shape} != {b.shape}"
        scale = float(np.abs(b).max()) or 1.0
        err = float(np.abs(a.astype(np.float64) - b).max())
        assert err <= REL_INTERMEDIATE * scale, f"{nm}: max error {err:.3g} vs scale {scale:.3g}"
