"""Rule 5: a node between other streams joins a neighbour's stream when that costs no overlap."""
from __future__ import annotations

from hypothesis import given, settings
from hypothesis import strategies as st

import pyge
from pyge.ir.clone import clone_graph
from pyge.passes.graph.engines import assign_engines
from pyge.passes.streams.context import StreamContext
from pyge.passes.streams.pull import pull_isolated

from _dags import sum_dags


def _prepared(g, streams: dict[str, int]):
    g = clone_graph(g)
    assign_engines(g)
    for n in g.nodes:
        n.stream_id = streams[n.name]
    return g


def _chain():
    """pre -> x0 -> a -> z -> post (pre and post keep x0 and z company on their stream)."""
    b = pyge.GraphBuilder("chain")
    pre = b.op("Exp", [b.input("x", "float32", (4,))], name="pre")
    a = b.op("Relu", [b.op("Relu", [pre], name="x0")], name="a")
    b.graph.outputs.append(b.op("Neg", [b.op("Abs", [a], name="z")], name="post"))
    return b.build()


def _diamond(b_attrs=None):
    b = pyge.GraphBuilder("diamond")
    x = b.op("Relu", [b.input("x", "float32", (4,))], name="x0")
    a = b.op("Abs", [x], name="a")
    bb = b.op("Neg", [x], name="b", **(b_attrs or {}))
    b.graph.outputs.append(b.op("Add", [a, bb], name="z"))
    return b.build()


def test_lonely_node_moves_to_the_first_neighbour_that_costs_no_overlap():
    """x0 (alone on stream 0) -> a -> z (stream 1): x0 joins a, then everything is one stream."""
    b = pyge.GraphBuilder("short")
    a = b.op("Relu", [b.op("Relu", [b.input("x", "float32", (4,))], name="x0")], name="a")
    b.graph.outputs.append(b.op("Abs", [a], name="z"))
    g = _prepared(b.build(), {"x0": 0, "a": 1, "z": 0})
    assert pull_isolated(g, StreamContext(next_stream=2)) == 2
    assert {n.stream_id for n in g.nodes} == {1}


def test_hop_in_a_chain_is_pulled_back():
    g = _prepared(_chain(), {"pre": 0, "x0": 0, "a": 1, "z": 0, "post": 0})
    assert pull_isolated(g, StreamContext(next_stream=2)) == 1
    assert g.node("a").stream_id == 0


def test_parallel_branch_is_not_pulled():
    g = _prepared(_diamond(), {"x0": 0, "a": 0, "b": 1, "z": 0})
    assert pull_isolated(g, StreamContext(next_stream=2)) == 0
    assert g.node("b").stream_id == 1


def test_node_sharing_a_stream_with_a_neighbour_stays():
    g = _prepared(_chain(), {"pre": 0, "x0": 0, "a": 1, "z": 1, "post": 1})
    assert pull_isolated(g, StreamContext(next_stream=2)) == 0


def test_labelled_nodes_and_label_streams_are_exempt():
    g = _prepared(_diamond({"_stream_label": "L"}), {"x0": 0, "a": 0, "b": 1, "z": 0})
    assert pull_isolated(g, StreamContext(next_stream=2)) == 0
    # a node alone between a labelled stream and its own is not pulled onto the labelled one
    g = _prepared(_chain(), {"pre": 0, "x0": 0, "a": 1, "z": 0, "post": 0})
    ctx = StreamContext(next_stream=2, label_streams={"L": 0})
    assert pull_isolated(g, ctx) == 0


def test_prefers_the_stream_with_most_neighbours():
    b = pyge.GraphBuilder("vote")
    x = b.input("x", "float32", (4,))
    p = b.op("Relu", [b.op("Exp", [x], name="pre")], name="p")
    m = b.op("Abs", [p], name="m")
    b.graph.outputs += [b.op("Neg", [m], name="c1"), b.op("Exp", [m], name="c2")]
    g = _prepared(b.build(), {"pre": 0, "p": 0, "m": 1, "c1": 2, "c2": 2})
    pull_isolated(g, StreamContext(next_stream=3))
    assert g.node("m").stream_id == 2


# -- property: a pulled node never shares a stream with a node it could overlap -------------

@st.composite
def assigned_dags(draw):
    g = draw(sum_dags(max_nodes=10, max_inputs=2))
    return g, {n.name: draw(st.integers(0, 3)) for n in g.nodes}


def _reachable(a, b) -> bool:
    todo, seen = [a], set()
    while todo:
        n = todo.pop()
        if n is b:
            return True
        if id(n) not in seen:
            seen.add(id(n))
            todo.extend(n.successors)
    return False


@settings(max_examples=80, deadline=None)
@given(assigned_dags())
def test_pulled_nodes_only_join_ordered_nodes(case):
    graph, streams = case
    g = _prepared(graph, streams)
    pull_isolated(g, StreamContext(next_stream=4))
    for n in g.nodes:
        if n.stream_id == streams[n.name]:
            continue
        for m in g.nodes:
            if m is not n and m.stream_id == n.stream_id:
                assert _reachable(m, n) or _reachable(n, m), f"{n.name} overlaps {m.name}"


@settings(max_examples=80, deadline=None)
@given(assigned_dags())
def test_pull_never_adds_cross_stream_edges(case):
    graph, streams = case
    g = _prepared(graph, streams)

    def cross():
        return sum(p.stream_id != n.stream_id for n in g.nodes for p in n.predecessors)
    before = cross()
    pull_isolated(g, StreamContext(next_stream=4))
    assert cross() <= before


# -- property: the bounded searches give exactly the all-pairs reachability answers ---------

def _reference_pull(g, ctx) -> int:
    """The rule as first written: ancestor/descendant sets of every node as bitsets."""
    from pyge.passes.graph.engines import INDEPENDENT, kind_of
    from pyge.passes.streams._graph import label_of
    order = g.topological_sort()
    index = {id(n): i for i, n in enumerate(order)}
    related = [1 << i for i in range(len(order))]
    for i, n in enumerate(order):
        for p in n.predecessors:
            if id(p) in index:
                related[i] |= related[index[id(p)]] & ((1 << i) - 1)   # ancestors of i
    down = [1 << i for i in range(len(order))]
    for i in reversed(range(len(order))):
        for p in order[i].predecessors:
            if id(p) in index:
                down[index[id(p)]] |= down[i]
    related = [a | d for a, d in zip(related, down)]
    pinned, moved = ctx.pinned_streams(), 0
    for i, n in enumerate(order):
        if label_of(n) is not None or kind_of(n) == INDEPENDENT:
            continue
        nb = [*n.predecessors, *n.successors]
        streams = [m.stream_id for m in nb]
        if not nb or n.stream_id in streams:
            continue
        first = {s: k for k, s in reversed(list(enumerate(streams)))}
        for s in sorted(set(streams) - pinned, key=lambda s: (-streams.count(s), first[s])):
            on_s = sum(1 << k for k, m in enumerate(order) if m.stream_id == s)
            if s >= 0 and on_s & ~related[i] == 0:
                n.stream_id, moved = s, moved + 1
                break
    return moved


@st.composite
def wider_dags(draw):
    """Up to 40 nodes reading up to 3 of the previous 8 values, 1-6 streams, some pinned."""
    g = draw(sum_dags(max_nodes=40, max_inputs=3, window=8))
    k = draw(st.integers(1, 6))
    streams = {n.name: draw(st.integers(0, k - 1)) for n in g.nodes}
    pinned = draw(st.sets(st.integers(0, k - 1), max_size=1))
    return g, streams, pinned


@settings(max_examples=300, deadline=None)
@given(wider_dags())
def test_pull_matches_all_pairs_reachability(case):
    graph, streams, pinned = case
    g, h = _prepared(graph, streams), _prepared(graph, streams)
    labels = {f"L{s}": s for s in pinned}
    got = pull_isolated(g, StreamContext(next_stream=6, label_streams=dict(labels)))
    want = _reference_pull(h, StreamContext(next_stream=6, label_streams=dict(labels)))
    assert got == want
    assert {n.name: n.stream_id for n in g.nodes} == {n.name: n.stream_id for n in h.nodes}
