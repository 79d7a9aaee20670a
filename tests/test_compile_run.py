"""compile + run: feeds checked, errors specific, the user's graph untouched by compile."""
from __future__ import annotations

import numpy as np
import pytest

import pyge


def _graph():
    b = pyge.GraphBuilder("demo")
    x = b.input("input", "float32", (2, 3))
    a = b.op("Abs", [x], name="Abs_1")
    r = b.op("Relu", [x], name="Relu_1")
    b.output(b.op("Add", [a, r], name="Add_1"), "output")
    return b.build()


def test_run_returns_numpy_by_name():
    m = pyge.compile(_graph())
    x = np.array([[-1, 2, -3], [4, -5, 6]], np.float32)
    out = m.run({"input": x})
    np.testing.assert_array_equal(out["output"], np.abs(x) + np.maximum(x, 0))


@pytest.mark.parametrize("feeds, match", [
    ({}, "missing feed for input 'input'"),
    ({"input": np.zeros((2, 3), np.float32), "extra": 1}, "unexpected feed 'extra'"),
    ({"input": np.zeros((2, 4), np.float32)}, r"feed 'input' has shape \[2, 4\], expected \[2,3\]"),
    ({"input": np.zeros((2, 3), np.float64)}, "feed 'input' has dtype float64, expected float32"),
])
def test_bad_feeds(feeds, match):
    m = pyge.compile(_graph())
    with pytest.raises(pyge.InputError, match=match):
        m.run(feeds)


def test_compile_does_not_touch_the_users_graph():
    g = _graph()
    before = pyge.format_graph(g)
    pyge.compile(g)
    assert pyge.format_graph(g) == before
    assert all(n.stream_id == -1 for n in g.nodes)


@pytest.mark.parametrize("opts, match", [
    ({"ge.nope": "1"}, "unknown option 'ge.nope'"),
    ({"ge.enableSingleStream": "maybe"}, "ge.enableSingleStream.*accepted values: true, false"),
    ({"ge.autoMultistreamParallelMode": "LoadBalance:99"}, "ge.autoMultistreamParallelMode"),
    ({"ge.streamMaxParallelNum": "x:y"}, "ge.streamMaxParallelNum"),
])
def test_bad_options(opts, match):
    with pytest.raises(pyge.OptionError, match=match):
        pyge.compile(_graph(), options=opts)


def test_bad_device():
    with pytest.raises(pyge.OptionError, match="unknown device 'tpu'"):
        pyge.compile(_graph(), device="tpu")


def test_not_a_graph():
    with pytest.raises(pyge.GraphError, match="expects a pyge.Graph"):
        pyge.compile("model.onnx")


def _onnx_model(nodes, inputs, outputs, inits=()):
    from onnx import helper
    g = helper.make_graph(nodes, "m", inputs, outputs, initializer=list(inits))
    return pyge.load_onnx(helper.make_model(g, opset_imports=[helper.make_opsetid("", 17)]))


def _write_into_outputs_then_rerun(model, feeds):
    """Writes into every returned array; the next run must give the first run's outputs."""
    first = model.run(feeds)
    want = {k: [np.array(e) for e in v] if isinstance(v, list) else np.array(v) for k, v in first.items()}
    for v in first.values():
        for a in (v if isinstance(v, list) else [v]):
            a[...] = -99
    again = model.run(feeds)
    for k, v in want.items():
        for a, b in zip(v if isinstance(v, list) else [v], again[k] if isinstance(v, list) else [again[k]]):
            np.testing.assert_array_equal(b, a, err_msg=k)


@pytest.mark.parametrize("single", ["true", "false"])
def test_sequence_output_elements_share_no_memory_with_feeds_or_weights(single):
    from onnx import TensorProto as TP, helper, numpy_helper
    seq = helper.make_sequence_type_proto(helper.make_tensor_type_proto(TP.FLOAT, [2, 3]))
    g = _onnx_model([helper.make_node("SequenceConstruct", ["x", "W"], ["s"], name="seq"),
                     helper.make_node("Add", ["x", "W"], ["z"], name="add")],
                    [helper.make_tensor_value_info("x", TP.FLOAT, [2, 3])],
                    [helper.make_value_info("s", seq), helper.make_tensor_value_info("z", TP.FLOAT, [2, 3])],
                    [numpy_helper.from_array(np.full((2, 3), 7, np.float32), "W")])
    m = pyge.compile(g, "cpu", {"ge.enableSingleStream": single, "ge.streamMaxParallelNum": "2"})
    x = np.ones((2, 3), np.float32)
    _write_into_outputs_then_rerun(m, {"x": x})
    assert (x == 1).all()                       # the caller's feed is untouched too


def _if_model(then_nodes, then_inits=()):
    from onnx import TensorProto as TP, helper
    then_g = helper.make_graph(then_nodes, "then", [], [helper.make_tensor_value_info("t", TP.FLOAT, [2, 3])],
                               initializer=list(then_inits))
    else_g = helper.make_graph([helper.make_node("Identity", ["x"], ["e"])], "else", [],
                               [helper.make_tensor_value_info("e", TP.FLOAT, [2, 3])])
    return _onnx_model([helper.make_node("If", ["c"], ["y"], name="if", then_branch=then_g, else_branch=else_g)],
                       [helper.make_tensor_value_info("x", TP.FLOAT, [2, 3]),
                        helper.make_tensor_value_info("c", TP.BOOL, [])],
                       [helper.make_tensor_value_info("y", TP.FLOAT, [2, 3])])


def test_outputs_kept_by_kernels_are_handed_over_as_copies():
    """A Constant node's value (not folded: fusion off, or inside an If branch), a static
    ConstantOfShape and an If branch's initializer are tensors the kernel returns on every
    run; the caller writing into that output changed every later run's result."""
    from onnx import TensorProto as TP, helper, numpy_helper
    feeds = {"x": np.ones((2, 3), np.float32)}
    const = numpy_helper.from_array(np.arange(6, dtype=np.float32).reshape(2, 3))
    g = _onnx_model([helper.make_node("Constant", [], ["k"], value=const),
                     helper.make_node("ConstantOfShape", ["shp"], ["f"],
                                      value=numpy_helper.from_array(np.array([2.0], np.float32))),
                     helper.make_node("Identity", ["k"], ["y"]), helper.make_node("Reshape", ["f", "shp"], ["r"]),
                     helper.make_node("Add", ["x", "k"], ["z"]), helper.make_node("Add", ["x", "f"], ["w"])],
                    [helper.make_tensor_value_info("x", TP.FLOAT, [2, 3])],
                    [helper.make_tensor_value_info(n, TP.FLOAT, [2, 3]) for n in "yrzw"],
                    [numpy_helper.from_array(np.array([2, 3], np.int64), "shp")])
    _write_into_outputs_then_rerun(pyge.compile(g, "cpu", {"ge.exec.enableFusion": "false"}), feeds)
    c = np.array(True)
    _write_into_outputs_then_rerun(pyge.compile(_if_model([helper.make_node("Constant", [], ["t"], value=const)])),
                                   {**feeds, "c": c})
    _write_into_outputs_then_rerun(pyge.compile(_if_model([helper.make_node("Identity", ["Wt"], ["t"])],
                                                          [numpy_helper.from_array(np.full((2, 3), 3, np.float32), "Wt")])),
                                   {**feeds, "c": c})


def test_string_outputs_are_handed_over_as_copies():
    """A string Constant (not folded) and a string initializer returned through Identity:
    numpy object arrays that every run returns; writing into one changed later runs."""
    from onnx import TensorProto as TP, helper, numpy_helper
    words = numpy_helper.from_array(np.array(["a", "b"], dtype=object), "words")
    g = _onnx_model([helper.make_node("Constant", [], ["k"], value_strings=["x", "y"]),
                     helper.make_node("Identity", ["k"], ["s"]), helper.make_node("Identity", ["words"], ["t"])],
                    [helper.make_tensor_value_info("x", TP.FLOAT, [1])],
                    [helper.make_tensor_value_info(n, TP.STRING, [2]) for n in "st"], [words])
    _write_into_outputs_then_rerun(pyge.compile(g, "cpu", {"ge.exec.enableFusion": "false"}),
                                   {"x": np.ones(1, np.float32)})
