"""GE's NodeStreamUpdatePass: every node takes its cluster's stream.

Unlabelled skip-engine clusters have none yet (-1): the skip rule gives their nodes a
neighbour's stream next. Any other cluster without a stream is an internal error.
"""
from __future__ import annotations

from ...errors import PassError
from ..graph.engines import SKIP
from .clusters import Cluster


def update_nodes(clusters: list[Cluster]) -> int:
    """Copy each cluster's stream onto its nodes; returns how many nodes got one."""
    count = 0
    for c in clusters:
        if c.stream < 0 and not (c.kind == SKIP and c.label is None):
            first = c.nodes[0]
            raise PassError(f"stream allocation left cluster {c.index} (engine {c.engine}, first node "
                            f"{first.name!r} ({first.op_type})) without a stream")
        for n in c.nodes:
            n.stream_id = c.stream
            count += c.stream >= 0
    return count
