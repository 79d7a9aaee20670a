"""ge.enableSingleStream=true (GE's SingleStreamPass): every node on stream 0.

Stream labels ask for streams of their own, which a single stream cannot give: GE refuses
them, and so does pyge.
"""
from __future__ import annotations

from ...errors import PassError
from ...ir.graph import Graph
from ._graph import label_of


def assign_single_stream(graph: Graph) -> int:
    """Put every node of `graph` and its subgraphs on stream 0; returns how many nodes."""
    count = 0
    for g in graph.all_graphs():
        for n in g.nodes:
            label = label_of(n)
            if label is not None:
                raise PassError(f"node {n.name!r} ({n.op_type}) in graph {g.name!r} has stream label "
                                f"{label!r}, but ge.enableSingleStream=true allows no stream labels "
                                f"(remove the label or set ge.enableSingleStream=false)")
            n.stream_id = 0
            count += 1
    return count
