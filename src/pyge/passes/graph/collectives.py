"""Collectives at compile time: their process group and types (pass 3a), and one issue
order for every rank (pass 11a).

prepare_collectives (after type inference)
    Finds the com.microsoft AllReduce / AllGather / AllToAll nodes of the graph and its
    subgraphs. With none, it does nothing (torch.distributed is not even imported). With
    some, it needs the default process group (kernels/collective_group.py: the caller's, or one made
    from torchrun's environment; a one-line error saying how to launch otherwise), checks
    each node against it (group_size is the group's size, types, axis), gives each output
    its type and shape (ONNX inference does not know these contrib ops, so their consumers
    would stay untyped; inference is re-run until nothing new is learnt) and stamps the
    node with pyge.collectiveTimeout for its kernel.

order_collectives (after build_plan, before insert_events)
    Every rank runs the same plan, and a collective only completes when every rank has
    issued it: if two collectives could start in either order, one rank may issue A then B
    while another issues B then A, and both wait forever. They are safe when the plan's
    happens-before orders all of them totally: then each rank issues them in that one
    order, whatever its threads' timing. The built-in allocation puts them on one stream of
    the independent engine, which orders them already; a stream label, a policy or a custom
    stream pass may spread them over several streams. So each collective gets a control
    edge from the previous one in plan order (a topological order, the same on every rank)
    when the two sit on different streams. insert_events turns an edge into an event only
    where the plan does not already order the pair, so a plan that was already safe keeps
    its events. The edge cannot make a cycle: the plan order runs along every dependency
    and every stream, so the earlier node can never depend on the later one.
    plan.meta["collectives"] lists the collective nodes for the verifier
    (verify_collectives.py), which re-checks the total order on the finished plan.
"""
from __future__ import annotations

import logging

from ...errors import GraphError
from ...ir.graph import Graph, Node
from ...kernels.collective import (DOMAIN, DTYPES, TIMEOUT_ATTR, check_world, gather_axis, holds_collective,
                                  is_collective, output_shape)
from ...plan.collectives import META_KEY
from ...plan.plan import Plan

log = logging.getLogger(__name__)


def collective_nodes(graph: Graph) -> list[Node]:
    """Every collective node of `graph` and of its subgraphs."""
    return [n for g in graph.all_graphs() for n in g.nodes if is_collective(n)]


def prepare_collectives(graph: Graph, device: str, timeout_s: float) -> int:
    """Check the graph's collectives against the default process group (initialising it if
    need be), type their outputs and stamp their timeout; returns how many there are."""
    nodes = collective_nodes(graph)
    if not nodes:
        return 0
    from ...kernels.collective_group import default_group
    first = nodes[0]
    info = default_group(device, timeout_s, f"node {first.name!r} ({first.op_type})")
    _infer_types(graph, nodes)
    for n in nodes:
        _check_node(n, info.world_size)
        n.attrs[TIMEOUT_ATTR] = float(timeout_s)
    log.info("%d collective node(s) on %s (%s)", len(nodes), info.where(), info.backend)
    return len(nodes)


def _check_node(n: Node, world_size: int) -> None:
    what = f"node {n.name!r} ({n.op_type})"
    if not n.inputs or any(v is None for v in n.inputs):
        raise GraphError(f"{what} needs at least one input, and no empty ones")
    if len(n.outputs) != len(n.inputs):
        raise GraphError(f"{what} has {len(n.inputs)} input(s) but {len(n.outputs)} output(s); "
                         "they map one to one")
    check_world(n, world_size)
    for v in n.inputs:
        if v.dtype is not None and v.dtype not in DTYPES[n.op_type]:
            raise GraphError(f"{what}: input {v.name!r} is {v.dtype}; {n.op_type} accepts "
                             f"{', '.join(DTYPES[n.op_type])}")
        if v.shape is not None and n.op_type == "AllGather":
            gather_axis(n, len(v.shape))
        if v.shape is not None and n.op_type == "AllToAll" and all(isinstance(d, int) for d in v.shape):
            count = 1
            for d in v.shape:
                count *= d
            if count % world_size:
                raise GraphError(f"{what}: input {v.name!r} has {count} elements, which cannot be "
                                 f"cut into {world_size} equal chunks")


def _infer_types(graph: Graph, nodes: list[Node]) -> None:
    """Collective outputs from their inputs, alternating with ONNX inference for the rest.

    The contrib domain must be imported for ONNX inference to run at all (a graph built by
    hand may lack it); inference skips the ops it does not know."""
    from ...frontends.onnx_loader import refine_types
    if DOMAIN not in graph.opset_imports:
        graph.opset_imports[DOMAIN] = 1
        refine_types(graph)
    for _ in range(len(nodes) + 1):
        learnt = False
        for n in nodes:
            for v, o in zip(n.inputs, n.outputs):
                if o.dtype is None and v.dtype is not None:
                    o.dtype, learnt = v.dtype, True
                if o.shape is None and v.shape is not None:
                    o.shape, learnt = output_shape(n, v.shape), True
        if not learnt:
            return
        refine_types(graph)


def order_collectives(plan: Plan, graph: Graph) -> int:
    """Chain the plan's collectives in plan order (see the module docstring); returns how
    many control edges were added."""
    holders = {n.name for n in graph.nodes if holds_collective(n)}
    chain = [pn.index for pn in plan.nodes if pn.name in holders]
    plan.meta[META_KEY] = chain
    added = 0
    for u, v in zip(chain, chain[1:]):
        later = plan.nodes[v]
        if plan.nodes[u].stream != later.stream and u not in later.control_preds:
            later.control_preds.append(u)
            added += 1
    if added:
        log.info("collectives of %r spread over several streams: %d control edge(s) keep one "
                 "issue order on every rank", plan.graph_name, added)
    return added
