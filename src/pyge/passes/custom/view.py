"""The read-only graph a custom stream pass receives (GE's ConstGraph).

A pass may look at everything about the graph it was handed but change nothing except
stream ids, and those only through its StreamPassContext. The wrappers therefore expose
copies (attribute arrays are read-only copies, lists are tuples, subgraphs appear by name)
and have no setters. Wrappers are cached per view while the passes run, so
`graph.get_direct_nodes()` returns the same objects every time; wrappers of one node are
equal and hash alike, so they can be used as dict keys.
"""
from __future__ import annotations

import logging
from types import MappingProxyType
from typing import Any, Iterator, Mapping, NamedTuple

import numpy as np

from ...ir.graph import Graph, Node, Value
from ..graph.engines import ENGINE_KIND, COMPUTE
from ..graph._match import ORIGINAL_NAMES

log = logging.getLogger(__name__)


class TensorDesc(NamedTuple):
    """An input or output of a node: name, dtype (numpy name or None), shape (tuple or None)."""
    name: str
    dtype: str | None
    shape: tuple | None
    kind: str = "tensor"


def _desc(v: Value | None) -> TensorDesc | None:
    if v is None:
        return None
    return TensorDesc(v.name, v.dtype, tuple(v.shape) if v.shape is not None else None, v.kind)


def _frozen(a: Any) -> Any:
    if isinstance(a, Graph):
        return a.name
    if isinstance(a, np.ndarray):
        c = a.copy()
        c.flags.writeable = False
        return c
    if isinstance(a, (list, tuple)):
        return tuple(_frozen(x) for x in a)
    return a


class ConstNode:
    """Read-only view of one node."""

    __slots__ = ("_node", "_view")

    def __init__(self, node: Node, view: "ConstGraph"):
        object.__setattr__(self, "_node", node)
        object.__setattr__(self, "_view", view)

    def __setattr__(self, key: str, value: Any) -> None:
        raise AttributeError(f"node {self._node.name!r} is read-only in a custom stream pass; "
                             "change its stream with ctx.set_stream_id(node, id)")

    name = property(lambda self: self._node.name)
    type = property(lambda self: self._node.op_type)
    op_type = property(lambda self: self._node.op_type)
    domain = property(lambda self: self._node.domain)
    engine = property(lambda self: self._node.engine)
    stream_id = property(lambda self: self._node.stream_id)
    graph_name = property(lambda self: self._node.graph.name if self._node.graph is not None else None)

    def get_name(self) -> str:
        return self._node.name

    def get_type(self) -> str:
        return self._node.op_type

    @property
    def engine_kind(self) -> str:
        return ENGINE_KIND.get(self._node.engine or COMPUTE, COMPUTE)

    @property
    def inputs(self) -> tuple[TensorDesc | None, ...]:
        return tuple(_desc(v) for v in self._node.inputs)

    @property
    def outputs(self) -> tuple[TensorDesc, ...]:
        return tuple(_desc(v) for v in self._node.outputs)

    @property
    def input_names(self) -> tuple[str, ...]:
        return tuple(v.name if v is not None else "" for v in self._node.inputs)

    @property
    def output_names(self) -> tuple[str, ...]:
        return tuple(v.name for v in self._node.outputs)

    @property
    def predecessors(self) -> list["ConstNode"]:
        """Nodes of the same graph this one waits for (data, subgraph reads, control)."""
        return [self._view._wrap(p) for p in self._node.predecessors]

    @property
    def successors(self) -> list["ConstNode"]:
        return [self._view._wrap(s) for s in self._node.successors]

    @property
    def control_predecessors(self) -> list["ConstNode"]:
        return [self._view._wrap(p) for p in self._node._control_preds]

    @property
    def attrs(self) -> Mapping[str, Any]:
        return MappingProxyType({k: _frozen(a) for k, a in self._node.attrs.items()})

    def get_attr(self, name: str, default: Any = None) -> Any:
        return _frozen(self._node.attrs[name]) if name in self._node.attrs else default

    @property
    def original_op_names(self) -> tuple[str, ...]:
        """The source nodes this node stands for: its own name, or, for a node made by fusion,
        every name it replaced (GE's `_datadump_original_op_names`)."""
        names = self._node.attrs.get(ORIGINAL_NAMES)
        return tuple(names) if names else (self._node.name,)

    @property
    def subgraph_names(self) -> tuple[str, ...]:
        return tuple(g.name for g in self._node.subgraphs)

    def __eq__(self, other: object) -> bool:
        return isinstance(other, ConstNode) and other._node is self._node

    def __hash__(self) -> int:
        return id(self._node)

    def __repr__(self) -> str:
        return f"<node {self._node.name!r} ({self._node.op_type}) stream {self._node.stream_id}>"


class ConstGraph:
    """Read-only view of one graph (the root graph or one subgraph)."""

    __slots__ = ("_graph", "_nodes")

    def __init__(self, graph: Graph):
        object.__setattr__(self, "_graph", graph)
        object.__setattr__(self, "_nodes", {})

    def __setattr__(self, key: str, value: Any) -> None:
        raise AttributeError(f"graph {self._graph.name!r} is read-only in a custom stream pass")

    def _wrap(self, node: Node) -> ConstNode:
        w = self._nodes.get(id(node))
        if w is None or w._node is not node:
            w = self._nodes[id(node)] = ConstNode(node, self)
        return w

    def _forget(self) -> None:
        """Drop the cached wrappers once the passes have returned. Each wrapper references
        the view, so the cache makes a reference cycle of one object per node, which only
        the cyclic GC would free; a view kept past its call makes new wrappers (equal to
        the old ones, as wrappers of one node are)."""
        self._nodes.clear()

    name = property(lambda self: self._graph.name)

    def get_name(self) -> str:
        return self._graph.name

    @property
    def is_root(self) -> bool:
        return self._graph.parent is None

    @property
    def parent_node_name(self) -> str | None:
        """For a subgraph, the name of the If/Loop/Scan node that owns it."""
        return self._graph.parent.name if self._graph.parent is not None else None

    def get_direct_nodes(self) -> list[ConstNode]:
        """This graph's own nodes, in execution (topological) order; not its subgraphs' nodes."""
        return [self._wrap(n) for n in self._graph.nodes]

    def get_all_nodes(self) -> list[ConstNode]:
        """This graph's nodes and its subgraphs' (read only: a pass may change only direct nodes)."""
        return [self._wrap(n) for g in self._graph.all_graphs() for n in g.nodes]

    def find_node(self, name: str) -> ConstNode | None:
        """The direct node named `name`, or None (see `find_original` for fused-away names)."""
        n = self._graph.find_node(name)
        if n is None:
            holder = self._holder(name)
            if holder is not None:
                log.info("graph %s has no node %r: fusion merged it into %r (its %s); "
                         "find_original(%r) finds it", self._graph.name, name, holder.name,
                         ORIGINAL_NAMES, name)
        return self._wrap(n) if n is not None else None

    def find_original(self, name: str) -> ConstNode | None:
        """The direct node that runs source node `name`: that node itself, or the node fusion
        merged it into (whose `original_op_names` hold `name`); None if there is neither."""
        n = self._graph.find_node(name)
        if n is None:
            n = self._holder(name)
        return self._wrap(n) if n is not None else None

    def _holder(self, name: str) -> Node | None:
        for n in self._graph.nodes:
            if name in (n.attrs.get(ORIGINAL_NAMES) or ()):
                return n
        return None

    @property
    def inputs(self) -> tuple[TensorDesc, ...]:
        return tuple(_desc(v) for v in self._graph.inputs)

    @property
    def outputs(self) -> tuple[TensorDesc, ...]:
        return tuple(_desc(v) for v in self._graph.outputs)

    def __iter__(self) -> Iterator[ConstNode]:
        return iter(self.get_direct_nodes())

    def __len__(self) -> int:
        return len(self._graph)

    def __repr__(self) -> str:
        return f"<read-only graph {self._graph.name!r}, {len(self._graph)} nodes>"
