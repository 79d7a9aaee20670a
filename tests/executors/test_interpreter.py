"""The reference interpreter (executors/interpreter.py) and how control-flow kernels get
their body runner from the executor layer rather than importing it."""
from __future__ import annotations

import numpy as np
import pytest
from onnx import TensorProto as T
from onnx import helper as h
from onnx.reference import ReferenceEvaluator

import pyge
from pyge.errors import ExecutionError
from pyge.executors.interpreter import run_reference
from pyge.frontends import load_onnx
from pyge.kernels.build import build_kernel


def _if_in_loop():
    """y = Loop 3 times { s = If(s > 2) then s * 2 else s + 1 }: a body inside a body."""
    then = h.make_graph([h.make_node("Mul", ["s_in", "two"], ["t"])], "then", [],
                        [h.make_tensor_value_info("t", T.FLOAT, [1])])
    other = h.make_graph([h.make_node("Add", ["s_in", "one"], ["e"])], "else", [],
                         [h.make_tensor_value_info("e", T.FLOAT, [1])])
    body = h.make_graph(
        [h.make_node("Greater", ["s_in", "two"], ["big"]),
         h.make_node("If", ["big"], ["s_out"], then_branch=then, else_branch=other),
         h.make_node("Identity", ["c_in"], ["c_out"])],
        "body",
        [h.make_tensor_value_info("i", T.INT64, []), h.make_tensor_value_info("c_in", T.BOOL, []),
         h.make_tensor_value_info("s_in", T.FLOAT, [1])],
        [h.make_tensor_value_info("c_out", T.BOOL, []), h.make_tensor_value_info("s_out", T.FLOAT, [1])])
    g = h.make_graph(
        [h.make_node("Loop", ["n", "go", "s0"], ["y"], body=body)], "m",
        [h.make_tensor_value_info("s0", T.FLOAT, [1])], [h.make_tensor_value_info("y", T.FLOAT, [1])],
        initializer=[h.make_tensor("n", T.INT64, [], [3]), h.make_tensor("go", T.BOOL, [], [True]),
                     h.make_tensor("one", T.FLOAT, [], [1.0]),
                     h.make_tensor("two", T.FLOAT, [], [2.0])])
    return h.make_model(g, opset_imports=[h.make_opsetid("", 17)])


def test_nested_bodies_run_in_the_interpreter():
    m = _if_in_loop()
    feeds = {"s0": np.array([1.0], np.float32)}
    expected = ReferenceEvaluator(m).run(None, feeds)[0]   # 1 -> 2 -> 3 -> 6
    np.testing.assert_array_equal(run_reference(load_onnx(m), feeds)["y"], expected)


def test_executors_hand_bodies_to_the_interpreter():
    m = _if_in_loop()
    feeds = {"s0": np.array([1.0], np.float32)}
    expected = ReferenceEvaluator(m).run(None, feeds)[0]
    model = pyge.compile(load_onnx(m), device="cpu")
    np.testing.assert_array_equal(model.run(feeds)["y"], expected)


def test_a_body_kernel_built_without_a_subgraph_compiler_names_the_node():
    g = load_onnx(_if_in_loop())
    loop = next(n for n in g.nodes if n.op_type == "Loop")
    with pytest.raises(ExecutionError, match=r"node '.*' \(Loop\), preparing its kernel.*"
                                             r"no subgraph compiler.*'body'"):
        build_kernel(loop, "cpu")
