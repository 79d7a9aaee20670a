"""The infer_types pass: ONNX inference fills in what a hand-built graph leaves unknown."""
from __future__ import annotations

import numpy as np

import pyge
from pyge.passes.graph.infer_types import infer_types


def _untyped():
    b = pyge.GraphBuilder("g")
    x = b.input("x", "float32", (2, 3))
    y = b.op("Transpose", [b.op("Relu", [x], name="r")], name="t", perm=[1, 0])
    b.output(y)
    g = b.build()
    for n in g.nodes:
        for o in n.outputs:
            o.dtype = o.shape = None
    return g


def test_unknown_types_and_shapes_are_filled_in():
    g = _untyped()
    assert infer_types(g) == 2
    assert [(o.dtype, o.shape) for n in g.nodes for o in n.outputs] == \
        [("float32", (2, 3)), ("float32", (3, 2))]
    assert infer_types(g) == 0                          # nothing left to learn


def test_best_effort_on_operators_onnx_cannot_infer():
    b = pyge.GraphBuilder("g")
    x = b.input("x", "float32", (4,))
    b.output(b.op("MulAdd", [x, b.initializer("s", np.ones(4, "float32")),
                             b.initializer("t", np.zeros(4, "float32"))], name="ma", domain="pyge"))
    g = b.build()
    g.nodes[0].outputs[0].dtype = None
    assert infer_types(g) == 0 and g.nodes[0].outputs[0].dtype is None


def test_compile_types_a_hand_built_graph():
    m = pyge.compile(_untyped())
    assert [(v.dtype, v.shape) for v in m.plan.values if v.name.startswith("t")][-1] == ("float32", (3, 2))
