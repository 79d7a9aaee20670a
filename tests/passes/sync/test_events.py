"""Pass 11, insert_events: one Send/Recv pair per cross-stream edge of the transitive reduction."""
from __future__ import annotations

import numpy as np
import pytest
from onnx import TensorProto
from onnx import helper as h

import pyge
from pyge.errors import PlanError
from pyge.passes.sync.event_ids import assign_event_ids
from pyge.passes.sync.events import insert_events, minimal_sync_edges
from pyge.passes.verify.checks import verify_plan
from pyge.plan.build import build_plan
from pyge.plan.plan import LAUNCH, RECORD, WAIT, Step


def plan_of(edges: dict[str, list[str]], streams: dict[str, int], control=()):
    """Nodes named by `edges` (name -> data predecessors, in topological order)."""
    b = pyge.GraphBuilder("t")
    x = b.input("x", "float32", (2,))
    out = {}
    for name, preds in edges.items():
        ins = [out[p] for p in preds] or [x]
        op = {0: "Relu", 1: "Abs", 2: "Add"}.get(len(ins), "Sum")
        out[name] = b.op(op, ins, name=name)
    for before, after in control:
        b.control_edge(before, after)
    b.output(out[list(edges)[-1]])
    g = b.build()
    for n in g.nodes:
        n.stream_id = streams[n.name]
    plan = build_plan(g, 1 + max(streams.values()))
    insert_events(plan)
    assign_event_ids(plan, 1023)
    verify_plan(plan)
    return plan


def pairs(plan):
    return [(e.src, e.dst) for e in plan.events]


def test_reference_example_one_pair_around_abs():
    p = plan_of({"Abs_1": [], "Relu_1": [], "Add_1": ["Abs_1", "Relu_1"]},
                {"Abs_1": 1, "Relu_1": 0, "Add_1": 0})
    assert pairs(p) == [("Abs_1", "Add_1")]
    e = p.events[0]
    assert (e.src_stream, e.dst_stream, e.reason, e.event_id) == (1, 0, "data", 0)
    # RECORD right after the producer, WAIT right before the consumer.
    assert p.streams[1] == [Step(LAUNCH, 0), Step(RECORD, 0)]
    assert p.streams[0] == [Step(LAUNCH, 1), Step(WAIT, 0), Step(LAUNCH, 2)]


def test_single_stream_needs_no_event():
    p = plan_of({"a": [], "b": ["a"], "c": ["a", "b"]}, {"a": 0, "b": 0, "c": 0})
    assert p.events == []


def test_later_consumer_on_same_stream_is_covered_by_stream_order():
    # a -> b and a -> c with b before c on stream 1: the event to b also orders c.
    p = plan_of({"a": [], "b": ["a"], "c": ["a"]}, {"a": 0, "b": 1, "c": 1})
    assert pairs(p) == [("a", "b")]


def test_only_latest_producer_per_stream_is_synchronised():
    # a, b on stream 0 (a before b); c on stream 1 reads both: one event, from b.
    p = plan_of({"a": [], "b": [], "c": ["a", "b"]}, {"a": 0, "b": 0, "c": 1})
    assert pairs(p) == [("b", "c")]


def test_transitive_path_through_a_third_stream():
    # a(s0) -> b(s1) -> c(s2) and a -> c: the direct a -> c event is redundant.
    p = plan_of({"a": [], "b": ["a"], "c": ["a", "b"]}, {"a": 0, "b": 1, "c": 2})
    assert pairs(p) == [("a", "b"), ("b", "c")]


def test_fork_join_needs_two_events():
    p = plan_of({"a": [], "b": ["a"], "c": ["a"], "d": ["b", "c"]},
                {"a": 0, "b": 0, "c": 1, "d": 0})
    assert pairs(p) == [("a", "c"), ("c", "d")]


def test_control_edge_across_streams_gets_a_control_event():
    p = plan_of({"a": [], "b": []}, {"a": 0, "b": 1}, control=[("a", "b")])
    assert pairs(p) == [("a", "b")]
    assert p.events[0].reason == "control"


def test_data_event_on_a_node_pair_with_both_edges_says_data():
    p = plan_of({"a": [], "b": ["a"]}, {"a": 0, "b": 1}, control=[("a", "b")])
    assert [(e.src, e.dst, e.reason) for e in p.events] == [("a", "b", "data")]


def test_subgraph_reads_are_dependencies():
    # The If on stream 0 reads `a` (stream 1) only inside its branches.
    f = TensorProto.FLOAT
    then_g = h.make_graph([h.make_node("Add", ["a", "x"], ["t"])], "then", [],
                          [h.make_tensor_value_info("t", f, [2])])
    else_g = h.make_graph([h.make_node("Sub", ["a", "x"], ["e"])], "else", [],
                          [h.make_tensor_value_info("e", f, [2])])
    nodes = [h.make_node("Abs", ["x"], ["a"], name="abs"),
             h.make_node("If", ["c"], ["out"], name="if", then_branch=then_g, else_branch=else_g)]
    gp = h.make_graph(nodes, "g", [h.make_tensor_value_info("c", TensorProto.BOOL, []),
                                   h.make_tensor_value_info("x", f, [2])],
                      [h.make_tensor_value_info("out", f, [2])])
    g = pyge.load_onnx(h.make_model(gp, opset_imports=[h.make_opsetid("", 17)]))
    for n in g.nodes:
        n.stream_id = 1 if n.name == "abs" else 0
    plan = build_plan(g, 2)
    insert_events(plan)
    assert pairs(plan) == [("abs", "if")]


def test_events_are_minimal_edges_in_consumer_order():
    p = plan_of({"a": [], "b": [], "c": [], "d": ["a", "b", "c"]},
                {"a": 1, "b": 2, "c": 3, "d": 0})
    assert pairs(p) == [("a", "d"), ("b", "d"), ("c", "d")]
    assert [e.index for e in p.events] == [0, 1, 2]
    assert [(s, d) for s, d, _ in minimal_sync_edges(p)] == [(0, 3), (1, 3), (2, 3)]


def test_runs_once_only():
    p = plan_of({"a": [], "b": ["a"]}, {"a": 0, "b": 1})
    with pytest.raises(PlanError, match="already has events"):
        insert_events(p)


def test_stream_order_against_data_flow_is_reported():
    p = plan_of({"a": [], "b": ["a"]}, {"a": 0, "b": 0})
    p.streams[0].reverse()
    p.events.clear()
    with pytest.raises(PlanError, match="contradicts"):
        insert_events(p)


def test_node_stream_must_match_its_launch():
    p = plan_of({"a": [], "b": ["a"]}, {"a": 0, "b": 0})
    p.nodes[1].stream = 3
    with pytest.raises(PlanError, match="launched on stream 0"):
        minimal_sync_edges(p)


def test_compiled_model_exposes_events_and_streams():
    b = pyge.GraphBuilder("demo")
    x = b.input("input", "float32", (2, 3))
    b.output(b.op("Add", [b.op("Abs", [x], name="Abs_1"), b.op("Relu", [x], name="Relu_1")],
                  name="Add_1"), "output")
    m = pyge.compile(b.build())
    m.verify()
    assert m.streams == [[n.name for n in m.plan.nodes]]
    assert m.events == []
    xs = np.arange(6, dtype=np.float32).reshape(2, 3) - 3
    np.testing.assert_array_equal(m.run({"input": xs})["output"], np.abs(xs) + np.maximum(xs, 0))
