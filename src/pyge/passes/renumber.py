"""Renumber used stream ids to 0..N-1 with no holes."""
from __future__ import annotations

from ..ir.graph import Graph


def renumber_streams(graph: Graph, custom_ids: set[int]) -> tuple[int, list[int]]:
    used = sorted({n.stream_id for g in graph.all_graphs() for n in g.nodes} | {0})
    remap = {old: new for new, old in enumerate(used)}
    for g in graph.all_graphs():
        for n in g.nodes:
            n.stream_id = remap[n.stream_id]
    return len(used), sorted(remap[c] for c in custom_ids if c in remap)
