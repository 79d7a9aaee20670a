"""The infer_types pass: ONNX inference fills in what a hand-built graph leaves unknown, and
what it refuses is an error naming the node."""
from __future__ import annotations

import numpy as np
import onnx
import pytest
from onnx import TensorProto as T
from onnx import helper as h
from onnx import numpy_helper

import pyge
from pyge.errors import GraphTypeError
from pyge.passes.graph.infer_types import infer_types, refusals


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


# -- what inference refuses is an error naming the node (issue 20 item 9) --------------------

F, I64 = T.FLOAT, T.INT64


def _vi(name, t=F, shape=None):
    return h.make_tensor_value_info(name, t, shape)


def _model(nodes, inputs, outputs, inits=(), vinfo=(), opset=17):
    g = h.make_graph(nodes, "g", inputs, outputs, list(inits), value_info=list(vinfo))
    return h.make_model(g, opset_imports=[h.make_opsetid("", opset)])


def _one(op, ins, in_vis, out=None, inits=(), opset=17, **attrs):
    return _model([h.make_node(op, ins, ["z"], name="bad", **attrs)], in_vis, [out or _vi("z")], inits,
                  opset=opset)


# Each refused by onnxruntime when it loads the model, and by onnx's strict inference;
# pyge compiled every one before (and failed at run time, or computed something).
REFUSED = {
    "add_float_int64": (_one("Add", ["x", "y"], [_vi("x", F, [2]), _vi("y", I64, [2])]), "inconsistent type"),
    "relu_of_strings": (_one("Relu", ["x"], [_vi("x", T.STRING, [2])], _vi("z", T.STRING)), "unsupported type"),
    "where_float_condition": (_one("Where", ["c", "x", "x"], [_vi("c", F, [2]), _vi("x", F, [2])]), "unsupported type"),
    "add_one_input": (_one("Add", ["x"], [_vi("x", F, [2])]), "input size 1"),
    "broadcast": (_one("Add", ["x", "y"], [_vi("x", F, [2]), _vi("y", F, [3])]), "Incompatible dimensions"),
    "matmul_dims": (_one("MatMul", ["x", "y"], [_vi("x", F, [2, 3]), _vi("y", F, [4, 5])]), "matrix multiplication"),
    "output_type": (_one("Cast", ["x"], [_vi("x", F, [2])], _vi("z", F, [2]), to=I64), "elem type differs"),
    "gather_axis": (_one("Gather", ["x", "i"], [_vi("x", F, [2, 3]), _vi("i", I64, [1])], axis=3), "axis"),
    "concat_ranks": (_one("Concat", ["x", "y"], [_vi("x", F, [2, 3]), _vi("y", F, [2])], axis=0), "same rank"),
    "transpose_perm": (_one("Transpose", ["x"], [_vi("x", F, [2, 3])], perm=[0, 0]), "repeated value"),
    "missing_attribute": (_one("Cast", ["x"], [_vi("x", F, [2])]), "attribute to"),
    "split_sum": (_model([h.make_node("Split", ["x", "s"], ["a", "b"], name="bad", axis=0)], [_vi("x", F, [4])],
                         [_vi("a"), _vi("b")], [numpy_helper.from_array(np.array([1, 2], np.int64), "s")],
                         opset=18), "sum of 'split'"),
}


@pytest.mark.parametrize("case", sorted(REFUSED))
def test_refused_at_compile_naming_the_node(case):
    mp, what = REFUSED[case]
    g = pyge.load_onnx(mp)                   # loading stays lenient: the compile refuses
    with pytest.raises(GraphTypeError, match=f"node 'bad' \\(\\w+\\): .*{what}") as info:
        pyge.compile(g)
    assert info.value.node == "bad" and "\n" not in str(info.value)
    assert isinstance(info.value, pyge.GraphError)


@pytest.mark.parametrize("case", sorted(REFUSED))
def test_onnxruntime_refuses_them_too(case):
    ort = pytest.importorskip("onnxruntime")
    with pytest.raises(Exception):
        ort.InferenceSession(REFUSED[case][0].SerializeToString(), providers=["CPUExecutionProvider"])


def test_hand_built_graph_is_checked_too():
    b = pyge.GraphBuilder("g")
    x = b.input("x", "float32", (2,))
    b.output(b.op("Add", [x, b.initializer("k", np.ones(2, np.int64))], name="add"))
    with pytest.raises(GraphTypeError, match="node 'add' \\(Add\\)"):
        pyge.compile(b.build())


def test_error_in_a_subgraph_names_the_inner_node():
    then_g = h.make_graph([h.make_node("Add", ["x", "i"], ["t"], name="inner_add")], "then", [], [_vi("t")])
    else_g = h.make_graph([h.make_node("Neg", ["x"], ["e"], name="inner_neg")], "else", [], [_vi("e")])
    mp = _model([h.make_node("If", ["c"], ["y"], name="If_1", then_branch=then_g, else_branch=else_g)],
                [_vi("x", F, [2]), _vi("c", T.BOOL, []), _vi("i", I64, [2])], [_vi("y")])
    with pytest.raises(GraphTypeError, match="node 'inner_add' \\(Add\\): .*inconsistent type"):
        pyge.compile(pyge.load_onnx(mp))


def test_several_refused_nodes_are_counted():
    mp = _model([h.make_node("Add", ["x", "y"], ["a"], name="first"),
                 h.make_node("MatMul", ["x", "y"], ["b"], name="second")],
                [_vi("x", F, [2, 3]), _vi("y", F, [4, 5])], [_vi("a"), _vi("b")])
    with pytest.raises(GraphTypeError, match="node 'first' .*and 1 more: 'second'"):
        pyge.compile(pyge.load_onnx(mp))


def test_declared_shape_conflict_is_lenient_as_in_onnxruntime():
    """A value_info shape that inference contradicts: onnxruntime merges leniently and runs."""
    mp = _model([h.make_node("Relu", ["x"], ["r"], name="relu"), h.make_node("Neg", ["r"], ["z"], name="neg")],
                [_vi("x", F, [2])], [_vi("z", F, [2])], vinfo=[_vi("r", F, [3])])
    x = np.array([-1, 2], np.float32)
    np.testing.assert_array_equal(pyge.compile(pyge.load_onnx(mp)).run({"x": x})["z"], [0, -2])


def test_function_body_complaints_are_onnx_own():
    """MeanVarianceNormalization (opset 13): onnx's strict mode fails inside the function body
    it expands (a nameless Constant), onnxruntime runs it, and so does pyge."""
    mp = _model([h.make_node("MeanVarianceNormalization", ["x"], ["y"], name="mvn")],
                [_vi("x", F, [3, 3, 3, 1])], [_vi("y", F, [3, 3, 3, 1])], opset=13)
    with pytest.raises(Exception, match="op_type:Constant"):
        onnx.shape_inference.infer_shapes(mp, check_type=True, strict_mode=True)
    x = np.random.default_rng(0).standard_normal((3, 3, 3, 1)).astype(np.float32)
    y = pyge.compile(pyge.load_onnx(mp)).run({"x": x})["y"]
    want = (x - x.mean(axis=(0, 2, 3), keepdims=True)) / x.std(axis=(0, 2, 3), keepdims=True)
    np.testing.assert_allclose(y, want, rtol=1e-4, atol=1e-5)


def test_refusals_reads_onnx_messages():
    text = ("[ShapeInferenceError] Inference error(s): (op_type:Add, node name: a): "
            "[ShapeInferenceError] Incompatible dimensions\n"
            "(op_type:Relu, node name: r): [ShapeInferenceError] Inferred shape and existing shape differ\n"
            "(op_type:MeanVarianceNormalization, node name: m): [ShapeInferenceError] Inference error(s): "
            "(op_type:Constant): [ShapeInferenceError] One and only one\n"
            "(op_type:If, node name: if): [ShapeInferenceError] (op_type:Add, node name: in): B has "
            "inconsistent type tensor(int64)\n"
            "Invalid tensor data type 0.\n")
    assert refusals(text) == [("Add", "a", "Incompatible dimensions"),
                              ("Add", "in", "B has inconsistent type tensor(int64)")]


def test_each_distinct_type_is_read_once_with_what_read_type_would_assign():
    """_copy_back reads a repeated type once; each value still gets exactly what read_type
    gives it, including leaving alone what the type does not say (a type without a shape)."""
    from onnx import TensorProto, helper

    from pyge.frontends.onnx_proto import read_type
    from pyge.ir.value import Value
    from pyge.passes.graph.infer_types import _read_type_cached
    types = [helper.make_tensor_type_proto(TensorProto.FLOAT, [2, "n", None]),
             helper.make_tensor_type_proto(TensorProto.INT64, None),
             helper.make_sequence_type_proto(helper.make_tensor_type_proto(TensorProto.FLOAT, [3])),
             helper.make_optional_type_proto(helper.make_tensor_type_proto(TensorProto.BOOL, [1]))]
    reads: dict = {}
    for rep in range(2):
        for k, tp in enumerate(types):
            a, b = Value(f"a{k}", shape=(7,)), Value(f"b{k}", shape=(7,))
            read_type(a, tp)
            _read_type_cached(b, tp, reads)
            assert (a.kind, a.dtype, a.shape, a.elem_kind) == (b.kind, b.dtype, b.shape, b.elem_kind)
    assert len(reads) == len(types)
