"""The built graph as GE dumps it: operator nodes plus the Send/Recv nodes of the plan's events.

A logical event k from producer P (stream a) to consumer C (stream b) becomes
    Send  (domain pyge, on stream a) right after P, input: the value C reads from P
    Recv  (domain pyge, on stream b) right before C, input: the Send's token (its own token
          output is left unconsumed: an extra input would break C's operator schema)
both with `event_id` (the physical id executors use), `stream_id`, and GE's
`send_event_id_list` / `recv_event_id_list` (ge_sync_attrs). Nodes are written in one
merged order of the streams' steps, so the file is topologically sorted and every Send comes
before its Recv; Netron draws P -> Send -> Recv.

When `pyge.dumps.built_graph.built_graph_nodes` (the events pass's own view) is importable, its
order and its Send/Recv nodes are used, with our annotated operator protos (engine, subgraphs)
put in place of its operator nodes; the materialisation below is the fallback.
"""
from __future__ import annotations

import logging

import onnx
from onnx import helper

from ..ir.graph import Graph
from ..errors import PlanError
from ..plan.order import host_order
from ..plan.plan import LAUNCH, RECORD, WAIT, Event, Plan
from .convert import ENGINE_ATTR, has_attr, set_attr, stream_attrs

log = logging.getLogger(__name__)

EVENT_DOMAIN = "pyge"
EVENT_ENGINE = "rts"   # GE runs Send/Recv on its runtime-service engine


def merged_steps(plan: Plan) -> list[tuple[int, object]]:
    """(stream, step) in the host order executors issue in (plan.order.host_order).

    Falls back to stream after stream if the plan deadlocks (verify() reports that as an
    error; a dump should still show the plan).
    """
    try:
        return [(s, plan.streams[s][i]) for s, i in host_order(plan)]
    except PlanError:
        log.warning("plan %s deadlocks; dumping its streams one after another", plan.graph_name)
        return [(s, st) for s, steps in enumerate(plan.streams) for st in steps]


def _crossing_value(plan: Plan, e: Event) -> str | None:
    """Name of the value the event orders (the one C reads from P), else P's first output."""
    if e.src_node < 0:
        return None
    src = plan.nodes[e.src_node]
    reads = set(plan.nodes[e.dst_node].inputs) if e.dst_node >= 0 else set()
    for vi in src.outputs:
        if vi in reads:
            return plan.values[vi].name
    return plan.values[src.outputs[0]].name if src.outputs else None


def _unique(base: str, taken: set[str]) -> str:
    name, i = base, 1
    while name in taken:
        name, i = f"{base}_{i}", i + 1
    taken.add(name)
    return name


def event_nodes(plan: Plan, taken: set[str]) -> dict[int, tuple[onnx.NodeProto, onnx.NodeProto]]:
    """Per logical event index, its (Send, Recv) node protos."""
    out = {}
    for e in plan.events:
        send_name = _unique(f"{e.src}_Send_e{e.index}", taken)
        recv_name = _unique(f"{e.dst}_Recv_e{e.index}", taken)
        token = _unique(f"{e.src}_send_e{e.index}", taken)
        done = _unique(f"{e.dst}_recv_e{e.index}", taken)
        data = _crossing_value(plan, e)
        send = helper.make_node("Send", [data] if data else [], [token], name=send_name,
                                domain=EVENT_DOMAIN)
        recv = helper.make_node("Recv", [token], [done], name=recv_name, domain=EVENT_DOMAIN)
        for node, stream, peer_stream, peer in ((send, e.src_stream, e.dst_stream, e.dst),
                                                (recv, e.dst_stream, e.src_stream, e.src)):
            set_attr(node, "event_id", int(e.event_id))
            stream_attrs(node, stream, EVENT_ENGINE)
            set_attr(node, "_peer_stream_id", int(peer_stream))
            set_attr(node, "_peer_node", peer)
            set_attr(node, "_reason", e.reason)
        out[e.index] = (send, recv)
    return out


def own_built_nodes(graph: Graph, plan: Plan, op_protos: dict[str, onnx.NodeProto]) -> list[onnx.NodeProto]:
    """Operators and Send/Recv nodes in merged step order (our own materialisation)."""
    taken = set(op_protos) | set(graph.values())
    events = event_nodes(plan, taken)
    nodes: list[onnx.NodeProto] = []
    placed: set[str] = set()
    for s, st in merged_steps(plan):
        if st.kind == LAUNCH:
            pn = plan.nodes[st.arg]
            proto = op_protos.get(pn.name)
            if proto is not None:
                stream_attrs(proto, pn.stream, pn.engine)
                nodes.append(proto)
                placed.add(pn.name)
        elif st.kind == RECORD:
            nodes.append(events[st.arg][0])
        elif st.kind == WAIT:
            nodes.append(events[st.arg][1])
    # Nodes the plan does not launch (none expected) still belong in the picture.
    nodes.extend(p for name, p in op_protos.items() if name not in placed)
    return nodes


def _theirs():
    try:
        from ..dumps.built_graph import built_graph_nodes
    except ImportError:
        return None
    return built_graph_nodes


def built_node_list(graph: Graph, plan: Plan, gp: onnx.GraphProto) -> list[onnx.NodeProto]:
    """The built graph's node list; `gp` is the annotated proto of `graph` (operators only)."""
    op_protos = {p.name: p for p in gp.node}
    theirs = _theirs()
    if theirs is None:
        return own_built_nodes(graph, plan, op_protos)
    given = list(theirs(graph, plan))
    names = {p.name for p in given}
    if not all(pn.name in names for pn in plan.nodes):
        # Send/Recv nodes only: operators first, then theirs.
        given = [op_protos[pn.name] for pn in plan.nodes if pn.name in op_protos] + \
                [p for p in given if p.name not in op_protos]
    by_name = {pn.name: pn for pn in plan.nodes}
    nodes = []
    for p in given:
        pn = by_name.get(p.name)
        if pn is not None:
            # Our proto of the operator: annotated in subgraphs too, engine included.
            p = op_protos.get(p.name, p)
            stream_attrs(p, pn.stream, pn.engine)
        elif not has_attr(p, ENGINE_ATTR):
            set_attr(p, ENGINE_ATTR, EVENT_ENGINE)
        nodes.append(p)
    return nodes


def ge_sync_attrs(gp: onnx.GraphProto) -> None:
    """GE's spelling on every node of the built graph: the stream as `stream_id` (a node the
    plan's own materialisation wrote as `_stream_id` is renamed), and each Send (Recv) with
    its event ids as `send_event_id_list` (`recv_event_id_list`), as GE dumps them."""
    from onnx import helper as _h
    for p in gp.node:
        for i, a in enumerate(p.attribute):
            if a.name == "_stream_id":
                value = _h.get_attribute_value(a)
                del p.attribute[i]
                set_attr(p, "stream_id", int(value))
                break
        if p.domain == EVENT_DOMAIN and p.op_type in ("Send", "Recv"):
            ids = [int(_h.get_attribute_value(a)) for a in p.attribute if a.name == "event_id"]
            set_attr(p, "send_event_id_list" if p.op_type == "Send" else "recv_event_id_list", ids)


def add_event_opset(mp: onnx.ModelProto) -> None:
    """Declare the "pyge" domain of Send/Recv so that readers know the ops are custom."""
    if any(n.domain == EVENT_DOMAIN for n in mp.graph.node) and \
            not any(o.domain == EVENT_DOMAIN for o in mp.opset_import):
        mp.opset_import.append(helper.make_opsetid(EVENT_DOMAIN, 1))


def replace_nodes(gp: onnx.GraphProto, nodes: list[onnx.NodeProto]) -> None:
    copies = [onnx.NodeProto() for _ in nodes]
    for c, n in zip(copies, nodes):
        c.CopyFrom(n)
    del gp.node[:]
    gp.node.extend(copies)
