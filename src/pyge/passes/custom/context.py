"""StreamPassContext: what a custom stream pass may do besides reading its graph.

One context serves every stream pass of one compiled model (GE's StreamPassContext, made
once per RunCustomStreamPass call): a pass sees the ids earlier passes drew. It starts at
the largest stream id the built-in allocation drew (holes included: an id drawn but left
unused still counts, as in GE), `allocate_next_stream_id` draws the next one, and
`get_curr_max_stream_id` is the largest drawn so far.

`set_stream_id` refuses, with GE's GRAPH_FAILED and a message (see `get_error_message`),
ids below 0 or above that maximum and nodes that are not direct nodes of the model's graph
(a subgraph's node, another graph's); a refusal changes nothing.

The context is open only while one of the model's pass calls runs: between calls and after
the last one (a pass kept it, or handed it to a thread) `set_stream_id` is refused and
`allocate_next_stream_id` raises, so that nothing changes the graph once the compiler has
moved on. The error message is cleared when a pass call starts, so a failing pass reports
its own message.
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
    """Stream ids of one model's stream pass calls: the maximum drawn, and who drew what."""

    def __init__(self, max_id: int):
        self.max_id = int(max_id)
        self.allocated: list[tuple[int, str]] = []   # (id, pass name), in drawing order

    def allocate(self, pass_name: str) -> int:
        self.max_id += 1
        self.allocated.append((self.max_id, pass_name))
        return self.max_id


class StreamPassContext:
    """Handed to every stream pass of one model next to its read-only graph."""

    def __init__(self, graph: Graph, options: Options, book: StreamBook, pass_name: str = ""):
        self._pass_name = pass_name
        self._graph = graph
        self._options = options
        self._book = book
        self._error = ""
        self._lock = threading.Lock()
        self._closed = True

    def _begin(self, pass_name: str) -> None:
        """Open the context for one pass call (the runner calls this)."""
        with self._lock:
            self._pass_name, self._error, self._closed = pass_name, "", False

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
        """Put `node` on the stream `stream_id` (0..get_curr_max_stream_id()); GRAPH_SUCCESS,
        or GRAPH_FAILED with a message."""
        if not isinstance(node, ConstNode):
            return self._refuse(f"set_stream_id expects a node of the graph handed to the pass, "
                                f"got {type(node).__name__}")
        if node._node.graph is not self._graph:
            other = node._node.graph
            where = ("no graph" if other is None else
                     f"subgraph {other.name!r} (of node {other.parent.name!r}; a body runs on its "
                     "parent node's stream)" if other.parent is not None and _inside(other, self._graph)
                     else f"another graph (also named {other.name!r})" if other.name == self._graph.name
                     else f"graph {other.name!r}")
            return self._refuse(f"node {node.name!r} belongs to {where}, not to graph "
                                f"{self._graph.name!r} that the stream passes were handed")
        try:
            if isinstance(stream_id, bool):
                raise TypeError
            sid = operator.index(stream_id)
        except TypeError:
            return self._refuse(f"stream id {stream_id!r} for node {node.name!r} is not an integer")
        with self._lock:
            if self._closed:
                return self._refuse(f"set_stream_id({node.name!r}, {sid}) outside a pass call; "
                                    "a context is valid only while a pass call runs")
            if sid < 0 or sid > self._book.max_id:
                return self._refuse(f"stream id {sid} for node {node.name!r} is outside 0..{self._book.max_id} "
                                    "(the current maximum; allocate_next_stream_id() gives a new stream)")
            node._node.stream_id = sid
        return GRAPH_SUCCESS

    def _set_stream_ids(self, nodes: list, stream_id: int) -> GraphStatus:
        """set_stream_id(wrapper of n, stream_id) for each direct node n of the graph (the
        built-in DAG pass places every node so): the id and the call checked once, then
        each node's membership; a node of another graph goes through set_stream_id, which
        refuses it by name."""
        with self._lock:
            if self._closed or isinstance(stream_id, bool) or not isinstance(stream_id, int) \
                    or not 0 <= stream_id <= self._book.max_id:
                ok = False
            else:
                ok = True
                graph = self._graph
                for n in nodes:
                    if n.graph is graph:
                        n.stream_id = stream_id
                    else:
                        ok = False
                        break
        if ok:
            return GRAPH_SUCCESS
        status = GRAPH_SUCCESS
        for n in nodes:         # the general way, for its checks and messages
            got = self.set_stream_id(ConstNode(n, None), stream_id)
            status = got if got != GRAPH_SUCCESS else status
        return status

    def allocate_next_stream_id(self) -> int:
        """A new stream id, one above the current maximum."""
        with self._lock:
            if self._closed:
                raise PassError(f"custom pass {self._pass_name!r}: allocate_next_stream_id() outside a "
                                "pass call; a context is valid only while a pass call runs")
            sid = self._book.allocate(self._pass_name)
        log.debug("stream pass %s allocated stream %d", self._pass_name, sid)
        return sid

    def get_curr_max_stream_id(self) -> int:
        """The largest stream id drawn so far (by the built-in allocation or a pass)."""
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
        return GRAPH_FAILED

    def __repr__(self) -> str:
        return (f"<StreamPassContext pass={self._pass_name!r} graph={self._graph.name!r} "
                f"max={self._book.max_id}>")


def _inside(sub: Graph, root: Graph) -> bool:
    """Whether `sub` is a (nested) subgraph of `root`."""
    g = sub
    while g.parent is not None:
        g = g.parent.graph
        if g is root:
            return True
        if g is None:
            return False
    return False


__all__ = ["StreamPassContext", "StreamBook", "GraphStatus", "GRAPH_SUCCESS", "GRAPH_FAILED",
           "GRAPH_PARAM_INVALID", "ConstGraph"]
