"""GE's AssignByLabelPass: clusters with the same stream label share one stream.

The label is a node's `_user_stream_label`, else its `_stream_label` (a cluster's label is
its first node's; clusters only ever hold one label). Each label draws a new stream the
first time it is met, in cluster order. Independent-engine clusters get a label stream too,
but the next rule takes them back unless their label is a user label: a user label beats
the independent engine, a plain stream label does not (GE: HasAssignedUserStream).
"""
from __future__ import annotations

import logging

from .clusters import Cluster
from .context import StreamContext

log = logging.getLogger(__name__)


def assign_by_label(clusters: list[Cluster], ctx: StreamContext) -> int:
    """Give every labelled cluster its label's stream; returns how many clusters."""
    count = 0
    for c in clusters:
        if c.label is None:
            continue
        stream = ctx.label_streams.get(c.label)
        if stream is None:
            stream = ctx.label_streams[c.label] = ctx.new_stream()
            log.debug("stream label %r gets stream %d (engine %s)", c.label, stream, c.engine)
        c.stream = stream
        count += 1
    return count
