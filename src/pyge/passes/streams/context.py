"""State shared by the built-in stream rules while they allocate one model's streams.

Stream ids are global to the model: the root graph and every subgraph draw new ids from one
counter, as GE's LogicalStreamAllocator does. A subgraph's first engine stream is its parent
node's stream (GE's "default stream"), so by default a body runs where its If/Loop runs.
"""
from __future__ import annotations

from dataclasses import dataclass, field

from ...errors import OptionError
from ..engines import ENGINE_KIND, engine_names

PARALLEL_KEY = "ge.streamMaxParallelNum"


@dataclass
class StreamContext:
    max_parallel: dict[str, int] = field(default_factory=lambda: {"*": 1})
    next_stream: int = 0
    # stream label -> stream, for the whole model (a label means the same stream everywhere)
    label_streams: dict[str, int] = field(default_factory=dict)
    # (engine, label) -> stream of an independent engine
    independent_streams: dict[tuple[str, str], int] = field(default_factory=dict)
    # the parent node's stream while a subgraph is being allocated; None for the root graph
    default_stream: int | None = None

    def new_stream(self) -> int:
        s = self.next_stream
        self.next_stream += 1
        return s

    def parallel_num(self, engine: str) -> int:
        return self.max_parallel.get(engine, self.max_parallel.get("*", 1))

    def pinned_streams(self) -> set[int]:
        """Streams owned by a label or an independent engine: no other rule puts nodes there."""
        return set(self.label_streams.values()) | set(self.independent_streams.values())


# GE's engine names, so that a GE user's `AIcoreEngine:2` means what it means in GE.
GE_ENGINE_ALIASES = {"AIcoreEngine": "compute", "VectorEngine": "compute", "DNN_HCCL": "independent",
                     "DNN_VM_GE_LOCAL": "skip", "DNN_VM_GE_LOCAL_OP_STORE": "skip"}


def check_parallel_num(parsed: dict[str, int]) -> dict[str, int]:
    """Every engine named in ge.streamMaxParallelNum must exist (checked before allocating)."""
    merged: dict[str, int] = {}
    for k, v in parsed.items():
        key = GE_ENGINE_ALIASES.get(k, k) if k not in ENGINE_KIND else k
        merged[key] = max(v, merged.get(key, 0))
    parsed = merged
    unknown = sorted(k for k in parsed if k != "*" and k not in ENGINE_KIND)
    if unknown:
        raise OptionError(f"option {PARALLEL_KEY} names unknown engine(s) {', '.join(unknown)}; "
                          f"accepted engines: {', '.join(engine_names())}")
    return dict(parsed)
