"""Graph helpers shared by the stream rules: labels, effective predecessors, reachability."""
from __future__ import annotations

from ...ir.graph import Graph, Node
from ..engines import SKIP, kind_of

LABEL_ATTR = "_stream_label"
USER_LABEL_ATTR = "_user_stream_label"   # overrides _stream_label, as in GE


def label_of(node: Node) -> str | None:
    """The node's stream label; `_user_stream_label` wins over `_stream_label`."""
    for key in (USER_LABEL_ATTR, LABEL_ATTR):
        v = node.attrs.get(key)
        if isinstance(v, bytes):
            v = v.decode("utf-8", errors="replace")
        if v is not None and str(v) != "":
            return str(v)
    return None


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


class Reach:
    """Ancestor and descendant sets of every node as Python-int bitsets (cheap for 10^4 nodes).

    Stored inclusive of the node itself (`up[i]` = ancestors + i, `down[i]` = descendants + i):
    a node then costs one big-int OR per edge instead of two, which matters at 10^5 nodes.
    """

    def __init__(self, graph: Graph, order: list[Node] | None = None):
        self.order = order if order is not None else graph.topological_sort()
        self.index = index = {id(n): i for i, n in enumerate(self.order)}
        n = len(self.order)
        preds = [[index[id(p)] for p in m.predecessors if id(p) in index] for m in self.order]
        up = [0] * n
        for i in range(n):
            a = 1 << i
            for p in preds[i]:
                a |= up[p]
            up[i] = a
        down = [1 << i for i in range(n)]
        for i in reversed(range(n)):
            d = down[i]
            for p in preds[i]:
                down[p] |= d
        self.up, self.down = up, down

    def bit(self, node: Node) -> int:
        return 1 << self.index[id(node)]

    def related(self, node: Node) -> int:
        """Bitset of the node, its ancestors and its descendants: everything ordered with it."""
        i = self.index[id(node)]
        return self.up[i] | self.down[i]

    def all_bits(self) -> int:
        return (1 << len(self.order)) - 1
