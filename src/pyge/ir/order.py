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


def _pred_indices(graph, index: dict[int, int]) -> tuple[list[list[int]], bool]:
    """Per node (by position), the positions of its predecessors, without repeats; and
    whether every predecessor comes before its reader (the order is topological already)."""
    get = index.get
    preds: list[list[int]] = []
    in_order = True
    for i, n in enumerate(graph._nodes):
        if n.attrs:    # may hold a subgraph (implicit inputs): the general way
            ps = [index[id(p)] for p in n.predecessors if id(p) in index]
        else:          # Node.predecessors inlined, as positions (it runs ~10 times a compile)
            ps = []
            for v in n._inputs:
                if v is not None:
                    p = v.producer
                    if p is not None and p.graph is graph:
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
    return preds, in_order


def topological_sort(graph) -> list:
    """Kahn's algorithm, stable with respect to the current node order (among ready nodes
    the earliest listed goes first). When the current order already is topological (the
    common case: passes keep it so) it is returned as is, which is what the stable pass
    would return. Raises GraphCycleError naming the nodes of one cycle."""
    nodes = graph._nodes
    index = {id(n): i for i, n in enumerate(nodes)}
    preds, in_order = _pred_indices(graph, index)
    if in_order:
        return list(nodes)
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
