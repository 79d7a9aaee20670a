"""What the built-in DAG stream pass shares and batches: passes/streams/_graph.Topo.of (one Topo
per graph version, shared with the built-in stream allocation, not kept on the compiled model)
and StreamPassContext._set_stream_ids (set_stream_id for many nodes, with its checks)."""
from __future__ import annotations

import pyge
from pyge.ir.graph import Value
from pyge.passes.streams._graph import Topo


def _graph() -> pyge.Graph:
    b = pyge.GraphBuilder("g")
    x = b.input("x", "float32", (2,))
    p = b.op("Relu", [x], name="p")
    q = b.op("Neg", [x], name="q")
    b.output(b.op("Add", [p, q], name="s"))
    return b.build()


def test_an_unchanged_graph_gives_the_same_topo():
    g = _graph()
    t = Topo.of(g)
    g.nodes[0].stream_id = 2                 # not an edge
    assert Topo.of(g) is t
    assert [n.name for n in t.order] == ["p", "q", "s"] and t.preds == [[], [], [0, 1]]


def test_an_edit_gives_a_new_topo():
    g = _graph()
    t = Topo.of(g)
    p, q, _ = g.nodes
    p.control_preds.append(q)
    u = Topo.of(g)
    assert u is not t and [n.name for n in u.order] == ["q", "p", "s"]
    g.invalidate()
    assert Topo.of(g) is not u
    v = Topo.of(g)
    q.set_input(0, Value("other"))           # (a value of no node: no new edge, still an edit)
    assert Topo.of(g) is not v


def test_the_compiled_model_keeps_no_topo():
    m = pyge.compile(_graph(), options={"ge.autoMultistreamParallelMode": "LoadBalance:4"})
    assert "streams.topo" not in m.graph._derived


def test_the_batch_placement_checks_as_set_stream_id_does():
    from pyge.options import parse_options
    from pyge.passes.custom.context import GRAPH_FAILED, GRAPH_SUCCESS, StreamBook, StreamPassContext
    g = _graph()
    other = _graph()
    ctx = StreamPassContext(g, parse_options(None), StreamBook(3))
    p, q, s = g.nodes
    assert ctx._set_stream_ids([p, q], 1) == GRAPH_FAILED          # outside a pass call
    ctx._begin("t")
    assert ctx._set_stream_ids([p, q], 2) == GRAPH_SUCCESS and (p.stream_id, q.stream_id) == (2, 2)
    assert ctx._set_stream_ids([s], 4) == GRAPH_FAILED and "outside 0..3" in ctx.get_error_message()
    assert ctx._set_stream_ids([s, other.nodes[0]], 3) == GRAPH_FAILED
    assert s.stream_id == 3 and other.nodes[0].stream_id != 3
    assert "not to graph" in ctx.get_error_message()
