"""Pool(Concat(a, b, ...)) on the channel axis becomes Concat(Pool(a), Pool(b), ...).

A pool treats every channel alone, so pooling the parts and concatenating the results gives
the same values (the same bits: each output element is the same max or sum of the same
inputs). Where the pool shrinks the map, the Concat then copies the small results instead
of the large parts: squeezenet's Fire modules 4 and 8 concatenate two 55x55 (27x27) maps
that a stride-2 max pool reads next. Conditions: the pool is a MaxPool with no Indices
output, an AveragePool, a GlobalAveragePool or a GlobalMaxPool of the default domain; its
input is a 4-D Concat on axis 1 of static parts, read by the pool alone and not a graph
output; the pool's output has fewer pixels than its input. The pool node keeps its name and
pools the first part; the others get a copy of it each, named after it (`<pool>_part<i>`,
with the pool's name among their original names); the Concat keeps its name and produces
the pool's output value. `ge.exec.enableFusion=false` leaves the graph as it is.
"""
from __future__ import annotations

import math

from ...ir.graph import Graph, Node, Value
from ._match import ORIGINAL_NAMES, fresh_name, fusion_sites, is_static

_POOLS = frozenset({"MaxPool", "AveragePool", "GlobalAveragePool", "GlobalMaxPool"})


def _plan(pool: Node, graph: Graph):
    """The Concat to move below `pool`, or None (module doc)."""
    if pool.op_type not in _POOLS or pool.domain or len(pool.inputs) != 1 or len(pool.outputs) != 1:
        return None
    x, y = pool.inputs[0], pool.outputs[0]
    concat = x.producer if x is not None else None
    if concat is None or concat.op_type != "Concat" or concat.domain or concat.graph is not graph \
            or len(x.uses) != 1 or x in graph.outputs or len(concat.inputs) < 2:
        return None
    if not is_static(x.shape) or len(x.shape) != 4 or int(concat.attrs.get("axis", 0)) not in (1, -3):
        return None
    if not is_static(y.shape) or math.prod(y.shape[2:]) >= math.prod(x.shape[2:]):
        return None
    if any(p is None or not is_static(p.shape) or len(p.shape) != 4 for p in concat.inputs):
        return None
    return concat


def pool_before_concat(graph: Graph) -> int:
    """Move every eligible Concat of the root graph below the pool reading it; returns how
    many."""
    moved = 0
    for pool, concat in fusion_sites(graph, _plan, _POOLS):
        y = pool.outputs[0]
        parts = list(concat.inputs)
        for node in (pool, concat):           # the pool's output becomes the Concat's
            for v in node._outputs:
                v.producer, v.index = None, -1
            node._outputs = []
        concat.add_output(y)
        pooled = []
        for i, part in enumerate(parts):
            shape = tuple(part.shape[:2]) + tuple(y.shape[2:])
            v = Value(fresh_name(graph, f"{y.name}_part{i}"), y.dtype, shape)
            if i == 0:
                node = pool
                node.set_inputs([part])
            else:
                node = Node(pool.op_type, graph.unique_node_name(f"{pool.name}_part{i}"),
                            attrs=dict(pool.attrs))
                node.set_inputs([part])
                node.attrs[ORIGINAL_NAMES] = [node.name, pool.name]
                node.doc = f"part {i} of {pool.name} (pool_concat.py)"
            node.add_output(v)
            if i:
                graph.add_node(node)
            pooled.append(v)
        concat.set_inputs(pooled)
        moved += 1
    if moved:
        graph.sort()
        graph.invalidate()
    return moved
