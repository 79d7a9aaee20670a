"""Renumber used stream ids to 0..N-1 with no holes (the renumber_streams pass, GE's
RefreshContinuousStreams).

Ids keep their relative order (the smallest used id becomes 0), over the root graph and all
subgraphs together, since ids are global to a model. Ids that custom passes allocated are
reported in their new numbering, so the compiled model knows which streams were custom; an
allocated id that ended up unused simply disappears.
"""
from __future__ import annotations

import logging
from typing import Iterable

from ...errors import PassError
from ...ir.graph import Graph

log = logging.getLogger(__name__)


def renumber_streams(graph: Graph, custom_ids: Iterable[int] = ()) -> tuple[int, list[int]]:
    """Returns (number of streams, custom-pass stream ids after renumbering). An empty
    graph still has one (empty) stream."""
    nodes = [(g, n) for g in graph.all_graphs() for n in g.nodes]
    for g, n in nodes:
        if not isinstance(n.stream_id, int) or n.stream_id < 0:
            raise PassError(f"node {n.name!r} ({n.op_type}) of graph {g.name!r} has no stream "
                            f"(stream id {n.stream_id!r}) when streams are renumbered")
    used = sorted({n.stream_id for _, n in nodes})
    remap = {old: new for new, old in enumerate(used)}
    for _, n in nodes:
        n.stream_id = remap[n.stream_id]
    custom = sorted({remap[c] for c in custom_ids if c in remap})
    if any(old != new for old, new in remap.items()):
        log.debug("streams renumbered: %s", ", ".join(f"{o}->{n}" for o, n in remap.items() if o != n))
    return max(len(used), 1), custom
