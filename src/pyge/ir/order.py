"""Topological order of one graph's nodes (Graph.topological_sort and Graph.sort call it),
and the GraphCycleError naming the cycle that prevents one.

The loader sorts graphs that list a reader before its producer (ONNX asks for a sorted
graph, but onnxruntime runs unsorted ones) and clone sorts the compiler's copy. The cycle
named is ir/cycles.find_cycle's, the one the graph checks after each pass use too. Edges are
a node's predecessors in its own graph: data inputs, the outer-scope reads of its subgraphs
and control edges.
"""
from __future__ import annotations

import heapq

from ..errors import GraphCycleError
from .cycles import find_cycle
from .node import holds_graph


def predecessor_positions(n, graph, get) -> list[int]:
    """The positions (`get(id(node))`, None: not counted) of `n`'s predecessors in `graph`,
    without repeats, in Node.predecessors' order, without building that list."""
    if n.attrs and holds_graph(n.attrs):   # implicit inputs of a subgraph: the general way
        return [j for j in (get(id(p)) for p in n.predecessors) if j is not None]
    ps = []
    for v in n._inputs:
        if v is not None:
            p = v.producer
            if p is not None and p.graph is graph:
                j = get(id(p))
                if j is not None:
                    ps.append(j)
    for p in n._control_preds:
        j = get(id(p))
        if j is not None:
            ps.append(j)
    if len(ps) > 1:
        ps = list(dict.fromkeys(ps))
    return ps


def predecessor_lists(nodes: list, graph) -> list[list[int]]:
    """Per node of `nodes`, predecessor_positions(n, graph, get) with `get` the positions in
    `nodes`: each predecessor's position is read off a stamp written on it first (Node._pos,
    as _in_order does), not through id() and a position map, and trusted only where `nodes`
    holds that node there (a node that claims the graph but is not listed is left out, as
    the map would leave it). Nodes holding a subgraph go the general way."""
    count, get = len(nodes), None
    for i, n in enumerate(nodes):
        n._pos = i
    out = []
    for n in nodes:
        if n.attrs and holds_graph(n.attrs):
            if get is None:
                get = {id(m): j for j, m in enumerate(nodes)}.get
            out.append(predecessor_positions(n, graph, get))
            continue
        ps = []
        for v in n._inputs:
            if v is not None:
                p = v.producer
                if p is not None and p.graph is graph:
                    j = p._pos
                    if 0 <= j < count and nodes[j] is p:
                        ps.append(j)
        for p in n._control_preds:
            j = p._pos
            if 0 <= j < count and nodes[j] is p:
                ps.append(j)
        if len(ps) > 1:
            ps = list(dict.fromkeys(ps))
        out.append(ps)
    return out


def _in_order(graph) -> bool:
    """Whether every predecessor comes before its reader (the order is topological already).
    The common case, checked without building the predecessor lists or a position map (it
    runs ~10 times a compile, on every node): each node's position is stamped on it first,
    so an edge costs two attribute reads. A node whose stamp says "later" is trusted only
    if the list holds it there: one that claims this graph but is not listed (an edit by
    plain assignment) is ignored, as the position map of the sort ignores it."""
    nodes = graph._nodes
    for i, n in enumerate(nodes):
        n._pos = i
    count, get = len(nodes), None
    for i, n in enumerate(nodes):
        if n.attrs and holds_graph(n.attrs):   # implicit inputs: the general way
            if get is None:
                get = {id(m): j for j, m in enumerate(nodes)}.get
            if any(j >= i for j in predecessor_positions(n, graph, get)):
                return False
            continue
        for v in n._inputs:
            if v is not None:
                p = v.producer
                if p is not None and p.graph is graph and p._pos >= i and _listed(p, nodes, count):
                    return False
        for p in n._control_preds:
            if p._pos >= i and _listed(p, nodes, count):
                return False
    return True


def _listed(p, nodes: list, count: int) -> bool:
    """Whether `p`'s stamp is its position in `nodes` (else it is not in the list)."""
    return p._pos < count and nodes[p._pos] is p


def topological_sort(graph) -> list:
    """Kahn's algorithm, stable with respect to the current node order (among ready nodes
    the earliest listed goes first). When the current order already is topological (the
    common case: passes keep it so) it is returned as is, which is what the stable pass
    would return. Raises GraphCycleError naming the nodes of one cycle.

    The witness: a graph found in order at version k (Graph._version, which every editing
    method and every change to control edges moves on, ir/node.edited) is in order while
    its version is still k, so the check is not walked again (a compile asks some ten
    times, between passes that mostly change no edge)."""
    nodes = graph._nodes
    if graph._sorted_at == graph._version or _in_order(graph):
        graph._sorted_at = graph._version
        return list(nodes)
    preds = predecessor_lists(nodes, graph)
    indeg = [len(ps) for ps in preds]
    succs: list[list[int]] = [[] for _ in nodes]
    for i, ps in enumerate(preds):
        for j in ps:
            succs[j].append(i)
    ready = [i for i, d in enumerate(indeg) if d == 0]
    heapq.heapify(ready)
    order = []
    while ready:
        i = heapq.heappop(ready)
        order.append(nodes[i])
        for s in succs[i]:
            indeg[s] -= 1
            if indeg[s] == 0:
                heapq.heappush(ready, s)
    if len(order) != len(nodes):
        raise cycle_error(graph, find_cycle(graph))
    return order


def cycle_error(graph, ring: list) -> GraphCycleError:
    """GraphCycleError naming the nodes of `ring` (from find_cycle), each with its op type."""
    names = [n.name for n in ring]
    if not ring:                      # cannot happen when Kahn's pass is stuck; say so anyway
        return GraphCycleError(f"graph {graph.name!r} has a cycle", nodes=[])
    shown = " -> ".join(f"{n.name!r} ({n.op_type})" for n in ring[:12])
    more = f" -> ... ({len(ring) - 12} more)" if len(ring) > 12 else ""
    return GraphCycleError(f"graph {graph.name!r} has a cycle through {len(ring)} node(s): "
                           f"{shown}{more} -> {ring[0].name!r}", nodes=names)


__all__ = ["topological_sort", "find_cycle", "cycle_error"]
