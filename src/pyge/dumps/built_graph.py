"""The built graph: the compiled root graph plus its Send/Recv nodes, as ONNX NodeProtos.

GE's final dump shows the inserted synchronisation as nodes; so does pyge's. Nodes come in
host enqueue order (plan/order.py), a topological order, and every node carries its stream
as the attribute `_stream_id`:

    Abs_1                 (_stream_id=1)
    Abs_1_Send_e0         pyge.Send(Abs_1_out) -> Abs_1_send_e0      event_id=0, _stream_id=1
    Add_1_Recv_e0         pyge.Recv(Abs_1_send_e0) -> Add_1_recv_e0  event_id=0, _stream_id=0
    Add_1                 (_stream_id=0)

Send reads the value the event guards (the producer's output the consumer reads; for a
control edge, the producer's first output), so the edge shows where the event comes from; its
token output feeds the Recv, whose token is left unconsumed (giving the consumer an extra
input would break its operator schema). The names carry the *logical* event index, which is
unique; the attribute `event_id` is the physical id. Serialisation (pbtxt files) stays in
pyge.dumps; `built_graph_model` wraps the nodes in a ModelProto with the "pyge" opset.
Structurally valid ONNX: onnx.checker accepts it once the `_stream_id` attributes, which
standard operator schemas do not know, are stripped.
"""
from __future__ import annotations

import onnx
from onnx import helper

from ..frontends.onnx_proto import graph_to_model, node_to_proto
from ..ir.graph import Graph
from ..plan.order import host_order
from ..plan.plan import LAUNCH, RECORD, Plan

SYNC_DOMAIN = "pyge"
SYNC_OPSET = 1


def built_graph_nodes(graph: Graph, plan: Plan, weights: bool = True) -> list[onnx.NodeProto]:
    """Operator nodes and Send/Recv nodes of the built graph, in host enqueue order."""
    by_name = {n.name: n for n in graph.nodes}
    taken = set(by_name) | set(graph.values())
    out: list[onnx.NodeProto] = []
    token: dict[int, str] = {}
    for s, i in host_order(plan):
        st = plan.streams[s][i]
        if st.kind == LAUNCH:
            node = by_name[plan.nodes[st.arg].name]
            out.append(node_to_proto(node, weights, {"_stream_id": s}))
            continue
        e = plan.events[st.arg]
        if st.kind == RECORD:
            feed = _crossing_value(plan, e)
            token[e.index] = _fresh(taken, f"{e.src}_send_e{e.index}")
            out.append(_sync_node("Send", _fresh(taken, f"{e.src}_Send_e{e.index}"), feed,
                                  token[e.index], e.event_id, s, e))
        else:
            out.append(_sync_node("Recv", _fresh(taken, f"{e.dst}_Recv_e{e.index}"),
                                  [token[e.index]], _fresh(taken, f"{e.dst}_recv_e{e.index}"),
                                  e.event_id, s, e))
    return out


def built_graph_model(graph: Graph, plan: Plan, weights: bool = True) -> onnx.ModelProto:
    """The built graph as a ModelProto (graph inputs, outputs, initializers kept)."""
    mp = graph_to_model(graph, weights=weights, nodes=built_graph_nodes(graph, plan, weights))
    if not any(o.domain == SYNC_DOMAIN for o in mp.opset_import):
        mp.opset_import.append(helper.make_opsetid(SYNC_DOMAIN, SYNC_OPSET))
    return mp


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
    return helper.make_node(op, inputs, [output], name=name, domain=SYNC_DOMAIN,
                            event_id=event_id, _stream_id=stream, _peer_stream_id=peer_stream,
                            _peer_node=peer, _reason=e.reason, _logical_event=e.index)


def _fresh(taken: set[str], base: str) -> str:
    name, i = base, 1
    while name in taken:
        name, i = f"{base}_{i}", i + 1
    taken.add(name)
    return name
