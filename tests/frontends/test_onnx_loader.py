"""load_onnx: good models load, bad input gets a specific one-line error naming the culprit."""
from __future__ import annotations

import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper, numpy_helper

import pyge
from pyge.passes.graph.infer_types import infer_types
from pyge.frontends.onnx_proto import SHAPE_DATA_MAX, graph_to_model


def _model(op="Relu", opset=17):
    x = helper.make_tensor_value_info("x", TensorProto.FLOAT, [2, 3])
    y = helper.make_tensor_value_info("y", TensorProto.FLOAT, None)
    node = helper.make_node(op, ["x"], ["y"], name="n0")
    return helper.make_model(helper.make_graph([node], "g", [x], [y]),
                             opset_imports=[helper.make_opsetid("", opset)])


def test_load_from_proto_path_and_bytes(tmp_path):
    mp = _model()
    p = tmp_path / "m.onnx"
    onnx.save(mp, p)
    for src in (mp, p, str(p), mp.SerializeToString()):
        g = pyge.load_onnx(src)
        assert [n.name for n in g.nodes] == ["n0"]
        assert g.outputs[0].shape == (2, 3)  # from shape inference


def test_missing_file(tmp_path):
    with pytest.raises(pyge.ModelLoadError, match="not found"):
        pyge.load_onnx(tmp_path / "nope.onnx")


def test_corrupt_file(tmp_path):
    p = tmp_path / "bad.onnx"
    p.write_bytes(b"\x08\x07garbage\xff\xff\xff")
    with pytest.raises(pyge.ModelLoadError, match="bad.onnx"):
        pyge.load_onnx(p)


def test_empty_file(tmp_path):
    p = tmp_path / "empty.onnx"
    p.write_bytes(b"")
    with pytest.raises(pyge.ModelLoadError, match="empty"):
        pyge.load_onnx(p)


def test_external_data(tmp_path):
    w = np.arange(12, dtype=np.float32).reshape(3, 4)
    x = helper.make_tensor_value_info("x", TensorProto.FLOAT, [2, 3])
    y = helper.make_tensor_value_info("y", TensorProto.FLOAT, None)
    g = helper.make_graph([helper.make_node("MatMul", ["x", "w"], ["y"], name="mm")], "g", [x], [y],
                          initializer=[numpy_helper.from_array(w, "w")])
    mp = helper.make_model(g, opset_imports=[helper.make_opsetid("", 17)])
    p = tmp_path / "ext.onnx"
    onnx.save(mp, p, save_as_external_data=True, all_tensors_to_one_file=True, location="w.bin",
              size_threshold=0)
    assert (tmp_path / "w.bin").exists()
    gg = pyge.load_onnx(p)
    np.testing.assert_array_equal(gg.initializers["w"].const, w)
    (tmp_path / "w.bin").unlink()
    with pytest.raises(pyge.ModelLoadError, match="external data"):
        pyge.load_onnx(p)


def test_undefined_input_is_named():
    mp = _model()
    mp.graph.node[0].input[0] = "ghost"
    with pytest.raises(pyge.ModelLoadError, match="'ghost'"):
        pyge.load_onnx(mp)


def test_unsupported_ops_listed_at_compile_time():
    mp = _model()
    mp.graph.node.append(helper.make_node("FancyOp", ["y"], ["z"], name="f1", domain="acme"))
    mp.graph.node.append(helper.make_node("OtherOp", ["z"], ["w"], name="o1", domain="acme"))
    mp.graph.output[0].name = "w"
    g = pyge.load_onnx(mp)
    with pytest.raises(pyge.UnsupportedOperatorError) as ei:
        pyge.compile(g)
    msg = str(ei.value)
    assert "acme.FancyOp (node 'f1')" in msg and "acme.OtherOp (node 'o1')" in msg
    assert "\n" not in msg


def test_round_trip_to_onnx_keeps_structure():
    g = pyge.load_onnx(_model())
    mp = graph_to_model(g)
    onnx.checker.check_model(mp)
    assert [n.name for n in mp.graph.node] == ["n0"]


def _big_weight_model() -> onnx.ModelProto:
    """MatMul with a 96x128 weight (over the shape-data limit), then Reshape to a target
    held in a small int64 initializer: inference needs the second's data, not the first's."""
    rng = np.random.default_rng(0)
    w = rng.standard_normal((96, 128)).astype(np.float32)
    nodes = [helper.make_node("MatMul", ["x", "w"], ["h"], name="mm"),
             helper.make_node("Relu", ["h"], ["r"], name="relu"),
             helper.make_node("Reshape", ["r", "target"], ["y"], name="rs")]
    g = helper.make_graph(nodes, "big", [helper.make_tensor_value_info("x", TensorProto.FLOAT, [2, 96])],
                          [helper.make_tensor_value_info("y", TensorProto.FLOAT, None)],
                          initializer=[numpy_helper.from_array(w, "w"),
                                       numpy_helper.from_array(np.array([4, 8, -1], np.int64), "target")])
    return helper.make_model(g, opset_imports=[helper.make_opsetid("", 17)])


def test_inference_skips_large_weights_but_keeps_them():
    mp = _big_weight_model()
    assert 96 * 128 > SHAPE_DATA_MAX
    before = mp.SerializeToString()
    g = pyge.load_onnx(mp)
    assert mp.SerializeToString() == before                   # the caller's proto is untouched
    np.testing.assert_array_equal(g.initializers["w"].const, numpy_helper.to_array(mp.graph.initializer[0]))
    shapes = {o.name: o.shape for n in g.nodes for o in n.outputs}
    assert shapes["h"] == (2, 128) and shapes["y"] == (4, 8, 8)   # the Reshape target was read
    m = pyge.compile(g)
    x = np.random.default_rng(1).standard_normal((2, 96)).astype(np.float32)
    w = numpy_helper.to_array(mp.graph.initializer[0])
    np.testing.assert_allclose(m.run({"x": x})["y"], np.maximum(x @ w, 0).reshape(4, 8, 8), rtol=1e-5, atol=1e-5)


def test_infer_types_without_weight_data():
    """Re-inference after passes writes large weights as type and dims only."""
    g = pyge.load_onnx(_big_weight_model())
    slim = graph_to_model(g, weights="shapes")
    tensors = {t.name: t for t in slim.graph.initializer}
    assert not tensors["w"].raw_data and list(tensors["w"].dims) == [96, 128]
    assert tensors["target"].raw_data                                  # shape data kept
    for n in g.nodes:                                                  # forget, then re-infer
        for o in n.outputs:
            o.shape = None
    infer_types(g)
    assert {o.name: o.shape for n in g.nodes for o in n.outputs}["y"] == (4, 8, 8)


def test_weights_are_held_once():
    """The executor's constants share memory with the graph's initializers (a read-only array
    from onnx's to_array would make torch copy every weight and keep both)."""
    m = pyge.compile(pyge.load_onnx(_big_weight_model()), "cpu")
    consts = m.executor.consts
    assert consts
    for vi, t in consts.items():
        arr = m.graph.initializers[m.plan.values[vi].name].const
        assert arr.flags.writeable and t.data_ptr() == arr.ctypes.data


def test_unknown_element_type_is_named():
    mp = _model()
    mp.graph.input[0].type.tensor_type.elem_type = 999    # no ONNX version defines it
    with pytest.raises(pyge.ModelLoadError, match=r"value 'x' has an unknown ONNX element type 999"):
        pyge.load_onnx(mp)


def _with_constant(tensor: onnx.TensorProto) -> onnx.ModelProto:
    mp = _model(op="Add")
    mp.graph.node[0].input.append("c")
    mp.graph.node.insert(0, helper.make_node("Constant", [], ["c"], name="k", value=tensor))
    return mp


@pytest.mark.parametrize("corrupt", ["dtype", "size"])
def test_corrupt_tensor_attribute_names_node_and_attribute(corrupt):
    t = numpy_helper.from_array(np.ones((2, 3), np.float32))
    if corrupt == "dtype":
        t.data_type = 999
    else:
        t.raw_data = b"\0" * 5
    with pytest.raises(pyge.ModelLoadError, match=r"node 'k' \(Constant\): attribute 'value' cannot be read"):
        pyge.load_onnx(_with_constant(t))


def test_corrupt_sparse_initializer_is_named():
    mp = _model(op="Add")
    mp.graph.node[0].input.append("w")
    mp.graph.sparse_initializer.append(helper.make_sparse_tensor(
        numpy_helper.from_array(np.ones(2, np.float32), "w"),
        numpy_helper.from_array(np.array([0, 99], np.int64), "i"), [2, 3]))     # index 99 of 6
    with pytest.raises(pyge.ModelLoadError, match="sparse initializer 'w' cannot be read"):
        pyge.load_onnx(mp)


@pytest.mark.parametrize("case", ["two_nodes", "node_and_input", "node_and_initializer",
                                  "one_node_twice", "two_inputs", "two_initializers", "subgraph"])
def test_value_defined_twice_is_refused(case):
    """Not SSA (onnx.checker refuses it): which definition a reader got would depend on load order."""
    x = helper.make_tensor_value_info("x", TensorProto.FLOAT, [2, 3])
    y = helper.make_tensor_value_info("y", TensorProto.FLOAT, None)
    w = numpy_helper.from_array(np.ones((2, 3), np.float32), "w")
    inputs, inits = [x], []
    nodes = [helper.make_node("Abs", ["x"], ["y"], name="a")]
    if case == "two_nodes":
        nodes.append(helper.make_node("Neg", ["x"], ["y"], name="b"))
    elif case == "node_and_input":
        nodes.insert(0, helper.make_node("Neg", ["x"], ["x"], name="b"))
    elif case == "node_and_initializer":
        inits = [w]
        nodes.insert(0, helper.make_node("Neg", ["x"], ["w"], name="b"))
    elif case == "one_node_twice":
        nodes = [helper.make_node("Split", ["x"], ["y", "y"], name="b", axis=0)]
    elif case == "two_inputs":
        inputs = [x, x]
    elif case == "two_initializers":
        inits = [w, numpy_helper.from_array(np.zeros((2, 3), np.float32), "w")]
        nodes = [helper.make_node("Add", ["x", "w"], ["y"], name="a")]
    elif case == "subgraph":
        branch = helper.make_graph([helper.make_node("Abs", ["x"], ["t"], name="t1"),
                                    helper.make_node("Neg", ["x"], ["t"], name="t2")], "then", [],
                                   [helper.make_tensor_value_info("t", TensorProto.FLOAT, [2, 3])])
        inputs = [x, helper.make_tensor_value_info("c", TensorProto.BOOL, [])]
        nodes = [helper.make_node("If", ["c"], ["y"], name="if", then_branch=branch, else_branch=branch)]
    mp = helper.make_model(helper.make_graph(nodes, "g", inputs, [y], initializer=inits),
                           opset_imports=[helper.make_opsetid("", 17)])
    with pytest.raises(pyge.ModelLoadError, match="is defined twice") as ei:
        pyge.load_onnx(mp)
    assert "\n" not in str(ei.value)


def test_opset_warning_only_outside_the_tested_range(caplog):
    from onnx import TensorProto as TP, helper

    def model(opset):
        g = helper.make_graph([helper.make_node("Relu", ["x"], ["y"])], "g",
                              [helper.make_tensor_value_info("x", TP.FLOAT, [2])],
                              [helper.make_tensor_value_info("y", TP.FLOAT, [2])])
        return helper.make_model(g, opset_imports=[helper.make_opsetid("", opset)])
    with caplog.at_level("WARNING"):
        pyge.load_onnx(model(28))
    assert "tested on opsets" not in caplog.text
    with caplog.at_level("WARNING"):
        pyge.load_onnx(model(29))
    assert "uses opset 29; pyge is tested on opsets 7..28" in caplog.text
