"""GE's DAG stream pass, part 1: the residual DAG and its minimum path cover.

The residual DAG (GE's SplitSerialGraph) holds the root graph's nodes that carry work and
no stream label, in topological order. Labelled nodes ("serial" nodes: they keep one stream
per label) and nodes without device work (pyge's unlabelled skip-engine nodes: views, shape
queries; GE's nodes of zero weight) are left out, and an edge u -> v of the residual DAG
stands for a path u -> x ... -> v of the graph whose inner nodes were all left out, so that
a Reshape or a labelled node between two operators still links them.

A path cover splits the residual DAG into vertex-disjoint paths along its edges; each path
is one logical stream: consecutive nodes on a path need no event. GE matches on the edges
of this DAG themselves, not on its transitive closure, so paths are chains of direct
dependencies. A minimum cover has n - |M| paths for a maximum matching M between "out"
copies and "in" copies of the nodes (u_out -- v_in for every edge u -> v): every matched
edge glues two paths into one. The matching is Hopcroft-Karp (breadth-first layers, then
vertex-disjoint shortest augmenting paths), O(E sqrt(V)), after a greedy start.
Paths are read off in node order from every node no matched edge enters, as GE does.
"""
from __future__ import annotations

from collections import deque
from dataclasses import dataclass, field

from ...analysis.matching import greedy_matching, hopcroft_karp
from ...ir.graph import Graph, Node
from ._graph import Topo, is_transparent, label_of


@dataclass
class ResidualDag:
    """The nodes the cover works on (topological order), their edges, and the others."""
    nodes: list[Node]
    succs: list[list[int]]
    preds: list[list[int]]
    serial: list[Node] = field(default_factory=list)     # labelled nodes, topological order
    weightless: list[Node] = field(default_factory=list)  # unlabelled skip nodes
    order: list[Node] = field(default_factory=list)       # every direct node, topological order

    def __len__(self) -> int:
        return len(self.nodes)


def residual_dag(graph: Graph) -> ResidualDag:
    """The residual DAG of `graph`'s direct nodes."""
    topo = Topo.of(graph)
    order, succ_all = topo.order, topo.succs
    kept = [label_of(n) is None and not is_transparent(n) for n in order]
    index = {}
    nodes: list[Node] = []
    for i, n in enumerate(order):
        if kept[i]:
            index[i] = len(nodes)
            nodes.append(n)
    succs: list[list[int]] = [[] for _ in nodes]
    for i, k in index.items():
        ss = succ_all[i]
        if all(kept[j] for j in ss):          # the common case: no node left out after it
            # (Topo's successor lists are ascending without repeats, and index grows with
            # position: what sorted({index[j] for j in ss}) gives, without the set and sort)
            succs[k] = [index[j] for j in ss]
        else:
            succs[k] = _bridged(i, succ_all, kept, index)
    preds: list[list[int]] = [[] for _ in nodes]
    for k, ss in enumerate(succs):
        for s in ss:
            preds[s].append(k)
    return ResidualDag(nodes, succs, preds,
                       serial=[n for n in order if label_of(n) is not None],
                       weightless=[n for i, n in enumerate(order) if not kept[i] and label_of(n) is None],
                       order=order)


def _bridged(i: int, succ_all: list[list[int]], kept: list[bool], index: dict[int, int]) -> list[int]:
    """Kept successors of position i, reached directly or through left-out nodes only."""
    out: dict[int, None] = {}
    queue = deque(succ_all[i])
    seen: set[int] = set()
    while queue:
        j = queue.popleft()
        if kept[j]:
            out.setdefault(index[j], None)
        elif j not in seen:
            seen.add(j)
            queue.extend(succ_all[j])
    return sorted(out)


def max_matching(succs: list[list[int]]) -> list[int]:
    """Hopcroft-Karp on the bipartite graph u_out -- v_in (v in succs[u]), after a greedy
    start; returns, per u, the v it is matched to, or -1."""
    return hopcroft_karp(succs, len(succs), greedy_matching(succs, len(succs)))


def path_cover(succs: list[list[int]]) -> list[list[int]]:
    """A minimum vertex-disjoint path cover along the edges `succs` (a DAG in topological
    order), as lists of node indices; paths start in node order."""
    n = len(succs)
    nxt = max_matching(succs)
    has_pred = [False] * n
    for u in range(n):
        if nxt[u] >= 0:
            has_pred[nxt[u]] = True
    paths = []
    for u in range(n):
        if not has_pred[u]:
            path = [u]
            while nxt[path[-1]] >= 0:
                path.append(nxt[path[-1]])
            paths.append(path)
    return paths
