"""ge.autoMultistreamParallelMode: GE's built-in DAG stream pass (its MiniDAGStreamPass).

GE implements the automatic mode as a stream pass of its own: it runs with the custom stream
passes, before them, on the same context, and is dumped like them
(RunCustomPass_*AssignLogicStreamMiniDAGStreamPass). It re-places the root graph's direct
nodes:

  1. the residual DAG and its minimum path cover (dag_cover.py): each path one logical stream;
  2. the paths merged onto at most N physical streams (dag_merge.py for LoadBalance:N and
     MainStream:N, dag_weighted.py for WeightedLoadBalance:N);
  3. stream-labelled nodes keep their labels: one stream per label, after those N;
  4. nodes without device work (unlabelled skip nodes) take a neighbour's stream.

Ids: the pass draws one id as its base, puts physical stream k on base + k and label j on
base + N' + j (N' the physical streams used), then draws as many ids as it used, as GE does
(so one id at the top stays a hole, closed by renumbering).

WeightedLoadBalance weighs nodes by measured microseconds: `pyge.costFile` (a cost file that
`pyge tune` wrote, or a Chrome trace that `profile.save_trace` wrote); a node the file does
not name is weighed by pyge's static estimate (passes/streams/cost.py). As in GE, when the
file names none of the graph's nodes the pass falls back to LoadBalance (with a warning).
"""
from __future__ import annotations

import logging
from typing import Callable

from ...analysis.dag import depths
from ...ir.graph import Graph
from ...options import Options
from .context import StreamContext
from .cost import node_cost
from .dag_cover import residual_dag, path_cover
from .dag_merge import load_balance, main_stream
from .dag_units import build_units
from .dag_weighted import weighted_load_balance
from ._graph import Topo, label_of
from .skip import assign_skipped

log = logging.getLogger(__name__)

PASS_NAME = "MiniDAGStreamPass"
LOAD_BALANCE, MAIN_STREAM, WEIGHTED = "LoadBalance", "MainStream", "WeightedLoadBalance"


def dag_stream_pass(options: Options) -> Callable | None:
    """The built-in stream pass for the option's mode, or None when the mode is off."""
    mode = options["ge.autoMultistreamParallelMode"]
    if mode is None or options.single_stream:
        return None
    strategy, limit = mode
    costs = None
    if strategy == WEIGHTED:
        from ..policies._dag import cost_table
        costs = cost_table(options).costs

    def run(view, ctx) -> int:
        from ..custom.context import GRAPH_SUCCESS
        assign_dag(view, strategy, limit, ctx, costs)
        return GRAPH_SUCCESS
    return run


def assign_dag(view, strategy: str, limit: int, ctx, costs: dict[str, float] | None = None) -> int:
    """Re-place the direct nodes of `view` (the ConstGraph a stream pass gets) through `ctx`
    (its StreamPassContext); returns the number of streams it used."""
    graph: Graph = view._graph
    wrap = view._wrap
    dag = residual_dag(graph)
    base = ctx.allocate_next_stream_id()
    paths = path_cover(dag.succs)
    level = depths(dag.preds)
    units = build_units(paths, dag.preds, level)
    if strategy == WEIGHTED and not _measured(dag.nodes, costs):
        log.warning("WeightedLoadBalance: the cost file names none of graph %r's nodes; "
                    "using LoadBalance", graph.name)
        strategy = LOAD_BALANCE
    if strategy == MAIN_STREAM:
        physical = main_stream(units, limit, level)
    elif strategy == WEIGHTED:
        physical = weighted_load_balance(units, limit, level, _durations_us(dag.nodes, costs or {}))
    else:
        physical = load_balance(units, limit)
    used = 1 + max(physical, default=-1)
    labels = list(dict.fromkeys(label_of(n) for n in dag.serial))
    for _ in range(used + len(labels)):
        ctx.allocate_next_stream_id()
    nodes = dag.nodes
    for u, k in zip(units, physical):     # ctx.set_stream_id per node, a unit at a time
        ctx._set_stream_ids([nodes[i] for i in u.nodes], base + k)
    slot = {lab: base + used + j for j, lab in enumerate(labels)}
    for n in dag.serial:
        ctx.set_stream_id(wrap(n), slot[label_of(n)])
    _follow_neighbours(graph, dag.weightless, base, dag.order)
    log.info("%s:%d on graph %s: %d path(s) merged onto %d stream(s), %d label stream(s)",
             strategy, limit, graph.name, len(paths), used, len(labels))
    return used + len(labels)


def _follow_neighbours(graph: Graph, weightless, base: int, order) -> None:
    """Nodes without device work take a neighbour's new stream (the skip rule); those with
    no placed neighbour at all go to the first stream of the pass."""
    if not weightless:
        return
    for n in weightless:
        n.stream_id = -1
    assign_skipped(graph, StreamContext(default_stream=base), order, Topo.of(graph))


def _measured(nodes, costs: dict[str, float] | None) -> bool:
    return bool(costs) and any(n.name in costs for n in nodes)


def _durations_us(nodes, costs: dict[str, float]) -> list[float]:
    return [1e6 * (costs[n.name] if n.name in costs else node_cost(n)) for n in nodes]
