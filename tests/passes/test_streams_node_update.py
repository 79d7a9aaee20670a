"""GE's NodeStreamUpdatePass: nodes take their cluster's stream; unlabelled skip clusters wait
for the skip rule, any other cluster without a stream is an internal error naming it."""
from __future__ import annotations

import pytest

import pyge
from pyge.ir.clone import clone_graph
from pyge.passes.graph.engines import assign_engines
from pyge.passes.streams.clusters import build_clusters
from pyge.passes.streams.node_update import update_nodes


def _graph():
    b = pyge.GraphBuilder("upd")
    x = b.input("x", "float32", (2, 2))
    r = b.op("Reshape", [b.op("Relu", [x], name="a"), b.constant([4])], name="view")
    b.graph.outputs.append(b.op("Abs", [r], name="c"))
    g = clone_graph(b.build())
    assign_engines(g)
    return g


def test_nodes_take_their_clusters_stream_and_skip_clusters_wait():
    g = _graph()
    clusters = build_clusters(g)
    for c in clusters:
        if c.kind != "skip":
            c.stream = 7
    assert update_nodes(clusters) == 2
    assert {n.name: n.stream_id for n in g.nodes} == {"a": 7, "view": -1, "c": 7}


def test_a_compute_cluster_without_stream_is_an_internal_error():
    clusters = build_clusters(_graph())
    with pytest.raises(pyge.PassError, match=r"cluster 0 \(engine compute, first node 'a' \(Relu\)\) without a stream"):
        update_nodes(clusters)
