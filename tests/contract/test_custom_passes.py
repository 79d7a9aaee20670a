"""INTERFACE.md contract: custom stream passes (acceptance checks call these names as written)."""
from __future__ import annotations

import json
import os
import re
import stat
import sys
import textwrap
import threading
import time

import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper

import pyge
from pyge import GRAPH_SUCCESS, register_custom_pass
from pyge.cli import main as cli_main
from pyge.passes.custom.plugins import reset_plugins


from .common import *  # noqa: F401,F403 - shared helpers and constants
from .common import DUMP_RE, SHAPE, one_line, onnx_model, ref_graph, split_abs, split_model, x_in  # noqa: F401


# -- custom stream passes ----------------------------------------------------------------------

def if_graph():
    b = pyge.GraphBuilder("root")
    cond, x = b.input("cond", "bool", ()), b.input("x", "float32", (4,))
    pre = b.op("Sigmoid", [x], name="pre")
    then_b, else_b = pyge.GraphBuilder("then_body"), pyge.GraphBuilder("else_body")
    then_b.graph.outputs.append(then_b.op("Abs", [then_b.op("Relu", [pre], name="t_relu")], name="t_abs"))
    else_b.graph.outputs.append(else_b.op("Neg", [pre], name="e_neg"))
    b.graph.outputs.append(b.op("If", [cond], name="if", then_branch=then_b.graph, else_branch=else_b.graph))
    b.graph.outputs.append(b.op("Exp", [x], name="post"))
    return b.build()


def test_registration_forms_and_call_order():
    calls = []
    reg = register_custom_pass("First")
    assert reg.custom_allocate_stream_pass_fn(lambda g, c: calls.append(("First", g.name)) or GRAPH_SUCCESS) is reg

    @pyge.custom_stream_pass("Second")
    def second(graph, ctx):
        calls.append(("Second", graph.name, [n.name for n in graph.get_direct_nodes()],
                      [ctx.get_stream_id(n) for n in graph.get_direct_nodes()]))
        return GRAPH_SUCCESS
    assert callable(second)
    pyge.compile(if_graph())
    # once per compiled model (GE), in registration order, with the model's graph
    assert [c[:2] for c in calls] == [("First", "root"), ("Second", "root")]
    assert calls[1][2] == ["pre", "if", "post"]
    # passes run after the built-in allocation: every node already has a stream
    assert all(s >= 0 for c in calls if c[0] == "Second" for s in c[3])


def test_context_methods():
    got = {}

    @pyge.custom_stream_pass("Ctx")
    def ctx_pass(graph, ctx):
        if not graph.is_root:
            return GRAPH_SUCCESS
        pre = graph.find_node("pre")
        foreign = next(n for n in graph.get_all_nodes() if n.name == "t_relu")
        mx = ctx.get_curr_max_stream_id()
        got.update(name=ctx.pass_name, opt=ctx.get_option_value("ge.streamMaxParallelNum"),
                   single=ctx.get_option_value("ge.enableSingleStream"), mx=mx, sid=ctx.get_stream_id(pre))
        for key, sid, node in (("neg", -1, pre), ("above", mx + 1, pre), ("foreign", 0, foreign)):
            got[key] = (ctx.set_stream_id(node, sid), ctx.get_error_message())
        new = ctx.allocate_next_stream_id()
        got.update(new=new, mx2=ctx.get_curr_max_stream_id(), ok=ctx.set_stream_id(pre, new))
        ctx.set_error_message("custom message")
        got["msg"] = ctx.get_error_message()
        return GRAPH_SUCCESS
    model = pyge.compile(if_graph(), options={"ge.streamMaxParallelNum": "2"})
    assert got["name"] == "Ctx" and got["opt"] == "2" and got["single"] == "false"
    assert got["new"] == got["mx"] + 1 == got["mx2"] and got["ok"] == GRAPH_SUCCESS and got["sid"] >= 0
    for key in ("neg", "above", "foreign"):
        assert got[key][0] == pyge.GRAPH_FAILED and got[key][1], key
    assert "then_body" in got["foreign"][1] and got["msg"] == "custom message"
    assert model.num_streams == len(model.streams) and model.stream_of("pre") < model.num_streams


@pytest.mark.parametrize("ret, code", [(pyge.GRAPH_FAILED, "GRAPH_FAILED"), (-7, "-7"), (None, "None"),
                                       ("ok", "'ok'"), (1.5, "1.5")])
def test_failing_pass_names_pass_code_and_message_and_changes_nothing(ret, code):
    g = ref_graph()
    before = pyge.format_graph(g), [(n.name, n.stream_id) for n in g.nodes]

    @pyge.custom_stream_pass("Bad")
    def bad(graph, ctx):
        ctx.set_stream_id(graph.find_node("Abs_1"), ctx.allocate_next_stream_id())
        ctx.set_error_message("no stream for Abs_1")
        return ret
    with pytest.raises(pyge.CustomPassError, match=rf"'Bad' failed with return code {re.escape(code)}") as err:
        pyge.compile(g)
    assert "no stream for Abs_1" in one_line(err) and err.value.pass_name == "Bad"
    assert (pyge.format_graph(g), [(n.name, n.stream_id) for n in g.nodes]) == before


@pytest.mark.parametrize("exc", [KeyError("Abs_2"), SystemExit(3), RecursionError("deep")])
def test_raising_pass_is_a_custom_pass_error(exc):
    def raises(graph, ctx):
        raise exc
    register_custom_pass("Raises").custom_allocate_stream_pass_fn(raises)
    with pytest.raises(pyge.CustomPassError, match=rf"'Raises' failed .*{type(exc).__name__}") as err:
        pyge.compile(ref_graph())
    one_line(err)


def test_numpy_integer_status_is_accepted():
    register_custom_pass("NpInt").custom_allocate_stream_pass_fn(lambda g, c: np.int64(0))
    assert pyge.compile(ref_graph()).num_streams == 1


def test_pass_cannot_mutate_the_graph_or_act_after_it_returned():
    kept = {}

    def mutate(graph, ctx):
        kept.update(ctx=ctx, node=graph.find_node("Abs_1"))
        graph.get_direct_nodes()[0].name = "renamed"
    register_custom_pass("Mutate").custom_allocate_stream_pass_fn(mutate)
    with pytest.raises(pyge.CustomPassError, match="'Mutate'.*read-only"):
        pyge.compile(ref_graph())
    pyge.clear_custom_passes()

    def keep(graph, ctx):
        kept.update(ctx=ctx, node=graph.find_node("Abs_1"))
        return GRAPH_SUCCESS
    register_custom_pass("Keep").custom_allocate_stream_pass_fn(keep)
    model = pyge.compile(ref_graph())
    assert kept["ctx"].set_stream_id(kept["node"], 0) == pyge.GRAPH_FAILED
    assert "outside a pass call" in kept["ctx"].get_error_message()
    with pytest.raises(pyge.PassError, match="'Keep'"):
        kept["ctx"].allocate_next_stream_id()
    assert model.graph.node("Abs_1").stream_id == model.stream_of("Abs_1") == 0


def test_pass_that_never_returns_times_out_and_changes_nothing():
    release, kept = threading.Event(), {}

    def stuck(graph, ctx):
        kept.update(ctx=ctx, node=graph.find_node("Abs_1"))
        sid = ctx.allocate_next_stream_id()
        release.wait(30)          # "never" returns, within the test's lifetime
        kept["late"] = ctx.set_stream_id(kept["node"], sid)
        return GRAPH_SUCCESS
    register_custom_pass("Stuck").custom_allocate_stream_pass_fn(stuck)
    g = ref_graph()
    before = (pyge.format_graph(g), [(n.name, n.stream_id) for n in g.nodes])
    t0 = time.perf_counter()
    with pytest.raises(pyge.CustomPassError, match=r"'Stuck' failed with return code timeout: .*0\.3 s") as err:
        pyge.compile(g, options={"pyge.customPassTimeout": "0.3"})
    assert time.perf_counter() - t0 < 10
    assert err.value.code == "timeout" and err.value.pass_name == "Stuck"
    one_line(err)
    assert (pyge.format_graph(g), [(n.name, n.stream_id) for n in g.nodes]) == before
    release.set()                 # the abandoned call resumes: its context is closed
    for _ in range(200):
        if "late" in kept:
            break
        time.sleep(0.01)
    assert kept["late"] == pyge.GRAPH_FAILED
    assert "outside a pass call" in kept["ctx"].get_error_message()
    pyge.clear_custom_passes()
    assert pyge.compile(g).num_streams == 1


def test_pass_timeout_zero_runs_on_the_calling_thread():
    seen = []
    register_custom_pass("Here").custom_allocate_stream_pass_fn(
        lambda g, c: seen.append(threading.current_thread()) or GRAPH_SUCCESS)
    pyge.compile(ref_graph(), options={"pyge.customPassTimeout": "0"})
    pyge.compile(ref_graph())
    assert seen[0] is threading.current_thread() and seen[1] is not threading.current_thread()


@pytest.mark.parametrize("value", ["-1", "soon", "nan", "1e9"])
def test_pass_timeout_option_is_checked(value):
    with pytest.raises(pyge.OptionError, match=r"pyge\.customPassTimeout.*accepted values: a number of seconds"):
        pyge.compile(ref_graph(), options={"pyge.customPassTimeout": value})


def test_single_stream_runs_no_custom_pass():
    calls = []
    register_custom_pass("Never").custom_allocate_stream_pass_fn(lambda g, c: calls.append(1) or 5)
    assert pyge.compile(ref_graph(), options={"ge.enableSingleStream": "true"}).num_streams == 1
    assert calls == []


@pytest.mark.parametrize("timeout", ["0", "30"])
def test_pass_that_compiles_fails_at_once(timeout):
    def nested(graph, ctx):
        pyge.compile(ref_graph())
        return GRAPH_SUCCESS
    register_custom_pass("Nested").custom_allocate_stream_pass_fn(nested)
    t0 = time.perf_counter()
    with pytest.raises(pyge.CustomPassError, match=r"'Nested' failed .*'Nested' failed with return code reentrant") as err:
        pyge.compile(ref_graph(), options={"pyge.customPassTimeout": timeout})
    assert time.perf_counter() - t0 < 10
    one_line(err)
    pyge.clear_custom_passes()
    assert pyge.compile(ref_graph()).num_streams == 1    # the thread mark did not stay behind
