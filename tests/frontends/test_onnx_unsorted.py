"""Unsorted ONNX graphs load (onnxruntime runs them); a real cycle names its nodes (issue 20
item 10)."""
from __future__ import annotations

import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper

import pyge


def _vi(name, shape=(2, 3), t=TensorProto.FLOAT):
    return helper.make_tensor_value_info(name, t, shape)


def _model(nodes, inputs, outputs, name="g"):
    return helper.make_model(helper.make_graph(nodes, name, inputs, outputs),
                             opset_imports=[helper.make_opsetid("", 17)])


def _unsorted():
    """y = Relu(Abs(x)) + Neg(x), listed consumers first."""
    return _model([helper.make_node("Add", ["r", "n"], ["y"], name="Last"),
                   helper.make_node("Relu", ["a"], ["r"], name="Second"),
                   helper.make_node("Abs", ["x"], ["a"], name="First"),
                   helper.make_node("Neg", ["x"], ["n"], name="Other")],
                  [_vi("x")], [_vi("y")])


def test_unsorted_graph_is_sorted_and_runs_like_onnxruntime():
    ort = pytest.importorskip("onnxruntime")
    mp = _unsorted()
    g = pyge.load_onnx(mp)
    assert [n.name for n in g.nodes] == ["First", "Second", "Other", "Last"]
    x = np.random.default_rng(0).standard_normal((2, 3)).astype(np.float32)
    (want,) = ort.InferenceSession(mp.SerializeToString(), providers=["CPUExecutionProvider"]).run(None, {"x": x})
    np.testing.assert_allclose(pyge.compile(g).run({"x": x})["y"], want, rtol=1e-6)


def test_unsorted_file_compiles_by_path(tmp_path):
    p = tmp_path / "unsorted.onnx"
    onnx.save(_unsorted(), p)
    x = np.ones((2, 3), np.float32)
    np.testing.assert_array_equal(pyge.compile(p).run({"x": x})["y"], np.zeros((2, 3), np.float32))


def test_subgraph_may_read_a_value_listed_after_its_node():
    then_g = helper.make_graph([helper.make_node("Identity", ["late"], ["t"], name="then_id")], "then", [], [_vi("t")])
    else_g = helper.make_graph([helper.make_node("Neg", ["late"], ["e"], name="else_neg")], "else", [], [_vi("e")])
    mp = _model([helper.make_node("If", ["c"], ["y"], name="If_1", then_branch=then_g, else_branch=else_g),
                 helper.make_node("Abs", ["x"], ["late"], name="Abs_1")],
                [_vi("x"), _vi("c", (), TensorProto.BOOL)], [_vi("y")])
    g = pyge.load_onnx(mp)
    assert [n.name for n in g.nodes] == ["Abs_1", "If_1"]
    x = np.array([[-1, 2, -3], [4, -5, 6]], np.float32)
    m = pyge.compile(g)
    np.testing.assert_array_equal(m.run({"x": x, "c": np.array(True)})["y"], np.abs(x))
    np.testing.assert_array_equal(m.run({"x": x, "c": np.array(False)})["y"], -np.abs(x))


def test_cycle_is_a_graph_cycle_error_naming_its_nodes(tmp_path):
    mp = _model([helper.make_node("Relu", ["x"], ["p"], name="Before"),
                 helper.make_node("Add", ["p", "b"], ["a"], name="A"),
                 helper.make_node("Abs", ["a"], ["b"], name="B"),
                 helper.make_node("Neg", ["b"], ["y"], name="After")],
                [_vi("x")], [_vi("y")])
    p = tmp_path / "cyc.onnx"
    onnx.save(mp, p)
    for src in (mp, p):
        with pytest.raises(pyge.GraphCycleError) as info:
            pyge.load_onnx(src)
        assert isinstance(info.value, pyge.ModelLoadError)      # as every bad model file
        assert sorted(info.value.nodes) == ["A", "B"]
        msg = str(info.value)
        assert "'A' (Add)" in msg and "'B' (Abs)" in msg and "Before" not in msg and "After" not in msg
        assert "\n" not in msg
    with pytest.raises(pyge.GraphCycleError, match="cyc.onnx"):
        pyge.compile(p)


def test_node_reading_its_own_output_is_a_cycle():
    mp = _model([helper.make_node("Add", ["x", "y"], ["y"], name="Loop")], [_vi("x")], [_vi("y")])
    with pytest.raises(pyge.GraphCycleError, match="'Loop' \\(Add\\)") as info:
        pyge.load_onnx(mp)
    assert info.value.nodes == ["Loop"]
