"""The graph IR: Graph, Node, Value.

Built around values, as torch.fx and onnx-ir are: a Value knows its producer and its
uses, and the use lists are kept up to date by the setters (``Node.set_input``,
``Node.replace_input_with``, ``Graph.remove_node``), never by hand.

This module imports no other pyge layer and no serialisation library: converting to
and from ONNX lives in ``pyge.frontends``.
"""
from __future__ import annotations

from collections import deque
from typing import Any, Iterable, Iterator

import numpy as np

from ..errors import GraphCycleError, GraphError

# Value kinds: a plain tensor, a sequence of tensors, an optional.
TENSOR, SEQUENCE, OPTIONAL = "tensor", "sequence", "optional"


class Value:
    """An SSA value: a graph input, an initializer, or one output of a node."""

    __slots__ = ("name", "dtype", "shape", "kind", "producer", "index", "uses", "const", "graph",
                 "elem_kind")

    def __init__(self, name: str, dtype: str | None = None, shape: tuple | None = None,
                 kind: str = TENSOR, const: np.ndarray | None = None):
        self.name = name
        # numpy dtype name ("float32", "int64", "bool", "float16", "bfloat16", "object" for
        # strings); for a sequence/optional, the element's dtype. None = unknown.
        self.dtype = dtype
        # tuple of int (known), str (symbolic) or None (unknown) per axis; None = unknown rank.
        self.shape = shape
        self.kind = kind
        self.elem_kind: str | None = None  # for OPTIONAL: kind of the contained value
        self.producer: Node | None = None
        self.index: int = -1               # output index within producer
        self.uses: list[tuple[Node, int]] = []  # (consumer, input index)
        self.const = const                  # initializer data, if this value is one
        self.graph: Graph | None = None

    @property
    def is_initializer(self) -> bool:
        return self.const is not None

    @property
    def consumers(self) -> list["Node"]:
        seen: dict[int, Node] = {}
        for n, _ in self.uses:
            seen.setdefault(id(n), n)
        return list(seen.values())

    def __repr__(self) -> str:
        return f"Value({self.name!r}, {self.dtype}, {self.shape})"


class Node:
    """One operator. Attributes are plain Python values; a graph attribute is a Graph."""

    __slots__ = ("name", "op_type", "domain", "attrs", "_inputs", "_outputs", "graph",
                 "stream_id", "engine", "doc", "control_preds")

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
        # Control edges: nodes that must finish before this one (no data flows).
        self.control_preds: list[Node] = []

    # -- inputs and outputs -------------------------------------------------------------
    @property
    def inputs(self) -> tuple[Value | None, ...]:
        return tuple(self._inputs)

    @property
    def outputs(self) -> tuple[Value, ...]:
        return tuple(self._outputs)

    def set_inputs(self, values: Iterable[Value | None]) -> None:
        for i, v in enumerate(self._inputs):
            if v is not None:
                v.uses.remove((self, i))
        self._inputs = []
        for v in values:
            self.append_input(v)

    def append_input(self, v: Value | None) -> None:
        self._inputs.append(v)
        if v is not None:
            v.uses.append((self, len(self._inputs) - 1))

    def set_input(self, i: int, v: Value | None) -> None:
        old = self._inputs[i]
        if old is not None:
            old.uses.remove((self, i))
        self._inputs[i] = v
        if v is not None:
            v.uses.append((self, i))

    def replace_input_with(self, old: Value, new: Value) -> None:
        for i, v in enumerate(self._inputs):
            if v is old:
                self.set_input(i, new)

    def add_output(self, v: Value) -> Value:
        if v.producer is not None:
            raise GraphError(f"value {v.name!r} already has producer {v.producer.name!r}")
        v.producer = self
        v.index = len(self._outputs)
        self._outputs.append(v)
        return v

    # -- graph structure ---------------------------------------------------------------
    @property
    def subgraphs(self) -> list["Graph"]:
        out = []
        for a in self.attrs.values():
            if isinstance(a, Graph):
                out.append(a)
            elif isinstance(a, list) and a and isinstance(a[0], Graph):
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
        if self.attrs and self.subgraphs:
            for v in self.implicit_inputs():
                p = v.producer
                if p is not None and p.graph is g:
                    out.setdefault(id(p), p)
        for p in self.control_preds:
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


class Graph:
    """A dataflow graph; also used for If/Loop bodies (then ``parent`` is the owning node)."""

    def __init__(self, name: str = "graph"):
        self.name = name
        self.inputs: list[Value] = []
        self.outputs: list[Value] = []
        self.initializers: dict[str, Value] = {}
        self._nodes: list[Node] = []
        self.parent: Node | None = None
        self.opset_imports: dict[str, int] = {"": 17}
        self.ir_version: int = 8
        self.doc: str = ""
        self.metadata: dict[str, str] = {}
        self._succ_cache: dict[int, list[Node]] | None = None

    # -- construction ------------------------------------------------------------------
    @property
    def nodes(self) -> list[Node]:
        return list(self._nodes)

    def __iter__(self) -> Iterator[Node]:
        return iter(list(self._nodes))

    def __len__(self) -> int:
        return len(self._nodes)

    def add_input(self, v: Value) -> Value:
        v.graph = self
        self.inputs.append(v)
        return v

    def add_initializer(self, name: str, data: np.ndarray) -> Value:
        data = np.asarray(data) if not isinstance(data, np.ndarray) else data
        v = Value(name, dtype=str(data.dtype), shape=tuple(data.shape), const=data)
        v.graph = self
        self.initializers[name] = v
        return v

    def add_node(self, node: Node) -> Node:
        node.graph = self
        for o in node._outputs:
            o.graph = self
        for g in node.subgraphs:
            g.parent = node
        self._nodes.append(node)
        self._succ_cache = None
        return node

    def remove_node(self, node: Node) -> None:
        for o in node._outputs:
            if o.uses or o in self.outputs:
                raise GraphError(f"cannot remove node {node.name!r}: output {o.name!r} is still used")
        node.set_inputs([])
        self._nodes.remove(node)
        node.graph = None
        self._succ_cache = None

    def fold_to_constants(self, node: Node, arrays: list[np.ndarray]) -> None:
        """Constant folding: each output Value of `node` becomes an initializer holding the
        matching array, and `node` leaves the graph. Consumers keep reading the same Values,
        so names and use lists stay valid."""
        if len(arrays) != len(node._outputs):
            raise GraphError(f"node {node.name!r}: {len(arrays)} folded values for "
                             f"{len(node._outputs)} outputs")
        for o, a in zip(node._outputs, arrays):
            o.const = np.asarray(a, order="C")  # (not ascontiguousarray: it makes 0-d arrays 1-d)
            o.dtype, o.shape = str(a.dtype), tuple(a.shape)
            o.producer, o.index = None, -1
            self.initializers[o.name] = o
        node._outputs = []
        self.remove_node(node)

    def absorb(self, keep: Node, drop: Node) -> None:
        """Fusion: `keep` produces `drop`'s (single) output Value and `drop` leaves the graph.

        Consumers keep reading the same Value, so output names and use lists stay valid;
        `keep`'s old output is dropped (the caller made sure nothing else reads it)."""
        (y,) = drop._outputs
        drop.set_inputs([])
        drop._outputs = []
        y.producer, y.index = None, -1
        self.remove_node(drop)
        for old in keep._outputs:
            old.producer, old.index = None, -1
        keep._outputs = []
        keep.add_output(y)

    def set_node_order(self, nodes: list[Node]) -> None:
        if len(nodes) != len(self._nodes) or {id(n) for n in nodes} != {id(n) for n in self._nodes}:
            raise GraphError(f"graph {self.name!r}: new node order is not a permutation")
        self._nodes = list(nodes)

    def invalidate(self) -> None:
        self._succ_cache = None

    # -- queries -----------------------------------------------------------------------
    def node(self, name: str) -> Node:
        for n in self._nodes:
            if n.name == name:
                return n
        raise KeyError(f"graph {self.name!r} has no node named {name!r}")

    def find_node(self, name: str) -> Node | None:
        for n in self._nodes:
            if n.name == name:
                return n
        return None

    def values(self) -> dict[str, Value]:
        """Every value defined in this graph (inputs, initializers, node outputs)."""
        out: dict[str, Value] = {}
        for v in self.inputs:
            out[v.name] = v
        for name, v in self.initializers.items():
            out.setdefault(name, v)
        for n in self._nodes:
            for o in n._outputs:
                out[o.name] = o
        return out

    def value(self, name: str) -> Value:
        v = self.values().get(name)
        if v is None:
            raise KeyError(f"graph {self.name!r} has no value named {name!r}")
        return v

    def successors_of(self, node: Node) -> list[Node]:
        if self._succ_cache is None:
            cache: dict[int, list[Node]] = {id(n): [] for n in self._nodes}
            for n in self._nodes:
                for p in n.predecessors:
                    lst = cache.get(id(p))
                    if lst is not None and n not in lst:
                        lst.append(n)
            self._succ_cache = cache
        return list(self._succ_cache.get(id(node), []))

    def outer_references(self) -> list[Value]:
        """Values used by this graph (or its nested subgraphs) but defined outside it."""
        defined = set(id(v) for v in self.values().values())
        out: dict[int, Value] = {}
        for n in self._nodes:
            for v in n._inputs:
                if v is not None and id(v) not in defined:
                    out.setdefault(id(v), v)
            for sg in n.subgraphs:
                for v in sg.outer_references():
                    if id(v) not in defined:
                        out.setdefault(id(v), v)
        for v in self.outputs:
            if id(v) not in defined:
                out.setdefault(id(v), v)
        return list(out.values())

    def all_graphs(self) -> list["Graph"]:
        """This graph and every nested subgraph, parents before children."""
        out = [self]
        for n in self._nodes:
            for sg in n.subgraphs:
                out.extend(sg.all_graphs())
        return out

    def topological_sort(self) -> list[Node]:
        """Kahn's algorithm, stable with respect to the current node order. Raises on a cycle.

        Runs about ten times per compile, so it works on integer indices, and when the
        current order already is topological (the common case: passes keep it so) it
        returns it as is, which is exactly what the stable Kahn pass would return.
        """
        nodes = self._nodes
        index = {id(n): i for i, n in enumerate(nodes)}
        get = index.get
        preds: list[list[int]] = []
        in_order = True
        for i, n in enumerate(nodes):
            if n.attrs:    # may hold a subgraph (implicit inputs): the general way
                ps = [index[id(p)] for p in n.predecessors if id(p) in index]
            else:          # inlined Node.predecessors, as indices (deduplicated below)
                ps = []
                for v in n._inputs:
                    if v is not None:
                        p = v.producer
                        if p is not None and p.graph is self:
                            j = get(id(p))
                            if j is not None:
                                ps.append(j)
                for p in n.control_preds:
                    j = get(id(p))
                    if j is not None:
                        ps.append(j)
                if len(ps) > 1:
                    ps = list(dict.fromkeys(ps))
            if in_order:
                for j in ps:
                    if j >= i:
                        in_order = False
                        break
            preds.append(ps)
        if in_order:
            return list(nodes)
        indeg = [len(ps) for ps in preds]
        succs: list[list[int]] = [[] for _ in nodes]
        for i, ps in enumerate(preds):
            for j in ps:
                succs[j].append(i)
        import heapq
        ready = [i for i, d in enumerate(indeg) if d == 0]
        heapq.heapify(ready)
        order: list[Node] = []
        while ready:
            i = heapq.heappop(ready)
            order.append(nodes[i])
            for s in succs[i]:
                indeg[s] -= 1
                if indeg[s] == 0:
                    heapq.heappush(ready, s)
        if len(order) != len(nodes):
            stuck = [n for i, n in enumerate(nodes) if indeg[i] > 0]
            raise GraphCycleError(
                f"graph {self.name!r} has a cycle through node {stuck[0].name!r} ({stuck[0].op_type})")
        return order

    def sort(self) -> None:
        """Reorder nodes topologically (in place)."""
        self._nodes = self.topological_sort()
        self._succ_cache = None

    def __repr__(self) -> str:
        return f"Graph({self.name!r}, {len(self._nodes)} nodes)"


def unique_name(taken: set[str], base: str) -> str:
    """`base`, else the first of `base_1`, `base_2`, ... not in `taken`; the name returned is
    added to `taken`. pyge's one unique-name helper (fusions, front ends, the built graph)."""
    if base not in taken:
        taken.add(base)
        return base
    i = 1
    while f"{base}_{i}" in taken:
        i += 1
    name = f"{base}_{i}"
    taken.add(name)
    return name


def bfs_order(start: Iterable[Node]) -> list[Node]:
    q = deque(start)
    seen = set()
    out = []
    while q:
        n = q.popleft()
        if id(n) in seen:
            continue
        seen.add(id(n))
        out.append(n)
        q.extend(n.successors)
    return out
