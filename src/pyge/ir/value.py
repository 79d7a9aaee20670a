"""Value: one SSA value of the graph IR (a graph input, an initializer, a node's output).

A value knows its producer and its uses; the use lists are kept by Node's setters
(pyge/ir/graph.py), never by hand. Imports no other pyge layer.
"""
from __future__ import annotations

import numpy as np


# Value kinds: a plain tensor, a sequence of tensors, an optional.
TENSOR, SEQUENCE, OPTIONAL = "tensor", "sequence", "optional"


class Value:
    """An SSA value: a graph input, an initializer, or one output of a node."""

    __slots__ = ("name", "dtype", "shape", "kind", "producer", "index", "uses", "const", "graph",
                 "elem_kind")

    def __init__(self, name: str, dtype: str | None = None, shape: tuple | None = None,
                 kind: str = TENSOR, const: np.ndarray | None = None):
        self.name = name
        # numpy dtype name ("float32", "int64", "bool", "float16", "bfloat16", "object" for
        # strings); for a sequence/optional, the element's dtype. None = unknown.
        self.dtype = dtype
        # tuple of int (known), str (symbolic) or None (unknown) per axis; None = unknown rank.
        self.shape = shape
        self.kind = kind
        self.elem_kind: str | None = None  # for OPTIONAL: kind of the contained value
        self.producer: Node | None = None
        self.index: int = -1               # output index within producer
        self.uses: list[tuple[Node, int]] = []  # (consumer, input index)
        self.const = const                  # initializer data, if this value is one
        self.graph: Graph | None = None

    @property
    def is_initializer(self) -> bool:
        return self.const is not None

    @property
    def consumers(self) -> list["Node"]:
        seen: dict[int, Node] = {}
        for n, _ in self.uses:
            seen.setdefault(id(n), n)
        return list(seen.values())

    def __repr__(self) -> str:
        return f"Value({self.name!r}, {self.dtype}, {self.shape})"
