"""The dynamic-shape partition (GE's DynamicShapePartitioner), run at the end of the graph
passes once engines are known.

    unknown.py   which nodes are unknown, and why (device-dependent for host kernels)
    clusters.py  GE's four clustering steps and `ge.exec.static_model_ops_lower_limit`
    extract.py   a Graph per static sub-model, and the dynamic root with its call nodes

`partition_graph` returns None for a fully static model (no unknown node, the limit not -1):
it compiles as one static model, exactly as before. Otherwise a Partition: the root Graph
(the unknown nodes and one `pyge.PartitionedCall` node per static sub-model) and the static
sub-models, named `<graph>_static_<k>` in execution order. The compiler then runs the model
passes on each part (pyge/compiler.py).
"""
from __future__ import annotations

from dataclasses import dataclass, field

from ...ir.graph import Graph
from ..pipeline import CompileState, Condition
from .clusters import cluster_graph
from .extract import CALL_DOMAIN, CALL_OP, SUBMODEL_ATTR, RootBuilder, build_submodel
from .unknown import unknown_nodes

STATIC, DYNAMIC = "static", "dynamic"


@dataclass
class StaticPart:
    """One static sub-model before compilation: its graph and the call node that runs it."""
    name: str
    graph: Graph
    call: str                      # name of its call node in the root


@dataclass
class Partition:
    root: Graph                                   # the dynamic part
    statics: list[StaticPart] = field(default_factory=list)
    unknown: dict[str, str] = field(default_factory=dict)   # node name -> why it is unknown

    def describe(self) -> str:
        """Several lines: each part and its size (for logs)."""
        lines = [f"dynamic part {self.root.name!r}: {len(self.root.nodes)} node(s)"]
        lines += [f"static sub-model {p.name!r} (called by {p.call!r}): {len(p.graph.nodes)} node(s)"
                  for p in self.statics]
        return "\n".join(lines)


def partition_graph(graph: Graph, device: str, limit: int = 4) -> Partition | None:
    """Split `graph` as GE's dynamic-shape partitioner does (see the package doc); None when
    the model is fully static."""
    unknown = unknown_nodes(graph, device)
    if not graph.nodes or (not unknown and limit >= 0):
        return None
    by_id = {id(n): n for n in graph.nodes}
    builder = RootBuilder(graph)
    part = Partition(root=graph, unknown={by_id[k].name: why for k, why in unknown.items()})
    for c in cluster_graph(graph, set(unknown), limit):
        if not c.known:
            for n in c.nodes:
                builder.add_unknown(n)
            continue
        name = f"{graph.name}_static_{len(part.statics)}"
        sub, ins, outs = build_submodel(graph, c.nodes, name)
        call = builder.add_call(name, len(part.statics), c.nodes, ins, outs)
        part.statics.append(StaticPart(name, sub, call.name))
    part.root = builder.finish()
    return part


def _covers(st: CompileState) -> str | None:
    """Every node of the compiled graph is in exactly one part, and the root calls every
    static sub-model once."""
    part = st.partition
    if part is None:
        return None
    calls = [n.attrs.get(SUBMODEL_ATTR) for n in part.root.nodes
             if n.op_type == CALL_OP and n.domain == CALL_DOMAIN]
    if sorted(calls) != sorted(p.name for p in part.statics):
        return f"the root's call nodes run {sorted(calls)}, the sub-models are {[p.name for p in part.statics]}"
    held = [n.name for n in part.root.nodes if n.op_type != CALL_OP or n.domain != CALL_DOMAIN]
    held += [n.name for p in part.statics for n in p.graph.nodes]
    if sorted(held) != sorted(n.name for n in st.graph.nodes):
        missing = sorted({n.name for n in st.graph.nodes} - set(held)) or sorted(held)
        return f"the parts do not hold each node once (first in question: {missing[0]!r})"
    return None


PARTITIONED = Condition("partitioned", _covers)

__all__ = ["partition_graph", "PARTITIONED", "Partition", "StaticPart", "STATIC", "DYNAMIC", "CALL_OP",
           "CALL_DOMAIN", "SUBMODEL_ATTR"]
