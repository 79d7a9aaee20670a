"""Renumbering: used stream ids become 0..N-1 with no holes; custom ids follow."""
from __future__ import annotations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import pyge
from pyge.passes.streams.renumber import renumber_streams


def _chain(n: int):
    b = pyge.GraphBuilder("chain")
    v = b.input("x", "float32", (2,))
    for i in range(n):
        v = b.op("Relu", [v], name=f"n{i}")
    b.graph.outputs.append(v)
    return b.build()


def test_holes_are_closed_and_order_kept():
    g = _chain(4)
    for n, s in zip(g.nodes, [7, 3, 7, 12]):
        n.stream_id = s
    num, custom = renumber_streams(g, {12, 5})
    assert num == 3
    assert [n.stream_id for n in g.nodes] == [1, 0, 1, 2]
    assert custom == [2]          # 5 was allocated but never used


def test_subgraph_streams_are_renumbered_with_the_root():
    x = pyge.Value("x", "float32", (2,))
    body = pyge.GraphBuilder("body")
    body.graph.outputs.append(body.op("Relu", [x], name="inner"))
    other = pyge.GraphBuilder("other")
    other.graph.outputs.append(other.op("Abs", [x], name="inner2"))
    b = pyge.GraphBuilder("g")
    cond, xin = b.input("cond", "bool", ()), b.input("x", "float32", (2,))
    for sg in (body.graph, other.graph):
        sg.nodes[0].replace_input_with(x, xin)
    b.graph.outputs.append(b.op("If", [cond], name="if", then_branch=body.graph, else_branch=other.graph))
    g = b.build()
    g.node("if").stream_id, body.graph.nodes[0].stream_id, other.graph.nodes[0].stream_id = 4, 9, 4
    assert renumber_streams(g, ()) == (2, [])
    assert (g.node("if").stream_id, body.graph.nodes[0].stream_id) == (0, 1)


def test_unassigned_node_is_an_error():
    g = _chain(2)
    g.nodes[0].stream_id = 0
    with pytest.raises(pyge.PassError, match=r"node 'n1' \(Relu\) of graph 'chain' has no stream"):
        renumber_streams(g, ())


def test_empty_graph_has_one_stream():
    assert renumber_streams(pyge.Graph("empty"), ()) == (1, [])


@settings(max_examples=50, deadline=None)
@given(st.lists(st.integers(0, 40), min_size=1, max_size=12), st.sets(st.integers(0, 45)))
def test_dense_and_order_preserving(ids, custom):
    g = _chain(len(ids))
    for n, s in zip(g.nodes, ids):
        n.stream_id = s
    num, new_custom = renumber_streams(g, custom)
    got = [n.stream_id for n in g.nodes]
    assert sorted(set(got)) == list(range(num))
    for a, b, x, y in zip(ids, ids[1:], got, got[1:]):
        assert (a < b) == (x < y) and (a == b) == (x == y)
    assert new_custom == sorted(got[ids.index(c)] for c in custom if c in ids)


def test_compiled_model_remembers_custom_streams():
    with pyge.custom_passes_scope():
        pyge.clear_custom_passes()

        @pyge.custom_stream_pass("Holes")
        def holes(graph, ctx):
            ctx.allocate_next_stream_id()                       # unused: disappears
            ctx.set_stream_id(graph.find_node("Abs_1"), ctx.allocate_next_stream_id())
            return pyge.GRAPH_SUCCESS
        m = pyge.compile(pyge.examples.reference_graph((4, 4)))
    assert m.num_streams == 2 and m.custom_streams == [1] and m.stream_of("Abs_1") == 1
