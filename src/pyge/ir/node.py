"""Node: one operator of the graph IR, and the setters that keep its values' use lists.

Inputs and outputs change only through the setters here (``set_input(s)``,
``append_input``, ``replace_input_with``, ``add_output``), which keep every Value's
producer and uses right; a node of a sealed graph (see ``Graph.seal``) refuses them.
Imports no other pyge layer.
"""
from __future__ import annotations

from typing import Any, Iterable

from ..errors import GraphError
from .value import Value


class GraphBase:
    """What a Node must recognise of a Graph: that an attribute holds one (a subgraph).
    ``pyge.ir.graph.Graph`` is the one subclass; Node cannot import it (graph.py imports
    this module)."""

    __slots__ = ()


def holds_graph(attrs: dict) -> bool:
    """Whether an attribute holds a subgraph (what Node.subgraphs finds), without the list."""
    for a in attrs.values():
        if isinstance(a, GraphBase) or (isinstance(a, list) and a and isinstance(a[0], GraphBase)):
            return True
    return False


def edited(node: "Node") -> None:
    """Note a change to `node`'s edges: its graph's version, and every enclosing graph's (a
    subgraph's reads are its parent node's implicit inputs), moves on. What a version vouches
    for (ir/order.py: the node list is still topologically sorted) holds only at its own."""
    g = node.graph
    while g is not None:
        g._version += 1
        parent = g.parent
        g = parent.graph if parent is not None else None


class ControlEdges(list):
    """`Node.control_preds`: a list like any other, whose changes mark the node's graph as
    edited (`edited`), since passes and custom graph passes edit control edges directly."""

    __slots__ = ("_node",)

    def __reduce_ex__(self, protocol):
        # copy and pickle rebuild it whole (their default appends items one by one, which
        # would note edits on a node not rebuilt yet)
        return _control_edges, (list(self), self._node)


def _control_edges(nodes: list, node: "Node") -> ControlEdges:
    c = ControlEdges(nodes)
    c._node = node
    return c


def _noting(name: str):
    base = getattr(list, name)

    def method(self, *args, **kwargs):
        edited(self._node)            # first: an edit that fails half-way is still an edit
        return base(self, *args, **kwargs)
    method.__name__ = name
    method.__doc__ = base.__doc__
    return method


for _name in ("append", "extend", "insert", "remove", "pop", "clear", "sort", "reverse",
              "__setitem__", "__delitem__", "__iadd__", "__imul__"):
    setattr(ControlEdges, _name, _noting(_name))
del _name


class Node:
    """One operator. Attributes are plain Python values; a graph attribute is a Graph."""

    __slots__ = ("name", "op_type", "domain", "attrs", "_inputs", "_outputs", "graph",
                 "stream_id", "engine", "doc", "_control_preds", "_pos")

    def __init__(self, op_type: str, name: str, domain: str = "", attrs: dict | None = None):
        self.name = name
        self.op_type = op_type
        self.domain = domain or ""
        self.attrs: dict[str, Any] = dict(attrs or {})
        self._inputs: list[Value | None] = []
        self._outputs: list[Value] = []
        self.graph: Graph | None = None
        # Logical stream id, set by the stream passes; -1 = unassigned.
        self.stream_id: int = -1
        # Engine name, set by the engine table ("compute", "skip", "independent", "attach").
        self.engine: str | None = None
        self.doc: str = ""
        # Control edges (`control_preds`): nodes that must finish before this one (no data
        # flows). The empty tuple until first asked for: most nodes have none.
        self._control_preds: tuple | ControlEdges = ()
        # Scratch: the node's position, written by ir/order.py's order check just before it
        # reads it (meaningless at any other time).
        self._pos: int = -1

    @property
    def control_preds(self) -> ControlEdges:
        """Nodes that must finish before this one (no data flows); edit it as a list."""
        c = self._control_preds
        if type(c) is not ControlEdges:
            c = self._control_preds = _control_edges(c, self)
        return c

    @control_preds.setter
    def control_preds(self, nodes: Iterable["Node"]) -> None:
        c = _control_edges(nodes, self)
        edited(self)
        self._control_preds = c

    # -- inputs and outputs -------------------------------------------------------------
    @property
    def inputs(self) -> tuple[Value | None, ...]:
        return tuple(self._inputs)

    @property
    def outputs(self) -> tuple[Value, ...]:
        return tuple(self._outputs)

    def set_inputs(self, values: Iterable[Value | None]) -> None:
        values = list(values)
        self._editable()
        for v in values:
            self._check_value(v)
        for i, v in enumerate(self._inputs):
            if v is not None:
                v.uses.remove((self, i))
        self._inputs = []
        edited(self)
        for v in values:
            self.append_input(v)

    def append_input(self, v: Value | None) -> None:
        g = self.graph
        if g is not None:
            if g._sealed is not None:
                g._refuse_sealed()
            edited(self)
        if v is not None and type(v) is not Value:
            self._check_value(v)
        self._inputs.append(v)
        if v is not None:
            v.uses.append((self, len(self._inputs) - 1))

    def set_input(self, i: int, v: Value | None) -> None:
        self._editable()
        self._check_value(v)
        n = len(self._inputs)
        if not -n <= i < n:
            raise GraphError(f"node {self.name!r} ({self.op_type}) has {n} input(s); there is no "
                             f"input {i} (append_input adds one)")
        i %= n    # a use records the index as it is in the list: never negative
        edited(self)
        old = self._inputs[i]
        if old is not None:
            old.uses.remove((self, i))
        self._inputs[i] = v
        if v is not None:
            v.uses.append((self, i))

    def replace_input_with(self, old: Value, new: Value | None) -> int:
        """Every input slot reading `old` reads `new`; returns how many did."""
        hits = [i for i, v in enumerate(self._inputs) if v is old]
        for i in hits:
            self.set_input(i, new)
        return len(hits)

    def add_output(self, v: Value) -> Value:
        """Make `v` this node's next output. On a node already in a graph, the value joins
        that graph, and its name must be free there."""
        self._editable()
        if not isinstance(v, Value):
            raise GraphError(f"node {self.name!r}: an output must be a pyge.Value, got {type(v).__name__}")
        if v.producer is not None:
            raise GraphError(f"value {v.name!r} already has producer {v.producer.name!r}")
        g = self.graph
        if g is not None:
            g._claim_value(v, f"output of node {self.name!r}")
            edited(self)
        v.producer = self
        v.index = len(self._outputs)
        self._outputs.append(v)
        return v

    def set_attr(self, key: str, value: Any) -> None:
        """Set attribute `key`; a Graph (or list of Graphs) becomes this node's subgraph."""
        self._editable()
        if not isinstance(key, str) or not key:
            raise GraphError(f"node {self.name!r}: attribute names are non-empty strings, got {key!r}")
        self.attrs[key] = value
        for sub in (value if isinstance(value, list) else [value]):
            if isinstance(sub, GraphBase):
                sub.parent = self
        if self.graph is not None:
            self.graph._succ_cache = None   # a new body may read other outer values
            edited(self)

    def get_attr(self, key: str, default: Any = None) -> Any:
        return self.attrs.get(key, default)

    def _editable(self) -> None:
        g = self.graph
        if g is not None and g._sealed is not None:
            g._refuse_sealed()

    def _check_value(self, v: Any) -> None:
        if v is not None and not isinstance(v, Value):
            raise GraphError(f"node {self.name!r} ({self.op_type}): an input must be a pyge.Value "
                             f"or None, got {type(v).__name__}")

    # -- graph structure ---------------------------------------------------------------
    @property
    def subgraphs(self) -> list["Graph"]:
        out = []
        for a in self.attrs.values():
            if isinstance(a, GraphBase):
                out.append(a)
            elif isinstance(a, list) and a and isinstance(a[0], GraphBase):
                out.extend(a)
        return out

    def implicit_inputs(self) -> list[Value]:
        """Outer-scope values read by this node's subgraphs (dependencies, too)."""
        found: dict[int, Value] = {}
        if not self.attrs:
            return []
        for g in self.subgraphs:
            for v in g.outer_references():
                found.setdefault(id(v), v)
        return list(found.values())

    def all_inputs(self) -> list[Value]:
        """Explicit (non-empty) inputs followed by implicit subgraph inputs, deduplicated."""
        seen: dict[int, Value] = {}
        for v in self._inputs:
            if v is not None:
                seen.setdefault(id(v), v)
        for v in self.implicit_inputs():
            seen.setdefault(id(v), v)
        return list(seen.values())

    @property
    def predecessors(self) -> list["Node"]:
        """Nodes of the same graph this node depends on (data, implicit and control)."""
        # Hot (every pass walks the graph through it): producers are deduplicated in the
        # order of first use, which is the order all_inputs() would give; implicit inputs
        # only when the node holds a subgraph.
        g = self.graph
        out: dict[int, Node] = {}
        for v in self._inputs:
            if v is not None:
                p = v.producer
                if p is not None and p.graph is g:
                    out.setdefault(id(p), p)
        if self.attrs and holds_graph(self.attrs):
            for v in self.implicit_inputs():
                p = v.producer
                if p is not None and p.graph is g:
                    out.setdefault(id(p), p)
        for p in self._control_preds:
            out.setdefault(id(p), p)
        return list(out.values())

    @property
    def successors(self) -> list["Node"]:
        g = self.graph
        if g is None:
            return []
        return g.successors_of(self)

    def __repr__(self) -> str:
        return f"Node({self.op_type}, {self.name!r})"
