"""Copy of a graph (nodes, values, subgraphs), sharing the read-only weight arrays.

Compilation works on a clone, so a failed compile leaves the user's graph untouched.
Iterative (not copy.deepcopy): a 100,000-node chain would overflow the recursion limit.
"""
from __future__ import annotations

from .graph import Graph, Node, Value
from .node import holds_graph


def _copy_value(v: Value) -> Value:
    nv = Value(v.name, v.dtype, v.shape, v.kind, v.const)  # const arrays are shared, never mutated
    nv.elem_kind = v.elem_kind
    return nv


def clone_graph(g: Graph, vmap: dict[int, Value] | None = None) -> Graph:
    """Clone `g`; `vmap` maps ids of outer-scope values to their clones (for subgraphs).
    The copy lists its nodes in a topological order (the source's stable one), so it needs
    no sort. A graph whose names or inputs the checked editing methods would refuse is copied
    through them, which raises their GraphError; any other is linked directly (the checks
    could not fail there), which is most of a large compile's copying cost saved."""
    vmap = dict(vmap or {})
    out = Graph(g.name)
    out.opset_imports = dict(g.opset_imports)
    out.ir_version = g.ir_version
    out.doc = g.doc
    out.metadata = dict(g.metadata)
    out.attrs = dict(g.attrs)
    checked = not _plainly_valid(g)
    for v in g.inputs:
        nv = _copy_value(v)
        vmap[id(v)] = nv
        if checked:
            out.add_input(nv)
        else:
            nv.graph = out
            out.inputs.append(nv)
    for name, v in g.initializers.items():
        nv = _copy_value(v)
        nv.graph = out
        out.initializers[name] = nv
        vmap[id(v)] = nv
    nmap: dict[int, Node] = {}
    order = g.topological_sort()  # raises GraphCycleError; outer values precede their readers
    edges = any(n._control_preds for n in order)      # nmap is for control edges only
    for n in order:
        nn = Node(n.op_type, n.name, n.domain)
        nn.stream_id, nn.engine, nn.doc = n.stream_id, n.engine, n.doc
        if n.attrs:
            _copy_attrs(n.attrs, nn.attrs, vmap)
        if checked:
            _link_checked(out, n, nn, vmap)
        else:
            _link(out, n, nn, vmap)
        if edges:
            nmap[id(n)] = nn
    for n in order if edges else ():
        if n._control_preds:
            nmap[id(n)].control_preds = [nmap[id(p)] for p in n._control_preds if id(p) in nmap]
    out.outputs = [vmap.get(id(v), v) for v in g.outputs]
    return out


def _copy_attrs(attrs: dict, into: dict, vmap: dict[int, Value]) -> None:
    for k, a in attrs.items():
        if isinstance(a, Graph):
            into[k] = clone_graph(a, vmap)
        elif isinstance(a, list) and a and isinstance(a[0], Graph):
            into[k] = [clone_graph(x, vmap) for x in a]
        elif isinstance(a, list):
            into[k] = list(a)
        else:
            into[k] = a


def _plainly_valid(g: Graph) -> bool:
    """Whether copying `g` through the checked editing methods could not fail: unique node
    names, unique value names (inputs, initializers, node outputs), inputs without data and
    every node input a Value or None."""
    order = g._nodes
    names = {n.name for n in order}
    values = [v.name for v in g.inputs]
    if len(names) != len(order) or any(v.const is not None for v in g.inputs):
        return False
    count = len(values) + len(g.initializers)
    for n in order:
        count += len(n._outputs)
        values.extend([o.name for o in n._outputs])
        for v in n._inputs:
            if v is not None and type(v) is not Value:
                return False
    values.extend(g.initializers)
    return len(set(values)) == count


def _link(out: Graph, n: Node, nn: Node, vmap: dict[int, Value]) -> None:
    """`nn` (the copy of `n`) gets copies of `n`'s inputs and outputs and joins `out`: what
    Node.append_input, Node.add_output and Graph.add_node do, without their checks."""
    ins = nn._inputs
    for k, v in enumerate(n._inputs):
        if v is not None:
            v = vmap.get(id(v), v)
            v.uses.append((nn, k))
        ins.append(v)
    outs = nn._outputs
    for k, o in enumerate(n._outputs):
        no = _copy_value(o)
        no.producer, no.index, no.graph = nn, k, out
        vmap[id(o)] = no
        outs.append(no)
    nn.graph = out
    for sub in nn.subgraphs if nn.attrs and holds_graph(nn.attrs) else ():
        sub.parent = nn
    out._nodes.append(nn)


def _link_checked(out: Graph, n: Node, nn: Node, vmap: dict[int, Value]) -> None:
    """As _link, through the checked editing methods (which raise what they refuse)."""
    for v in n.inputs:
        nn.append_input(None if v is None else vmap.get(id(v), v))
    for o in n.outputs:
        no = _copy_value(o)
        vmap[id(o)] = no
        nn.add_output(no)
    out.add_node(nn)
