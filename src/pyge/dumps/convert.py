"""IR graph -> annotated ONNX ModelProto -> protobuf text, for one dump.

Every node, in subgraphs too, carries `stream_id` (GE's attribute name, an int) and `_engine`
(a string) so that Netron shows where each operator runs; a fused node also carries GE's
`_datadump_original_op_names` (the IR keeps it as a node attribute). The dump mode decides how
much data stays:
    FULL        everything, weights included
    NO_WEIGHTS  initializers become graph inputs with their type and shape; tensor attributes
                keep name, type and shape, not their data
    STRUCTURE   no initializers and no value_info at all; tensor attributes without data
Every mode loads with a plain `onnx.load`: data that is left out is simply absent, never
pointed to an external file that does not exist.
"""
from __future__ import annotations

from typing import Any

import onnx
from google.protobuf import text_format
from onnx import AttributeProto, TensorProto, helper

from ..frontends.onnx_proto import graph_to_model
from ..ir.graph import Graph, Node
from .config import FULL, STRUCTURE

STREAM_ATTR, ENGINE_ATTR = "stream_id", "_engine"


def set_attr(node: onnx.NodeProto, name: str, value: Any) -> None:
    """Set (or replace) one attribute of a node proto."""
    for i, a in enumerate(node.attribute):
        if a.name == name:
            del node.attribute[i]
            break
    node.attribute.append(helper.make_attribute(name, value))


def has_attr(node: onnx.NodeProto, name: str) -> bool:
    return any(a.name == name for a in node.attribute)


def stream_attrs(node: onnx.NodeProto, stream: int, engine: str | None) -> None:
    set_attr(node, STREAM_ATTR, int(stream))
    set_attr(node, ENGINE_ATTR, engine or "unassigned")


def annotate(g: Graph, gp: onnx.GraphProto) -> None:
    """Add stream and engine attributes to every node of `gp` and of its subgraphs.

    graph_to_proto writes nodes in graph order and a subgraph under its attribute name, so
    the IR and the proto can be walked side by side.
    """
    for n, p in zip(g.nodes, gp.node):
        stream_attrs(p, n.stream_id, n.engine)
        _annotate_subgraphs(n, p)


def _annotate_subgraphs(n: Node, p: onnx.NodeProto) -> None:
    for a in p.attribute:
        sub = n.attrs.get(a.name)
        if a.type == AttributeProto.GRAPH and isinstance(sub, Graph):
            annotate(sub, a.g)
        elif a.type == AttributeProto.GRAPHS and isinstance(sub, list):
            for sg, sgp in zip(sub, a.graphs):
                if isinstance(sg, Graph):
                    annotate(sg, sgp)


def _strip_tensor(t: TensorProto) -> None:
    """Keep name, type and shape; drop the data, and any external-data reference with it."""
    for f in ("raw_data", "float_data", "int32_data", "string_data", "int64_data", "double_data",
              "uint64_data", "external_data"):
        t.ClearField(f)
    t.data_location = TensorProto.DEFAULT


def _initializers_as_inputs(gp: onnx.GraphProto) -> None:
    """NO_WEIGHTS: each initializer becomes a graph input of its type and shape."""
    declared = {v.name for v in gp.input}
    for t in gp.initializer:
        if t.name not in declared:
            gp.input.append(helper.make_tensor_value_info(t.name, t.data_type, list(t.dims)))
    gp.ClearField("initializer")
    gp.ClearField("sparse_initializer")


def _strip_graph(gp: onnx.GraphProto, mode: int, top: bool = True) -> None:
    """Drop the data the mode leaves out. A subgraph's initializers stay declared, without
    data (a body takes no inputs of its own)."""
    if mode == STRUCTURE:
        gp.ClearField("initializer")
        gp.ClearField("sparse_initializer")
        gp.ClearField("value_info")
    elif top:
        _initializers_as_inputs(gp)
    else:
        for t in gp.initializer:
            _strip_tensor(t)
    for p in gp.node:
        for a in p.attribute:
            if a.type == AttributeProto.TENSOR:
                _strip_tensor(a.t)
            elif a.type == AttributeProto.TENSORS:
                for t in a.tensors:
                    _strip_tensor(t)
            elif a.type == AttributeProto.GRAPH:
                _strip_graph(a.g, mode, top=False)
            elif a.type == AttributeProto.GRAPHS:
                for sg in a.graphs:
                    _strip_graph(sg, mode, top=False)


def graph_model(g: Graph, mode: int) -> onnx.ModelProto:
    """The graph as an annotated ModelProto (data not yet stripped for modes 2 and 3)."""
    mp = graph_to_model(g, weights=(mode == FULL))
    annotate(g, mp.graph)
    return mp


def finish(mp: onnx.ModelProto, mode: int, meta: dict[str, str]) -> onnx.ModelProto:
    """Strip data for the mode and record where the dump came from."""
    if mode != FULL:
        _strip_graph(mp.graph, mode)
    keep = [(p.key, p.value) for p in mp.metadata_props if p.key not in meta]
    mp.ClearField("metadata_props")
    for k, v in keep + sorted(meta.items()):
        p = mp.metadata_props.add()
        p.key, p.value = k, str(v)
    return mp


def to_text(mp: onnx.ModelProto) -> str:
    """Protobuf text format (parses back with text_format.Parse into onnx.ModelProto)."""
    return text_format.MessageToString(mp)


def parse_text(text: str) -> onnx.ModelProto:
    return text_format.Parse(text, onnx.ModelProto())
