"""Control-flow bodies follow their node: every subgraph node (nested ones too) takes its
root-graph ancestor's stream, and the model counts only root-graph streams."""
from __future__ import annotations

import pyge
from pyge.ir.clone import clone_graph
from pyge.passes.graph.engines import assign_engines
from pyge.passes.streams import allocate_streams, follow_parents


def _nested():
    x = pyge.Value("x", "float32", (2,))
    inner = pyge.GraphBuilder("inner")
    inner.graph.outputs.append(inner.op("Relu", [x], name="deep", _stream_label="L"))
    empty = pyge.GraphBuilder("empty_inner")
    empty.graph.outputs.append(empty.op("Abs", [x], name="deep2"))
    mid = pyge.GraphBuilder("mid")
    c2 = pyge.Value("c2", "bool", ())
    mid.graph.outputs.append(mid.op("If", [c2], name="inner_if", then_branch=inner.graph,
                                    else_branch=empty.graph))
    other = pyge.GraphBuilder("other")
    other.graph.outputs.append(other.op("Neg", [x], name="flat"))
    b = pyge.GraphBuilder("root")
    cond, xin = b.input("cond", "bool", ()), b.input("x", "float32", (2,))
    b.input("c2", "bool", ())
    for g in (inner.graph, empty.graph, other.graph):
        for n in g.nodes:
            n.replace_input_with(x, xin)
    for n in mid.graph.nodes:
        n.replace_input_with(c2, b.graph.value("c2"))
    b.graph.outputs.append(b.op("If", [cond], name="if", then_branch=mid.graph, else_branch=other.graph))
    b.graph.outputs.append(b.op("Exp", [xin], name="side"))
    return b.build()


def test_every_body_node_takes_its_root_ancestors_stream():
    g = clone_graph(_nested())
    assign_engines(g)
    allocate_streams(g)
    root_if = g.node("if")
    root_if.stream_id = 5                      # as a custom pass might have moved it
    assert follow_parents(g) == 4            # inner_if, deep, deep2, flat
    assert {n.stream_id for sg in g.all_graphs()[1:] for n in sg.nodes} == {5}


def test_compiled_model_counts_root_streams_only():
    m = pyge.compile(_nested(), options={"ge.autoMultistreamParallelMode": "LoadBalance:2"})
    assert m.num_streams <= 2
    assert m.stream_of("deep") == m.stream_of("flat") == m.stream_of("if")
