"""StreamPassContext: what a custom stream pass may do besides reading its graph.

Stream ids are global to the compiled model (the root graph and its subgraphs draw from one
range), so "the current maximum" is the largest id in use anywhere in the model or handed
out by `allocate_next_stream_id` so far, and a pass on a subgraph may also put a node on a
stream the root graph uses. `set_stream_id` refuses ids below 0 or above that maximum and
nodes of any graph other than the one the pass was handed; a refusal changes nothing,
returns GRAPH_PARAM_INVALID and leaves a message (see `get_error_message`).

A context is valid only while the pass call it was made for runs: afterwards (the pass kept it,
or handed it to a thread) `set_stream_id` is refused and `allocate_next_stream_id` raises, so
that nothing can change the graph once the compiler has moved on to renumbering and planning.
"""
from __future__ import annotations

import enum
import logging
import operator
import threading

from ...errors import PassError
from ...ir.graph import Graph
from ...options import Options
from .view import ConstGraph, ConstNode

log = logging.getLogger(__name__)


class GraphStatus(enum.IntEnum):
    """GE's graph status codes (ge_error_codes.h). Users' own codes should be negative."""
    GRAPH_SUCCESS = 0
    GRAPH_PARAM_INVALID = 50331649
    GRAPH_FAILED = 0xFFFFFFFF

    def __str__(self) -> str:
        return f"{self.name} ({int(self)})"

    def __format__(self, spec: str) -> str:
        return format(str(self), spec)


GRAPH_SUCCESS = GraphStatus.GRAPH_SUCCESS
GRAPH_FAILED = GraphStatus.GRAPH_FAILED
GRAPH_PARAM_INVALID = GraphStatus.GRAPH_PARAM_INVALID


class StreamBook:
    """Stream ids for one run of the custom passes over a model: shared by every pass call."""

    def __init__(self, graph: Graph):
        ids = [n.stream_id for g in graph.all_graphs() for n in g.nodes]
        self.max_id = max(ids, default=-1)
        self.allocated: list[int] = []

    def allocate(self) -> int:
        self.max_id += 1
        self.allocated.append(self.max_id)
        return self.max_id


class StreamPassContext:
    """Handed to a custom stream pass next to its read-only graph (GE's StreamPassContext)."""

    def __init__(self, pass_name: str, graph: Graph, options: Options, book: StreamBook | None = None):
        self._pass_name = pass_name
        self._graph = graph
        self._options = options
        self._book = book if book is not None else StreamBook(graph)
        self._error = ""
        self._lock = threading.Lock()
        self._closed = False

    def _close(self) -> None:
        with self._lock:
            self._closed = True

    @property
    def pass_name(self) -> str:
        return self._pass_name

    def get_pass_name(self) -> str:
        return self._pass_name

    def get_stream_id(self, node: ConstNode) -> int:
        """The node's current stream id (-1 = unassigned)."""
        return self._node(node).stream_id

    def set_stream_id(self, node: ConstNode, stream_id: int) -> GraphStatus:
        """Put `node` on the existing stream `stream_id`; GRAPH_SUCCESS or a refusal."""
        if not isinstance(node, ConstNode):
            return self._refuse(f"set_stream_id expects a node of the graph handed to the pass, "
                                f"got {type(node).__name__}")
        if node._node.graph is not self._graph:
            other = node._node.graph
            where = ("no graph" if other is None else f"another graph (also named {other.name!r})"
                     if other.name == self._graph.name else f"graph {other.name!r}")
            return self._refuse(f"node {node.name!r} belongs to {where}, not to graph "
                                f"{self._graph.name!r} that this pass call was handed")
        try:
            if isinstance(stream_id, bool):
                raise TypeError
            sid = operator.index(stream_id)
        except TypeError:
            return self._refuse(f"stream id {stream_id!r} for node {node.name!r} is not an integer")
        if sid < 0 or sid > self._book.max_id:
            return self._refuse(f"stream id {sid} for node {node.name!r} is outside 0..{self._book.max_id} "
                                "(the current maximum; allocate_next_stream_id() gives a new stream)")
        with self._lock:
            if self._closed:
                return self._refuse(f"set_stream_id({node.name!r}, {sid}) after the pass call returned; "
                                    "a context is valid only during its pass call")
            node._node.stream_id = sid
        return GRAPH_SUCCESS

    def allocate_next_stream_id(self) -> int:
        """A new stream id, one above the current maximum."""
        with self._lock:
            if self._closed:
                raise PassError(f"custom pass {self._pass_name!r}: allocate_next_stream_id() after the "
                                "pass call returned; a context is valid only during its pass call")
            sid = self._book.allocate()
        log.debug("custom pass %s allocated stream %d", self._pass_name, sid)
        return sid

    def get_curr_max_stream_id(self) -> int:
        return self._book.max_id

    def set_error_message(self, message: str) -> None:
        self._error = str(message)

    def get_error_message(self) -> str:
        return self._error

    def get_option_value(self, key: str) -> str | None:
        """A compile option's string value (or its default); None for a key pyge does not know."""
        return self._options.get_string(key)

    def _node(self, node: ConstNode):
        if not isinstance(node, ConstNode):
            raise PassError(f"custom pass {self._pass_name!r}: expected a node from the graph, "
                            f"got {type(node).__name__}")
        return node._node

    def _refuse(self, message: str) -> GraphStatus:
        self._error = message
        log.warning("custom pass %s: %s", self._pass_name, message)
        return GRAPH_PARAM_INVALID

    def __repr__(self) -> str:
        return (f"<StreamPassContext pass={self._pass_name!r} graph={self._graph.name!r} "
                f"max={self._book.max_id}>")


__all__ = ["StreamPassContext", "StreamBook", "GraphStatus", "GRAPH_SUCCESS", "GRAPH_FAILED",
           "GRAPH_PARAM_INVALID", "ConstGraph"]
