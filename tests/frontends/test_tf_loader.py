"""pyge.load_tf: the TensorFlow front end, reachable from the Python API.

TensorFlow and tf2onnx are an optional extra; tests/cli/test_cli_tf.py runs real .pb files
where they are installed. Here: the error without them, and the front end's own work (default
inputs and outputs, errors, the ONNX it loads) with stand-ins for the two packages.
"""
from __future__ import annotations

import importlib.util
import sys
import types
from types import SimpleNamespace as NS

import pytest
from onnx import TensorProto, helper

import pyge
from pyge.frontends.tf import placeholders, sinks

HAVE_TF = all(importlib.util.find_spec(m) is not None for m in ("tensorflow", "tf2onnx"))


def _graph_def():
    """x (Placeholder) -> Abs -> out; a NoOp and a Const that nothing reads."""
    nodes = [NS(name="x", op="Placeholder", input=[]), NS(name="c", op="Const", input=[]),
             NS(name="abs", op="Abs", input=["x:0"]), NS(name="init", op="NoOp", input=["^c"])]
    return NS(node=nodes, SerializeToString=lambda: b"")


def _onnx_abs():
    g = helper.make_graph([helper.make_node("Abs", ["x:0"], ["abs:0"], name="abs")], "tf_graph",
                          [helper.make_tensor_value_info("x:0", TensorProto.FLOAT, [2])],
                          [helper.make_tensor_value_info("abs:0", TensorProto.FLOAT, [2])])
    return helper.make_model(g, opset_imports=[helper.make_opsetid("", 17)])


@pytest.fixture()
def fake_tf(monkeypatch):
    """Stand-ins for tensorflow and tf2onnx; returns the calls tf2onnx received."""
    calls = []

    def from_graph_def(gd, input_names, output_names, opset):
        calls.append((input_names, output_names, opset))
        if output_names == ["boom:0"]:
            raise ValueError("unsupported op Boom\nmore details")
        return _onnx_abs(), None
    tf = types.ModuleType("tensorflow")
    tf.compat = NS(v1=NS(GraphDef=lambda: pytest.fail("a GraphDef object needs no parsing")))
    t2o = types.ModuleType("tf2onnx")
    t2o.convert = NS(from_graph_def=from_graph_def)
    monkeypatch.setitem(sys.modules, "tensorflow", tf)
    monkeypatch.setitem(sys.modules, "tf2onnx", t2o)
    return calls


def test_load_tf_is_public():
    assert "load_tf" in pyge.__all__ and pyge.load_tf is pyge.frontends.tf.load_tf


def test_default_inputs_and_outputs():
    gd = _graph_def()
    assert placeholders(gd) == ["x:0"]
    assert sinks(gd) == ["abs:0"]          # NoOp and Const are not outputs, x is read


def test_graph_def_to_graph(fake_tf):
    g = pyge.load_tf(_graph_def())
    assert fake_tf == [(["x:0"], ["abs:0"], 17)]
    assert [n.op_type for n in g.nodes] == ["Abs"] and g.metadata["source"] == "<GraphDef>"
    pyge.load_tf(_graph_def(), inputs=["x:0"], outputs=["abs:0"], opset=13)
    assert fake_tf[-1] == (["x:0"], ["abs:0"], 13)


def test_conversion_failure_is_one_line(fake_tf):
    with pytest.raises(pyge.ModelLoadError, match=r"^<GraphDef>: tf2onnx could not convert the graph: "
                                                   r"unsupported op Boom$"):
        pyge.load_tf(_graph_def(), outputs=["boom:0"])


def test_bad_arguments(fake_tf, tmp_path):
    with pytest.raises(pyge.ModelLoadError, match="model file not found"):
        pyge.load_tf(tmp_path / "none.pb")
    with pytest.raises(pyge.ModelLoadError, match="expects a path, bytes or a tf GraphDef, got int"):
        pyge.load_tf(3)
    no_outputs = NS(node=[NS(name="x", op="Placeholder", input=[])], SerializeToString=lambda: b"")
    with pytest.raises(pyge.ModelLoadError, match="no output found"):
        pyge.load_tf(no_outputs)


@pytest.mark.skipif(HAVE_TF, reason="TensorFlow and tf2onnx are installed: the error cannot happen")
def test_without_tensorflow_the_error_says_what_to_install(tmp_path):
    (tmp_path / "m.pb").write_bytes(b"\x0a\x00")
    with pytest.raises(pyge.ModelLoadError, match=r"m\.pb: .*pip install -e '\.\[tf\]'\); missing: t"):
        pyge.load_tf(tmp_path / "m.pb")
    from pyge import cli
    assert cli.main(["run", str(tmp_path / "m.pb")]) == 1
