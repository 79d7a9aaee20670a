"""Fixtures for the command-line tests: a small two-branch ONNX model on disk."""
from __future__ import annotations

import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper, numpy_helper


def two_branch_model() -> onnx.ModelProto:
    """y = Abs(x) + x @ w: two independent branches joined by Add."""
    x = helper.make_tensor_value_info("x", TensorProto.FLOAT, [2, 4])
    y = helper.make_tensor_value_info("y", TensorProto.FLOAT, [2, 4])
    w = numpy_helper.from_array(np.arange(16, dtype=np.float32).reshape(4, 4) / 8, "w")
    nodes = [helper.make_node("Abs", ["x"], ["a"], name="Abs_1"),
             helper.make_node("MatMul", ["x", "w"], ["m"], name="MatMul_1"),
             helper.make_node("Add", ["a", "m"], ["y"], name="Add_1")]
    g = helper.make_graph(nodes, "two_branch", [x], [y], [w])
    return helper.make_model(g, opset_imports=[helper.make_opsetid("", 17)])


@pytest.fixture()
def onnx_file(tmp_path):
    p = tmp_path / "two_branch.onnx"
    onnx.save(two_branch_model(), p)
    return p
