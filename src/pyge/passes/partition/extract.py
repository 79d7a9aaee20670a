"""From clusters to graphs: one Graph per static sub-model, and the dynamic root.

A static sub-model's Graph holds copies of its cluster's nodes (names kept, control-flow
bodies copied with them); its inputs are the values that cross into the cluster (in the
order its nodes first read them), its outputs the values it makes that something outside
reads or that the model returns (in the order they are made), and its initializers the
weights it reads (the arrays are shared, never copied). The root Graph keeps the model's
inputs and outputs, the unknown nodes, and at each static sub-model's place one call node
(`pyge.PartitionedCall`, attribute `submodel` = the sub-model's name) that reads the
sub-model's inputs and makes its outputs: the same names, so every value keeps its name in
whichever part holds it. Control edges between parts become control edges between the
root's nodes and call nodes. The source graph is not changed.
"""
from __future__ import annotations

from ...errors import GraphError
from ...ir.clone import clone_graph
from ...ir.graph import Graph, Node, Value, unique_name

CALL_OP = "PartitionedCall"
CALL_DOMAIN = "pyge"
CALL_OPSET = 1
SUBMODEL_ATTR = "submodel"


def _copy_value(v: Value) -> Value:
    nv = Value(v.name, v.dtype, v.shape, v.kind)
    nv.elem_kind = v.elem_kind
    return nv


def _copy_node(n: Node, vmap: dict[int, Value]) -> Node:
    """A copy of `n` reading `vmap`'s values; its outputs are added to `vmap`."""
    nn = Node(n.op_type, n.name, n.domain)
    nn.engine, nn.doc = n.engine, n.doc
    for k, a in n.attrs.items():
        if isinstance(a, Graph):
            nn.attrs[k] = clone_graph(a, vmap)
        elif isinstance(a, list) and a and isinstance(a[0], Graph):
            nn.attrs[k] = [clone_graph(x, vmap) for x in a]
        else:
            nn.attrs[k] = list(a) if isinstance(a, list) else a
    for v in n.inputs:
        nn.append_input(None if v is None else vmap[id(v)])
    for o in n.outputs:
        no = _copy_value(o)
        vmap[id(o)] = no
        nn.add_output(no)
    return nn


def _new_graph(source: Graph, name: str) -> Graph:
    g = Graph(name)
    g.opset_imports = dict(source.opset_imports)
    g.ir_version = source.ir_version
    return g


def build_submodel(source: Graph, nodes: list[Node], name: str) -> tuple[Graph, list[Value], list[Value]]:
    """The Graph of a static sub-model made of `nodes` (in graph order). Returns it with the
    source values that become its inputs and its outputs, in their order."""
    g = _new_graph(source, name)
    inside = {id(n) for n in nodes}
    vmap: dict[int, Value] = {}
    crossing_in: list[Value] = []
    for n in nodes:
        for v in n.all_inputs():
            if id(v) in vmap or (v.producer is not None and id(v.producer) in inside):
                continue
            if v.const is not None and v.producer is None:
                vmap[id(v)] = g.add_initializer(v.name, v.const)
            else:
                vmap[id(v)] = g.add_input(_copy_value(v))
                crossing_in.append(v)
    copies: dict[int, Node] = {}
    for n in nodes:
        copies[id(n)] = g.add_node(_copy_node(n, vmap))
    for n in nodes:
        copies[id(n)].control_preds = [copies[id(p)] for p in n._control_preds if id(p) in inside]
    returned = {id(v) for v in source.outputs}
    crossing_out: list[Value] = []
    for n in nodes:
        for o in n.outputs:
            if id(o) in returned or any(id(c) not in inside for c in _readers(o)):
                crossing_out.append(o)
    g.outputs = [vmap[id(o)] for o in crossing_out]
    return g, crossing_in, crossing_out


def _readers(v: Value) -> list[Node]:
    """The root-graph nodes that read `v`, directly or inside a body (the body's owner)."""
    out = []
    for c in v.consumers:
        while c.graph is not None and c.graph.parent is not None:
            c = c.graph.parent
        out.append(c)
    return out


class RootBuilder:
    """Builds the dynamic root: the source's unknown nodes and one call node per sub-model."""

    def __init__(self, source: Graph):
        self.source = source
        self.root = _new_graph(source, source.name)
        self.root.metadata = dict(source.metadata)
        self.root.doc = source.doc
        self.root.opset_imports.setdefault(CALL_DOMAIN, CALL_OPSET)
        self.vmap: dict[int, Value] = {}
        for v in source.inputs:
            self.vmap[id(v)] = self.root.add_input(_copy_value(v))
        self.node_of: dict[int, Node] = {}      # id(source node) -> its root node or call node
        self._taken = {n.name for n in source.nodes} | set(source.values())

    def _value(self, v: Value) -> Value:
        got = self.vmap.get(id(v))
        if got is None:
            if v.const is None:  # clusters come in a topological order: a producer comes first
                raise GraphError(f"graph {self.source.name!r}: value {v.name!r} is read before "
                                 "the part that makes it (a bug of the dynamic-shape partition)")
            got = self.vmap[id(v)] = self.root.add_initializer(v.name, v.const)
        return got

    def add_unknown(self, n: Node) -> None:
        for v in n.all_inputs():
            self._value(v)
        self.node_of[id(n)] = self.root.add_node(_copy_node(n, self.vmap))

    def add_call(self, name: str, k: int, nodes: list[Node], ins: list[Value],
                 outs: list[Value]) -> Node:
        """The call node of sub-model `name`, the k-th, made of `nodes` (source nodes)."""
        call = Node(CALL_OP, unique_name(self._taken, f"{CALL_OP}_{k}"), CALL_DOMAIN,
                    {SUBMODEL_ATTR: name})
        call.engine = "compute"
        for v in ins:
            call.append_input(self._value(v))
        for o in outs:
            self.vmap[id(o)] = call.add_output(_copy_value(o))
        for n in nodes:
            self.node_of[id(n)] = call
        return self.root.add_node(call)

    def finish(self) -> Graph:
        """Control edges between parts, the model's outputs, and a topological order."""
        for n in self.source.nodes:
            mine = self.node_of[id(n)]
            for p in n._control_preds:
                theirs = self.node_of.get(id(p))
                if theirs is not None and theirs is not mine and theirs not in mine.control_preds:
                    mine.control_preds.append(theirs)
        self.root.outputs = [self._value(v) for v in self.source.outputs]
        self.root.sort()
        return self.root


__all__ = ["CALL_OP", "CALL_DOMAIN", "SUBMODEL_ATTR", "build_submodel", "RootBuilder"]
