"""GE's AssignByDependencyPass on clusters: a cluster continues a predecessor's stream, else
round-robin new streams per engine. With GE's clusters a connected one-engine graph is one
cluster; the round-robin shows on clusters that cannot merge (unconnected branches, or
branches behind another engine), and on single nodes under pyge.streamAllocation=nodes."""
from __future__ import annotations

from hypothesis import given, settings
from hypothesis import strategies as st

import pyge
from pyge.ir.clone import clone_graph
from pyge.passes.graph.engines import assign_engines
from pyge.passes.streams import allocate_streams
from pyge.passes.streams.clusters import build_clusters
from pyge.passes.streams.context import StreamContext
from pyge.passes.streams.dependency import assign_by_dependency
from pyge.passes.streams.node_update import update_nodes

from _dags import sum_dags


NODES = {"pyge.streamAllocation": "nodes"}


def _alloc(g, **options):
    g = clone_graph(g)
    assign_engines(g)
    allocate_streams(g, options)
    return {n.name: n.stream_id for n in g.nodes}


def _branches(n_branches: int, length: int = 2):
    """n unconnected chains over one input: n clusters that cannot merge."""
    b = pyge.GraphBuilder("branches")
    x = b.input("x", "float32", (4,))
    for i in range(n_branches):
        v = x
        for j in range(length):
            v = b.op("Relu", [v], name=f"b{i}_{j}")
        b.graph.outputs.append(v)
    return b.build()


def _fork(n_branches: int):
    """x -> root -> b0..bN-1 -> join (Sum)."""
    b = pyge.GraphBuilder("fork")
    root = b.op("Relu", [b.input("x", "float32", (4,))], name="root")
    outs = [b.op("Abs", [root], name=f"b{i}") for i in range(n_branches)]
    b.graph.outputs.append(b.op("Sum", outs, name="join"))
    return b.build()


def test_chain_stays_on_one_stream():
    b = pyge.GraphBuilder("chain")
    v = b.input("x", "float32", (4,))
    for i in range(5):
        v = b.op("Relu", [v], name=f"n{i}")
    b.graph.outputs.append(v)
    assert set(_alloc(b.build()).values()) == {0}


def test_default_is_one_stream_per_engine_as_in_ge():
    assert set(_alloc(_fork(4)).values()) == {0}
    assert set(_alloc(_branches(3)).values()) == {0}


def test_a_fork_is_one_cluster_whatever_the_parallel_number():
    assert set(_alloc(_fork(4), **{"ge.streamMaxParallelNum": "4"}).values()) == {0}


def test_unconnected_clusters_round_robin_up_to_the_parallel_number():
    s = _alloc(_branches(4), **{"ge.streamMaxParallelNum": "2"})
    assert s["b0_0"] == s["b0_1"] == s["b2_0"] != s["b1_0"] == s["b3_1"]
    assert len(set(s.values())) == 2


def test_first_successor_continues_others_open_new_streams():
    s = _alloc(_fork(2), **{"ge.streamMaxParallelNum": "2"}, **NODES)
    assert s["root"] == s["b0"] == s["join"]   # join continues its first input's stream
    assert s["b1"] != s["b0"]


def test_new_streams_round_robin_up_to_the_parallel_number_per_node():
    s = _alloc(_fork(4), **{"ge.streamMaxParallelNum": "2"}, **NODES)
    # root opened stream slot 0 and hands it to b0; b1 opens slot 1, b2 wraps to slot 0, b3 slot 1.
    assert s["b0"] == s["b2"] == s["root"]
    assert s["b1"] == s["b3"] != s["b0"]
    assert len(set(s.values())) == 2


def test_parallel_number_per_engine():
    s = _alloc(_branches(3), **{"ge.streamMaxParallelNum": "compute:3"})
    assert len({s["b0_0"], s["b1_0"], s["b2_0"]}) == 3


def test_a_cluster_continues_through_another_engines_cluster_only_if_it_rode_on_it():
    """compute -> If (attach) -> compute: the If rides on the first stream and the second
    compute cluster continues it (GE's reused_subgraph); behind a collective (independent)
    it opens its own."""
    b = pyge.GraphBuilder("through")
    x = b.input("x", "float32", (4,))
    a = b.op("Relu", [x], name="a")
    seq = b.op("SequenceConstruct", [a], name="seq")
    c = b.op("SequenceAt", [seq, b.constant(0)], name="at")
    d = b.op("Abs", [c], name="d")
    ar = b.op("AllReduce", [a], name="ar")
    e = b.op("Neg", [ar], name="e")
    b.graph.outputs += [d, e]
    s = _alloc(b.build(), **{"ge.streamMaxParallelNum": "4"})
    assert s["a"] == s["seq"] == s["at"] == s["d"]
    assert s["e"] not in (s["a"], s["ar"])


def test_skip_nodes_are_looked_through():
    """root -> Reshape -> (p, q): p continues root's stream through the Reshape; q does not."""
    b = pyge.GraphBuilder("through")
    x = b.input("x", "float32", (2, 2))
    root = b.op("Relu", [x], name="root")
    r = b.op("Reshape", [root, b.constant([4])], name="reshape")
    p = b.op("Abs", [r], name="p")
    q = b.op("Neg", [r], name="q")
    b.graph.outputs.append(b.op("Add", [p, q], name="add"))
    s = _alloc(b.build(), **{"ge.streamMaxParallelNum": "2"}, **NODES)
    assert s["root"] == s["p"] == s["reshape"] == s["add"]
    assert s["q"] != s["p"]


def test_attach_node_rides_on_its_producers_stream():
    b = pyge.GraphBuilder("attach")
    x = b.input("x", "float32", (4,))
    root = b.op("Relu", [x], name="root")
    a = b.op("Abs", [root], name="a")
    seq = b.op("SequenceConstruct", [root], name="seq")
    b.graph.outputs += [a, seq]
    s = _alloc(b.build(), **{"ge.streamMaxParallelNum": "4"}, **NODES)
    assert s["root"] == s["a"] == s["seq"]   # the attach node does not use up the hand-off


# -- property: on random DAGs, with enough streams, each stream is a chain handed down -----

def dags():
    return sum_dags(max_nodes=12, max_inputs=3)


def _run_rule(g, parallel):
    """The dependency rule alone, on single-node clusters (pyge's per-node rules)."""
    g = clone_graph(g)
    assign_engines(g)
    clusters = build_clusters(g, merge=False)
    assign_by_dependency(clusters, StreamContext(max_parallel={"*": parallel}))
    update_nodes(clusters)
    return g


@settings(max_examples=60, deadline=None)
@given(dags())
def test_each_stream_is_a_chain_of_hand_offs(g):
    g = _run_rule(g, parallel=64)
    order = g.topological_sort()
    pos = {id(n): i for i, n in enumerate(order)}

    def handed_before(p, v):   # p gave its stream to another successor before v came
        return any(w is not v and w.stream_id == p.stream_id and pos[id(w)] < pos[id(v)]
                   for w in p.successors)

    seen: dict[int, object] = {}
    for v in order:
        prev = seen.get(v.stream_id)
        preds = v.predecessors
        if prev is None:      # opened a stream: every predecessor had handed its stream on
            assert all(handed_before(p, v) for p in preds)
        else:                 # continued the first predecessor that had not handed it on
            assert prev in preds
            first = next(p for p in preds if not handed_before(p, v))
            assert first is prev
        seen[v.stream_id] = v


@settings(max_examples=40, deadline=None)
@given(dags(), st.integers(1, 4))
def test_at_most_parallel_num_streams_and_deterministic(g, parallel):
    a = _run_rule(g, parallel)
    b = _run_rule(g, parallel)
    sa = [n.stream_id for n in a.nodes]
    assert sa == [n.stream_id for n in b.nodes]
    assert min(sa) >= 0 and len(set(sa)) <= parallel


def test_ge_engine_names_are_accepted_for_parallel_num():
    """A GE user's `AIcoreEngine:2` means the compute engine, as in GE."""
    import pyge
    from pyge.examples import reference_graph
    from pyge.passes.streams.context import check_parallel_num
    assert check_parallel_num({"AIcoreEngine": 2, "DNN_HCCL": 3}) == {"compute": 2, "independent": 3}
    m = pyge.compile(reference_graph(), options={"ge.streamMaxParallelNum": "AIcoreEngine:2",
                                                 "pyge.streamAllocation": "nodes"})
    assert m.num_streams == 2
    assert m.stream_of("Abs_1") != m.stream_of("Relu_1")


def test_one_engine_named_twice_through_ge_names_is_an_error():
    import pytest
    from pyge.examples import reference_graph
    with pytest.raises(pyge.OptionError, match=r"names engine 'compute' twice \('compute' and 'AIcoreEngine'\)"):
        pyge.compile(reference_graph(), options={"ge.streamMaxParallelNum": "compute:2,AIcoreEngine:3"})
