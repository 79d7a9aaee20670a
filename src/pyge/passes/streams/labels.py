"""Rule 1 (GE's AssignByLabelPass): nodes with the same stream label share one stream.

The label is the node attribute `_stream_label`, or `_user_stream_label`, which overrides it.
Each label gets a new stream the first time it is met (in topological order); the label keeps
that stream in every subgraph too. Independent-engine nodes are left to rule 2, which gives
them one stream per (engine, label) pair.
"""
from __future__ import annotations

import logging

from ...ir.graph import Graph
from ..engines import INDEPENDENT, kind_of
from ._graph import label_of
from .context import StreamContext

log = logging.getLogger(__name__)


def assign_by_label(graph: Graph, ctx: StreamContext) -> int:
    """Give every labelled node of `graph` (not its subgraphs) its label's stream; returns how many."""
    count = 0
    # Most graphs have no label: then skip the topological sort (the order only matters
    # for which label opens a stream first).
    if not any(label_of(n) is not None and kind_of(n) != INDEPENDENT for n in graph._nodes):
        return 0
    for n in graph.topological_sort():
        label = label_of(n)
        if label is None or kind_of(n) == INDEPENDENT:
            continue
        stream = ctx.label_streams.get(label)
        if stream is None:
            stream = ctx.label_streams[label] = ctx.new_stream()
            log.debug("stream label %r gets stream %d", label, stream)
        n.stream_id = stream
        count += 1
    return count
