"""After each custom graph pass the compiler checks what it returned: every kind of broken
rewrite fails compilation with the pass's CustomPassError and a message of its own."""
from __future__ import annotations

import numpy as np
import pytest

import pyge
from pyge import GRAPH_SUCCESS, CustomPassStage, Node, Value

pytestmark = pytest.mark.usefixtures("no_custom_passes")


def _graph():
    """x -> Relu r -> Exp e -> y, plus a weight w read by Add a: y2 = e + w."""
    b = pyge.GraphBuilder("g")
    x = b.input("x", "float32", (2, 3))
    e = b.op("Exp", [b.op("Relu", [x], name="r")], name="e", outputs=["y"])
    b.graph.outputs.append(e)
    b.output(b.op("Add", [e, b.initializer("w", np.ones((2, 3), np.float32))], name="a", outputs=["y2"]))
    return b.build()


def _broken_by(edit, stage=CustomPassStage.AFTER_INFER_SHAPE):
    """The CustomPassError of compiling _graph() with a pass doing `edit(graph)`."""
    def fn(graph, ctx):
        edit(graph)
        return GRAPH_SUCCESS
    pyge.register_custom_pass("Breaker").custom_pass_fn(fn).stage(stage)
    g = _graph()
    before = pyge.format_graph(g)
    with pytest.raises(pyge.CustomPassError) as info:
        pyge.compile(g)
    assert pyge.format_graph(g) == before                  # the caller's graph is untouched
    err = info.value
    assert err.pass_name == "Breaker" and err.code is None and err.stage == stage.name
    assert str(err).startswith(f"custom graph pass 'Breaker' (stage {stage.name}) left a broken graph: ")
    return err


def _new(graph, op, inputs, name, out=None, **attrs):
    n = Node(op, name, attrs=attrs)
    n.set_inputs(inputs)
    n.add_output(Value(out or f"{name}_out"))
    graph.add_node(n)
    return n


def test_an_operator_without_a_kernel():
    err = _broken_by(lambda g: _new(g, "NoSuchOp", [g.inputs[0]], "odd"))
    assert "node 'odd' is operator NoSuchOp, which has no kernel" in str(err)


def test_a_cycle_names_its_nodes_and_keeps_the_cycle_error():
    def edit(g):
        g.node("r").set_input(0, g.node("e").outputs[0])
    err = _broken_by(edit)
    assert "the graph has a cycle: " in str(err)
    assert "'r' (Relu) -> 'e' (Exp) -> 'r'" in str(err) or "'e' (Exp) -> 'r' (Relu) -> 'e'" in str(err)
    assert isinstance(err.__cause__, pyge.GraphCycleError)


def test_a_dangling_value():
    err = _broken_by(lambda g: g.node("e").set_input(0, Value("ghost", "float32", (2, 3))))
    assert ("node 'e' (Exp) reads value 'ghost', which no node produces and which is no input or "
            "initializer of graph 'g' as input 0") in str(err)


def test_a_value_of_a_removed_node():
    def edit(g):
        r = g.node("r")
        kept = r.outputs[0]
        g.node("e").set_input(0, g.inputs[0])
        g.remove_node(r)
        g.node("e").set_input(0, kept)               # reads what the removed node produced
    err = _broken_by(edit)
    assert "reads value 'r_out', the output of node 'r', which was removed from the graph" in str(err)


def test_a_constant_that_is_no_initializer():
    err = _broken_by(lambda g: g.node("a").set_input(1, Value("c", "float32", (2, 3), const=np.zeros((2, 3)))))
    assert "reads value 'c', a constant that is no initializer of the graph" in str(err)


def test_a_control_edge_to_a_node_of_another_graph():
    def edit(g):
        g.node("e").control_preds.append(Node("Relu", "stranger"))
    err = _broken_by(edit)
    assert "node 'e' (Exp) has a control edge from node 'stranger', which is not a node of graph 'g'" in str(err)


def test_an_output_that_is_no_longer_produced():
    def edit(g):
        g.outputs[1] = Value("y2")                   # same name, produced by nothing
    err = _broken_by(edit)
    assert "graph output 'y2' is no longer produced: it is value 'y2', which no node produces" in str(err)


def test_outputs_and_inputs_keep_their_names():
    err = _broken_by(lambda g: g.outputs.pop())
    assert "the graph outputs changed from ['y', 'y2'] to ['y']; a pass keeps the model's outputs" in str(err)
    pyge.unregister_custom_pass("Breaker")
    err = _broken_by(lambda g: g.inputs.append(Value("extra", "float32", (1,))))
    assert "the graph inputs changed from ['x'] to ['x', 'extra']" in str(err)


def test_names_made_twice_by_plain_assignment():
    def edit(g):
        g.node("a").name = "e"
    err = _broken_by(edit)
    assert "two nodes of graph 'g' are named 'e' (Exp and Add)" in str(err)
    pyge.unregister_custom_pass("Breaker")

    def values(g):
        g.node("r").outputs[0].name = "y"
    err = _broken_by(values)
    assert "two values of graph 'g' are named 'y'" in str(err)


def test_a_subgraph_that_names_another_parent():
    def edit(g):
        body = pyge.GraphBuilder("body")
        body.graph.outputs.append(body.op("Neg", [g.inputs[0]], name="inner"))
        iff = _new(g, "If", [g.inputs[0]], "iff", then_branch=body.graph, else_branch=body.graph)
        iff.attrs["else_branch"] = pyge.GraphBuilder("other").graph   # plain assignment: no parent
    err = _broken_by(edit)
    assert "subgraph 'other' of node 'iff' names None as its parent (Node.set_attr sets it)" in str(err)


def test_a_rewrite_that_cannot_type_check():
    def edit(g):
        w = g.add_initializer("w_bad", np.ones((5, 7), np.float32))
        mm = _new(g, "MatMul", [g.node("e").outputs[0], w], "mm")
        g.replace_value(g.node("a").outputs[0], mm.outputs[0])
        g.remove_node(g.node("a"))
    err = _broken_by(edit)
    assert ("type inference fails at node 'mm' (MatMul): [ShapeInferenceError] Incompatible dimensions "
            "for matrix multiplication") in str(err)


def test_a_type_error_before_inference_is_found_too():
    def edit(g):
        cast = _new(g, "Cast", [g.inputs[0]], "cast", to=7)        # int64
        add = _new(g, "Add", [cast.outputs[0], g.node("r").outputs[0]], "mixed")
        g.node("e").set_input(0, add.outputs[0])
    err = _broken_by(edit, CustomPassStage.BEFORE_INFER_SHAPE)
    assert "type inference fails at node 'mixed' (Add)" in str(err)


def test_a_graph_the_later_steps_refuse_names_the_pass(monkeypatch):
    """What an earlier stage's built-in step checks (here engine assignment, re-run after a
    pass at the last stage) is reported as the pass's error."""
    from pyge.passes.graph import engines
    assign = engines.assign_engines

    def refuse(graph):
        if graph.find_node("late") is not None:
            raise pyge.GraphError("no engine for node 'late'")
        assign(graph)
    pyge.register_custom_pass("Late").custom_pass_fn(
        lambda g, ctx: (_new(g, "Neg", [g.inputs[0]], "late"), GRAPH_SUCCESS)[1]
    ).stage(CustomPassStage.AFTER_ORIGIN_GRAPH_OPTIMIZE)
    monkeypatch.setattr(engines, "assign_engines", refuse)
    with pytest.raises(pyge.CustomPassError, match="custom graph pass 'Late' .* left a graph the "
                                                   "compiler cannot go on with: GraphError: no engine"):
        pyge.compile(_graph())


def test_an_unused_new_node_is_fine_and_a_good_rewrite_passes_every_check():
    def edit(g):
        _new(g, "Neg", [g.inputs[0]], "unused")
        r = g.node("r")
        leaky = _new(g, "LeakyRelu", list(r.inputs), "leaky", alpha=0.5)
        g.replace_value(r.outputs[0], leaky.outputs[0])
        g.remove_node(r)

    def fn(graph, ctx):
        edit(graph)
        return GRAPH_SUCCESS
    pyge.register_custom_pass("Good").custom_pass_fn(fn).stage(CustomPassStage.AFTER_INFER_SHAPE)
    m = pyge.compile(_graph())
    x = np.array([[-1, 0, 2], [3, -4, 5]], np.float32)
    out = m.run({"x": x})
    np.testing.assert_allclose(out["y"], np.exp(np.where(x > 0, x, 0.5 * x)), rtol=1e-6)
    assert m.graph.node("leaky").outputs[0].shape == (2, 3)      # typed again


def _if_graph():
    """x -> Sigmoid pre; If(cond): then = Relu(pre), else = Neg(pre)."""
    b = pyge.GraphBuilder("root")
    cond = b.input("cond", "bool", ())
    x = b.input("x", "float32", (4,))
    pre = b.op("Sigmoid", [x], name="pre")
    then_b = pyge.GraphBuilder("then_body")
    then_b.graph.outputs.append(then_b.op("Relu", [pre], name="t_relu"))
    else_b = pyge.GraphBuilder("else_body")
    else_b.graph.outputs.append(else_b.op("Neg", [pre], name="e_neg"))
    b.graph.outputs.append(b.op("If", [cond], name="if", then_branch=then_b.graph,
                                else_branch=else_b.graph))
    return b.build()


def _hand_assigned_branch(node, build):
    """Replace `node`'s then-branch by plain assignment (no version moves) with a graph
    `build(nb, pre)` fills, where `pre` is the outer value the old branch read."""
    pre = node.attrs["then_branch"].node("t_relu").inputs[0]
    nb = pyge.GraphBuilder("then_body")
    build(nb, pre)
    nb.graph.parent = node
    node.attrs["then_branch"] = nb.graph
    return nb.graph


def test_a_cycle_in_a_subgraph_put_into_attrs_by_plain_assignment():
    """The pass asks for all_graphs() (cached by the graph's version), then replaces a branch
    by assigning to node.attrs, which moves no version: the check still finds the new
    branch's cycle and names the pass."""
    def cyclic(nb, pre):
        out = nb.op("Abs", [nb.op("Relu", [pre], name="c_relu")], name="c_abs")
        nb.graph.node("c_relu").set_input(0, out)
        nb.graph.outputs.append(out)

    def fn(graph, ctx):
        graph.all_graphs()
        _hand_assigned_branch(graph.node("if"), cyclic)
        return GRAPH_SUCCESS
    pyge.register_custom_pass("Breaker").custom_pass_fn(fn).stage(CustomPassStage.AFTER_INFER_SHAPE)
    with pytest.raises(pyge.CustomPassError, match=r"custom graph pass 'Breaker' .* left a broken "
                       r"graph: the graph has a cycle: .*'c_relu' \(Relu\)"):
        pyge.compile(_if_graph())


def test_a_subgraph_put_into_attrs_by_plain_assignment_is_sealed_too():
    """The graph a pass returns is sealed whole, a branch assigned by hand included."""
    kept = []

    def fn(graph, ctx):
        graph.all_graphs()
        kept.append(_hand_assigned_branch(
            graph.node("if"), lambda nb, pre: nb.graph.outputs.append(nb.op("Abs", [pre], name="c_abs"))))
        return GRAPH_SUCCESS
    pyge.register_custom_pass("Swapper").custom_pass_fn(fn).stage(CustomPassStage.AFTER_INFER_SHAPE)
    pyge.compile(_if_graph())
    with pytest.raises(pyge.GraphError, match="Swapper"):
        kept[0].node("c_abs").set_input(0, kept[0].node("c_abs").outputs[0])
