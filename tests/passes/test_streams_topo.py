"""passes/streams/_graph.Topo.of: one Topo per graph version, shared by the built-in stream
allocation and the DAG stream pass, and not kept on the compiled model."""
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
