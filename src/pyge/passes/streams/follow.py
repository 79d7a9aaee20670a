"""Control-flow bodies run on their parent node's stream.

pyge runs an If/Loop/Scan body inside its node's launch, on that node's stream, so a body
node has no stream of its own: after the stream passes every subgraph node takes the stream
of the root-graph node that (transitively) owns it. The ids therefore never count towards
the model's streams, and a pass that moves an If node moves its bodies with it.
"""
from __future__ import annotations

from ...ir.graph import Graph
from ...ir.node import holds_graph


def follow_parents(graph: Graph) -> int:
    """Give every node of `graph`'s subgraphs its root-graph ancestor's stream; returns how many."""
    count = 0
    for n in graph.nodes:
        if not n.attrs or not holds_graph(n.attrs):   # most nodes: no body
            continue
        for sg in n.subgraphs:
            for g in sg.all_graphs():
                for m in g.nodes:
                    m.stream_id = n.stream_id
                    count += 1
    return count
