"""An inference Dropout leaves the graph; the node making its input takes its name.

At inference a Dropout is the identity, but a Dropout that declares its mask output still
makes an all-true mask of the input's size at every run (kernels/nn_dropout.py), and a node
is an executor step either way (squeezenet's last Concat feeds one). Conditions: the
Dropout is in inference mode (opset < 7: is_test=1; opsets 7-11 always; from 12: the
training_mode input absent or a constant false), its mask is read by nobody and is not a
graph output, and its input is the one output read only by it of a root-graph node. Then the
Dropout's readers read its input, which also takes the Dropout output's place (and name)
among the graph outputs; the Dropout's name goes to the producer's fused names, so
`stream_of` still answers for it. `ge.exec.enableFusion=false` leaves the graph as it is.
"""
from __future__ import annotations

import numpy as np

from ...ir.graph import Graph, Node
from ._match import fusion_sites, mark_fused, note_fused


def _inference(node: Node, opset: int) -> bool:
    if opset < 7:
        return bool(node.attrs.get("is_test", 0))
    if opset < 12 or len(node.inputs) < 3 or node.inputs[2] is None:
        return True
    t = node.inputs[2].const
    return t is not None and np.asarray(t).size > 0 and not np.asarray(t).reshape(-1)[0]


def _plan(node: Node, graph: Graph):
    """The producer of `node`'s input if `node` is a removable Dropout (module doc), else None."""
    if node.op_type != "Dropout" or node.domain or not node.inputs or node.inputs[0] is None \
            or not node.outputs:
        return None
    if not _inference(node, graph.opset_imports.get("", 1)):
        return None
    if any(m.uses or m in graph.outputs for m in node.outputs[1:]):
        return None
    x = node.inputs[0]
    p = x.producer
    if p is None or p.graph is not graph or len(x.uses) != 1 or x in graph.outputs:
        return None
    return p


def fuse_dropout(graph: Graph) -> int:
    """Remove every eligible Dropout of the root graph; returns how many."""
    fused = []
    for node, producer in fusion_sites(graph, _plan, frozenset({"Dropout"})):
        graph.replace_value(node.outputs[0], node.inputs[0])
        graph.remove_node(node)
        fused.append(mark_fused(producer, [producer.name, node.name]))
    note_fused(graph, fused)
    return len(fused)
