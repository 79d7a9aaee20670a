"""The built graph (dumps/built_graph.py): the plan's Send/Recv events as ONNX nodes."""
from __future__ import annotations

import pyge
from pyge.passes.sync.event_ids import assign_event_ids
from pyge.passes.sync.events import insert_events
from pyge.plan.build import build_plan


def _built(streams):
    from pyge.passes.graph.infer_types import infer_types
    from pyge.dumps.built_graph import built_graph_model
    b = pyge.GraphBuilder("demo")
    x = b.input("input", "float32", (2, 3))
    b.output(b.op("Add", [b.op("Abs", [x], name="Abs_1"), b.op("Relu", [x], name="Relu_1")],
                  name="Add_1"), "output")
    g = b.build()
    infer_types(g)                    # as pyge.compile does: typed outputs for the checker
    for n in g.nodes:
        n.stream_id = streams.get(n.name, 0)
    plan = build_plan(g, 2)
    insert_events(plan)
    assign_event_ids(plan, 1023)
    return g, plan, built_graph_model(g, plan)


def test_built_graph_has_send_recv_nodes_in_order():
    from onnx import helper as oh
    _, plan, mp = _built({"Abs_1": 1})
    ops = [(n.op_type, n.domain) for n in mp.graph.node]
    # Host order, level by level: Abs and Relu (level 0), Send, then Recv before Add (level 1).
    assert ops == [("Abs", ""), ("Relu", ""), ("Send", "pyge"), ("Recv", "pyge"), ("Add", ""),
                   ("Identity", "")]
    attrs = [{a.name: oh.get_attribute_value(a) for a in n.attribute} for n in mp.graph.node]
    assert [a["_stream_id"] for a in attrs] == [1, 0, 1, 0, 0, 0]
    send, recv = mp.graph.node[2], mp.graph.node[3]
    assert attrs[2]["event_id"] == attrs[3]["event_id"] == plan.events[0].event_id
    assert list(send.input) == ["Abs_1_out"] and list(recv.input) == list(send.output)
    assert list(send.output) == ["Abs_1_send_e0"] and list(recv.output) == ["Add_1_recv_e0"]


def test_built_graph_is_structurally_valid_onnx():
    import onnx
    _, _, mp = _built({"Abs_1": 1, "Relu_1": 1})
    assert any(o.domain == "pyge" for o in mp.opset_import)
    onnx.load_from_string(mp.SerializeToString())
    # Standard schemas do not know `_stream_id`; without it the checker accepts the graph.
    for n in mp.graph.node:
        if n.domain != "pyge":
            keep = [a for a in n.attribute if a.name != "_stream_id"]
            del n.attribute[:]
            n.attribute.extend(keep)
    onnx.checker.check_model(mp, full_check=True)


def test_dump_and_model_share_the_send_recv_nodes():
    """The dump path (operator protos supplied) and built_graph_model make the same
    Send/Recv nodes: one materialisation, on GE's rts engine."""
    from onnx import helper as oh
    from pyge.dumps.built_graph import built_graph_nodes
    from pyge.frontends.onnx_proto import node_to_proto
    g, plan, mp = _built({"Abs_1": 1})
    protos = {n.name: node_to_proto(n) for n in g.nodes}
    dumped = built_graph_nodes(g, plan, op_protos=protos)
    sync = [n for n in mp.graph.node if n.domain == "pyge"]
    assert [n.SerializeToString() for n in dumped if n.domain == "pyge"] == \
        [n.SerializeToString() for n in sync]
    assert all(oh.get_attribute_value(a) == b"rts" for n in sync for a in n.attribute
               if a.name == "_engine")
    ops = [n for n in dumped if n.domain != "pyge"]
    assert [n.name for n in ops] == ["Abs_1", "Relu_1", "Add_1", ops[-1].name]
    assert {a.name for a in ops[0].attribute} >= {"stream_id", "_engine"}
