"""What every stream policy shares: the DAG it schedules, the costs, and the finishing step.

A policy sees the root graph's direct nodes in three classes:

    fixed        a stream label (`_stream_label` / `_user_stream_label`) or an independent
                 engine: the node keeps the stream GE's chain gave it, and that stream is
                 kept free of other nodes (GE's pinned streams)
    transparent  an unlabelled skip-engine node (a view, a shape query): it does no work,
                 so the policy looks through it and it follows a neighbour afterwards
    movable      everything else: the policy decides its stream

The scheduled DAG holds fixed and movable nodes, with edges through transparent nodes
(a Reshape between two convolutions still orders them). Costs are seconds per node: a
cost file (`pyge.costFile`, written by `pyge tune`) where it names the node, else the
static estimate of passes/streams/cost.py (FLOPs and bytes, or a node's `_cost_us`).
"""
from __future__ import annotations

import json
import logging
from dataclasses import dataclass, field
from pathlib import Path
from typing import Callable

from ...analysis.dag import (bottom_levels, heaviest_chain, list_schedule, reach_sets,
                             successors)
from ...errors import OptionError
from ...ir.graph import Graph, Node
from ..graph.engines import INDEPENDENT, kind_of
from ..streams._graph import EffectivePreds, is_transparent, label_of
from ..streams.context import StreamContext
from ..streams.cost import EVENT_S, node_cost
from ..streams.skip import assign_skipped

log = logging.getLogger(__name__)

COST_FILE_VERSION = 1


@dataclass
class CostTable:
    """Per-node costs in seconds, plus the device's per-event and per-launch overheads."""
    costs: dict[str, float] = field(default_factory=dict)
    event_s: float = EVENT_S
    launch_s: float = 0.0
    device: str = ""
    extra: dict = field(default_factory=dict)   # other fields of the file, kept for the tuner

    def cost_fn(self) -> Callable[[Node], float]:
        table = self.costs

        def cost(n: Node) -> float:
            c = table.get(n.name)
            return c if c is not None else node_cost(n)
        return cost


MAX_COST_US = 1e12    # 11.6 days: anything above is a unit mistake, and overflows the ns keys


def cost_us(path: str | Path, what: str, us) -> float:
    """A microseconds field of cost file `path` as seconds; OptionError naming file and field
    unless it is a finite number 0..MAX_COST_US (not a bool, a string, NaN or Infinity)."""
    if isinstance(us, bool) or not isinstance(us, (int, float)) or not 0 <= us <= MAX_COST_US:
        raise OptionError(f"option pyge.costFile: {str(path)!r}: {what} is {us!r}, "
                          f"expected a number of microseconds 0..{MAX_COST_US:g}")
    return float(us) * 1e-6


def load_costs(path: str | Path) -> CostTable:
    """Read a cost file: {"version": 1, "unit": "us", "costs": {node: us}, "event_us": x}, or a
    Chrome trace that `Profile.save_trace` wrote (each node's median duration over the runs)."""
    p = Path(path)
    try:
        data = json.loads(p.read_text())
    except OSError as err:
        raise OptionError(f"option pyge.costFile: cannot read {str(p)!r}: {err.strerror or err}") from err
    except ValueError as err:
        raise OptionError(f"option pyge.costFile: {str(p)!r} is not valid JSON: {err}") from err
    if isinstance(data, dict) and isinstance(data.get("traceEvents"), list):
        return _trace_costs(p, data["traceEvents"])
    if not isinstance(data, dict) or isinstance(data.get("version"), bool) or \
            data.get("version") != COST_FILE_VERSION or not isinstance(data.get("costs"), dict):
        raise OptionError(f"option pyge.costFile: {str(p)!r} is not a version {COST_FILE_VERSION} "
                          'cost file ({"version": 1, "unit": "us", "costs": {node name: microseconds}})')
    if data.get("unit", "us") != "us":
        raise OptionError(f"option pyge.costFile: {str(p)!r}: unit is {data['unit']!r}; accepted values: \"us\"")
    costs = {str(name): cost_us(p, f"cost of node {name!r}", us) for name, us in data["costs"].items()}
    extra = {k: v for k, v in data.items() if k not in ("version", "unit", "costs")}
    return CostTable(costs=costs, event_s=cost_us(p, "event_us", data.get("event_us", EVENT_S * 1e6)),
                     launch_s=cost_us(p, "launch_us", data.get("launch_us", 0.0)),
                     device=str(data.get("device", "")), extra=extra)


def _trace_costs(path: Path, events: list) -> CostTable:
    """Per node name, the median duration of its complete ("ph": "X") op events."""
    import statistics
    durs: dict[str, list[float]] = {}
    for e in events:
        if isinstance(e, dict) and e.get("ph") == "X" and e.get("cat", "op") == "op" and "name" in e:
            durs.setdefault(str(e["name"]), []).append(cost_us(path, f"duration of {e['name']!r}", e.get("dur")))
    if not durs:
        raise OptionError(f"option pyge.costFile: {str(path)!r} is a trace without operator events "
                          '(expected the "ph": "X" events that profile.save_trace writes)')
    return CostTable(costs={name: statistics.median(ds) for name, ds in durs.items()})


def cost_table(options) -> CostTable:
    path = options["pyge.costFile"] if options is not None else ""
    return load_costs(path) if path else CostTable()


def is_fixed(n: Node) -> bool:
    return label_of(n) is not None or kind_of(n) == INDEPENDENT


class DagView:
    """The scheduled nodes of one graph (topological order), their edges, costs and levels."""

    def __init__(self, graph: Graph, cost: Callable[[Node], float]):
        self.graph = graph
        self.order = graph.topological_sort()
        self.nodes = [n for n in self.order if not is_transparent(n)]
        self.idx = {id(n): i for i, n in enumerate(self.nodes)}
        eff = EffectivePreds()
        self.preds: list[list[int]] = [sorted({self.idx[id(p)] for p in eff(n)}) for n in self.nodes]
        self.succs = successors(self.preds)
        self.cost = [max(0.0, float(cost(n))) for n in self.nodes]
        self.fixed = [is_fixed(n) for n in self.nodes]
        self.blevel = bottom_levels(self.succs, self.cost)   # longest cost path to an exit

    def __len__(self) -> int:
        return len(self.nodes)

    def pool(self, k: int) -> list[int]:
        """The k smallest stream ids not pinned by a fixed node: the policy's streams."""
        pinned = {n.stream_id for n, f in zip(self.nodes, self.fixed) if f}
        out, s = [], 0
        while len(out) < max(1, k):
            if s not in pinned:
                out.append(s)
            s += 1
        return out

    def reach(self) -> tuple[list[int], list[int]]:
        """Ancestor and descendant bitsets (Python ints) of every scheduled node."""
        return reach_sets(self.preds, self.succs)

    def critical_path(self) -> list[int]:
        """The longest cost path: from the heaviest source follow the heaviest successor."""
        return heaviest_chain(self.preds, self.succs, self.blevel)


def schedule_est(view: DagView, allowed: Callable[[int], list[int]], event_s: float,
                 fixed_stream: Callable[[int], int | None] = lambda i: None) -> tuple[list[int], list[float]]:
    """List scheduling of the view by bottom level (analysis.dag.list_schedule): each ready
    node to the allowed stream where it starts earliest. Fixed nodes, and every node whose
    `fixed_stream(i)` is not None, go where they are told. Returns (stream, start) per node."""
    def told(i: int) -> int | None:
        return view.nodes[i].stream_id if view.fixed[i] else fixed_stream(i)
    return list_schedule(view.preds, view.succs, view.cost, view.blevel, allowed, event_s, told)


LIGHT_SHARE = 0.01


def fold_light_streams(view: DagView, stream: list[int], main: int, share: float = LIGHT_SHARE) -> list[int]:
    """Streams that carry less than `share` of the work go back to a neighbour's stream.

    A side stream holding one ConstantOfShape buys nothing, yet costs events, and on the CPU
    it costs much more: the executor splits the thread budget over every busy stream, so
    all operators would run with fewer threads. Each node of such a stream joins its first
    producer's stream (else its first consumer's, else `main`). Fixed nodes stay."""
    total = sum(view.cost) or 1.0
    work: dict[int, float] = {}
    for i, s in enumerate(stream):
        if not view.fixed[i]:
            work[s] = work.get(s, 0.0) + view.cost[i]
    light = {s for s, w in work.items() if s != main and w < share * total}
    if not light:
        return stream
    out = list(stream)
    for i in range(len(view)):                     # topological: producers are final first
        if out[i] in light and not view.fixed[i]:
            near = [out[j] for j in (*view.preds[i], *view.succs[i]) if out[j] not in light]
            out[i] = near[0] if near else main
    return out


def finish(view: DagView, stream: list[int], start: list[float]) -> int:
    """Write the streams onto the nodes, let transparent nodes follow a neighbour, and order
    the graph's nodes by planned start (streams launch in graph order, so each stream then
    runs its nodes in the order the policy planned). Returns the number of streams used."""
    graph = view.graph
    for i, node in enumerate(view.nodes):
        if not view.fixed[i]:
            node.stream_id = stream[i]
    for node in view.order:
        if is_transparent(node):
            node.stream_id = -1
    assign_skipped(graph, StreamContext())
    key: dict[int, float] = {}
    for node in view.order:
        i = view.idx.get(id(node))
        key[id(node)] = start[i] if i is not None else max(
            (key[id(p)] for p in node.predecessors if id(p) in key), default=0.0)
    index = {id(n): i for i, n in enumerate(view.order)}
    graph.set_node_order(sorted(view.order, key=lambda n: (round(key[id(n)] * 1e9), index[id(n)])))
    graph.sort()   # stable Kahn: restores a topological order wherever equal keys tied
    return len({n.stream_id for n in view.order})
