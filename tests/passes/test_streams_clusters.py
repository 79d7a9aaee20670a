"""GE's EnginePartitioner clusters: merging along edges, same engine and label, no cycles.
Checked against a plain re-implementation that searches second paths without GE's bound."""
from __future__ import annotations

from hypothesis import given, settings
from hypothesis import strategies as st

import pyge
from pyge.ir.clone import clone_graph
from pyge.passes.graph.engines import assign_engines
from pyge.passes.streams.clusters import build_clusters


def _clusters(g, merge=True):
    g = clone_graph(g)
    assign_engines(g)
    return g, build_clusters(g, merge=merge)


def _groups(clusters) -> list[list[str]]:
    return [[n.name for n in c.nodes] for c in clusters]


def test_a_fork_and_join_of_one_engine_is_one_cluster():
    g = pyge.examples.reference_graph((2, 2))
    _, cs = _clusters(g)
    assert _groups(cs) == [["Relu_1", "Abs_1", "Add_1"]]


def test_unconnected_branches_are_not_merged():
    b = pyge.GraphBuilder("two")
    x = b.input("x", "float32", (4,))
    b.graph.outputs += [b.op("Abs", [b.op("Relu", [x], name="a")], name="b"),
                        b.op("Neg", [b.op("Exp", [x], name="c")], name="d")]
    _, cs = _clusters(b.build())
    assert _groups(cs) == [["a", "b"], ["c", "d"]]


def test_no_merge_across_a_second_path_through_another_engine():
    """a -> ar (collective) -> c and a -> c: merging a and c would put ar both before and
    after the merged cluster."""
    b = pyge.GraphBuilder("cycle")
    x = b.input("x", "float32", (4,))
    a = b.op("Relu", [x], name="a")
    ar = b.op("AllReduce", [a], name="ar")
    b.graph.outputs.append(b.op("Add", [a, ar], name="c"))
    _, cs = _clusters(b.build())
    assert _groups(cs) == [["a"], ["ar"], ["c"]]
    assert [c.engine for c in cs] == ["compute", "independent", "compute"]


def test_labels_split_clusters_and_user_labels_merge_across_engines():
    b = pyge.GraphBuilder("labels")
    x = b.input("x", "float32", (4,))
    a = b.op("Relu", [x], name="a", _stream_label="L")
    c = b.op("Abs", [a], name="c")
    u1 = b.op("Neg", [c], name="u1", _user_stream_label="U")
    u2 = b.op("AllReduce", [u1], name="u2", _user_stream_label="U")
    b.graph.outputs.append(u2)
    _, cs = _clusters(b.build())
    assert _groups(cs) == [["a"], ["c"], ["u1", "u2"]]
    assert cs[0].label == "L" and cs[2].user_label == "U"


def test_constant_nodes_stay_alone_and_per_node_mode_merges_nothing():
    b = pyge.GraphBuilder("const")
    x = b.input("x", "float32", (4,))
    k = b.op("Constant", [], name="k", value=pyge.ir.builder.np.ones(4, "float32"))
    b.graph.outputs.append(b.op("Abs", [b.op("Add", [x, k], name="add")], name="abs"))
    _, cs = _clusters(b.build())
    assert ["k"] in _groups(cs) and ["add", "abs"] in _groups(cs)
    _, single = _clusters(b.build(), merge=False)
    assert all(len(c.nodes) == 1 for c in single)


# -- property: the same as an unbounded re-implementation, and acyclic -------------------------

@st.composite
def two_engine_dags(draw, max_nodes: int = 12):
    """Random DAGs whose nodes are compute (Relu/Add) or independent (AllReduce) ops."""
    n = draw(st.integers(2, max_nodes))
    b = pyge.GraphBuilder("rand")
    vals = [b.input("x", "float32", (4,))]
    for i in range(n):
        k = draw(st.integers(1, min(2, len(vals))))
        ins = draw(st.lists(st.sampled_from(vals), min_size=k, max_size=k, unique_by=id))
        if draw(st.booleans()) and k == 1 and i % 3 == 0:
            vals.append(b.op("AllReduce", ins, name=f"n{i}"))
        else:
            vals.append(b.op("Sum", ins, name=f"n{i}"))
    b.graph.outputs.append(vals[-1])
    return b.build()


def _reference(g) -> list[list[str]]:
    """MarkClusters with the second path searched over the whole cluster graph."""
    order = g.topological_sort()
    idx = {id(n): i for i, n in enumerate(order)}
    member = {i: {i} for i in range(len(order))}
    of = list(range(len(order)))
    edges = {(idx[id(p)], i) for i, n in enumerate(order) for p in n.predecessors}

    def cedges():
        return {(of[a], of[b]) for a, b in edges if of[a] != of[b]}

    def reach(src, dst, skip_direct):
        e = cedges()
        stack, seen = [src], set()
        while stack:
            x = stack.pop()
            for a, b in e:
                if a == x and not (skip_direct and a == src and b == dst):
                    if b == dst:
                        return True
                    if b not in seen:
                        seen.add(b)
                        stack.append(b)
        return False
    for c in range(len(order)):
        parents = sorted({a for a, b in cedges() if b == c},
                         key=lambda p: (len({b for a, b in cedges() if a == p}), p))
        merged = c
        for p in parents:
            same = order[p].engine == order[c].engine
            if same and not reach(p, merged, skip_direct=True):
                small, big = min(p, merged), max(p, merged)
                for i in member[big]:
                    of[i] = small
                member[small] |= member.pop(big)
                merged = small
    return [[order[i].name for i in sorted(member[k])] for k in sorted(member)]


@settings(max_examples=60, deadline=None)
@given(two_engine_dags())
def test_clusters_match_the_unbounded_search_and_stay_acyclic(g):
    g, cs = _clusters(g)
    assert _groups(cs) == _reference(g)
    # the cluster graph is a DAG (Kahn's algorithm removes every cluster)
    indeg = {id(c): len(c.preds) for c in cs}
    succs: dict[int, list] = {id(c): [] for c in cs}
    for c in cs:
        for p in c.preds:
            succs[id(p)].append(c)
    ready = [c for c in cs if indeg[id(c)] == 0]
    done = 0
    while ready:
        c = ready.pop()
        done += 1
        for d in succs[id(c)]:
            indeg[id(d)] -= 1
            if indeg[id(d)] == 0:
                ready.append(d)
    assert done == len(cs)
