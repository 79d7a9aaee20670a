"""GE's IndependentStreamPass: independent engines (collectives, host<->device copies; GE's
DNN_HCCL) get streams of their own, one per (engine, stream label) pair.

A cluster that already holds a user-labelled stream keeps it (a user label beats the
independent engine); one with a plain `_stream_label` moves to its (engine, label) stream.
"""
from __future__ import annotations

import logging

from ..graph.engines import INDEPENDENT
from .clusters import Cluster
from .context import StreamContext

log = logging.getLogger(__name__)


def assign_independent(clusters: list[Cluster], ctx: StreamContext) -> int:
    """Give each independent-engine cluster its (engine, label) stream; returns how many."""
    count = 0
    for c in clusters:
        if c.kind != INDEPENDENT or (c.user_label is not None and c.stream >= 0):
            continue
        key = (c.engine, c.label or "")
        stream = ctx.independent_streams.get(key)
        if stream is None:
            stream = ctx.independent_streams[key] = ctx.new_stream()
            log.debug("independent engine %s (label %r) gets stream %d", key[0], key[1], stream)
        c.stream = stream
        count += 1
    return count
