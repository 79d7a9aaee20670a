"""Engine table: built-in kinds, user registration, and what the engine means for streams."""
from __future__ import annotations

import pytest

import pyge
from pyge.ir.clone import clone_graph
from pyge.passes.graph import engines
from pyge.passes.graph.engines import (ATTACH, COMPUTE, INDEPENDENT, SKIP, assign_engines, engine_of,
                                 kind_of, register_engine, reset_engines)
from pyge.passes.streams import allocate_streams


@pytest.fixture(autouse=True)
def _clean_table():
    yield
    reset_engines()


@pytest.mark.parametrize("op, engine", [
    ("Conv", COMPUTE), ("MatMul", COMPUTE), ("Relu", COMPUTE), ("NotAnOp", COMPUTE),
    ("Reshape", SKIP), ("Shape", SKIP), ("Constant", SKIP), ("Identity", SKIP), ("Unsqueeze", SKIP),
    ("MemcpyToHost", INDEPENDENT), ("HcomAllReduce", INDEPENDENT),
    ("If", ATTACH), ("Loop", ATTACH), ("SequenceAt", ATTACH),
])
def test_builtin_table(op, engine):
    assert engine_of(op) == engine


def test_table_is_data_and_a_user_can_extend_it():
    register_engine("MyAllToAll", INDEPENDENT)
    assert engine_of("MyAllToAll") == INDEPENDENT
    register_engine("com.acme::Dvpp", "dvpp", kind=COMPUTE)
    assert engine_of("Dvpp", "com.acme") == "dvpp"
    assert engine_of("Dvpp") == COMPUTE          # the qualified entry is for that domain only
    assert engines.ENGINE_KIND["dvpp"] == COMPUTE
    reset_engines()
    assert engine_of("MyAllToAll") == COMPUTE and "dvpp" not in engines.ENGINE_KIND


@pytest.mark.parametrize("args, match", [
    (("X", "newengine"), "is new, so its kind is needed"),
    (("X", "e2", "gpu"), "is not one of compute, skip, independent, attach"),
    (("X", SKIP, COMPUTE), "already of kind 'skip'"),
    (("", COMPUTE), "non-empty string"),
])
def test_register_engine_errors(args, match):
    with pytest.raises(pyge.PassError, match=match):
        register_engine(*args)


def test_pyge_exports_register_engine():
    assert pyge.register_engine is register_engine


def _if_graph():
    then_b = pyge.GraphBuilder("then_body")
    x = pyge.Value("x", "float32", (2,))
    then_b.graph.outputs.append(then_b.op("Relu", [x], name="then_relu"))
    else_b = pyge.GraphBuilder("else_body")
    else_b.graph.outputs.append(else_b.op("Reshape", [x, else_b.constant([2])], name="else_reshape"))
    b = pyge.GraphBuilder("g")
    cond = b.input("cond", "bool", ())
    xin = b.input("x", "float32", (2,))
    # the bodies read the outer value x: wire them to the graph input
    for g in (then_b.graph, else_b.graph):
        for n in g.nodes:
            n.replace_input_with(x, xin)
    b.graph.outputs.append(b.op("If", [cond], name="if", then_branch=then_b.graph, else_branch=else_b.graph))
    return b.build()


def test_assign_engines_covers_subgraphs():
    g = clone_graph(_if_graph())
    assign_engines(g)
    got = {n.name: n.engine for sg in g.all_graphs() for n in sg.nodes}
    assert got == {"if": ATTACH, "then_relu": COMPUTE, "else_reshape": SKIP}


def test_kind_of_needs_engines():
    g = _if_graph()
    with pytest.raises(pyge.GraphError, match="has no engine yet"):
        kind_of(g.nodes[0])


def test_each_compute_engine_has_its_own_streams():
    """GE: one stream per engine by default; a user engine of kind compute is a separate engine."""
    register_engine("Abs", "vector", kind=COMPUTE)
    b = pyge.GraphBuilder("two_engines")
    x = b.input("x", "float32", (4,))
    r = b.op("Relu", [x], name="relu")
    a = b.op("Abs", [x], name="abs")
    b.graph.outputs.append(b.op("Add", [r, a], name="add"))
    g = clone_graph(b.build())
    assign_engines(g)
    allocate_streams(g, {"ge.streamMaxParallelNum": "compute:1,vector:1"})
    s = {n.name: n.stream_id for n in g.nodes}
    assert s["relu"] == s["add"] != s["abs"]


def test_parallel_num_names_unknown_engine():
    b = pyge.GraphBuilder("g")
    b.graph.outputs.append(b.op("Relu", [b.input("x", "float32", (1,))]))
    g = b.build()
    assign_engines(g)
    with pytest.raises(pyge.OptionError, match=r"ge.streamMaxParallelNum.*nosuch.*accepted engines: attach, compute"):
        allocate_streams(g, {"ge.streamMaxParallelNum": "nosuch:2"})
