"""Engine clusters (GE's EnginePartitioner): the units the built-in stream rules assign.

GE does not give streams to nodes one by one. It first partitions the graph into clusters of
one engine and one stream label, merged along edges wherever that makes no cycle, and the
rule chain (labels, independent engines, dependency) then gives each cluster one stream.

The merge, as GE's `MarkClusters` does it: every node starts as its own cluster, numbered by
topological position. Clusters are visited in that order; a cluster tries its parent
clusters (those it has an edge from), fewest outgoing edges first, and joins each one that

  * has the same engine and the same (effective) stream label, and
  * reaches it by no other path: merging across a second path p -> x -> c would put x both
    before and after the merged cluster, a cycle.

Two clusters with the same `_user_stream_label` merge whatever their engines (GE does not
look for a second path then either). Siblings are never merged directly: they can only end
up together through a common child. Graph inputs and initializers are values, not nodes, so
they take no part; `Constant` nodes (GE's data-like nodes) stay clusters of their own.

Why the search for a second path may stop at the child's position (GE's upper bound): when
cluster c is visited, every cluster numbered c or higher is still a single node (merges only
join a cluster with lower-numbered parents), and such a node cannot lead back into the
merged cluster, whose nodes all sit at or before c. So the bounded search is exact.
"""
from __future__ import annotations

from dataclasses import dataclass, field

from ...ir.graph import Graph, Node
from ..graph.engines import ENGINE_KIND, COMPUTE
from ._graph import Topo, label_of, user_label_of

_NEVER_MERGE = ("Constant",)   # GE's data-like nodes: no engine cluster


@dataclass(eq=False)
class Cluster:
    """One engine cluster: nodes in topological order, and the stream the rules give it."""
    index: int
    nodes: list[Node]
    engine: str
    kind: str
    label: str | None
    user_label: str | None
    preds: list["Cluster"] = field(default_factory=list)   # in the order their edges are met
    stream: int = -1

    def __repr__(self) -> str:
        return f"<cluster {self.index} {self.engine} {len(self.nodes)} node(s) stream {self.stream}>"


def build_clusters(graph: Graph, merge: bool = True, topo: Topo | None = None) -> list[Cluster]:
    """The clusters of `graph`'s direct nodes, in order of their first node. With
    merge=False every node is a cluster of its own (pyge's per-node rules)."""
    topo = topo or Topo(graph)
    order, preds = topo.order, topo.preds
    keys = [None if n.op_type in _NEVER_MERGE else (n.engine, label_of(n)) for n in order]
    users = [user_label_of(n) for n in order]
    rep = _mark(preds, keys, users) if merge else list(range(len(order)))
    clusters: dict[int, Cluster] = {}
    of: list[Cluster] = []
    for i, n in enumerate(order):
        r = rep[i]
        c = clusters.get(r)
        if c is None:
            engine = n.engine or COMPUTE
            c = clusters[r] = Cluster(r, [], engine, ENGINE_KIND.get(engine, COMPUTE), label_of(n), users[i])
        c.nodes.append(n)
        of.append(c)
    for i, c in enumerate(of):
        for p in preds[i]:
            pc = of[p]
            if pc is not c and pc not in c.preds:
                c.preds.append(pc)
    return [clusters[r] for r in sorted(clusters)]


def _mark(preds: list[list[int]], keys: list, users: list) -> list[int]:
    """GE's MarkClusters on positions; returns each position's cluster representative (the
    lowest position in it)."""
    n = len(preds)
    ins = [set(ps) for ps in preds]
    outs: list[set[int]] = [set() for _ in range(n)]
    for i, ps in enumerate(preds):
        for p in ps:
            outs[p].add(i)
    uf = list(range(n))
    key = list(keys)
    user = list(users)

    def second_path(src: int, dst: int, upper: int) -> bool:
        if not outs[src] or not ins[dst]:
            return False
        stack, seen = [src], set()
        while stack:
            x = stack.pop()
            if x in seen:
                continue
            seen.add(x)
            for o in outs[x]:
                if o == dst:
                    return True
                if o < upper:
                    stack.append(o)
        return False

    def mergeable(p: int, c: int, upper: int) -> bool:
        if user[p] is not None and user[p] == user[c]:
            return True
        if key[p] is None or key[p] != key[c]:
            return False
        ic, op = ins[c], outs[p]
        if (len(ic) == 1 and p in ic) or (len(op) == 1 and c in op):
            return True                     # the edge p -> c is all that enters c or leaves p
        outs[p].discard(c)
        ins[c].discard(p)
        found = second_path(p, c, upper)
        outs[p].add(c)
        ins[c].add(p)
        return not found

    def join(p: int, c: int) -> int:
        small, big = (p, c) if p < c else (c, p)
        outs[p].discard(c)
        ins[c].discard(p)
        in_small, out_small, in_big, out_big = ins[small], outs[small], ins[big], outs[big]
        in_small |= in_big
        out_small |= out_big
        for x in in_big:
            o = outs[x]
            o.discard(big)
            o.add(small)
        for x in out_big:
            i = ins[x]
            i.discard(big)
            i.add(small)
        in_small.discard(small)
        out_small.discard(small)
        ins[big], outs[big] = set(), set()
        uf[big] = small
        return small

    for c in range(n):
        merged = c
        ic = ins[c]
        for p in sorted(ic, key=lambda q: (len(outs[q]), q)) if len(ic) > 1 else list(ic):
            if mergeable(p, merged, c):
                merged = join(p, merged)
    return [_find(uf, i) for i in range(n)]


def _find(uf: list[int], i: int) -> int:
    root = i
    while uf[root] != root:
        root = uf[root]
    while uf[i] != root:
        uf[i], i = root, uf[i]
    return root
