"""The built graph: the compiled root graph plus its Send/Recv nodes, as ONNX NodeProtos.

GE's final dump shows the inserted synchronisation as nodes; so does pyge's (the
PreRunAfterBuild stage, Dumper.built). This module is the only place Send/Recv nodes are
made. Nodes come in host enqueue order (plan/order.py), a topological order in which every
Send comes before its Recv, and every node carries its stream as the attribute `_stream_id`:

    Abs_1                 (_stream_id=1)
    Abs_1_Send_e0         pyge.Send(Abs_1_out) -> Abs_1_send_e0      event_id=0, _stream_id=1
    Add_1_Recv_e0         pyge.Recv(Abs_1_send_e0) -> Add_1_recv_e0  event_id=0, _stream_id=0
    Add_1                 (_stream_id=0)

Send reads the value the event guards (the producer's output the consumer reads; for a
control edge, the producer's first output), so the edge shows where the event comes from; its
token output feeds the Recv, whose token is left unconsumed (giving the consumer an extra
input would break its operator schema). The names carry the *logical* event index, which is
unique; the attribute `event_id` is the physical id, and both run on GE's runtime-service
engine (`_engine` = "rts"). `built_graph_model` wraps the nodes in a ModelProto with the
"pyge" opset. Structurally valid ONNX: onnx.checker accepts it once the `_stream_id`
attributes, which standard operator schemas do not know, are stripped. The dump
(`into_dump`) writes GE's names: `stream_id`, and on each Send (Recv) `send_event_id_list`
(`recv_event_id_list`).
"""
from __future__ import annotations

import onnx
from onnx import helper

from ..frontends.onnx_proto import graph_to_model, node_to_proto
from ..ir.graph import Graph, unique_name
from ..plan.order import host_order
from ..plan.plan import LAUNCH, RECORD, Plan
from .convert import ENGINE_ATTR, STREAM_ATTR, set_attr, stream_attrs

SYNC_DOMAIN = "pyge"
SYNC_OPSET = 1
SYNC_ENGINE = "rts"   # GE runs Send/Recv on its runtime-service engine


def built_graph_nodes(graph: Graph, plan: Plan, weights: bool = True,
                      op_protos: dict[str, onnx.NodeProto] | None = None) -> list[onnx.NodeProto]:
    """Operator nodes and Send/Recv nodes of the built graph, in host enqueue order.

    `op_protos` (node name -> proto) supplies the operator nodes, as the dump does with its
    annotated protos (engines, subgraphs); they get the plan's stream and engine. Otherwise
    each operator is written here with its `_stream_id`."""
    by_name = {n.name: n for n in graph.nodes}
    taken = set(by_name) | set(graph.values())
    out: list[onnx.NodeProto] = []
    token: dict[int, str] = {}
    for s, i in host_order(plan):
        st = plan.streams[s][i]
        if st.kind == LAUNCH:
            pn = plan.nodes[st.arg]
            if op_protos is None:
                out.append(node_to_proto(by_name[pn.name], weights, {"_stream_id": s}))
            else:
                proto = op_protos[pn.name]
                stream_attrs(proto, pn.stream, pn.engine)
                out.append(proto)
            continue
        e = plan.events[st.arg]
        if st.kind == RECORD:
            feed = _crossing_value(plan, e)
            token[e.index] = unique_name(taken, f"{e.src}_send_e{e.index}")
            out.append(_sync_node("Send", unique_name(taken, f"{e.src}_Send_e{e.index}"), feed,
                                  token[e.index], e.event_id, s, e))
        else:
            out.append(_sync_node("Recv", unique_name(taken, f"{e.dst}_Recv_e{e.index}"),
                                  [token[e.index]], unique_name(taken, f"{e.dst}_recv_e{e.index}"),
                                  e.event_id, s, e))
    return out


def built_graph_model(graph: Graph, plan: Plan, weights: bool = True) -> onnx.ModelProto:
    """The built graph as a ModelProto (graph inputs, outputs, initializers kept)."""
    mp = graph_to_model(graph, weights=weights, nodes=built_graph_nodes(graph, plan, weights))
    if not any(o.domain == SYNC_DOMAIN for o in mp.opset_import):
        mp.opset_import.append(helper.make_opsetid(SYNC_DOMAIN, SYNC_OPSET))
    return mp


def into_dump(mp: onnx.ModelProto, graph: Graph, plan: Plan) -> None:
    """Turn `mp`, the dump's annotated model of `graph`, into the built graph: its node list
    replaced by the built graph's (operators as annotated there) with GE's attribute names,
    the "pyge" domain declared if Send/Recv nodes are in it."""
    nodes = built_graph_nodes(graph, plan, op_protos={p.name: p for p in mp.graph.node})
    copies = [onnx.NodeProto() for _ in nodes]
    for c, n in zip(copies, nodes):
        c.CopyFrom(n)
    del mp.graph.node[:]
    mp.graph.node.extend(copies)
    ge_sync_attrs(mp.graph)
    if any(n.domain == SYNC_DOMAIN for n in mp.graph.node) and \
            not any(o.domain == SYNC_DOMAIN for o in mp.opset_import):
        mp.opset_import.append(helper.make_opsetid(SYNC_DOMAIN, SYNC_OPSET))


def ge_sync_attrs(gp: onnx.GraphProto) -> None:
    """GE's spelling on every node of the built graph: the stream as `stream_id` (a node
    written here with `_stream_id` is renamed), and each Send (Recv) with its event ids as
    `send_event_id_list` (`recv_event_id_list`), as GE dumps them."""
    for p in gp.node:
        for i, a in enumerate(p.attribute):
            if a.name == "_stream_id":
                value = helper.get_attribute_value(a)
                del p.attribute[i]
                set_attr(p, STREAM_ATTR, int(value))
                break
        if p.domain == SYNC_DOMAIN and p.op_type in ("Send", "Recv"):
            ids = [int(helper.get_attribute_value(a)) for a in p.attribute if a.name == "event_id"]
            set_attr(p, "send_event_id_list" if p.op_type == "Send" else "recv_event_id_list", ids)


def _crossing_value(plan: Plan, e) -> list[str]:
    if e.src_node < 0 or not plan.nodes[e.src_node].outputs:
        return []
    outs = plan.nodes[e.src_node].outputs
    reads = set(plan.nodes[e.dst_node].inputs) if e.dst_node >= 0 else set()
    vi = next((o for o in outs if o in reads), outs[0])
    return [plan.values[vi].name]


def _sync_node(op: str, name: str, inputs: list[str], output: str, event_id: int, stream: int,
               e) -> onnx.NodeProto:
    peer_stream, peer = (e.dst_stream, e.dst) if op == "Send" else (e.src_stream, e.src)
    node = helper.make_node(op, inputs, [output], name=name, domain=SYNC_DOMAIN,
                            event_id=event_id, _stream_id=stream, _peer_stream_id=peer_stream,
                            _peer_node=peer, _reason=e.reason, _logical_event=e.index)
    node.attribute.append(helper.make_attribute(ENGINE_ATTR, SYNC_ENGINE))
    return node
