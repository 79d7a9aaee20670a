"""GraphBuilder: build a graph by hand.

    b = GraphBuilder("demo")
    x = b.input("input", "float32", (4, 64))
    a = b.op("Abs", [x], name="Abs_1")
    r = b.op("Relu", [x], name="Relu_1")
    b.output(b.op("Add", [a, r], name="Add_1"), "output")
    g = b.build()
"""
from __future__ import annotations

from typing import Any, Sequence

import numpy as np

from ..errors import GraphError
from .graph import Graph, Node, Value, unique_name


class GraphBuilder:
    def __init__(self, name: str = "graph", opset: int = 17):
        self.graph = Graph(name)
        self.graph.opset_imports = {"": opset}
        self._names: set[str] = set()
        self._node_names: set[str] = set()
        # name -> node, so that control_edge is O(1) (a scan of the graph made building a
        # 100k-node graph quadratic); checked against the graph, which callers may edit.
        self._by_name: dict[str, Node] = {}

    def input(self, name: str, dtype: str = "float32", shape: Sequence | None = None) -> Value:
        self._claim(name)
        v = Value(name, dtype=str(np.dtype(dtype)) if dtype != "object" else "object",
                  shape=tuple(shape) if shape is not None else None)
        return self.graph.add_input(v)

    def initializer(self, name: str, data: Any) -> Value:
        self._claim(name)
        return self.graph.add_initializer(name, np.asarray(data))

    def constant(self, data: Any, name: str | None = None) -> Value:
        name = name or unique_name(self._names, "const")
        if name not in self._names:
            self._claim(name)
        return self.graph.add_initializer(name, np.asarray(data))

    def op(self, op_type: str, inputs: Sequence[Value | None], name: str | None = None,
           num_outputs: int = 1, outputs: Sequence[str] | None = None, domain: str = "",
           **attrs: Any):
        """Add a node; returns its output Value (or a tuple when it has several)."""
        name = name or unique_name(self._node_names, f"{op_type}_{len(self.graph)}")
        if name in self._node_names and self.graph.find_node(name) is not None:
            raise GraphError(f"GraphBuilder: duplicate node name {name!r}")
        self._node_names.add(name)
        node = Node(op_type, name, domain=domain, attrs=attrs)
        for v in inputs:
            if v is not None and not isinstance(v, Value):
                raise GraphError(f"GraphBuilder: input of node {name!r} is not a Value: {v!r}")
            node.append_input(v)
        out_names = list(outputs) if outputs else [
            f"{name}_out{i}" if num_outputs > 1 else f"{name}_out" for i in range(num_outputs)]
        vals = []
        for on in out_names:
            self._claim(on)
            vals.append(node.add_output(Value(on)))
        self.graph.add_node(node)
        self._by_name[name] = node
        return vals[0] if len(vals) == 1 else tuple(vals)

    def output(self, v: Value, name: str | None = None) -> Value:
        if name is not None and name != v.name:
            v = self.op("Identity", [v], name=f"{name}_Identity", outputs=[name])
        self.graph.outputs.append(v)
        return v

    def control_edge(self, before: str, after: str) -> None:
        """A control dependency: node `after` waits for node `before` (no data flows)."""
        self._node(after).control_preds.append(self._node(before))
        self.graph.invalidate()

    def _node(self, name: str) -> Node:
        n = self._by_name.get(name)
        if n is not None and n.graph is self.graph and n.name == name:
            return n
        return self.graph.node(name)   # renamed or removed behind our back: the slow, exact way

    def build(self) -> Graph:
        # Shapes and dtypes of intermediates are inferred when the graph is compiled.
        self.graph.sort()
        return self.graph

    def _claim(self, name: str) -> None:
        if name in self._names:
            raise GraphError(f"GraphBuilder: duplicate value name {name!r}")
        self._names.add(name)
