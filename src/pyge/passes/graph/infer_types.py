"""The infer_types pass: ONNX type and shape inference on the compiler's graph.

Front ends run inference when they load a model, but a graph built by hand (GraphBuilder,
pyge.from_torch) may leave node outputs without a dtype or a shape. Inference here is the
ONNX reference's (onnx.shape_inference with data propagation), run on the graph turned into
an ONNX model without its large weights; newly known types are copied back. It is best
effort: an operator ONNX cannot infer leaves its outputs as they were, and nothing
downstream requires types (planning treats an unknown size as unplanned).
"""
from __future__ import annotations

import logging

import onnx

from ...frontends.onnx_proto import graph_to_model, read_type
from ...ir.graph import Graph

log = logging.getLogger(__name__)


def infer_types(graph: Graph) -> int:
    """Fill in the dtype and shape of root-graph node outputs that lack one, where ONNX
    inference knows them. Returns how many values it changed."""
    # Only root-graph node outputs lacking a dtype or a shape are ever written back: when
    # none lacks one, inference (a whole-graph ONNX round trip) could change nothing.
    if all(o.dtype is not None and o.shape is not None for n in graph.nodes for o in n.outputs):
        return 0
    try:
        mp = graph_to_model(graph, weights="shapes")      # large weights' data is not needed
        inferred = onnx.shape_inference.infer_shapes(mp, check_type=False, strict_mode=False,
                                                     data_prop=True)
    except Exception as err:  # noqa: BLE001 - best effort
        log.info("shape inference on graph %r failed: %s", graph.name, err)
        return 0
    infos = {vi.name: vi for vi in list(inferred.graph.value_info) + list(inferred.graph.output)}
    changed = 0
    for n in graph.nodes:
        for o in n.outputs:
            vi = infos.get(o.name)
            if vi is not None and (o.dtype is None or o.shape is None):
                before = (o.dtype, o.shape)
                read_type(o, vi.type)
                changed += (o.dtype, o.shape) != before
    return changed
