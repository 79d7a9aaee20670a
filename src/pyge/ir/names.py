"""Names in the graph IR: pyge's one unique-name helper, and the per-graph name index that
lets Graph's editing methods keep node and value names unique at O(1) a call."""
from __future__ import annotations

from typing import Callable



def unique_name(taken: set[str], base: str) -> str:
    """`base`, else the first of `base_1`, `base_2`, ... not in `taken`; the name returned is
    added to `taken`. pyge's one unique-name helper (fusions, front ends, the built graph)."""
    name = first_free(base, taken.__contains__)
    taken.add(name)
    return name


def first_free(base: str, taken: Callable[[str], bool]) -> str:
    """`base`, else the first of `base_1`, `base_2`, ... for which `taken` is false."""
    if not taken(base):
        return base
    i = 1
    while taken(f"{base}_{i}"):
        i += 1
    return f"{base}_{i}"


class NameIndex:
    """The node names and value names (inputs, initializers, node outputs) of one graph.

    Built from the graph on first use and kept up to date by its editing methods. An entry
    is checked against the graph when it is found (a node may have been renamed, or a value
    dropped, by plain assignment), so a stale entry never refuses a free name. A name given
    by plain assignment after the index was built is not seen here: the checks after each
    custom graph pass, and the WELL_FORMED invariant, look at every name.
    """

    __slots__ = ("graph", "nodes", "values")

    def __init__(self, graph: Graph):
        self.graph = graph
        self.nodes: dict[str, Node] = {n.name: n for n in graph._nodes}
        self.values: dict[str, Value] = {v.name: v for v in graph.inputs}
        self.values.update(graph.initializers)
        for n in graph._nodes:
            for o in n._outputs:
                self.values[o.name] = o

    def node(self, name: str) -> Node | None:
        """The node of the graph called `name`, as far as the index knows."""
        n = self.nodes.get(name)
        return n if n is not None and n.graph is self.graph and n.name == name else None

    def value(self, name: str) -> Value | None:
        """The value defined in the graph called `name`, as far as the index knows."""
        v = self.values.get(name)
        if v is None or v.name != name:
            return None
        g, p = self.graph, v.producer
        if p is not None:
            return v if p.graph is g and v in p._outputs else None
        return v if g.initializers.get(name) is v or any(x is v for x in g.inputs) else None
