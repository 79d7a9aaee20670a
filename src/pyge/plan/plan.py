"""The execution plan: plain data, as ONNX Runtime's SequentialExecutionPlan.

Integer indices at run time, names only for printing and dumps. Executors read a finished
plan (plus the graph, for kernels); they never call passes.

    stream 0:  launch #3 Conv_1 | record e0 | launch #5 Relu_2
    stream 1:  wait e0 | launch #4 Abs_1

A `record e` step on stream s is placed right after the producer's launch; the matching
`wait e` step on stream t is placed right before the consumer's launch. Physical event ids
may be shared by several logical events whose lifetimes cannot overlap (see
passes/sync/event_ids.py); `Event.event_id` is the physical id used by executors.
"""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

import math

import numpy as np

LAUNCH, RECORD, WAIT = 0, 1, 2
_KIND_NAMES = {LAUNCH: "launch", RECORD: "record", WAIT: "wait"}


@dataclass(slots=True)
class Step:
    kind: int      # LAUNCH, RECORD or WAIT
    arg: int       # node index for LAUNCH; logical event index (into Plan.events) otherwise

    def describe(self, plan: "Plan | None" = None) -> str:
        if self.kind == LAUNCH:
            if plan is not None:
                n = plan.nodes[self.arg]
                return f"launch #{self.arg} {n.name} ({n.op_type})"
            return f"launch #{self.arg}"
        if plan is not None:
            e = plan.events[self.arg]
            return f"{_KIND_NAMES[self.kind]} e{e.event_id}"
        return f"{_KIND_NAMES[self.kind]} ev[{self.arg}]"

    def __str__(self) -> str:
        return self.describe()


@dataclass(slots=True)
class PlanValue:
    index: int
    name: str
    dtype: str | None
    shape: tuple | None
    kind: str = "tensor"
    producer: int = -1             # node index, -1 for graph inputs and constants
    is_input: bool = False
    is_output: bool = False
    is_const: bool = False
    nbytes: int = 0                # planned size (0 if unknown statically)
    buffer: int = -1               # memory plan buffer id, -1 if not planned


@dataclass(slots=True)
class PlanNode:
    index: int
    name: str
    op_type: str
    stream: int
    inputs: list[int]              # value indices; -1 for an absent optional input;
                                   # explicit inputs then implicit (subgraph) inputs
    outputs: list[int]
    engine: str = "compute"
    control_preds: list[int] = field(default_factory=list)  # node indices (no data flows)
    free_after: list[int] = field(default_factory=list)   # value indices released after it


@dataclass(slots=True)
class Event:
    """One logical Send/Recv pair: `src` records on `src_stream`, `dst` waits on `dst_stream`."""
    index: int                     # logical index into Plan.events
    event_id: int                  # physical event id (after reuse), contiguous from 0
    src: str                       # producer node name
    dst: str                       # consumer node name
    src_stream: int
    dst_stream: int
    src_node: int = -1             # node indices
    dst_node: int = -1
    reason: str = "data"           # "data", "control" or "memory" (buffer reuse ordering)

    def __str__(self) -> str:
        return f"e{self.event_id}: {self.src}@s{self.src_stream} -> {self.dst}@s{self.dst_stream}"


@dataclass
class Buffer:
    index: int
    offset: int
    size: int
    stream: int                    # stream of the first tenant


@dataclass
class MemoryPlan:
    buffers: list[Buffer] = field(default_factory=list)
    peak_bytes: int = 0
    no_reuse_bytes: int = 0

    def __str__(self) -> str:
        return (f"memory: {len(self.buffers)} buffers, peak {self.peak_bytes} B, "
                f"without reuse {self.no_reuse_bytes} B")


@dataclass
class Plan:
    graph_name: str
    values: list[PlanValue]
    nodes: list[PlanNode]
    streams: list[list[Step]]                 # per logical stream, steps in order
    events: list[Event] = field(default_factory=list)
    inputs: list[int] = field(default_factory=list)    # value indices of graph inputs
    outputs: list[int] = field(default_factory=list)   # value indices of graph outputs
    memory: MemoryPlan = field(default_factory=MemoryPlan)
    custom_streams: list[int] = field(default_factory=list)  # streams created by custom passes
    options: dict[str, str] = field(default_factory=dict)
    meta: dict[str, Any] = field(default_factory=dict)

    @property
    def num_streams(self) -> int:
        return len(self.streams)

    @property
    def num_physical_events(self) -> int:
        return 1 + max((e.event_id for e in self.events), default=-1)

    def value_index(self) -> dict[str, int]:
        return {v.name: v.index for v in self.values}

    def node_index(self) -> dict[str, int]:
        return {n.name: n.index for n in self.nodes}

    def format(self) -> str:
        lines = [f"plan {self.graph_name}: {self.num_streams} stream(s), {len(self.nodes)} node(s), "
                 f"{len(self.events)} event(s) on {self.num_physical_events} physical id(s)"]
        for s, steps in enumerate(self.streams):
            lines.append(f"  stream {s}:")
            for st in steps:
                lines.append(f"    {st.describe(self)}")
        lines.append(f"  {self.memory}")
        return "\n".join(lines)

    __str__ = format


_ITEMSIZE: dict[str, int] = {}   # dtype name -> bytes per element (np.dtype is slow to build per call)


def itemsize(dtype: str) -> int:
    """Bytes per element of an ONNX/numpy dtype name (bfloat16: 2; unknown names: 4)."""
    item = _ITEMSIZE.get(dtype)
    if item is None:
        try:
            item = np.dtype(dtype).itemsize
        except TypeError:
            item = 2 if dtype == "bfloat16" else 4
        _ITEMSIZE[dtype] = item
    return item


def value_nbytes(dtype: str | None, shape: tuple | None) -> int:
    if dtype is None or shape is None or dtype == "object":
        return 0
    for d in shape:
        if not isinstance(d, int) or d < 0:
            return 0
    return math.prod(shape) * itemsize(dtype)
