"""GE's dynamic-shape clustering, on a graph's direct nodes (DynamicShapePartitioner).

Every node starts as a cluster of its own, known or unknown (unknown.py), with the clusters
of its predecessors (data, implicit and control) as inputs. Then, in GE's order:

  1. unknown clusters are merged along every path between them: a node that lies on a path
     from one unknown node to another becomes unknown, and each connected group of unknown
     nodes becomes one cluster (no path can leave such a group through a known node and
     come back, so the merge makes no cycle);
  2. known clusters merge with their known input clusters where that makes no cycle;
  3. known clusters of fewer than `limit` nodes become unknown (too small to be worth a
     static sub-model of their own; GE's ChangeSmallClusterType);
  4. unknown clusters merge with their unknown input clusters where that makes no cycle.

The cycle test is GE's TryMerge: merging input cluster J into K makes a cycle exactly when
another path leads from J to K. Each cluster keeps the lowest and highest topological rank
of its nodes; a path from X to K needs X.lo < K.hi, which bounds the search.

`cluster_graph` returns the clusters in a topological order of the cluster graph, each
with its kind and its nodes in graph order.
"""
from __future__ import annotations

import heapq
from dataclasses import dataclass, field

from ...errors import GraphCycleError
from ...ir.graph import Graph, Node


@dataclass(eq=False)
class Cluster:
    known: bool
    nodes: list[Node]
    lo: int
    hi: int
    ins: set["Cluster"] = field(default_factory=set)
    outs: set["Cluster"] = field(default_factory=set)

    def __hash__(self) -> int:
        return id(self)


def _absorb(keep: Cluster, other: Cluster, owner: dict[int, Cluster]) -> None:
    """Merge `other` into `keep` (edges, ranks, nodes); unknown wins over known."""
    keep.nodes.extend(other.nodes)
    for n in other.nodes:
        owner[id(n)] = keep
    for c in other.ins:
        c.outs.discard(other)
        if c is not keep:
            c.outs.add(keep)
            keep.ins.add(c)
    for c in other.outs:
        c.ins.discard(other)
        if c is not keep:
            c.ins.add(keep)
            keep.outs.add(c)
    keep.ins.discard(other)
    keep.outs.discard(other)
    keep.lo, keep.hi = min(keep.lo, other.lo), max(keep.hi, other.hi)
    keep.known = keep.known and other.known


def _makes_cycle(into: Cluster, other: Cluster) -> bool:
    """Whether merging input cluster `other` into `into` closes a cycle: another path from
    `other` reaches `into`."""
    stack = [c for c in other.outs if c is not into]
    seen: set[int] = set()
    while stack:
        c = stack.pop()
        if c is into:
            return True
        if id(c) in seen or c.lo >= into.hi:
            continue
        seen.add(id(c))
        stack.extend(c.outs)
    return False


def _init(order: list[Node], unknown: set[int]) -> tuple[list[Cluster], dict[int, Cluster]]:
    owner: dict[int, Cluster] = {}
    clusters = []
    for rank, n in enumerate(order):
        c = Cluster(known=id(n) not in unknown, nodes=[n], lo=rank, hi=rank)
        for p in n.predecessors:
            pc = owner.get(id(p))
            if pc is not None:
                c.ins.add(pc)
                pc.outs.add(c)
        owner[id(n)] = c
        clusters.append(c)
    return clusters, owner


def _between(order: list[Node], unknown: set[int]) -> set[int]:
    """Nodes with an unknown node both before and after them on some path (step 1)."""
    index = {id(n): i for i, n in enumerate(order)}
    after = [False] * len(order)       # has an unknown ancestor (or is unknown)
    for i, n in enumerate(order):
        after[i] = id(n) in unknown or any(after[index[id(p)]] for p in n.predecessors
                                           if id(p) in index)
    before = [False] * len(order)      # has an unknown descendant (or is unknown)
    for i in range(len(order) - 1, -1, -1):
        n = order[i]
        if before[i] or id(n) in unknown:
            before[i] = True
            for p in n.predecessors:
                j = index.get(id(p))
                if j is not None:
                    before[j] = True
    return {id(n) for i, n in enumerate(order) if after[i] and before[i]}


def _alive(owner: dict[int, Cluster], order: list[Node]) -> list[Cluster]:
    """The clusters still standing, in a topological order of the cluster graph (Kahn's,
    the lowest first rank first): GE sorts its clusters so between the steps."""
    alive: dict[int, Cluster] = {}
    for n in order:
        c = owner[id(n)]
        alive.setdefault(id(c), c)
    indeg = {k: len(c.ins) for k, c in alive.items()}
    ready = [(c.lo, k) for k, c in alive.items() if indeg[k] == 0]
    heapq.heapify(ready)
    out: list[Cluster] = []
    while ready:
        _, k = heapq.heappop(ready)
        c = alive[k]
        out.append(c)
        for d in c.outs:
            indeg[id(d)] -= 1
            if indeg[id(d)] == 0:
                heapq.heappush(ready, (d.lo, id(d)))
    if len(out) != len(alive):   # a merge made a cycle: a bug of this module, not the user's
        raise GraphCycleError(f"graph {order[0].graph.name!r}: the dynamic-shape clusters form a cycle")
    return out


def _merge_inputs(clusters: list[Cluster], owner: dict[int, Cluster], known: bool) -> None:
    """Steps 2 and 4: each cluster of the kind absorbs its input clusters of that kind where
    no cycle results (clusters visited in topological order, inputs by rank)."""
    for c in clusters:
        if owner[id(c.nodes[0])] is not c or c.known != known:
            continue                       # merged into another already
        for other in sorted(c.ins, key=lambda x: x.lo):
            if other.known == known and other in c.ins and not _makes_cycle(c, other):
                _absorb(c, other, owner)


def cluster_graph(graph: Graph, unknown: set[int], limit: int) -> list[Cluster]:
    """GE's four steps on `graph`'s direct nodes; `unknown`: ids of the unknown nodes;
    `limit`: the smallest static sub-model in nodes (-1: none at all)."""
    order = graph.topological_sort()
    if limit < 0:
        unknown = {id(n) for n in order}
    unknown = unknown | _between(order, unknown)
    clusters, owner = _init(order, unknown)
    for c in clusters:                       # step 1: unknown groups
        if c.known or owner[id(c.nodes[0])] is not c:
            continue
        for other in sorted(c.ins, key=lambda x: x.lo):
            if not other.known and other in c.ins:
                _absorb(c, other, owner)
    clusters = _alive(owner, order)
    _merge_inputs(clusters, owner, known=True)        # step 2
    clusters = _alive(owner, order)
    for c in clusters:                                # step 3
        if c.known and len(c.nodes) < limit:
            c.known = False
    _merge_inputs(clusters, owner, known=False)       # step 4
    out = _alive(owner, order)
    rank = {id(n): i for i, n in enumerate(order)}
    for c in out:
        c.nodes.sort(key=lambda n: rank[id(n)])
    return out


__all__ = ["Cluster", "cluster_graph"]
