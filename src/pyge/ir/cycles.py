"""Finding one dependency cycle of a graph, to name its nodes in an error.

`Graph.topological_sort` tells that a graph has a cycle; `find_cycle` says which nodes form
one, so that an error can print the loop (`'a' (Relu) -> 'b' (Add) -> 'a'`) rather than one
node that happens to be stuck behind it.
"""
from __future__ import annotations


_GRAY, _BLACK = 1, 2


def find_cycle(graph: Graph) -> list[Node]:
    """The nodes of one dependency cycle among `graph`'s nodes (data edges, subgraph reads,
    control edges), in data-flow order: each feeds the next and the last feeds the first.
    [] when the graph is acyclic. Iterative depth-first search, linear in the graph."""
    members = {id(n) for n in graph._nodes}
    state: dict[int, int] = {}
    for root in graph._nodes:
        if id(root) in state:
            continue
        path = [root]
        where = {id(root): 0}
        state[id(root)] = _GRAY
        stack = [iter(root.predecessors)]
        while stack:
            for p in stack[-1]:
                if id(p) not in members:
                    continue
                s = state.get(id(p))
                if s == _GRAY:   # p is on the path: p <- ... <- path[-1] <- p (predecessor links)
                    return path[where[id(p)]:][::-1]
                if s is None:
                    state[id(p)] = _GRAY
                    where[id(p)] = len(path)
                    path.append(p)
                    stack.append(iter(p.predecessors))
                    break
            else:
                done = path.pop()
                state[id(done)] = _BLACK
                del where[id(done)]
                stack.pop()
    return []


def describe_cycle(nodes: list[Node]) -> str:
    """"'a' (Relu) -> 'b' (Add) -> 'a'" for the cycle `nodes` (in data-flow order)."""
    if not nodes:
        return "(no cycle)"
    return " -> ".join([f"{n.name!r} ({n.op_type})" for n in nodes] + [repr(nodes[0].name)])
