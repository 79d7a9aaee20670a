"""Built-in logical stream allocation: GE's LogicalStreamAllocator, on the model's root graph.

The chain, as GE runs it (each step in its own module):

    clusters.build_clusters        engine clusters (GE's EnginePartitioner)
    labels.assign_by_label         clusters with one stream label share a stream
    independent.assign_independent independent engines (collectives) get their own streams
    dependency.assign_by_dependency continue a predecessor's stream, else round-robin new ones
    node_update.update_nodes       nodes take their cluster's stream
    skip.assign_skipped            skip-engine nodes take a neighbour's stream
    ineffective.undo_ineffective   multi-stream that cannot pay is undone

With `pyge.streamAllocation=nodes` the same rules work on single nodes instead of clusters,
and pull.pull_isolated (pyge's own rule) replaces the last step. With ge.enableSingleStream
=true, single.assign_single_stream puts everything on stream 0 instead.

Control-flow bodies have no streams of their own: follow.follow_parents puts every subgraph
node on its root-graph ancestor's stream (again after the stream passes). The automatic mode
(ge.autoMultistreamParallelMode) is not part of this chain: it is GE's built-in DAG stream
pass (auto.py), which runs with the custom stream passes. Ids may have holes until
passes/streams/renumber.py closes them.
"""
from __future__ import annotations

import logging
from typing import Any, Mapping

from ...errors import PassError
from ...ir.graph import Graph
from ...options import Options, parse_options
from ._graph import Topo
from .clusters import Cluster, build_clusters
from .context import StreamContext, check_parallel_num
from .dependency import assign_by_dependency
from .follow import follow_parents
from .independent import assign_independent
from .ineffective import undo_ineffective
from .labels import assign_by_label
from .node_update import update_nodes
from .pull import pull_isolated
from .single import assign_single_stream
from .skip import assign_skipped

log = logging.getLogger(__name__)

AUTO_KEY = "ge.autoMultistreamParallelMode"


def allocate_streams(graph: Graph, options: Options | Mapping[str, Any] | None = None) -> StreamContext:
    """Set `node.stream_id` for every node of `graph` and its subgraphs. Returns the context,
    whose `max_drawn` is the largest stream id drawn (what the stream passes start from)."""
    opts = parse_options(options)
    for g in graph.all_graphs():
        for n in g.nodes:
            n.stream_id = -1
    if opts.single_stream:
        assign_single_stream(graph)
        return StreamContext(next_stream=1)
    ctx = StreamContext(max_parallel=check_parallel_num(opts["ge.streamMaxParallelNum"]))
    allocate_graph(graph, ctx, per_node=opts["pyge.streamAllocation"] == "nodes")
    follow_parents(graph)
    return ctx


def allocate_graph(g: Graph, ctx: StreamContext, per_node: bool = False) -> list[Cluster]:
    """Run the rule chain on one graph's direct nodes; returns its clusters."""
    topo = Topo.of(g)
    clusters = build_clusters(g, merge=not per_node, topo=topo)
    assign_by_label(clusters, ctx)
    assign_independent(clusters, ctx)
    assign_by_dependency(clusters, ctx)
    update_nodes(clusters)
    assign_skipped(g, ctx, topo=topo)
    if per_node:
        pull_isolated(g, ctx)
    else:
        undo_ineffective(g, topo)
    missing = [n for n in g.nodes if n.stream_id < 0]
    if missing:  # an internal invariant, not a user error: say which node, to ease the report
        raise PassError(f"stream allocation left node {missing[0].name!r} ({missing[0].op_type}) "
                        f"of graph {g.name!r} without a stream")
    log.debug("graph %s: %d cluster(s), stream ids 0..%d drawn", g.name, len(clusters), ctx.max_drawn)
    return clusters


__all__ = ["allocate_streams", "allocate_graph", "StreamContext", "follow_parents", "AUTO_KEY"]
