"""The "still sorted" witness of ir/order.py: a graph found in order is not walked again
until its version moves, and every public way to change an edge moves it."""
from __future__ import annotations

import pytest

import pyge
from pyge.ir import order
from pyge.ir.graph import Graph, Node, Value


def _two() -> tuple[Graph, Node, Node]:
    """a and b both read the input, listed a, b; checked once, so the witness is set."""
    g = Graph("t")
    x = g.add_input(Value("x", "float32", (1,)))
    a, b = Node("Relu", "a"), Node("Neg", "b")
    for n in (a, b):
        n.add_output(Value(f"{n.name}_out"))
        n.append_input(x)
        g.add_node(n)
    assert g.topological_sort() == [a, b]
    return g, a, b


def _names(g: Graph) -> list[str]:
    return [n.name for n in g.topological_sort()]


def test_an_unchanged_graph_is_not_walked_again(monkeypatch):
    g, a, b = _two()
    calls = []
    real = order._in_order
    monkeypatch.setattr(order, "_in_order", lambda graph: calls.append(graph) or real(graph))
    assert g.topological_sort() == [a, b] and not calls
    b.stream_id, a.engine = 3, "compute"          # not edges: the witness stands
    assert g.topological_sort() == [a, b] and not calls
    g.invalidate()                               # after an edit by hand: walked again
    assert g.topological_sort() == [a, b] and len(calls) == 1


CONTROL_EDITS = {
    "append": lambda a, b: a.control_preds.append(b),
    "extend": lambda a, b: a.control_preds.extend([b]),
    "insert": lambda a, b: a.control_preds.insert(0, b),
    "iadd": lambda a, b: a.control_preds.__iadd__([b]),
    "setitem": lambda a, b: a.control_preds.__setitem__(slice(None), [b]),
    "assign": lambda a, b: setattr(a, "control_preds", [b]),
}


@pytest.mark.parametrize("how", sorted(CONTROL_EDITS))
def test_a_control_edge_added_by_hand_is_seen(how):
    g, a, b = _two()
    CONTROL_EDITS[how](a, b)            # a now waits for b, which is listed after it
    assert _names(g) == ["b", "a"]


def test_a_control_edge_kept_from_before_the_check_is_seen():
    g, a, b = _two()
    edges = a.control_preds              # the list, asked for before the check
    assert g.topological_sort() == [a, b]
    edges.append(b)
    assert _names(g) == ["b", "a"]


def test_control_edges_removed_by_hand_are_seen():
    g, a, b = _two()
    b.control_preds.append(a)
    g.set_node_order([b, a])
    assert _names(g) == ["a", "b"]
    for remove in (lambda c: c.remove(a), lambda c: c.pop(), lambda c: c.clear(),
                   lambda c: c.__delitem__(0)):
        b.control_preds = [a]
        g.set_node_order([b, a])
        assert _names(g) == ["a", "b"]
        remove(b.control_preds)
        assert _names(g) == ["b", "a"]   # nothing orders them now: the list order stands


INPUT_EDITS = {
    "set_input": lambda g, a, b: a.set_input(0, b.outputs[0]),
    "set_inputs": lambda g, a, b: a.set_inputs([b.outputs[0]]),
    "append_input": lambda g, a, b: a.append_input(b.outputs[0]),
    "replace_input_with": lambda g, a, b: a.replace_input_with(g.inputs[0], b.outputs[0]),
}


@pytest.mark.parametrize("how", sorted(INPUT_EDITS))
def test_a_data_edge_added_is_seen(how):
    g, a, b = _two()
    INPUT_EDITS[how](g, a, b)
    assert _names(g) == ["b", "a"]


def test_replace_value_is_seen():
    g, a, b = _two()
    c = Node("Abs", "c")
    c.add_output(Value("c_out"))
    c.append_input(a.outputs[0])
    g.add_node(c)
    assert _names(g) == ["a", "b", "c"]
    g.replace_value(a.outputs[0], b.outputs[0])    # c reads b now; still in order
    a.set_input(0, c.outputs[0])                   # and a reads c: a goes last
    assert _names(g) == ["b", "c", "a"]


def test_add_node_of_a_producer_listed_late_is_seen():
    g, a, b = _two()
    p = Node("Abs", "p")
    p.add_output(Value("p_out"))
    p.append_input(g.inputs[0])
    a.append_input(p.outputs[0])           # p is in no graph yet: nothing to order
    assert _names(g) == ["a", "b"]
    g.add_node(p)                          # listed after its reader a
    assert _names(g) == ["b", "p", "a"]


def test_add_output_making_a_late_producer_is_seen():
    g, a, b = _two()
    v = Value("v")
    a.append_input(v)                      # v has no producer yet
    assert _names(g) == ["a", "b"]
    b.add_output(v)                        # b, listed after a, produces it now
    assert _names(g) == ["b", "a"]


def test_absorb_into_a_late_node_is_seen():
    g, a, b = _two()
    r = Node("Abs", "r")
    r.add_output(Value("r_out"))
    r.append_input(a.outputs[0])
    g.add_node(r)
    keep = Node("Neg", "keep")
    keep.add_output(Value("keep_out"))
    keep.append_input(g.inputs[0])
    g.add_node(keep)
    assert _names(g) == ["a", "b", "r", "keep"]
    g.absorb(keep, a)                      # keep, listed after r, now produces what r reads
    assert _names(g) == ["b", "keep", "r"]


def test_set_node_order_is_seen():
    g, a, b = _two()
    b.set_input(0, a.outputs[0])
    assert _names(g) == ["a", "b"]
    g.set_node_order([b, a])
    assert _names(g) == ["a", "b"]


def _if_node(g: Graph) -> tuple[Node, Graph, Node]:
    body = Graph("body")
    inner = Node("Identity", "inner")
    inner.append_input(g.inputs[0])
    inner.add_output(Value("w"))
    body.add_node(inner)
    body.outputs.append(inner.outputs[0])
    cond = Node("If", "if")
    cond.add_output(Value("y"))
    cond.append_input(g.inputs[0])
    cond.set_attr("then_branch", body)
    cond.set_attr("else_branch", body)
    return cond, body, inner


def test_an_edit_inside_a_subgraph_moves_its_ancestors():
    g, a, b = _two()
    cond, body, inner = _if_node(g)
    g.add_node(cond)
    g.set_node_order([cond, a, b])
    assert _names(g) == ["if", "a", "b"]
    inner.set_input(0, b.outputs[0])       # the body now reads b: the If waits for b
    assert _names(g) == ["a", "b", "if"]
    inner.control_preds.append(Node("Abs", "stranger"))   # (no graph's node: no edge)
    assert _names(g) == ["a", "b", "if"]


def test_a_subgraph_set_as_an_attribute_is_seen():
    g, a, b = _two()
    cond, body, inner = _if_node(g)
    g.add_node(cond)
    g.set_node_order([cond, a, b])
    assert _names(g) == ["if", "a", "b"]
    other = Graph("other")
    reader = Node("Identity", "reader")
    reader.append_input(a.outputs[0])
    reader.add_output(Value("r"))
    other.add_node(reader)
    other.outputs.append(reader.outputs[0])
    cond.set_attr("else_branch", other)    # a body reading a: the If waits for a
    assert _names(g) == ["a", "if", "b"]


def test_a_cycle_made_after_the_check_is_still_refused():
    g, a, b = _two()
    b.set_input(0, a.outputs[0])
    assert _names(g) == ["a", "b"]
    a.control_preds.append(b)
    with pytest.raises(pyge.GraphCycleError):
        g.topological_sort()


def test_a_custom_graph_pass_adding_a_control_edge_is_checked(monkeypatch):
    """End to end: a control edge a custom graph pass appends by hand between two checks of
    the same graph still reaches the order of the plan."""
    bld = pyge.GraphBuilder("g")
    x = bld.input("x", "float32", (2,))
    p = bld.op("Relu", [x], name="p")
    q = bld.op("Neg", [x], name="q")
    bld.output(bld.op("Add", [p, q], name="s"))
    g = bld.build()
    assert _names(g) == ["p", "q", "s"]
    g.node("p").control_preds.append(g.node("q"))
    m = pyge.compile(g, options={"ge.enableSingleStream": "true"})
    assert [n.name for n in m.plan.nodes] == ["q", "p", "s"]


@pytest.mark.parametrize("how", ["deepcopy", "pickle"])
def test_copied_control_edges_still_note_their_edits(how):
    import copy
    import pickle
    g, a, b = _two()
    b.control_preds.append(a)
    h = copy.deepcopy(g) if how == "deepcopy" else pickle.loads(pickle.dumps(g))
    ha, hb = h.nodes
    assert hb.control_preds == [ha] and _names(h) == ["a", "b"]
    ha.control_preds.append(hb)            # a cycle now, through the copied lists
    with pytest.raises(pyge.GraphCycleError):
        h.topological_sort()


def _names_of(graphs) -> list[str]:
    return [g.name for g in graphs]


def test_all_graphs_follows_subgraphs_attached_and_removed():
    g, a, b = _two()
    assert _names_of(g.all_graphs()) == ["t"]
    cond, body, inner = _if_node(g)
    g.add_node(cond)
    assert _names_of(g.all_graphs()) == ["t", "body", "body"]
    nested = Graph("nested")
    deep = Node("Identity", "deep")
    deep.append_input(g.inputs[0])
    deep.add_output(Value("d"))
    nested.add_node(deep)
    nested.outputs.append(deep.outputs[0])
    holder = Node("If", "holder")
    holder.append_input(g.inputs[0])
    holder.add_output(Value("h"))
    holder.set_attr("then_branch", nested)
    body.add_node(holder)                    # an edit inside the body moves g's version too
    assert _names_of(g.all_graphs()) == ["t", "body", "nested", "body", "nested"]
    other = Graph("other")
    cond.set_attr("else_branch", other)
    assert _names_of(g.all_graphs()) == ["t", "body", "nested", "other"]
    g.replace_value(cond.outputs[0], cond.outputs[0])   # (a no-op: no edit)
    g.remove_node(cond)
    assert _names_of(g.all_graphs()) == ["t"]


def test_all_graphs_after_an_attribute_edited_by_hand_and_invalidate():
    g, a, b = _two()
    cond, body, inner = _if_node(g)
    g.add_node(cond)
    assert _names_of(g.all_graphs()) == ["t", "body", "body"]
    del cond.attrs["else_branch"]            # by hand: not an edit the version sees ...
    g.invalidate()                           # ... until invalidate()
    assert _names_of(g.all_graphs()) == ["t", "body"]
    listed = g.all_graphs()
    listed.append("junk")                    # the caller's copy: the kept list is unchanged
    assert _names_of(g.all_graphs()) == ["t", "body"]


def test_sort_moves_what_follows_the_node_order():
    g, a, b = _two()
    c1, body1, _ = _if_node(g)
    c1.name = "if1"
    g.add_node(c1)
    other = Graph("other")
    c2 = Node("If", "if2")
    c2.add_output(Value("y2"))
    c2.append_input(b.outputs[0])
    c2.set_attr("then_branch", other)
    g.add_node(c2)
    c1.append_input(c2.outputs[0])            # if1 reads if2, listed after it
    assert _names_of(g.all_graphs()) == ["t", "body", "body", "other"]
    g.sort()
    assert [n.name for n in g.nodes] == ["a", "b", "if2", "if1"]
    assert _names_of(g.all_graphs()) == ["t", "other", "body", "body"]


def test_predecessor_lists_are_predecessor_positions():
    """ir/order.predecessor_lists (stamped positions) gives exactly predecessor_positions
    over a position map: control edges, repeated inputs, a body's outer reads, a node of
    another graph and one that claims the graph without being listed."""
    import random

    import pyge
    from pyge.ir.graph import Graph, Node, Value
    from pyge.ir.order import predecessor_lists, predecessor_positions
    rng = random.Random(2)
    for _ in range(50):
        b = pyge.GraphBuilder("p")
        vals = [b.input("x", "float32", (2,))]
        for i in range(rng.randint(2, 30)):
            ins = [rng.choice(vals) for _ in range(rng.randint(1, 3))]
            vals.append(b.op("Sum", ins, name=f"n{i}"))
        b.output(vals[-1], "y")
        g = b.build()
        nodes = g.nodes
        for n in rng.sample(nodes, len(nodes) // 4):
            n.control_preds.append(rng.choice(nodes))
        if rng.random() < 0.5:                    # a body reading an outer value
            body = Graph("body")
            inner = Node("Identity", "inner")
            inner.append_input(rng.choice(vals[1:]))
            inner.add_output(Value("inner_out"))
            body.add_node(inner)
            body.outputs.append(inner.outputs[0])
            nodes[-1].set_attr("then_branch", body)
        if rng.random() < 0.5:                    # claims the graph, not listed
            ghost = Node("Relu", "ghost")
            ghost.append_input(vals[0])
            ghost.add_output(Value("ghost_out"))
            ghost.graph = g
            nodes[-1].append_input(ghost.outputs[0])
        order = list(reversed(nodes)) if rng.random() < 0.3 else nodes
        get = {id(n): i for i, n in enumerate(order)}.get
        assert predecessor_lists(order, g) == [predecessor_positions(n, g, get) for n in order]
