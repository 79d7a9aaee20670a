"""Built-in logical stream allocation (minimal first version: one stream)."""
from __future__ import annotations

from ...ir.graph import Graph
from ...options import Options


def allocate_streams(graph: Graph, options: Options) -> None:
    for g in graph.all_graphs():
        for n in g.nodes:
            n.stream_id = 0
