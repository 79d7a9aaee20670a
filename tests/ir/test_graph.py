"""IR: use lists kept by setters, topological order, cycles, lookup, clone independence."""
from __future__ import annotations

import numpy as np
import pytest

import pyge
from pyge.ir.clone import clone_graph
from pyge.ir.graph import Graph, Node, Value


def _diamond():
    b = pyge.GraphBuilder("diamond")
    x = b.input("x", "float32", (2, 3))
    a = b.op("Abs", [x], name="A")
    r = b.op("Relu", [x], name="R")
    b.output(b.op("Add", [a, r], name="J"))
    return b.build()


def test_uses_follow_setters():
    g = _diamond()
    x = g.inputs[0]
    assert sorted(n.name for n, _ in x.uses) == ["A", "R"]
    j = g.node("J")
    j.set_input(1, x)
    assert sorted(n.name for n, _ in x.uses) == ["A", "J", "R"]
    assert g.node("R").outputs[0].uses == []
    j.replace_input_with(x, g.node("R").outputs[0])
    assert (j, 1) in g.node("R").outputs[0].uses and (j, 1) not in x.uses


def test_predecessors_successors_and_order():
    g = _diamond()
    assert {p.name for p in g.node("J").predecessors} == {"A", "R"}
    assert {s.name for s in g.node("A").successors} == {"J"}
    assert [n.name for n in g.topological_sort()] == ["A", "R", "J"]


def test_cycle_is_reported_with_a_node_name():
    g = Graph("cyc")
    x = g.add_input(Value("x", "float32", (1,)))
    a, b = Node("Relu", "a"), Node("Relu", "b")
    va, vb = Value("va"), Value("vb")
    a.add_output(va)
    b.add_output(vb)
    a.append_input(vb)
    b.append_input(va)
    g.add_node(a)
    g.add_node(b)
    g.outputs.append(va)
    del x
    with pytest.raises(pyge.GraphCycleError, match="cycle through node 'a'"):
        g.topological_sort()
    with pytest.raises(pyge.GraphCycleError):
        pyge.compile(g)


def test_lookup_by_name():
    g = _diamond()
    assert g.node("A").op_type == "Abs"
    assert g.value("x") is g.inputs[0]
    with pytest.raises(KeyError, match="no node named 'nope'"):
        g.node("nope")


def test_remove_node_refuses_used_outputs():
    g = _diamond()
    with pytest.raises(pyge.GraphError, match="still used"):
        g.remove_node(g.node("A"))


def test_clone_is_independent_and_shares_weights():
    b = pyge.GraphBuilder("w")
    x = b.input("x", "float32", (2,))
    w = b.initializer("w", np.ones(2, np.float32))
    b.output(b.op("Add", [x, w], name="add"))
    g = b.build()
    h = clone_graph(g)
    h.node("add").stream_id = 5
    assert g.node("add").stream_id == -1
    assert h.node("add").inputs[0] is h.inputs[0]
    assert h.initializers["w"].const is g.initializers["w"].const


def test_clone_deep_chain_does_not_recurse():
    b = pyge.GraphBuilder("chain")
    v = b.input("x", "float32", (1,))
    for i in range(5000):
        v = b.op("Relu", [v], name=f"r{i}")
    b.output(v)
    h = clone_graph(b.build())
    assert len(h) == 5000


def test_absorb_moves_the_output_value_and_keeps_uses():
    g = _diamond()
    a, j = g.node("A"), g.node("J")
    out = j.outputs[0]
    j.set_inputs([])                          # J reads nothing now; A's output is unused
    g.absorb(a, j)
    assert a.outputs == (out,) and out.producer is a and out.index == 0
    assert g.find_node("J") is None and out in g.outputs


def test_fold_to_constants_keeps_values_and_uses():
    g = _diamond()
    a = g.node("A")
    (out,) = a.outputs
    readers = [n.name for n, _ in out.uses]
    arr = np.arange(4, dtype=np.float32)
    g.fold_to_constants(a, [arr])
    assert g.find_node("A") is None and out.producer is None and out.index == -1
    assert g.initializers[out.name] is out and out.const is not None and out.shape == (4,)
    assert sorted(n.name for n, _ in out.uses) == sorted(readers)
    with pytest.raises(pyge.GraphError, match="'R': 2 folded values for 1 outputs"):
        g.fold_to_constants(g.node("R"), [arr, arr])


def test_fold_to_constants_keeps_0d_values_0d():
    # np.ascontiguousarray makes a 0-d array 1-d: a folded scalar became shape (1,).
    g = _diamond()
    (out,) = g.node("A").outputs
    g.fold_to_constants(g.node("A"), [np.array(2.5, np.float32)])
    assert out.shape == () and out.const.shape == ()
