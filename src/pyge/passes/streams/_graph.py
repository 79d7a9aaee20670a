"""Graph helpers shared by the stream rules: labels and effective predecessors."""
from __future__ import annotations

from ...ir.graph import Graph, Node
from ...ir.order import predecessor_lists
from ..graph.engines import SKIP, kind_of

_TOPO = "streams.topo"
LABEL_ATTR = "_stream_label"
USER_LABEL_ATTR = "_user_stream_label"   # overrides _stream_label, as in GE


def label_of(node: Node) -> str | None:
    """The node's stream label; `_user_stream_label` wins over `_stream_label`."""
    attrs = node.attrs
    if not attrs or (USER_LABEL_ATTR not in attrs and LABEL_ATTR not in attrs):
        return None
    for key in (USER_LABEL_ATTR, LABEL_ATTR):
        v = node.attrs.get(key)
        if isinstance(v, bytes):
            v = v.decode("utf-8", errors="replace")
        if v is not None and str(v) != "":
            return str(v)
    return None


def user_label_of(node: Node) -> str | None:
    """The node's `_user_stream_label`, if any (it also merges clusters across engines)."""
    v = node.attrs.get(USER_LABEL_ATTR) if node.attrs else None
    if isinstance(v, bytes):
        v = v.decode("utf-8", errors="replace")
    return str(v) if v is not None and str(v) != "" else None


def is_transparent(node: Node) -> bool:
    """An unlabelled skip node: the dependency rules look through it to its producers."""
    return kind_of(node) == SKIP and label_of(node) is None


class EffectivePreds:
    """Predecessors of a node with unlabelled skip nodes looked through (memoised).

    A Reshape between two convolutions must not break the chain: the second convolution
    continues the first one's stream as if the Reshape were not there.
    """

    def __init__(self) -> None:
        self._memo: dict[int, list[Node]] = {}

    def __call__(self, node: Node) -> list[Node]:
        out: dict[int, Node] = {}
        for p in node.predecessors:
            if is_transparent(p):
                for q in self._through(p):
                    out.setdefault(id(q), q)
            else:
                out.setdefault(id(p), p)
        return list(out.values())

    def _through(self, skip: Node) -> list[Node]:
        key = id(skip)
        if key not in self._memo:
            self._memo[key] = self(skip)
        return self._memo[key]


class Topo:
    """One topological order of a graph's direct nodes, with integer adjacency: built once
    and shared by the rules of one chain and the DAG stream pass, which read it and change
    no edge (the lists are not to be modified)."""

    __slots__ = ("order", "pos", "preds", "succs")

    @classmethod
    def of(cls, graph: Graph) -> "Topo":
        """The graph's Topo, built again only when an edit has moved its version since the
        last one (the built-in allocation and the DAG pass both walk the same graph)."""
        hit = graph._derived.get(_TOPO)
        if hit is not None and hit[0] == graph._version:
            return hit[1]
        topo = cls(graph)
        graph._derived[_TOPO] = (graph._version, topo)
        return topo

    @staticmethod
    def forget(graph: Graph) -> None:
        """Drop the kept Topo (once the stream passes are done with the graph)."""
        graph._derived.pop(_TOPO, None)

    def __init__(self, graph: Graph):
        self.order = order = graph.topological_sort()
        self.pos = pos = {id(n): i for i, n in enumerate(order)}
        preds = predecessor_lists(order, graph)
        succs: list[list[int]] = [[] for _ in order]
        for i, ps in enumerate(preds):
            for p in ps:
                succs[p].append(i)
        self.preds, self.succs = preds, succs

    def __len__(self) -> int:
        return len(self.order)

