"""The collectives pass: the process group of a model's collectives, and their types.

Finds the com.microsoft AllReduce / AllGather / AllToAll nodes of the graph and its
subgraphs. With none, it does nothing (torch.distributed is not even imported). With some,
it needs the default process group (kernels/collective_group.py: the caller's, or one made
from torchrun's environment; a one-line error saying how to launch otherwise), checks each
node against it (group_size is the group's size, types, axis), gives each output its type
and shape (ONNX inference does not know these contrib ops, so their consumers would stay
untyped; inference is re-run until nothing new is learnt) and stamps the node with
pyge.collectiveTimeout for its kernel. It runs right after infer_types. One issue order of
the collectives on every rank is the order_collectives pass (passes/sync/collectives.py).
"""
from __future__ import annotations

import logging

from ...errors import GraphError
from ...ir.graph import Graph, Node
from ...kernels.collective import (DOMAIN, DTYPES, TIMEOUT_ATTR, check_world, gather_axis, is_collective,
                                  output_shape)
from .infer_types import infer_types

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
    from ...kernels.collective_group import default_group   # deferred: torch.distributed
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
    if DOMAIN not in graph.opset_imports:
        graph.opset_imports[DOMAIN] = 1
        infer_types(graph)
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
        infer_types(graph)
