"""State shared by the built-in stream rules while they allocate one model's streams.

Stream ids are drawn from one counter (GE's `Context::next_stream`). Every id a rule draws
counts, used or not: the custom stream passes start from the largest id drawn so far
(`next_stream - 1`, holes included, as GE's StreamPassContext does), and renumbering closes
the holes afterwards.
"""
from __future__ import annotations

from dataclasses import dataclass, field

from ...errors import OptionError
from ..graph.engines import ENGINE_KIND, engine_names

PARALLEL_KEY = "ge.streamMaxParallelNum"


@dataclass
class StreamContext:
    max_parallel: dict[str, int] = field(default_factory=lambda: {"*": 1})
    next_stream: int = 0
    # stream label -> stream (GE's AssignByLabelPass: one stream per label)
    label_streams: dict[str, int] = field(default_factory=dict)
    # (engine, label) -> stream of an independent engine (GE's IndependentStreamPass)
    independent_streams: dict[tuple[str, str], int] = field(default_factory=dict)
    # a stream new nodes may fall back on (the skip rule's last resort); None: the lowest used
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

    @property
    def max_drawn(self) -> int:
        """The largest stream id drawn so far (-1 before the first)."""
        return self.next_stream - 1


# GE's engine names for pyge's built-in engines, so that a GE user's `AIcoreEngine:2` means what
# it means in GE. Engines are told apart by name: a user engine named "VectorEngine" (registered
# with pyge.register_engine) is an engine of its own, not an alias of compute.
GE_ENGINE_ALIASES = {"AIcoreEngine": "compute", "DNN_HCCL": "independent",
                     "DNN_VM_GE_LOCAL": "skip", "DNN_VM_GE_LOCAL_OP_STORE": "skip"}


def check_parallel_num(parsed: dict[str, int]) -> dict[str, int]:
    """ge.streamMaxParallelNum with GE's engine names resolved: every engine must exist, and
    one engine may be named once (`compute:2,AIcoreEngine:3` names the compute engine twice)."""
    merged: dict[str, int] = {}
    given: dict[str, str] = {}
    for k, v in parsed.items():
        key = k if k in ENGINE_KIND or k == "*" else GE_ENGINE_ALIASES.get(k, k)
        if key in merged:
            raise OptionError(f"option {PARALLEL_KEY} names engine {key!r} twice ({given[key]!r} and "
                              f"{k!r}); accepted values: N (1..64) or ENGINE:N[,ENGINE:N...], each engine once")
        merged[key], given[key] = v, k
    unknown = sorted(given[k] for k in merged if k != "*" and k not in ENGINE_KIND)
    if unknown:
        raise OptionError(f"option {PARALLEL_KEY} names unknown engine(s) {', '.join(unknown)}; "
                          f"accepted engines: {', '.join(engine_names())} (GE's names "
                          f"{', '.join(sorted(GE_ENGINE_ALIASES))} mean pyge's built-in engines)")
    return merged
