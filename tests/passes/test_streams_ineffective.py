"""GE's OptimizeIneffectiveMultiStreamPass: a node alone between streams moves onto a stream
that holds its closest producer and consumer with nothing between them. Checked against a
direct transcription of GE's rule on random DAGs with random streams."""
from __future__ import annotations

from hypothesis import given, settings
from hypothesis import strategies as st

import pyge
from pyge.ir.clone import clone_graph
from pyge.passes.graph.engines import assign_engines
from pyge.passes.streams.ineffective import undo_ineffective
from pyge.passes.streams._graph import label_of

from _dags import sum_dags


def _chain_with_detour(label: dict | None = None):
    """x -> a -> m -> c, with a and c on stream 0 and m alone on stream 1."""
    b = pyge.GraphBuilder("detour")
    x = b.input("x", "float32", (4,))
    a = b.op("Relu", [x], name="a")
    m = b.op("Abs", [a], name="m", **(label or {}))
    b.graph.outputs.append(b.op("Neg", [m], name="c"))
    g = b.build()
    assign_engines(g)
    for n, s in zip(g.nodes, (0, 1, 0)):
        n.stream_id = s
    return g


def test_a_node_alone_between_two_neighbours_joins_their_stream():
    g = _chain_with_detour()
    assert undo_ineffective(g) == 1
    assert [n.stream_id for n in g.nodes] == [0, 0, 0]


def test_a_node_stays_when_its_stream_holds_a_neighbour_or_it_is_labelled():
    g = _chain_with_detour({"_stream_label": "L"})
    assert undo_ineffective(g) == 0
    g = _chain_with_detour()
    g.node("c").stream_id = 1          # m's consumer shares its stream now
    assert undo_ineffective(g) == 0


def test_a_node_stays_when_something_could_overlap_it_there():
    """x -> a -> m -> c and a -> o -> c, with o on a and c's stream between them: m could run
    beside o, so it keeps its stream."""
    b = pyge.GraphBuilder("overlap")
    x = b.input("x", "float32", (4,))
    a = b.op("Relu", [x], name="a")
    m = b.op("Abs", [a], name="m")
    o = b.op("Exp", [a], name="o")
    b.graph.outputs.append(b.op("Add", [m, o], name="c"))
    g = b.build()
    assign_engines(g)
    for n in g.nodes:
        n.stream_id = 1 if n.name == "m" else 0
    assert undo_ineffective(g) == 0 and g.node("m").stream_id == 1


def test_a_labelled_stream_takes_nobody():
    g = _chain_with_detour()
    g.node("a").attrs["_stream_label"] = "L"
    assert undo_ineffective(g) == 0


def _oracle(g) -> list[int]:
    """GE's rule, transcribed without the indexes: per node, scan every stream's members."""
    order = g.topological_sort()
    pos = {id(n): i for i, n in enumerate(order)}
    stream = {id(n): n.stream_id for n in order}
    label_streams = {n.stream_id for n in order if label_of(n) is not None}
    for n in order:
        if label_of(n) is not None:
            continue
        own = stream[id(n)]
        ins, outs = n.predecessors, n.successors
        if any(stream[id(p)] == own for p in ins) or any(stream[id(q)] == own for q in outs):
            continue
        for t in sorted({stream[id(p)] for p in ins}):
            if t in label_streams:
                continue
            before = max((pos[id(p)] for p in ins if stream[id(p)] == t), default=None)
            after = min((pos[id(q)] for q in outs if stream[id(q)] == t), default=None)
            if before is None or after is None:
                continue
            between = [m for m in order if stream[id(m)] == t and before < pos[id(m)] < after]
            if not between:
                stream[id(n)] = t
    return [stream[id(n)] for n in order]


@settings(max_examples=80, deadline=None)
@given(sum_dags(max_nodes=12, max_inputs=3), st.data())
def test_matches_a_direct_transcription_of_ge_s_rule(g, data):
    g = clone_graph(g)
    assign_engines(g)
    for n in g.nodes:
        n.stream_id = data.draw(st.integers(0, 3))
    want = _oracle(g)
    undo_ineffective(g)
    assert [n.stream_id for n in g.topological_sort()] == want
