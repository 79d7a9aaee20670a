"""The checks run on the graph a custom graph pass returns, before the compiler adopts it.

A pass edits the compiler's working graph with the IR's methods, which keep use lists and
names right one edit at a time; what no single edit can guarantee is that the result is a
graph the later passes can work on. So after every graph pass (graph_passes.py):

- on the graph as the pass left it (`structure_problem`): every node is where it says it
  is, node and value names are unique, every value a node reads is defined in its graph or
  an enclosing one (no dangling values), control edges stay within the graph, each
  subgraph's parent is the node holding it, the graph's inputs and outputs are the same
  names as before and every output is still produced, and there is no cycle;
- on the compiler's copy of it (`kernel_problem`, `retype`): every operator has a kernel,
  and the types of what the pass changed are inferred again (ONNX inference, strict, so
  that a rewrite that cannot type-check fails here, naming its node, not in a kernel at
  run time).

Each finding is a BrokenGraph with a message of its own kind; graph_passes.py reports it as
the pass's CustomPassError. `snapshot` records what the checks compare against, and which
nodes the pass changed (only those are re-typed).
"""
from __future__ import annotations

import logging
import re
from dataclasses import dataclass
from typing import Any

import onnx

from ...errors import GraphCycleError
from ...frontends.onnx_proto import graph_to_model, read_type
from ...ir.cycles import describe_cycle, find_cycle
from ...ir.graph import Graph, Node
from ..graph.check_ops import unsupported_ops

log = logging.getLogger(__name__)


class BrokenGraph(Exception):
    """What is wrong with the graph a pass returned (`cause`: an error behind it, if any)."""

    def __init__(self, message: str, cause: Exception | None = None):
        super().__init__(message)
        self.cause = cause


@dataclass
class Snapshot:
    """The graph before a pass: its interface, and one signature per node of every graph
    (the nodes are kept, so that no id is reused while the snapshot lives)."""
    inputs: tuple[str, ...]
    outputs: tuple[str, ...]
    nodes: dict[int, tuple[Node, tuple]]
    attrs: dict[str, Any]


def _signature(n: Node) -> tuple:
    attrs = tuple((k, id(a), tuple(a) if isinstance(a, list) else None) for k, a in n.attrs.items())
    return (n.op_type, n.domain, tuple(map(id, n._inputs)), tuple(map(id, n._outputs)),
            tuple(map(id, n._control_preds)), attrs)


def snapshot(graph: Graph) -> Snapshot:
    nodes = {id(n): (n, _signature(n)) for g in graph.all_graphs() for n in g._nodes}
    return Snapshot(tuple(v.name for v in graph.inputs), tuple(v.name for v in graph.outputs),
                    nodes, dict(graph.attrs))


def changed_nodes(graph: Graph, snap: Snapshot) -> set[str]:
    """Names of the root-graph nodes the pass added or changed (inputs, outputs, operator,
    attributes, control edges), a node holding a changed subgraph included."""
    out: set[str] = set()
    for g in graph.all_graphs():
        for n in g._nodes:
            old = snap.nodes.get(id(n))
            if old is None or old[0] is not n or old[1] != _signature(n):
                top = n
                while top.graph is not None and top.graph.parent is not None:
                    top = top.graph.parent
                out.add(top.name)
    return out


# -- on the graph the pass returned ---------------------------------------------------

def structure_problem(graph: Graph, snap: Snapshot) -> None:
    """Raise BrokenGraph for the first structural fault of `graph` (see the module doc)."""
    _scope(graph, [])
    _interface(graph, snap)
    for g in graph.all_graphs():
        cycle = find_cycle(g)
        if cycle:
            err = GraphCycleError(f"graph {g.name!r} has a cycle: {describe_cycle(cycle)}")
            raise BrokenGraph(f"the graph has a cycle: {describe_cycle(cycle)}", err)


def _scope(g: Graph, outer: list[set[int]]) -> None:
    """Names, membership, dangling reads, control edges and parents of `g` and its subgraphs."""
    defined = {id(v) for v in g.inputs} | {id(v) for v in g.initializers.values()}
    node_names: dict[str, Node] = {}
    value_names: dict[str, Any] = {v.name: v for v in g.inputs}
    for name, v in g.initializers.items():
        if v.name != name:
            raise BrokenGraph(f"initializer {v.name!r} of graph {g.name!r} is filed as {name!r}")
        _one_name(g, value_names, v)
    members = {id(n) for n in g._nodes}
    for n in g._nodes:
        if n.graph is not g:
            raise BrokenGraph(f"node {n.name!r} is listed in graph {g.name!r} but belongs to "
                              f"{'no graph' if n.graph is None else repr(n.graph.name)}")
        if n.name in node_names:
            raise BrokenGraph(f"two nodes of graph {g.name!r} are named {n.name!r} "
                              f"({node_names[n.name].op_type} and {n.op_type})")
        node_names[n.name] = n
        for o in n._outputs:
            _one_name(g, value_names, o)
            defined.add(id(o))
    scopes = outer + [defined]
    for n in g._nodes:
        for i, v in enumerate(n._inputs):
            if v is not None and not any(id(v) in s for s in scopes):
                raise BrokenGraph(f"node {n.name!r} ({n.op_type}) reads {_dangling(v, g)} as input {i}")
        for p in n._control_preds:
            if id(p) not in members:
                raise BrokenGraph(f"node {n.name!r} ({n.op_type}) has a control edge from node "
                                  f"{p.name!r}, which is not a node of graph {g.name!r}")
        for sub in n.subgraphs:
            if sub.parent is not n:
                who = sub.parent.name if sub.parent is not None else None
                raise BrokenGraph(f"subgraph {sub.name!r} of node {n.name!r} names {who!r} as its "
                                  "parent (Node.set_attr sets it)")
            _scope(sub, scopes)
    for v in g.outputs if g.parent is not None else ():
        if not any(id(v) in s for s in scopes):
            raise BrokenGraph(f"subgraph {g.name!r} returns {_dangling(v, g)}")


def _one_name(g: Graph, names: dict[str, Any], v) -> None:
    other = names.setdefault(v.name, v)
    if other is not v:
        raise BrokenGraph(f"two values of graph {g.name!r} are named {v.name!r}")


def _dangling(v, g: Graph) -> str:
    """'value x, which ...': why a value read in `g` is defined nowhere it can be read."""
    p = v.producer
    if p is not None and p.graph is None:
        why = f"the output of node {p.name!r}, which was removed from the graph"
    elif p is not None and p.graph is not g:
        why = f"produced by node {p.name!r} of graph {p.graph.name!r}, which graph {g.name!r} cannot read"
    elif p is not None:
        why = f"produced by node {p.name!r}, which is not listed in graph {g.name!r}"
    elif v.const is not None:
        why = "a constant that is no initializer of the graph (graph.add_initializer makes one)"
    else:
        why = f"which no node produces and which is no input or initializer of graph {g.name!r}"
    return f"value {v.name!r}, {why}"


def _interface(graph: Graph, snap: Snapshot) -> None:
    inputs = tuple(v.name for v in graph.inputs)
    if inputs != snap.inputs:
        raise BrokenGraph(f"the graph inputs changed from {list(snap.inputs)} to {list(inputs)}; a "
                          "pass keeps the model's inputs")
    outputs = tuple(v.name for v in graph.outputs)
    if outputs != snap.outputs:
        raise BrokenGraph(f"the graph outputs changed from {list(snap.outputs)} to {list(outputs)}; "
                          "a pass keeps the model's outputs (graph.replace_value keeps their names)")
    defined = {id(v) for v in graph.values().values()}
    for v in graph.outputs:
        if id(v) not in defined:
            raise BrokenGraph(f"graph output {v.name!r} is no longer produced: it is {_dangling(v, graph)}")


# -- on the compiler's copy -----------------------------------------------------------

def kernel_problem(graph: Graph) -> None:
    missing = unsupported_ops(graph)
    if missing:
        op, node = next(iter(missing.items()))
        raise BrokenGraph(f"node {node!r} is operator {op}, which has no kernel"
                          + (f" (and {len(missing) - 1} more operator(s) without one)" if len(missing) > 1 else ""))


_AT_NODE = re.compile(r"\(op_type:([^,]*), node name: ([^)]*)\):")


def retype(graph: Graph, changed: set[str]) -> int:
    """Infer again the types of the outputs of the `changed` root nodes and of everything
    downstream of them (inference's answer wins; where it has none the old type stays).
    Raises BrokenGraph when strict inference fails at a changed node. Returns how many
    values were re-typed."""
    if not changed:
        return 0
    affected = [n for n in graph.nodes if n.name in changed]
    seen = {id(n) for n in affected}
    for n in affected:              # grows while it is walked: everything downstream
        for s in n.successors:
            if id(s) not in seen:
                seen.add(id(s))
                affected.append(s)
    saved = [(o, o.dtype, o.shape, o.kind, o.elem_kind) for n in affected for o in n._outputs]
    for o, *_ in saved:
        o.dtype = o.shape = None
    try:
        infos = _infer(graph, changed)
    finally:
        for o, dtype, shape, kind, elem in saved:   # put back now, re-typed below where known
            o.dtype, o.shape, o.kind, o.elem_kind = dtype, shape, kind, elem
    count = 0
    for o, *_ in saved:
        vi = infos.get(o.name)
        if vi is not None and vi.type.WhichOneof("value") is not None:
            before = (o.dtype, o.shape)
            read_type(o, vi.type)
            if o.dtype is None:       # inference knew the kind only: keep the old type
                o.dtype, o.shape = before
            count += (o.dtype, o.shape) != before
    return count


def _infer(graph: Graph, changed: set[str]) -> dict[str, Any]:
    """name -> ValueInfoProto by ONNX inference; BrokenGraph for a failure at a changed node."""
    try:
        mp = graph_to_model(graph, weights="shapes")
    except Exception as err:  # noqa: BLE001 - types stay as they were (best effort, as infer_types)
        log.info("graph %r cannot be typed again after a custom pass: %s", graph.name, err)
        return {}
    try:
        out = onnx.shape_inference.infer_shapes(mp, check_type=True, strict_mode=True, data_prop=True)
    except Exception as err:  # noqa: BLE001 - InferenceError, or ONNX failing on its own
        text = str(err)
        marks = list(_AT_NODE.finditer(text))
        for k, m in enumerate(marks):
            if m.group(2) in changed:
                end = marks[k + 1].start() if k + 1 < len(marks) else len(text)
                detail = " ".join(text[m.end():end].split())
                raise BrokenGraph(f"type inference fails at node {m.group(2)!r} ({m.group(1)}): "
                                  f"{detail}", err) from None
        try:      # a failure elsewhere is the model's own: as infer_types, best effort
            out = onnx.shape_inference.infer_shapes(mp, check_type=False, strict_mode=False, data_prop=True)
        except Exception as err2:  # noqa: BLE001
            log.info("shape inference on graph %r failed: %s", graph.name, err2)
            return {}
    return {vi.name: vi for vi in list(out.graph.value_info) + list(out.graph.output)}
