"""Copy of a graph (nodes, values, subgraphs), sharing the read-only weight arrays.

Compilation works on a clone, so a failed compile leaves the user's graph untouched.
Iterative (not copy.deepcopy): a 100,000-node chain would overflow the recursion limit.
"""
from __future__ import annotations

from .graph import Graph, Node, Value


def _copy_value(v: Value) -> Value:
    nv = Value(v.name, v.dtype, v.shape, v.kind, v.const)  # const arrays are shared, never mutated
    nv.elem_kind = v.elem_kind
    return nv


def clone_graph(g: Graph, vmap: dict[int, Value] | None = None) -> Graph:
    """Clone `g`; `vmap` maps ids of outer-scope values to their clones (for subgraphs)."""
    vmap = dict(vmap or {})
    out = Graph(g.name)
    out.opset_imports = dict(g.opset_imports)
    out.ir_version = g.ir_version
    out.doc = g.doc
    out.metadata = dict(g.metadata)
    out.attrs = dict(g.attrs)
    for v in g.inputs:
        nv = _copy_value(v)
        vmap[id(v)] = nv
        out.add_input(nv)
    for name, v in g.initializers.items():
        nv = _copy_value(v)
        nv.graph = out
        out.initializers[name] = nv
        vmap[id(v)] = nv
    nmap: dict[int, Node] = {}
    order = g.topological_sort()  # raises GraphCycleError; outer values precede their readers
    for n in order:
        nn = Node(n.op_type, n.name, n.domain)
        nn.stream_id, nn.engine, nn.doc = n.stream_id, n.engine, n.doc
        for k, a in n.attrs.items():
            if isinstance(a, Graph):
                nn.attrs[k] = clone_graph(a, vmap)
            elif isinstance(a, list) and a and isinstance(a[0], Graph):
                nn.attrs[k] = [clone_graph(x, vmap) for x in a]
            elif isinstance(a, list):
                nn.attrs[k] = list(a)
            else:
                nn.attrs[k] = a
        for v in n.inputs:
            nn.append_input(None if v is None else vmap.get(id(v), v))
        for o in n.outputs:
            no = _copy_value(o)
            vmap[id(o)] = no
            nn.add_output(no)
        nmap[id(n)] = nn
        out.add_node(nn)
    for n in order:
        nmap[id(n)].control_preds = [nmap[id(p)] for p in n.control_preds if id(p) in nmap]
    out.outputs = [vmap.get(id(v), v) for v in g.outputs]
    return out
