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
    with pytest.raises(pyge.GraphCycleError, match="cycle through 2 node.*'a' .*'b'") as info:
        g.topological_sort()
    assert sorted(info.value.nodes) == ["a", "b"]
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


# -- the editing methods, safe for code outside pyge (custom graph passes) ---------------

def test_names_stay_unique():
    g = _diamond()
    dup = Node("Neg", "A")
    dup.add_output(Value("fresh"))
    dup.append_input(g.inputs[0])
    with pytest.raises(pyge.GraphError, match="already has a node named 'A' \\(Abs\\); "
                                              "graph.unique_node_name"):
        g.add_node(dup)
    clash = Node("Neg", "N")
    clash.append_input(g.inputs[0])
    clash.add_output(Value("A_out"))
    with pytest.raises(pyge.GraphError, match="already has a value named 'A_out'"):
        g.add_node(clash)
    with pytest.raises(pyge.GraphError, match="already has a value named 'x'"):
        g.add_initializer("x", np.zeros(1, np.float32))
    with pytest.raises(pyge.GraphError, match="already has a value named 'J_out'"):
        g.node("J").add_output(Value("J_out"))
    assert len(g) == 3 and len(g.node("J").outputs) == 1 and "x" not in g.initializers
    assert g.unique_node_name("A") == "A_1" and g.unique_node_name("B") == "B"
    assert g.unique_value_name("A_out") == "A_out_1"


def test_a_removed_or_renamed_name_is_free_again():
    g = _diamond()
    j = g.node("J")
    g.outputs.clear()
    g.remove_node(j)
    again = Node("Sub", "J")
    again.set_inputs(j.inputs or [g.node("A").outputs[0], g.node("R").outputs[0]])
    again.add_output(Value("J_out"))
    g.add_node(again)
    g.node("A").name = "A_renamed"                 # plain assignment: the index checks, not trusts
    assert g.find_node("A") is None and g.find_node("A_renamed").op_type == "Abs"
    assert g.unique_node_name("A") == "A"


def test_a_node_joins_one_graph_only_and_its_outputs_join_with_it():
    g, h = _diamond(), _diamond()
    n = Node("Neg", "neg")
    n.append_input(g.inputs[0])
    y = n.add_output(Value("neg_out"))
    g.add_node(n)
    assert y.graph is g and g.find_node("neg") is n
    with pytest.raises(pyge.GraphError, match="'neg' already belongs to graph 'diamond'"):
        h.add_node(n)
    z = n.add_output(Value("neg_extra"))
    assert z.graph is g and z.producer is n and z.index == 1
    with pytest.raises(pyge.GraphError, match="is not a node of graph"):
        h.remove_node(n)
    with pytest.raises(pyge.GraphError, match="expects a pyge.Node"):
        g.add_node("neg")


def test_setters_refuse_what_is_not_a_value_and_indices_out_of_range():
    g = _diamond()
    j = g.node("J")
    with pytest.raises(pyge.GraphError, match="node 'J' \\(Add\\): an input must be a pyge.Value"):
        j.set_input(0, "x")
    with pytest.raises(pyge.GraphError, match="has 2 input\\(s\\); there is no input 2"):
        j.set_input(2, g.inputs[0])
    with pytest.raises(pyge.GraphError, match="an input must be"):
        j.set_inputs([g.inputs[0], 3])
    assert [v.name for v in j.inputs] == ["A_out", "R_out"]      # unchanged by the refusals
    j.set_input(-1, g.inputs[0])                                   # negative: from the end
    assert (j, 1) in g.inputs[0].uses and g.node("R").outputs[0].uses == []
    assert j.replace_input_with(g.inputs[0], g.node("R").outputs[0]) == 1


def test_replace_value_rewires_readers_and_keeps_output_names():
    g = _diamond()
    j = g.node("J")
    neg = Node("Neg", "neg")
    neg.append_input(j.outputs[0])
    neg.add_output(Value("neg_out"))
    g.add_node(neg)
    old = j.outputs[0]
    assert g.replace_value(old, neg.outputs[0]) == 0          # no reader, one graph output
    assert g.outputs == [neg.outputs[0]] and neg.outputs[0].name == "J_out" and old.name == "neg_out"
    a_out = g.node("A").outputs[0]
    assert g.replace_value(a_out, g.inputs[0]) == 1           # J now reads x twice
    assert [v.name for v in j.inputs] == ["x", "R_out"] and a_out.uses == []
    with pytest.raises(pyge.GraphError, match="graph output 'J_out' must keep its name"):
        g.replace_value(neg.outputs[0], g.inputs[0])


def test_set_attr_makes_the_node_its_subgraphs_parent():
    g = _diamond()
    body = Graph("body")
    node = g.node("J")
    node.set_attr("then_branch", body)
    node.set_attr("branches", [Graph("b1"), Graph("b2")])
    assert body.parent is node and [s.parent for s in node.attrs["branches"]] == [node, node]
    g.set_attr("ge.autoMultistreamParallelMode", "LoadBalance:2")
    assert g.get_attr("ge.autoMultistreamParallelMode") == "LoadBalance:2"
    assert clone_graph(g).attrs == {"ge.autoMultistreamParallelMode": "LoadBalance:2"}
    with pytest.raises(pyge.GraphError, match="attribute names are non-empty strings"):
        g.set_attr("", 1)


def test_a_sealed_graph_refuses_every_edit():
    g = _diamond()
    g.seal("custom graph pass 'P'")
    a = g.node("A")
    edits = [lambda: g.add_input(Value("y")), lambda: g.add_initializer("c", np.zeros(1)),
             lambda: g.remove_node(g.node("J")), lambda: a.set_input(0, None),
             lambda: a.append_input(None), lambda: a.set_inputs([]),
             lambda: a.add_output(Value("more")), lambda: a.set_attr("alpha", 1.0),
             lambda: g.set_attr("k", "v"), lambda: g.replace_value(a.outputs[0], g.inputs[0]),
             lambda: g.set_node_order(g.nodes[::-1])]
    for edit in edits:
        with pytest.raises(pyge.GraphError, match="can no longer be changed: it was handed to "
                                                  "custom graph pass 'P', which has returned"):
            edit()
    assert pyge.format_graph(g) == pyge.format_graph(_diamond()) and g.attrs == {}
    assert clone_graph(g)._sealed is None


def test_find_cycle_names_the_loop():
    from pyge.ir import describe_cycle, find_cycle
    g = _diamond()
    assert find_cycle(g) == []
    a, r, j = g.node("A"), g.node("R"), g.node("J")
    a.set_input(0, j.outputs[0])                   # J -> A -> J; R is outside the loop
    cycle = find_cycle(g)
    assert {n.name for n in cycle} == {"A", "J"}
    assert describe_cycle(cycle) in ("'A' (Abs) -> 'J' (Add) -> 'A'", "'J' (Add) -> 'A' (Abs) -> 'J'")
    r.control_preds.append(j)                      # control edges count too
    j.set_input(1, g.inputs[0])
    a.set_input(0, g.inputs[0])
    j.control_preds.append(r)
    assert describe_cycle(find_cycle(g)) in ("'R' (Relu) -> 'J' (Add) -> 'R'", "'J' (Add) -> 'R' (Relu) -> 'J'")


def test_an_onnx_model_with_two_nodes_of_one_name_loads_with_unique_names():
    from onnx import TensorProto, helper
    nodes = [helper.make_node("Relu", ["x"], ["a"], name="dup"), helper.make_node("Neg", ["a"], ["y"], name="dup")]
    g = helper.make_graph(nodes, "g", [helper.make_tensor_value_info("x", TensorProto.FLOAT, [2])],
                          [helper.make_tensor_value_info("y", TensorProto.FLOAT, [2])])
    graph = pyge.load_onnx(helper.make_model(g, opset_imports=[helper.make_opsetid("", 17)]))
    assert [n.name for n in graph.nodes] == ["dup", "dup_1"]
    out = pyge.compile(graph).run({"x": np.array([1.0, -2.0], np.float32)})["y"]
    np.testing.assert_array_equal(out, [-1.0, 0.0])


def _add_relu(g: Graph, x: Value, name: str, out: str) -> Node:
    n = Node("Relu", name)
    n.append_input(x)
    n.add_output(Value(out))
    return g.add_node(n)


def test_remove_node_many_in_random_order_keeps_the_order_of_the_rest():
    """remove_node finds a node from position hints (no scan of the whole list); interleaved
    with add_node and sort, what stays must be exactly what list.remove would leave."""
    import random
    rng = random.Random(7)
    g = Graph("many")
    x = Value("x", "float32", (1,))
    g.add_input(x)
    expected = []
    for i in range(3000):
        expected.append(_add_relu(g, x, f"n{i}", f"y{i}"))
    for step in range(2500):
        victim = expected.pop(rng.randrange(len(expected)))
        g.remove_node(victim)
        if step % 97 == 0:
            expected.append(_add_relu(g, x, f"m{step}", f"z{step}"))
        if step % 701 == 0:
            g.sort()
            assert g.nodes == expected
    assert g.nodes == expected


def test_removals_in_batches_are_applied_when_the_list_is_next_read():
    """remove_node defers taking nodes out of the list until it is read next (one walk for
    many): batches of every size, read back through each way in, give what list.remove
    would leave, in the same list object a caller may hold; a removed node may come back."""
    import random
    rng = random.Random(11)
    g = Graph("batches")
    x = Value("x", "float32", (1,))
    g.add_input(x)
    expected = [_add_relu(g, x, f"n{i}", f"y{i}") for i in range(2000)]
    held = g._nodes
    for step in range(40):
        for _ in range(rng.choice([1, 3, 64, 65, 200])):
            if expected:
                g.remove_node(expected.pop(rng.randrange(len(expected))))
        way = step % 4
        if way == 0:
            assert len(g) == len(expected)
        elif way == 1:
            assert g.nodes == expected
        elif way == 2:
            assert g.topological_sort() == expected
        else:
            back = _add_relu(g, x, f"m{step}", f"z{step}")
            expected.append(back)
            g.remove_node(back)
            expected.pop()
            g.add_node(back)              # the same node again, after its pending removal
            expected.append(back)
        assert g._nodes is held and held == expected


def test_absorb_keeps_the_name_index_right_without_building_it():
    g = _diamond()
    a, j = g.node("A"), g.node("J")
    out = j.outputs[0]
    j.set_inputs([])
    g._names = None
    g.absorb(a, j)
    assert g._names is None                   # not built for the fusion
    assert g.unique_value_name(out.name) != out.name and g._index().value(out.name) is out
    h = _diamond()
    h._index()                                # built before: kept up to date
    a, j = h.node("A"), h.node("J")
    out = j.outputs[0]
    j.set_inputs([])
    h.absorb(a, j)
    assert h._names.value(out.name) is out and out.producer is a


def test_remove_node_after_the_list_was_edited_by_hand():
    """A node list reordered without set_node_order: remove_node still removes the node."""
    g = Graph("hand")
    x = Value("x", "float32", (1,))
    g.add_input(x)
    ns = [_add_relu(g, x, f"n{i}", f"y{i}") for i in range(5)]
    g.remove_node(ns[0])          # builds the hints
    g._nodes.reverse()            # not through the editing methods
    g.remove_node(ns[1])
    assert g.nodes == [ns[4], ns[3], ns[2]]


def test_clone_links_directly_as_the_checked_methods_would():
    """clone_graph links a valid graph without the editing methods' checks: the copy has the
    same names, order, use lists and producers as one made through them."""
    b = pyge.GraphBuilder("g")
    x = b.input("x", "float32", (2,))
    y = b.op("Relu", [x], name="r")
    z = b.op("Add", [y, y], name="a")
    b.output(z)
    g = b.build()
    h = clone_graph(g)
    assert [n.name for n in h.nodes] == ["r", "a"]
    r, a = h.nodes
    assert r.graph is h and a.graph is h and h.inputs[0].graph is h
    assert [(u.name, k) for u, k in r.outputs[0].uses] == [("a", 0), ("a", 1)]
    assert a.outputs[0].producer is a and a.outputs[0].index == 0 and h.outputs == [a.outputs[0]]
    assert h.find_node("a") is a and h.unique_value_name(r.outputs[0].name) != r.outputs[0].name


def test_clone_of_a_graph_with_a_taken_name_still_refuses_it():
    b = pyge.GraphBuilder("g")
    x = b.input("x", "float32", (2,))
    b.op("Relu", [b.op("Abs", [x], name="A")], name="B")
    g = b.build()
    g.nodes[1].name = "A"                  # plain assignment: not checked
    with pytest.raises(pyge.GraphError, match="already has a node named 'A'"):
        clone_graph(g)
