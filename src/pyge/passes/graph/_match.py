"""What the fusion passes (fuse_conv_bn, fuse_conv_act, fuse_affine, fuse_shuffle,
fuse_attention) share."""
from __future__ import annotations

from typing import Any, Callable, Iterator

import numpy as np

from ...ir.graph import Graph, Node, Value, unique_name


def single_consumer(v: Value, graph: Graph) -> Node | None:
    """The one default-domain node of `graph` reading `v`, if `v` has exactly one use and is
    not a graph output; else None."""
    if len(v.uses) != 1 or v in graph.outputs:
        return None
    n = v.uses[0][0]
    return n if n.graph is graph and not n.domain else None


def is_static(shape) -> bool:
    return shape is not None and all(isinstance(d, int) for d in shape)


FLOATS = ("float16", "float32", "float64")


ORIGINAL_NAMES = "_datadump_original_op_names"   # GE's attribute: the names a fused node replaced


def mark_fused(node: Node, names: list[str]) -> str:
    """Note that `node` absorbed names[1:] (names[0] is its own name): in its doc string, and
    in GE's `_datadump_original_op_names` attribute, which keeps every name it replaced (dumps,
    custom passes and model.stream_of read it). Returns the "a+b+c" entry for note_fused."""
    node.doc = (node.doc + " " if node.doc else "") + "fused " + "+".join(names[1:])
    before = list(node.attrs.get(ORIGINAL_NAMES) or names[:1])
    node.attrs[ORIGINAL_NAMES] = list(dict.fromkeys(before + names[1:]))
    return "+".join(names)


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
    return unique_name(set(graph.values()), base)


def fusion_sites(graph: Graph, plan: Callable[[Node, Graph], Any],
                 anchors: frozenset[str]) -> Iterator[tuple[Node, Any]]:
    """(node, plan(node, graph)) for each node of the root graph, in topological order, whose
    plan is not None. Plans are made one at a time, so each sees the fusions applied so far;
    nodes an earlier fusion removed are skipped. `anchors`: the op types plan can accept (it
    returns None for any other): a graph without one is not even sorted."""
    if not any(n.op_type in anchors for n in graph._nodes):
        return
    for node in graph.topological_sort():
        if node.graph is not graph or node.op_type not in anchors:
            continue
        p = plan(node, graph)
        if p is not None:
            yield node, p


def affine_of(node: Node, x: Value, rank: int) -> tuple[np.ndarray, np.ndarray] | None:
    """(s, t) if `node` computes s * x + t from its input x alone, for x of `rank` dims with
    channels on axis 1; s and t are float64 arrays that broadcast against x. None otherwise
    (other inputs not constant, another dtype, c - x, c / x, division by zero, training BN):
        BatchNormalization   s = gamma / sqrt(var + eps),  t = beta - mean * s   (per channel)
        Mul(x, c) / Div(x, c) s = c / 1 / c,  t = 0
        Add(x, c) / Sub(x, c) s = 1,  t = c / -c
    """
    if node.domain or len(node.outputs) != 1:
        return None
    op, ins = node.op_type, node.inputs
    if op == "BatchNormalization":
        if len(ins) != 5 or ins[0] is not x or rank < 2 or node.attrs.get("training_mode", 0) \
                or node.attrs.get("is_test", 1) == 0 or node.attrs.get("spatial", 1) == 0:
            return None
        ps = [None if v is None or v.const is None else np.asarray(v.const, dtype=np.float64)
              for v in ins[1:]]
        if any(p is None or p.ndim != 1 for p in ps) or len({p.shape for p in ps}) != 1:
            return None
        gamma, beta, mean, var = ps
        s = gamma / np.sqrt(var + float(node.attrs.get("epsilon", 1e-5)))
        shape = (-1,) + (1,) * (rank - 2)
        return s.reshape(shape), (beta - mean * s).reshape(shape)
    if op not in ("Mul", "Add", "Sub", "Div") or len(ins) != 2 or x not in ins:
        return None
    other = ins[1] if ins[0] is x else ins[0]
    if other is x or other is None or other.const is None or other.dtype != x.dtype:
        return None
    if op in ("Sub", "Div") and ins[0] is not x:
        return None
    c = np.asarray(other.const, dtype=np.float64)
    if op == "Mul":
        return c, np.zeros(())
    if op == "Div":
        return None if np.any(c == 0) else (1.0 / c, np.zeros(()))
    return np.ones(()), (c if op == "Add" else -c)
