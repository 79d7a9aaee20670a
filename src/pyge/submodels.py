"""The parts of a compiled model (`model.submodels`): GE's static sub-models and dynamic root.

A dynamic-shape model is split by the partition (passes/partition/) into a dynamic part, the
root, and static sub-models, each compiled through the model passes into a plan of its own.
`model.submodels` lists them in execution order, root first:

    for part in model.submodels:
        part.name, part.kind          "<graph>" "dynamic", "<graph>_static_0" "static", ...
        part.streams                  per stream of this part, its nodes' names (the root's
                                      call nodes, `PartitionedCall_<k>`, included)
        part.num_streams, part.events this part's own numbering (0..num_streams-1)
        part.stream_offset            where its streams start in the model's numbering
        part.graph, part.plan         what the executors run

A fully static model is one static sub-model: the model itself, unchanged. The model-wide
views (`model.streams`, `events`, `num_streams`, `stream_of`, profiles) read the flat plan
(plan/flatten.py) in which the parts' streams are numbered one after the other.
"""
from __future__ import annotations

from .ir.graph import Graph
from .passes.graph._match import ORIGINAL_NAMES
from .passes.partition import CALL_DOMAIN, CALL_OP, DYNAMIC, STATIC, SUBMODEL_ATTR
from .passes.verify.checks import verify_plan
from .plan.flatten import FlatMaps, flatten
from .plan.plan import LAUNCH, Event, Plan


class SubModel:
    """One part of a compiled model: its name, kind ("static" or "dynamic"), graph and plan."""

    __slots__ = ("name", "kind", "graph", "plan", "stream_offset", "capture_error")

    def __init__(self, name: str, kind: str, graph: Graph, plan: Plan, stream_offset: int = 0):
        self.name, self.kind, self.graph, self.plan = name, kind, graph, plan
        self.stream_offset = stream_offset
        self.capture_error: str | None = None     # set by the CUDA executor path when capture fails

    @property
    def streams(self) -> list[list[str]]:
        return [[self.plan.nodes[s.arg].name for s in steps if s.kind == LAUNCH]
                for steps in self.plan.streams]

    @property
    def num_streams(self) -> int:
        return self.plan.num_streams

    @property
    def events(self) -> list[Event]:
        return list(self.plan.events)

    def verify(self) -> None:
        verify_plan(self.plan)

    def local_stream_of(self, name: str) -> int | None:
        """This part's stream of node `name` (a body node: its parent's; a fused-away source
        node: the node that carries its name), or None when the part has no such node."""
        for n in self.plan.nodes:
            if n.name == name:
                return n.stream
        for g in self.graph.all_graphs()[1:]:
            for n in g.nodes:
                if n.name == name:
                    return n.stream_id
        for g in self.graph.all_graphs():
            for n in g.nodes:
                if name in (n.attrs.get(ORIGINAL_NAMES) or ()):
                    return n.stream_id
        return None

    def __repr__(self) -> str:
        return (f"<SubModel {self.name!r} ({self.kind}): {len(self.plan.nodes)} nodes, "
                f"{self.num_streams} streams, {len(self.plan.events)} events>")


def is_call(node) -> bool:
    return node.op_type == CALL_OP and node.domain == CALL_DOMAIN


def calls_of(root: SubModel, parts: list[SubModel]) -> dict[int, int]:
    """Root plan node index -> index in `parts` of the sub-model its call node runs."""
    where = {p.name: k for k, p in enumerate(parts)}
    by_name = {n.name: n for n in root.graph.nodes}
    out = {}
    for pn in root.plan.nodes:
        node = by_name[pn.name]
        if is_call(node):
            out[pn.index] = where[node.attrs[SUBMODEL_ATTR]]
    return out


def make_parts(root_graph: Graph, root_plan: Plan, statics: list[tuple[str, Graph, Plan]]) -> list[SubModel]:
    """The SubModels of a partitioned model: the root first, then the static ones in order,
    each with its stream offset in the model's numbering."""
    parts = [SubModel(root_plan.graph_name, DYNAMIC, root_graph, root_plan)]
    offset = root_plan.num_streams
    for name, g, p in statics:
        parts.append(SubModel(name, STATIC, g, p, offset))
        offset += p.num_streams
    return parts


def flat_view(parts: list[SubModel]) -> tuple[Plan, FlatMaps]:
    return flatten([p.plan for p in parts], calls_of(parts[0], parts))


__all__ = ["SubModel", "make_parts", "flat_view", "calls_of", "is_call", "STATIC", "DYNAMIC"]
