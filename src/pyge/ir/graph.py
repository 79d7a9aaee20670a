"""The graph IR: Graph (here), Node (node.py), Value (value.py).

Built around values, as torch.fx and onnx-ir are: a Value knows its producer and its
uses, and the use lists are kept up to date by the setters (``Node.set_input``,
``Node.replace_input_with``, ``Graph.replace_value``, ``Graph.remove_node``), never by hand.

The editing methods are safe for code outside pyge (custom graph passes): they refuse what
would break the graph, with a GraphError naming the culprit, and leave it unchanged then.
Node and value names stay unique within a graph (``add_node``, ``add_output``,
``add_initializer``, ``add_input`` refuse a taken name; ``unique_node_name`` and
``unique_value_name`` give free ones), use lists stay right, and a subgraph's parent is the
node that holds it (``add_node``, ``Node.set_attr``). A sealed graph (``seal``) refuses
every edit. Editing by plain assignment (``node.name = ...``, ``graph.outputs.append``)
is not checked. The editing methods, and any change to ``Node.control_preds``, also move
the graph's version (``_version``: ir/node.edited), which vouches for what was derived
from the structure (the order check of ir/order.py, ``all_graphs``); after an edit by
plain assignment that changes an edge (a subgraph's outputs, ``node.attrs`` holding a
graph), call ``invalidate()``.

This module imports no other pyge layer and no serialisation library: converting to
and from ONNX lives in ``pyge.frontends``.
"""
from __future__ import annotations

from collections import deque
from typing import Any, Iterable, Iterator

import numpy as np

from ..errors import GraphError
from . import order as _order
from .names import NameIndex, first_free, unique_name
from .node import GraphBase, Node, edited
from .value import OPTIONAL, SEQUENCE, TENSOR, Value

__all__ = ["Graph", "Node", "Value", "TENSOR", "SEQUENCE", "OPTIONAL", "unique_name", "bfs_order"]


class Graph(GraphBase):
    """A dataflow graph; also used for If/Loop bodies (then ``parent`` is the owning node)."""

    def __init__(self, name: str = "graph"):
        self.name = name
        self.inputs: list[Value] = []
        self.outputs: list[Value] = []
        self.initializers: dict[str, Value] = {}
        self._nodes = []            # the node list (a property: see _node_list)
        self.parent: Node | None = None
        self.opset_imports: dict[str, int] = {"": 17}
        self.ir_version: int = 8
        self.doc: str = ""
        self.metadata: dict[str, str] = {}
        self._succ_cache: dict[int, list[Node]] | None = None
        # Graph attributes (GE's AttrUtils on a ComputeGraph): compile-time facts a pass may
        # leave, such as ge.autoMultistreamParallelMode. Not part of the ONNX form.
        self.attrs: dict[str, Any] = {}
        self._names: NameIndex | None = None
        self._sealed: str | None = None   # who sealed it: its editing methods then refuse
        # remove_node's position hints (see _unlist); None until the first removal.
        self._positions: dict[int, int] | None = None
        self._removed_since = 0
        # Edit count (ir/node.edited: every editing method moves it, and a change to a
        # subgraph moves its ancestors'), and the count at which the order check last found
        # the node list topologically sorted (ir/order.py).
        self._version = 0
        self._sorted_at = -1
        # What passes derive from the structure, by name: (version derived at, the result),
        # valid while the version stands (passes/streams/_graph.Topo.of).
        self._derived: dict[str, tuple[int, Any]] = {}

    # -- the node list -----------------------------------------------------------------
    @property
    def _nodes(self) -> list[Node]:
        """The node list itself (passes read it directly). Removals are applied to it when
        it is next read (see _unlist)."""
        if self._unlisted:
            self._flush_removals()
        return self._node_list

    @_nodes.setter
    def _nodes(self, nodes: list[Node]) -> None:
        self._node_list = nodes
        self._unlisted: list[Node] = []     # removed, not yet taken out of _node_list
        self._positions = None

    # -- construction ------------------------------------------------------------------
    @property
    def nodes(self) -> list[Node]:
        return list(self._nodes)

    def __iter__(self) -> Iterator[Node]:
        return iter(list(self._nodes))

    def __len__(self) -> int:
        return len(self._nodes)

    def add_input(self, v: Value) -> Value:
        self._editable()
        if not isinstance(v, Value) or v.producer is not None or v.const is not None:
            raise GraphError(f"graph {self.name!r}: an input must be a pyge.Value with no producer "
                             f"and no data, got {v!r}")
        self._claim_value(v, "graph input")
        self.inputs.append(v)
        return v

    def add_initializer(self, name: str, data: np.ndarray) -> Value:
        """A constant value `name` holding `data` (not copied: weights are never written)."""
        self._editable()
        data = np.asarray(data) if not isinstance(data, np.ndarray) else data
        v = Value(name, dtype=str(data.dtype), shape=tuple(data.shape), const=data)
        self._claim_value(v, "initializer")
        self.initializers[name] = v
        return v

    def add_node(self, node: Node) -> Node:
        """Append `node` (with its inputs and outputs set) to this graph. Its name, and its
        outputs' names, must be free here; its subgraphs take it as their parent."""
        self._editable()
        if not isinstance(node, Node):
            raise GraphError(f"graph {self.name!r}: add_node expects a pyge.Node, got {type(node).__name__}")
        if node.graph is not None:
            raise GraphError(f"node {node.name!r} already belongs to graph {node.graph.name!r} "
                             "(remove_node it there first)")
        names = self._index()
        other = names.node(node.name)
        if other is not None:
            raise GraphError(f"graph {self.name!r} already has a node named {node.name!r} "
                             f"({other.op_type}); graph.unique_node_name() gives a free one")
        for o in node._outputs:
            if o.producer is not node:
                raise GraphError(f"node {node.name!r}: output {o.name!r} names producer "
                                 f"{getattr(o.producer, 'name', None)!r}; use node.add_output")
            self._check_free(o, f"output of node {node.name!r}")
        for sub in node.subgraphs:
            if sub.parent is not None and sub.parent is not node and sub.parent.graph is not None:
                raise GraphError(f"subgraph {sub.name!r} of node {node.name!r} already belongs to "
                                 f"node {sub.parent.name!r}")
        node.graph = self
        names.nodes[node.name] = node
        for o in node._outputs:
            o.graph = self
            names.values[o.name] = o
        for sub in node.subgraphs:
            sub.parent = node
        self._nodes.append(node)
        if self._positions is not None:
            self._positions[id(node)] = len(self._nodes) - 1
        self._succ_cache = None
        edited(node)
        return node

    def remove_node(self, node: Node) -> None:
        """Take `node` out of the graph; none of its outputs may still be read or be a graph
        output (rewire the readers first: replace_value, Node.set_input)."""
        self._editable()
        if not isinstance(node, Node) or node.graph is not self:
            raise GraphError(f"cannot remove {node!r}: it is not a node of graph {self.name!r}")
        for o in node._outputs:
            if o.uses or o in self.outputs:
                raise GraphError(f"cannot remove node {node.name!r}: output {o.name!r} is still used")
        node.set_inputs([])
        edited(node)
        self._unlist(node)
        node.graph = None
        self._succ_cache = None

    def _unlist(self, node: Node) -> None:
        """Delete `node` from the node list, when the list is next read: a fusion pass
        removes thousands of nodes, and deleting each at once moved the rest of a 100,000-node
        list every time (list.remove per node was also quadratic). Pending removals are
        applied together, in one walk of the list, or one at a time when they are few."""
        self._unlisted.append(node)

    def _flush_removals(self) -> None:
        pending, self._unlisted = self._unlisted, []
        nodes = self._node_list
        if len(pending) > 64:
            gone = {id(n) for n in pending}
            kept = []
            for n in nodes:                 # each pending node's first place, as list.remove
                if id(n) in gone:
                    gone.discard(id(n))
                else:
                    kept.append(n)
            nodes[:] = kept                 # in place: a caller may hold the list
            self._positions = None
            return
        for node in pending:
            self._delete_listed(node)

    def _delete_listed(self, node: Node) -> None:
        """Delete `node` from the node list without scanning it all. A node's position,
        noted when the hints were built (or it was added), can only have dropped since, by
        at most the number of removals made in between; so it is searched in that window,
        and the hints are rebuilt once the window grows past an eighth of the graph. A list
        edited by other means than these methods falls back to list.remove (nothing, for
        a node that is not listed at all)."""
        nodes = self._node_list
        if self._positions is None or self._removed_since > max(256, len(nodes) >> 3):
            self._positions = {id(n): i for i, n in enumerate(nodes)}
            self._removed_since = 0
        i = self._positions.pop(id(node), -1)
        try:
            del nodes[nodes.index(node, max(0, i - self._removed_since), i + 1)]
        except ValueError:          # not where the hint says (or no hint): the slow way
            if node in nodes:
                nodes.remove(node)
        self._removed_since += 1

    def replace_value(self, old: Value, new: Value) -> int:
        """Every reader of `old` (this graph's nodes and their subgraphs') reads `new`, but
        the node producing `new` (so that a node inserted after `old` keeps reading it), and
        `new` takes `old`'s place among the graph outputs. A graph output keeps its name:
        there the two values swap names, so `new` must be a node's output. Returns how many
        input slots were rewired. The usual end of a rewrite, before remove_node(old producer)."""
        self._editable()
        if not isinstance(old, Value) or not isinstance(new, Value):
            raise GraphError(f"graph {self.name!r}: replace_value expects two pyge.Values")
        if old is new:
            return 0
        slots = [k for k, v in enumerate(self.outputs) if v is old]
        if slots and (new.producer is None or new.producer.graph is not self):
            raise GraphError(f"graph output {old.name!r} must keep its name, so the value replacing it "
                             f"must be an output of a node of graph {self.name!r}; {new.name!r} is not "
                             "(add an Identity node)")
        readers = [(n, i) for n, i in old.uses if n is not new.producer]
        for n, i in readers:
            n.set_input(i, new)
        for k in slots:
            self.outputs[k] = new
        if slots:
            self._edited()          # a body's outputs are reads of its parent node's too
            old.name, new.name = new.name, old.name
            names = self._index()
            names.values[old.name], names.values[new.name] = old, new
        return len(readers)

    def fold_to_constants(self, node: Node, arrays: list[np.ndarray]) -> None:
        """Constant folding: each output Value of `node` becomes an initializer holding the
        matching array, and `node` leaves the graph. Consumers keep reading the same Values,
        so names and use lists stay valid."""
        if len(arrays) != len(node._outputs):
            raise GraphError(f"node {node.name!r}: {len(arrays)} folded values for "
                             f"{len(node._outputs)} outputs")
        self._editable()
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
        self._editable()
        (y,) = drop._outputs
        drop.set_inputs([])
        drop._outputs = []
        y.producer, y.index = None, -1
        self.remove_node(drop)
        for old in keep._outputs:
            old.producer, old.index = None, -1
        keep._outputs = []
        if keep.graph is self and y.graph is self:
            # y keeps its place among this graph's values under its own name, so what
            # add_output would check holds; skipping it spares building the name index
            # (every value of the graph) for a fusion pass that never needs it.
            y.producer, y.index = keep, 0
            keep._outputs.append(y)
            if self._names is not None:
                self._names.values[y.name] = y
            edited(keep)
        else:
            keep.add_output(y)

    def set_node_order(self, nodes: list[Node]) -> None:
        self._editable()
        if len(nodes) != len(self._nodes) or {id(n) for n in nodes} != {id(n) for n in self._nodes}:
            raise GraphError(f"graph {self.name!r}: new node order is not a permutation")
        self._nodes = list(nodes)
        self._positions = None
        self._edited()

    def invalidate(self) -> None:
        """Forget what was derived from the graph's structure (after an edit made without
        the editing methods): the successor lists, and that the order was checked."""
        self._succ_cache = None
        self._derived.clear()
        self._edited()

    def _edited(self) -> None:
        """This graph changed: its version moves on, and its ancestors' (ir/node.edited)."""
        g = self
        while g is not None:
            g._version += 1
            parent = g.parent
            g = parent.graph if parent is not None else None

    def set_attr(self, key: str, value: Any) -> None:
        """Set graph attribute `key` (GE's graph attributes; see `attrs`)."""
        self._editable()
        if not isinstance(key, str) or not key:
            raise GraphError(f"graph {self.name!r}: attribute names are non-empty strings, got {key!r}")
        self.attrs[key] = value

    def get_attr(self, key: str, default: Any = None) -> Any:
        return self.attrs.get(key, default)

    def unique_node_name(self, base: str) -> str:
        """`base`, or `base_1`, `base_2`, ..., whichever no node of this graph is called."""
        names = self._index()
        return first_free(base, lambda n: names.node(n) is not None)

    def unique_value_name(self, base: str) -> str:
        """`base`, or `base_1`, ..., whichever no value of this graph is called."""
        names = self._index()
        return first_free(base, lambda n: names.value(n) is not None)

    def seal(self, by: str) -> None:
        """Refuse every later edit through the editing methods, here and in every subgraph
        (`by` says who sealed it, for the message). For a graph handed to code that must no
        longer change it: the compiler seals what a custom graph pass returned."""
        self._derived.pop("all_graphs", None)   # a subgraph put into attrs by hand counts too
        for g in self.all_graphs():
            g._sealed = by

    # -- keeping names unique and sealed graphs unchanged --------------------------------
    def _index(self) -> NameIndex:
        if self._names is None:
            self._names = NameIndex(self)
        return self._names

    def _check_free(self, v: Value, what: str) -> None:
        other = self._index().value(v.name)
        if other is not None and other is not v:
            raise GraphError(f"graph {self.name!r} already has a value named {v.name!r}; the new "
                             f"{what} needs another (graph.unique_value_name() gives a free one)")

    def _claim_value(self, v: Value, what: str) -> None:
        self._check_free(v, what)
        v.graph = self
        self._index().values[v.name] = v

    def _editable(self) -> None:
        if self._sealed is not None:
            self._refuse_sealed()

    def _refuse_sealed(self) -> None:
        raise GraphError(f"graph {self.name!r} can no longer be changed: it was handed to "
                         f"{self._sealed}, which has returned (the compiler works on its own copy)")

    # -- queries -----------------------------------------------------------------------
    def node(self, name: str) -> Node:
        for n in self._nodes:
            if n.name == name:
                return n
        raise KeyError(f"graph {self.name!r} has no node named {name!r}")

    def find_node(self, name: str) -> Node | None:
        """The node called `name`, or None."""
        n = self._index().node(name)
        if n is not None:
            return n
        for n in self._nodes:   # renamed after it was indexed: the slow, exact way
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
        """This graph and every nested subgraph, parents before children.

        Kept with the version it was found at (a compile asks some sixteen times): a subgraph
        attached with Node.set_attr or a node added or removed moves the version, one put in
        or taken out of `node.attrs` by plain assignment does not (invalidate() then)."""
        hit = self._derived.get("all_graphs")
        if hit is not None and hit[0] == self._version:
            return list(hit[1])
        out = [self]
        for n in self._nodes:
            if n.attrs:           # (most nodes hold no graph: Node.subgraphs, inlined)
                for a in n.attrs.values():
                    if isinstance(a, GraphBase):
                        out.extend(a.all_graphs())
                    elif isinstance(a, list) and a and isinstance(a[0], GraphBase):
                        for sg in a:
                            out.extend(sg.all_graphs())
        self._derived["all_graphs"] = (self._version, out)
        return list(out)

    def topological_sort(self) -> list[Node]:
        """The nodes in a topological order, stable with respect to the current order (the
        current order itself when it is one). Raises GraphCycleError naming the nodes of a
        cycle (ir/order.py)."""
        return _order.topological_sort(self)

    def sort(self) -> None:
        """Reorder nodes topologically (in place); GraphCycleError on a cycle."""
        order = _order.topological_sort(self)
        if any(a is not b for a, b in zip(order, self._nodes)):
            self._nodes = order
            self._positions = None
            self._succ_cache = None
            self._edited()                  # what follows the list order (all_graphs) moves
        self._sorted_at = self._version     # sorted now

    def find_cycle(self) -> list[Node]:
        """The nodes of one cycle in data-flow order, or [] when the graph is acyclic."""
        return _order.find_cycle(self)            # ir/cycles.find_cycle

    def __repr__(self) -> str:
        return f"Graph({self.name!r}, {len(self._nodes)} nodes)"


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
