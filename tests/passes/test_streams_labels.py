"""GE's AssignByLabelPass: stream labels (`_stream_label`, overridden by `_user_stream_label`)
share a stream, one per label, numbered in cluster order."""
from __future__ import annotations

import pytest

import pyge
from pyge.ir.clone import clone_graph
from pyge.passes.graph.engines import assign_engines
from pyge.passes.streams import allocate_streams
from pyge.passes.streams.clusters import build_clusters
from pyge.passes.streams.context import StreamContext
from pyge.passes.streams.labels import assign_by_label


def _alloc(g, **options):
    g = clone_graph(g)
    assign_engines(g)
    allocate_streams(g, options)
    return {n.name: n.stream_id for sg in g.all_graphs() for n in sg.nodes}


def _fan(labels: dict[str, dict]):
    """x -> each named Relu (with the given attributes) -> Sum of all."""
    b = pyge.GraphBuilder("fan")
    x = b.input("x", "float32", (4,))
    outs = [b.op("Relu", [x], name=name, **attrs) for name, attrs in labels.items()]
    b.graph.outputs.append(b.op("Sum", outs, name="sum"))
    return b.build()


def test_same_label_same_stream_other_label_other_stream():
    s = _alloc(_fan({"a": {"_stream_label": "L1"}, "b": {"_stream_label": "L1"},
                     "c": {"_stream_label": "L2"}, "d": {}}))
    assert s["a"] == s["b"]
    assert len({s["a"], s["c"], s["d"]}) == 3


def test_user_stream_label_overrides_stream_label():
    s = _alloc(_fan({"a": {"_stream_label": "L1"},
                     "b": {"_stream_label": "L1", "_user_stream_label": "U"},
                     "c": {"_user_stream_label": "U"}}))
    assert s["b"] == s["c"] != s["a"]


def test_labels_are_numbered_first_in_topological_order():
    g = clone_graph(_fan({"a": {"_stream_label": "L1"}, "b": {"_stream_label": "L2"}}))
    assign_engines(g)
    ctx = StreamContext()
    clusters = build_clusters(g)
    assert assign_by_label(clusters, ctx) == 2
    assert ctx.label_streams == {"L1": 0, "L2": 1}
    assert ctx.next_stream == 2
    assert [c.stream for c in clusters] == [0, 1, -1]


def test_a_user_label_beats_the_independent_engine_a_stream_label_does_not():
    b = pyge.GraphBuilder("comm")
    x = b.input("x", "float32", (4,))
    r = b.op("Relu", [x], name="r", _stream_label="L")
    b.graph.outputs.append(b.op("AllReduce", [r], name="plain", _stream_label="L"))
    b.graph.outputs.append(b.op("AllReduce", [r], name="user", _user_stream_label="L"))
    s = _alloc(b.build())
    assert s["user"] == s["r"] != s["plain"]


def test_labelled_stream_is_not_continued_by_unlabelled_successors():
    b = pyge.GraphBuilder("chain")
    x = b.input("x", "float32", (4,))
    a = b.op("Relu", [x], name="a", _stream_label="L")
    c = b.op("Abs", [a], name="c")
    b.graph.outputs.append(b.op("Neg", [c], name="d"))
    s = _alloc(b.build())
    assert s["a"] != s["c"] == s["d"]


def test_a_labelled_body_node_still_runs_on_its_if_nodes_stream():
    x = pyge.Value("x", "float32", (2,))
    body = pyge.GraphBuilder("then_body")
    body.graph.outputs.append(body.op("Relu", [x], name="inner", _stream_label="L"))
    other = pyge.GraphBuilder("else_body")
    other.graph.outputs.append(other.op("Abs", [x], name="inner2"))
    b = pyge.GraphBuilder("g")
    cond = b.input("cond", "bool", ())
    xin = b.input("x", "float32", (2,))
    for g in (body.graph, other.graph):
        for n in g.nodes:
            n.replace_input_with(x, xin)
    outer = b.op("Neg", [xin], name="outer", _stream_label="L")
    b.graph.outputs.append(outer)
    b.graph.outputs.append(b.op("If", [cond], name="if", then_branch=body.graph, else_branch=other.graph))
    s = _alloc(b.build())
    # a body runs on its parent's stream, labels or not: no stream is its own
    assert s["inner"] == s["inner2"] == s["if"] != s["outer"]


def test_labels_are_an_error_in_single_stream_mode():
    g = _fan({"a": {"_stream_label": "L1"}, "b": {}})
    with pytest.raises(pyge.PassError, match=r"node 'a' \(Relu\).*stream label 'L1'.*ge.enableSingleStream=true"):
        _alloc(g, **{"ge.enableSingleStream": "true"})


def test_labels_through_compile():
    g = _fan({"a": {"_stream_label": "L1"}, "b": {}})
    m = pyge.compile(g)
    assert m.num_streams == 2
    assert m.stream_of("a") != m.stream_of("b")
