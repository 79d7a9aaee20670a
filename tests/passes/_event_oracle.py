"""A brute-force oracle for the events pass, sharing no code with it: the cross-stream edges
of the transitive reduction of H (data, control and stream-order edges), by plain DFS."""
from __future__ import annotations

from pyge.plan.plan import LAUNCH


def h_edges(plan) -> set[tuple[int, int]]:
    """Edges of H: data, control, and consecutive launches of each stream."""
    edges = set()
    for v, node in enumerate(plan.nodes):
        for vi in node.inputs:
            u = plan.values[vi].producer if vi >= 0 else -1
            if u >= 0 and u != v:
                edges.add((u, v))
        edges.update((u, v) for u in node.control_preds if u != v)
    for steps in plan.streams:
        chain = [st.arg for st in steps if st.kind == LAUNCH]
        edges.update(zip(chain, chain[1:]))
    return edges


def closure(n: int, edges) -> list[set[int]]:
    """reach[u] = nodes reachable from u by a path of length >= 1 (plain DFS per node)."""
    succ = [[] for _ in range(n)]
    for u, v in edges:
        succ[u].append(v)
    reach = []
    for u in range(n):
        seen, todo = set(), list(succ[u])
        while todo:
            w = todo.pop()
            if w not in seen:
                seen.add(w)
                todo.extend(succ[w])
        reach.append(seen)
    return reach


def oracle_events(plan) -> set[tuple[int, int]]:
    """Cross-stream edges of the transitive reduction of H."""
    n, edges = len(plan.nodes), h_edges(plan)
    reach = closure(n, edges)
    tr = {(u, v) for u, v in edges
          if not any(w != v and v in reach[w] for w in reach[u])}
    return {(u, v) for u, v in tr if plan.nodes[u].stream != plan.nodes[v].stream}


def events_of(plan) -> set[tuple[int, int]]:
    return {(e.src_node, e.dst_node) for e in plan.events}
