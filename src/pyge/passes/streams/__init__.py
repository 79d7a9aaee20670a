"""Built-in logical stream allocation (compiler pass 6): GE's chain of small rules.

Per graph (the root graph first, then every subgraph, sharing one stream counter):

    1 labels.assign_by_label          nodes with the same stream label share a stream
    2 independent.assign_independent  independent engines get their own streams
    3 dependency.assign_by_dependency continue a producer's stream, or round-robin new ones
      (or auto.assign_auto            ge.autoMultistreamParallelMode=LoadBalance:N / MainStream:N)
    4 skip.assign_skipped             skip-engine nodes take their neighbours' stream
    5 pull.pull_isolated              a node alone between other streams joins a neighbour's

With ge.enableSingleStream=true, single.assign_single_stream puts everything on stream 0
instead. Afterwards every node has a stream id >= 0; ids may have holes until
passes/renumber.py closes them (after the custom passes).
"""
from __future__ import annotations

import logging
from typing import Any, Mapping

from ...errors import PassError
from ...ir.graph import Graph
from ...options import Options, parse_options
from .auto import assign_auto
from .context import StreamContext, check_parallel_num
from .dependency import assign_by_dependency
from .independent import assign_independent
from .labels import assign_by_label
from .pull import pull_isolated
from .single import assign_single_stream
from .skip import assign_skipped

log = logging.getLogger(__name__)

AUTO_KEY = "ge.autoMultistreamParallelMode"


def allocate_streams(graph: Graph, options: Options | Mapping[str, Any] | None = None) -> int:
    """Set `node.stream_id` for every node of `graph` and its subgraphs; returns the number
    of stream ids drawn (an upper bound on the streams in use)."""
    opts = parse_options(options)
    for g in graph.all_graphs():
        for n in g.nodes:
            n.stream_id = -1
    if opts.single_stream:
        assign_single_stream(graph)
        return 1
    ctx = StreamContext(max_parallel=check_parallel_num(opts["ge.streamMaxParallelNum"]))
    auto = opts[AUTO_KEY]
    for g in graph.all_graphs():
        ctx.default_stream = g.parent.stream_id if g.parent is not None else None
        allocate_graph(g, ctx, auto)
    return ctx.next_stream


def allocate_graph(g: Graph, ctx: StreamContext, auto: tuple[str, int] | None = None) -> None:
    """Run the rule chain on one graph's direct nodes."""
    assign_by_label(g, ctx)
    assign_independent(g, ctx)
    if auto is None:
        assign_by_dependency(g, ctx)
    else:
        assign_auto(g, ctx, auto[0], auto[1])
    assign_skipped(g, ctx)
    pull_isolated(g, ctx)
    missing = [n for n in g.nodes if n.stream_id < 0]
    if missing:  # an internal invariant, not a user error: say which node, to ease the report
        raise PassError(f"stream allocation left node {missing[0].name!r} ({missing[0].op_type}) "
                        f"of graph {g.name!r} without a stream")


__all__ = ["allocate_streams", "allocate_graph", "StreamContext"]
