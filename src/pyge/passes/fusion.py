"""What the fusion passes (fuse_conv_bn, fuse_conv_act, fuse_affine) share."""
from __future__ import annotations

from typing import Any, Callable, Iterator

from ..ir.graph import Graph, Node, Value


def single_consumer(v: Value, graph: Graph) -> Node | None:
    """The one default-domain node of `graph` reading `v`, if `v` has exactly one use and is
    not a graph output; else None."""
    if len(v.uses) != 1 or v in graph.outputs:
        return None
    n = v.uses[0][0]
    return n if n.graph is graph and not n.domain else None


def is_static(shape) -> bool:
    return shape is not None and all(isinstance(d, int) for d in shape)


def note_fused(graph: Graph, fused: list[str], domain: str | None = None) -> None:
    """Record fused node names in graph.metadata["fused"] (and import the new op's domain)."""
    if not fused:
        return
    if domain:
        graph.opset_imports.setdefault(domain, 1)
    prev = graph.metadata.get("fused")
    graph.metadata["fused"] = ",".join(([prev] if prev else []) + fused)
    graph.invalidate()


def drop_unused_initializers(graph: Graph) -> None:
    """Remove initializers no node (of any subgraph) reads and that are not graph inputs or
    outputs: weights a fusion replaced (they may be large)."""
    used = {id(v) for g in graph.all_graphs() for n in g.nodes for v in n.inputs if v is not None}
    used |= {id(v) for v in graph.outputs} | {id(v) for v in graph.inputs}
    for name in [k for k, v in graph.initializers.items() if id(v) not in used]:
        del graph.initializers[name]


def fresh_name(graph: Graph, base: str) -> str:
    """`base`, or `base_1`, `base_2`, ... whichever no value of `graph` has."""
    taken = graph.values()
    name, i = base, 1
    while name in taken:
        name, i = f"{base}_{i}", i + 1
    return name


def fusion_sites(graph: Graph, plan: Callable[[Node, Graph], Any]) -> Iterator[tuple[Node, Any]]:
    """(node, plan(node, graph)) for each node of the root graph, in topological order, whose
    plan is not None. Plans are made one at a time, so each sees the fusions applied so far;
    nodes an earlier fusion removed are skipped."""
    for node in graph.topological_sort():
        if node.graph is not graph:
            continue
        p = plan(node, graph)
        if p is not None:
            yield node, p
