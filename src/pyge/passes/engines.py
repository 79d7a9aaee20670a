"""Engine of every op type (minimal first version: everything is a compute op)."""
from __future__ import annotations

from ..ir.graph import Graph


def assign_engines(graph: Graph) -> None:
    for g in graph.all_graphs():
        for n in g.nodes:
            n.engine = "compute"
