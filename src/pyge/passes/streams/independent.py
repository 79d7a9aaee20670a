"""Rule 2 (GE's IndependentStreamPass): independent engines get streams of their own.

Host/device copies and collectives must not queue behind kernels (nor kernels behind them),
so each independent engine gets a new stream per stream label (unlabelled nodes share the
engine's unlabelled stream). Streams are shared across the root graph and its subgraphs.
"""
from __future__ import annotations

import logging

from ...ir.graph import Graph
from ..engines import INDEPENDENT, kind_of
from ._graph import label_of
from .context import StreamContext

log = logging.getLogger(__name__)


def assign_independent(graph: Graph, ctx: StreamContext) -> int:
    """Give each independent-engine node of `graph` its (engine, label) stream; returns how many."""
    count = 0
    if not any(kind_of(n) == INDEPENDENT for n in graph._nodes):
        return 0   # the common case: no need for the topological order
    for n in graph.topological_sort():
        if kind_of(n) != INDEPENDENT:
            continue
        key = (n.engine or INDEPENDENT, label_of(n) or "")
        stream = ctx.independent_streams.get(key)
        if stream is None:
            stream = ctx.independent_streams[key] = ctx.new_stream()
            log.debug("independent engine %s (label %r) gets stream %d", key[0], key[1], stream)
        n.stream_id = stream
        count += 1
    return count
