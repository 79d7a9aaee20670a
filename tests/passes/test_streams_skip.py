"""Rule 4: skip-engine nodes (views, shape queries, constants) take their neighbours' stream."""
from __future__ import annotations

import pyge
from pyge.ir.clone import clone_graph
from pyge.passes.graph.engines import assign_engines
from pyge.passes.streams import allocate_streams
from pyge.passes.streams.context import StreamContext
from pyge.passes.streams.skip import assign_skipped


def _alloc(g, **options):
    g = clone_graph(g)
    assign_engines(g)
    allocate_streams(g, options)
    return {n.name: n.stream_id for n in g.nodes}


def _prepared(g, streams: dict[str, int]):
    """Engines assigned, the named nodes on the given streams, the rest unassigned."""
    g = clone_graph(g)
    assign_engines(g)
    for n in g.nodes:
        n.stream_id = streams.get(n.name, -1)
    return g


def test_view_between_two_kernels_on_one_stream_takes_it():
    b = pyge.GraphBuilder("view")
    x = b.input("x", "float32", (2, 2))
    r = b.op("Reshape", [b.op("Relu", [x], name="a"), b.constant([4])], name="reshape")
    b.graph.outputs.append(b.op("Abs", [r], name="b"))
    s = _alloc(b.build())
    assert s["reshape"] == s["a"] == s["b"]


def _producer_two_consumers():
    b = pyge.GraphBuilder("split")
    x = b.input("x", "float32", (2, 2))
    r = b.op("Flatten", [b.op("Relu", [x], name="a")], name="flat")
    b.graph.outputs += [b.op("Abs", [r], name="c1"), b.op("Neg", [r], name="c2")]
    return b.build()


def test_producer_stream_wins_when_neighbours_disagree():
    g = _prepared(_producer_two_consumers(), {"a": 0, "c1": 1, "c2": 2})
    assert assign_skipped(g, StreamContext(next_stream=3)) == 1
    assert g.node("flat").stream_id == 0


def test_single_neighbour_stream_wins_over_producer():
    g = _prepared(_producer_two_consumers(), {"a": 0, "c1": 1, "c2": 1})
    assign_skipped(g, StreamContext(next_stream=2))
    assert g.node("flat").stream_id == 0   # two streams among neighbours: the producer's
    g = _prepared(_producer_two_consumers(), {"a": 1, "c1": 1, "c2": 1})
    assign_skipped(g, StreamContext(next_stream=2))
    assert g.node("flat").stream_id == 1


def test_no_producer_takes_the_consumers_stream_even_through_a_chain():
    """Shape(x) -> Identity -> consumer on stream 2: both skip nodes go to stream 2."""
    b = pyge.GraphBuilder("shape")
    x = b.input("x", "float32", (2, 2))
    sh = b.op("Shape", [x], name="shape")
    ident = b.op("Identity", [sh], name="ident")
    b.graph.outputs += [b.op("Relu", [x], name="other"), b.op("Cast", [ident], name="use", to=1)]
    g = _prepared(b.build(), {"other": 0, "use": 2})
    assign_skipped(g, StreamContext(next_stream=3))
    assert g.node("shape").stream_id == g.node("ident").stream_id == 2


def test_isolated_skip_node_goes_to_the_default_stream():
    b = pyge.GraphBuilder("lonely")
    x = b.input("x", "float32", (2,))
    b.graph.outputs += [b.op("Relu", [x], name="r"), b.op("Identity", [x], name="ident")]
    g = _prepared(b.build(), {"r": 3})
    assign_skipped(g, StreamContext(next_stream=4))
    assert g.node("ident").stream_id == 3                 # the lowest stream in use
    g = _prepared(b.build(), {"r": 3})
    assign_skipped(g, StreamContext(next_stream=4, default_stream=1))
    assert g.node("ident").stream_id == 1                 # a subgraph: its parent's stream


def test_graph_of_only_skip_nodes_gets_one_stream():
    b = pyge.GraphBuilder("views")
    x = b.input("x", "float32", (2, 2))
    b.graph.outputs.append(b.op("Identity", [b.op("Flatten", [x], name="f")], name="i"))
    assert set(_alloc(b.build()).values()) == {0}


def test_labelled_skip_node_keeps_its_label_stream():
    b = pyge.GraphBuilder("labelled")
    x = b.input("x", "float32", (2, 2))
    f = b.op("Flatten", [b.op("Relu", [x], name="a")], name="f", _stream_label="L")
    b.graph.outputs.append(b.op("Abs", [f], name="b"))
    s = _alloc(b.build())
    assert s["f"] != s["a"]
