"""Custom stream passes: registration, the context, the read-only graph, failure semantics."""
from __future__ import annotations

import numpy as np
import pytest

import pyge
from pyge import GRAPH_FAILED, GRAPH_SUCCESS
from pyge.passes.graph.infer_types import infer_types
from pyge.ir.clone import clone_graph
from pyge.passes.custom import (AFTER_STAGE, BEFORE_STAGE, registered_passes, run_stream_passes)
from pyge.passes.graph.engines import assign_engines
from pyge.passes.streams import allocate_streams


pytestmark = pytest.mark.usefixtures("no_custom_passes")


def _if_graph():
    """x -> pre; If(cond): then = Relu(pre) -> Abs, else = Neg(pre); post = Exp(x)."""
    b = pyge.GraphBuilder("root")
    cond = b.input("cond", "bool", ())
    x = b.input("x", "float32", (4,))
    pre = b.op("Sigmoid", [x], name="pre")
    then_b = pyge.GraphBuilder("then_body")
    then_b.graph.outputs.append(then_b.op("Abs", [then_b.op("Relu", [pre], name="t_relu")], name="t_abs"))
    else_b = pyge.GraphBuilder("else_body")
    else_b.graph.outputs.append(else_b.op("Neg", [pre], name="e_neg"))
    b.graph.outputs.append(b.op("If", [cond], name="if", then_branch=then_b.graph, else_branch=else_b.graph))
    b.graph.outputs.append(b.op("Exp", [x], name="post"))
    return b.build()


def _prepared(g, **options):
    g = clone_graph(g)
    assign_engines(g)
    g.drawn = allocate_streams(g, options).max_drawn   # (a plain attribute, for the tests)
    return g


def run_custom_passes(g, options=None, on_stage=None):
    """The stream passes once, as the compiler calls them; returns the ids they drew."""
    return set(run_stream_passes(g, options, g.drawn, on_stage).custom_ids)


# -- registration -----------------------------------------------------------------------

def test_registration_is_chainable_and_ordered():
    def f(graph, ctx):
        return GRAPH_SUCCESS
    reg = pyge.register_custom_pass("B").custom_allocate_stream_pass_fn(f)
    assert reg.name == "B" and reg.stream_fn is f

    @pyge.custom_stream_pass("A")
    def g(graph, ctx):
        return GRAPH_SUCCESS
    assert g.__name__ == "g"                       # the decorator returns the function
    assert [r.name for r in registered_passes()] == ["B", "A"]


def test_duplicate_names_are_an_error():
    pyge.register_custom_pass("P")
    with pytest.raises(pyge.PassError, match="'P' is already registered.*unregister_custom_pass"):
        pyge.register_custom_pass("P")
    assert pyge.unregister_custom_pass("P") is True
    assert pyge.unregister_custom_pass("P") is False
    pyge.register_custom_pass("P")


@pytest.mark.parametrize("name", ["", "has space", "a/b", 3])
def test_bad_names_are_refused(name):
    with pytest.raises(pyge.PassError, match="is not accepted"):
        pyge.register_custom_pass(name)


def test_non_callable_function_is_refused_and_decorator_leaves_nothing_behind():
    with pytest.raises(pyge.PassError, match="must be callable"):
        pyge.register_custom_pass("X").custom_allocate_stream_pass_fn(42)
    with pytest.raises(pyge.PassError, match="must be callable"):
        pyge.custom_stream_pass("Y")("not a function")
    assert [r.name for r in registered_passes()] == ["X"]


def test_scope_undoes_registrations():
    pyge.register_custom_pass("keep")
    with pyge.custom_passes_scope():
        pyge.register_custom_pass("temp")
        pyge.unregister_custom_pass("keep")
    assert [r.name for r in registered_passes()] == ["keep"]


# -- what a pass sees ---------------------------------------------------------------------

def test_a_pass_is_called_once_per_model_with_the_models_graph():
    """As in GE: one call per compiled model; the subgraphs are not calls of their own."""
    seen, stages = [], []

    @pyge.custom_stream_pass("Look")
    def look(graph, ctx):
        seen.append((graph.name, graph.is_root, graph.parent_node_name,
                     [n.name for n in graph.get_direct_nodes()],
                     sorted(n.name for n in graph.get_all_nodes())))
        return GRAPH_SUCCESS
    run_custom_passes(_prepared(_if_graph()), None, lambda stage, g: stages.append((stage, g.name)))
    assert seen == [("root", True, None, ["pre", "if", "post"],
                     ["e_neg", "if", "post", "pre", "t_abs", "t_relu"])]
    assert stages == [(f"{BEFORE_STAGE}Look", "root"), (f"{AFTER_STAGE}Look", "root")]


def test_one_context_is_shared_by_all_passes_of_a_call():
    contexts, ids = [], []

    def make(name):
        def fn(graph, ctx):
            contexts.append(ctx)
            ids.append((ctx.pass_name, ctx.allocate_next_stream_id(), ctx.get_curr_max_stream_id()))
            return GRAPH_SUCCESS
        pyge.register_custom_pass(name).custom_allocate_stream_pass_fn(fn)
    make("A")
    make("B")
    g = _prepared(_if_graph())
    assert run_custom_passes(g) == {g.drawn + 1, g.drawn + 2}
    assert contexts[0] is contexts[1]
    assert ids == [("A", g.drawn + 1, g.drawn + 1), ("B", g.drawn + 2, g.drawn + 2)]


def test_passes_run_in_registration_order_and_see_earlier_changes():
    log = []

    @pyge.custom_stream_pass("First")
    def first(graph, ctx):
        if graph.is_root:
            ctx.set_stream_id(graph.find_node("post"), ctx.allocate_next_stream_id())
        log.append("first")
        return GRAPH_SUCCESS

    @pyge.custom_stream_pass("Second")
    def second(graph, ctx):
        if graph.is_root:
            log.append(ctx.get_stream_id(graph.find_node("post")))
        return GRAPH_SUCCESS
    g = _prepared(_if_graph())
    assert run_custom_passes(g) == {1}
    assert log == ["first", 1]


def test_read_only_node_properties():
    got = {}

    @pyge.custom_stream_pass("Props")
    def props(graph, ctx):
        if not graph.is_root:
            return GRAPH_SUCCESS
        n = graph.find_node("if")
        got.update(name=n.name, type=n.type, engine=n.engine, kind=n.engine_kind,
                   preds=[p.name for p in n.predecessors], subgraphs=n.subgraph_names,
                   attr=n.get_attr("then_branch"), ins=n.inputs)
        pre = graph.find_node("pre")
        got.update(succ=[s.name for s in pre.successors], out=pre.outputs[0])
        with pytest.raises(AttributeError, match="read-only"):
            pre.stream_id = 3
        with pytest.raises(AttributeError, match="read-only"):
            graph.extra = 1
        with pytest.raises(TypeError):
            pre.attrs["x"] = 1
        assert graph.get_direct_nodes()[0] is graph.get_direct_nodes()[0]
        return GRAPH_SUCCESS
    g = _prepared(_if_graph())
    infer_types(g)
    run_custom_passes(g)
    assert got["name"] == "if" and got["type"] == "If" and got["engine"] == "attach"
    assert got["preds"] == ["pre"]           # the subgraph's read of `pre` is a dependency
    assert got["subgraphs"] == ("then_body", "else_body") and got["attr"] == "then_body"
    assert got["ins"][0].name == "cond" and got["ins"][0].dtype == "bool"
    assert got["succ"] == ["if"] and got["out"].shape == (4,) and got["out"].dtype == "float32"


def test_attribute_arrays_are_read_only_copies():
    b = pyge.GraphBuilder("arr")
    b.graph.outputs.append(b.op("Relu", [b.input("x", "float32", (2,))], name="r", weights=np.zeros(2)))
    arrays = []

    @pyge.custom_stream_pass("Arr")
    def arr(graph, ctx):
        a = graph.find_node("r").get_attr("weights")
        arrays.append(a)
        with pytest.raises(ValueError):
            a[0] = 1
        return GRAPH_SUCCESS
    g = _prepared(b.build())
    run_custom_passes(g)
    assert arrays and g.node("r").attrs["weights"][0] == 0


# -- the context ----------------------------------------------------------------------------

def test_set_stream_id_refusals_change_nothing():
    results = {}

    @pyge.custom_stream_pass("Refuse")
    def refuse(graph, ctx):
        if not graph.is_root:
            return GRAPH_SUCCESS
        pre = graph.find_node("pre")
        inner = next(n for n in graph.get_all_nodes() if n.name == "t_relu")
        mx = ctx.get_curr_max_stream_id()
        for key, args in {"neg": (pre, -1), "above": (pre, mx + 1), "foreign": (inner, 0),
                          "notint": (pre, "0"), "bool": (pre, True), "notnode": ("pre", 0)}.items():
            results[key] = (ctx.set_stream_id(*args), ctx.get_error_message())
        results["stream"] = ctx.get_stream_id(pre)
        results["ok"] = ctx.set_stream_id(pre, mx)
        return GRAPH_SUCCESS
    g = _prepared(_if_graph())
    run_custom_passes(g)
    assert all(results[k][0] == GRAPH_FAILED for k in ("neg", "above", "foreign", "notint", "bool", "notnode"))
    assert "outside 0..0" in results["neg"][1] and "outside 0..0" in results["above"][1]
    assert "belongs to subgraph 'then_body' (of node 'if'" in results["foreign"][1]
    assert "not to graph 'root'" in results["foreign"][1]
    assert "not an integer" in results["notint"][1]
    assert results["stream"] == 0 and results["ok"] == GRAPH_SUCCESS
    assert g.node("pre").stream_id == 0


def test_max_stream_id_and_allocation():
    seen = []

    @pyge.custom_stream_pass("Alloc")
    def alloc(graph, ctx):
        if graph.is_root:
            seen.append(ctx.get_curr_max_stream_id())
            a = ctx.allocate_next_stream_id()
            b = ctx.allocate_next_stream_id()
            seen.extend([a, b, ctx.get_curr_max_stream_id()])
            ctx.set_stream_id(graph.find_node("post"), b)    # a stays unused
        return GRAPH_SUCCESS
    g = _prepared(_if_graph(), **{"ge.streamMaxParallelNum": "2"})
    before = g.drawn
    ids = run_custom_passes(g)
    assert seen == [before, before + 1, before + 2, before + 2]
    assert ids == {before + 1, before + 2}


def test_max_stream_id_counts_holes_as_ge_does():
    """An id the built-in allocation drew but left unused still counts. Between two
    collectives (their independent stream, id 0) a Relu gets a compute stream (id 1), and the
    last rule moves it onto stream 0 between them (nothing there could overlap it), leaving
    id 1 drawn and unused."""
    b = pyge.GraphBuilder("holes")
    x = b.input("x", "float32", (4,))
    r = b.op("Relu", [b.op("AllReduce", [x], name="ar1")], name="r")
    b.graph.outputs.append(b.op("AllReduce", [r], name="ar2"))
    g = _prepared(b.build())
    used = {n.stream_id for n in g.nodes}
    seen = []

    @pyge.custom_stream_pass("Max")
    def mx(graph, ctx):
        seen.append(ctx.get_curr_max_stream_id())
        return GRAPH_SUCCESS
    run_custom_passes(g)
    assert seen == [g.drawn] and g.drawn > max(used)


def test_options_and_pass_name():
    got = {}

    @pyge.custom_stream_pass("Opts")
    def opts(graph, ctx):
        got.update(name=ctx.pass_name, single=ctx.get_option_value("ge.enableSingleStream"),
                   par=ctx.get_option_value("ge.streamMaxParallelNum"), unknown=ctx.get_option_value("nope"))
        return GRAPH_SUCCESS
    pyge.compile(_if_graph(), options={"ge.streamMaxParallelNum": "3"})
    assert got == {"name": "Opts", "single": "false", "par": "3", "unknown": None}


# -- failures -------------------------------------------------------------------------------

def _ref_graph():
    return pyge.examples.reference_graph((4, 4))


def test_node_of_a_same_named_graph_is_refused_as_another_graph():
    """The pass sees the compiler's clone: a node of the user's own graph (same name) is
    refused, and the message says it is another graph rather than 'graph g, not graph g'."""
    from pyge.passes.custom import ConstGraph
    user = _ref_graph()
    seen = {}

    @pyge.custom_stream_pass("Foreign")
    def foreign(graph, ctx):
        node = ConstGraph(user).find_node("Abs_1")
        seen["status"], seen["message"] = ctx.set_stream_id(node, 0), ctx.get_error_message()
        return GRAPH_SUCCESS
    pyge.compile(user)
    assert seen["status"] == GRAPH_FAILED
    assert f"belongs to another graph (also named {user.name!r}), not to graph {user.name!r}" in seen["message"]


def test_failure_status_stops_compilation_with_name_code_and_message():
    @pyge.custom_stream_pass("Fails")
    def fails(graph, ctx):
        ctx.set_error_message("no good stream for Abs_1")
        return GRAPH_FAILED
    with pytest.raises(pyge.CustomPassError, match=r"'Fails' failed with return code GRAPH_FAILED "
                                                   r"\(4294967295\): no good stream for Abs_1") as info:
        pyge.compile(_ref_graph())
    assert info.value.pass_name == "Fails" and info.value.code == GRAPH_FAILED


def test_user_error_codes_are_reported():
    pyge.register_custom_pass("Neg").custom_allocate_stream_pass_fn(lambda g, c: -7)
    with pytest.raises(pyge.CustomPassError, match=r"'Neg' failed with return code -7: \(no message\)"):
        pyge.compile(_ref_graph())


def test_exception_in_a_pass_is_wrapped_with_its_cause():
    @pyge.custom_stream_pass("Raises")
    def raises(graph, ctx):
        raise KeyError("Abs_2")
    with pytest.raises(pyge.CustomPassError, match=r"'Raises' failed with return code exception: KeyError: 'Abs_2'") as info:
        pyge.compile(_ref_graph())
    assert isinstance(info.value.__cause__, KeyError)


class _Unprintable(Exception):
    def __str__(self):
        raise RuntimeError("cannot print me")


@pytest.mark.parametrize("how, expect", [
    ("message", r"return code GRAPH_FAILED \(4294967295\): first line second line$"),
    ("exception", r"return code exception: ValueError: first line second line$"),
    ("unprintable", r"return code exception: _Unprintable: <_Unprintable that cannot be printed>$")])
def test_pass_failure_message_is_one_line(how, expect):
    """A pass's message or exception text spanning lines, or one that cannot even be printed,
    still makes a one-line CustomPassError (not a second error from formatting it)."""
    @pyge.custom_stream_pass("Lines")
    def lines(graph, ctx):
        if how == "message":
            ctx.set_error_message("first line\n  second line\n")
            return GRAPH_FAILED
        raise ValueError("first line\nsecond line") if how == "exception" else _Unprintable()
    with pytest.raises(pyge.CustomPassError, match=expect) as info:
        pyge.compile(_ref_graph())
    assert "\n" not in str(info.value)


@pytest.mark.parametrize("ret", [None, True, "ok"])
def test_a_pass_must_return_a_status(ret):
    pyge.register_custom_pass("NoStatus").custom_allocate_stream_pass_fn(lambda g, c: ret)
    with pytest.raises(pyge.CustomPassError, match="must return a status such as GRAPH_SUCCESS"):
        pyge.compile(_ref_graph())


def test_a_subgraph_node_is_not_the_passes_to_move():
    got = {}

    @pyge.custom_stream_pass("SubMove")
    def sub_move(graph, ctx):
        inner = next(n for n in graph.get_all_nodes() if n.name == "t_abs")
        got["status"] = ctx.set_stream_id(inner, ctx.allocate_next_stream_id())
        got["message"] = ctx.get_error_message()
        return GRAPH_SUCCESS
    g = _prepared(_if_graph())
    run_custom_passes(g)
    assert got["status"] == GRAPH_FAILED and "a body runs on its parent node's stream" in got["message"]


def test_failed_compile_leaves_the_users_graph_untouched():
    g = _ref_graph()
    before = (pyge.format_graph(g), [(n.name, n.stream_id, n.engine) for n in g.nodes])

    @pyge.custom_stream_pass("MoveThenFail")
    def move_then_fail(graph, ctx):
        ctx.set_stream_id(graph.find_node("Abs_1"), ctx.allocate_next_stream_id())
        return GRAPH_FAILED
    with pytest.raises(pyge.CustomPassError):
        pyge.compile(g)
    assert (pyge.format_graph(g), [(n.name, n.stream_id, n.engine) for n in g.nodes]) == before


def test_single_stream_mode_runs_no_custom_pass():
    calls = []
    pyge.register_custom_pass("Never").custom_allocate_stream_pass_fn(lambda g, c: calls.append(1) or GRAPH_FAILED)
    m = pyge.compile(_ref_graph(), options={"ge.enableSingleStream": "true"})
    assert calls == [] and m.num_streams == 1


def test_registration_without_function_is_skipped():
    pyge.register_custom_pass("Empty")
    assert pyge.compile(_ref_graph()).num_streams == 1


def test_control_flow_bodies_follow_their_node():
    """A pass that moves an If node moves its bodies with it: after the passes every body node
    is on its node's stream, so the model has exactly the streams of its root graph."""
    @pyge.custom_stream_pass("MoveIf")
    def move_if(graph, ctx):
        ctx.set_stream_id(graph.find_node("if"), ctx.allocate_next_stream_id())
        return GRAPH_SUCCESS
    g = _if_graph()
    model = pyge.compile(g)
    s = model.stream_of("if")
    assert model.stream_of("t_abs") == model.stream_of("t_relu") == model.stream_of("e_neg") == s
    assert model.num_streams == 2 and s != model.stream_of("pre")
    assert "t_abs" not in sum(model.streams, [])
    single = pyge.compile(g, options={"ge.enableSingleStream": "true"})
    feeds = {"cond": np.array(True), "x": np.array([-1.0, 0.5, 2.0, -3.0], np.float32)}
    for k, v in single.run(feeds).items():
        np.testing.assert_array_equal(model.run(feeds)[k], v)


def test_passes_see_the_graph_after_fusion_and_the_names_fusion_replaced(caplog):
    """As in GE, stream passes run after fusion: Conv+Relu is one FusedConv named Conv_0 that
    carries _datadump_original_op_names; find_node("Relu_0") finds nothing and logs where it
    went, find_original("Relu_0") finds the fused node, and model.stream_of answers for it."""
    import logging
    b = pyge.GraphBuilder("fused")
    x = b.input("x", "float32", (1, 2, 4, 4))
    w = b.initializer("w", np.ones((2, 2, 1, 1), np.float32))
    y = b.op("Relu", [b.op("Conv", [x, w], name="Conv_0")], name="Relu_0")
    b.output(b.op("Abs", [y], name="Abs_0"), "out")
    got = {}

    @pyge.custom_stream_pass("Fused")
    def fused(graph, ctx):
        got["find"] = graph.find_node("Relu_0")
        node = graph.find_original("Relu_0")
        got["orig"] = (node.name, node.type, node.original_op_names,
                       node.get_attr("_datadump_original_op_names"),
                       graph.find_node("Abs_0").original_op_names)
        ctx.set_stream_id(node, ctx.allocate_next_stream_id())
        return GRAPH_SUCCESS
    with caplog.at_level(logging.INFO, logger="pyge.passes.custom.view"):
        m = pyge.compile(b.build())
    assert got["find"] is None and "fusion merged it into 'Conv_0'" in caplog.text
    assert got["orig"] == ("Conv_0", "FusedConv", ("Conv_0", "Relu_0"), ("Conv_0", "Relu_0"), ("Abs_0",))
    assert m.stream_of("Relu_0") == m.stream_of("Conv_0") != m.stream_of("Abs_0")
    with pytest.raises(KeyError, match="nor one fused into another"):
        m.stream_of("Nope_0")
