"""ir/order.py: stable topological order, and the cycle named node by node (issue 20 item 10)."""
from __future__ import annotations

import random

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import pyge
from pyge.ir.graph import Graph, Node, Value
from pyge.ir.order import _in_order


def _graph(edges: dict[str, list[str]], order: list[str] | None = None, control=()) -> Graph:
    """Nodes named by `edges` (name -> names it reads), listed in `order`; `control`: pairs
    (before, after) of control edges. A node with no reads reads the graph input."""
    g = Graph("t")
    x = g.add_input(Value("x", "float32", (1,)))
    nodes = {name: Node("Sum", name) for name in edges}
    for name, n in nodes.items():
        n.add_output(Value(f"{name}_out"))
    for name, reads in edges.items():
        for r in reads or [None]:
            nodes[name].append_input(x if r is None else nodes[r].outputs[0])
    for a, b in control:
        nodes[b].control_preds.append(nodes[a])
    for name in order or list(edges):
        g.add_node(nodes[name])
    return g


def _is_cycle(ring: list[Node]) -> bool:
    return len(ring) > 0 and all(ring[i - 1] in ring[i].predecessors for i in range(len(ring)))


def test_unsorted_order_is_sorted_stably():
    g = _graph({"a": [], "b": ["a"], "c": [], "d": ["b", "c"]}, order=["d", "c", "b", "a"])
    assert [n.name for n in g.topological_sort()] == ["c", "a", "b", "d"]
    g.sort()
    assert [n.name for n in g.nodes] == ["c", "a", "b", "d"]
    assert g.find_cycle() == []


def test_cycle_names_only_the_nodes_on_it():
    # in -> p -> q -> r -> q, r -> out: the cycle is q, r; p before it and out after it are not on it
    g = _graph({"p": [], "q": ["p", "r"], "r": ["q"], "out": ["r"]})
    with pytest.raises(pyge.GraphCycleError) as info:
        g.sort()
    assert sorted(info.value.nodes) == ["q", "r"]
    assert "'q' (Sum)" in str(info.value) and "'p'" not in str(info.value)
    assert "out" not in str(info.value)
    assert [n.name for n in g.nodes] == ["p", "q", "r", "out"]   # a failed sort changes nothing


def test_self_loop_and_control_cycle():
    g = _graph({"a": ["a"]})
    assert [n.name for n in g.find_cycle()] == ["a"]
    g = _graph({"a": [], "b": ["a"]}, control=[("b", "a")])
    with pytest.raises(pyge.GraphCycleError) as info:
        g.topological_sort()
    assert sorted(info.value.nodes) == ["a", "b"]


def test_cycle_through_a_subgraph_read():
    # If's body reads b's output, and b reads the If's output
    g = Graph("t")
    x = g.add_input(Value("x", "bool", ()))
    body = Graph("body")
    cond, b = Node("If", "if"), Node("Not", "b")
    cond.add_output(Value("y"))
    b.add_output(Value("z"))
    inner = Node("Identity", "inner")
    inner.append_input(b.outputs[0])
    inner.add_output(Value("w"))
    body.add_node(inner)
    body.outputs.append(inner.outputs[0])
    cond.attrs["then_branch"] = body
    cond.attrs["else_branch"] = body
    cond.append_input(x)
    b.append_input(cond.outputs[0])
    g.add_node(cond)
    g.add_node(b)
    assert sorted(n.name for n in g.find_cycle()) == ["b", "if"]


def test_long_chain_has_no_recursion_limit():
    n = 30_000
    edges = {f"n{i}": ([f"n{i - 1}"] if i else []) for i in range(n)}
    edges["n0"] = [f"n{n - 1}"]                        # closes the chain into one ring
    ring = _graph(edges).find_cycle()
    assert len(ring) == n and _is_cycle(ring)


@settings(max_examples=60, deadline=None)
@given(st.integers(2, 25), st.integers(0, 2**32 - 1), st.booleans())
def test_random_graphs_sort_or_name_a_real_cycle(n, seed, back_edge):
    """Random DAGs listed in random order sort to an order that respects every edge; with a
    back edge added, the nodes named form a real cycle of the graph."""
    rng = random.Random(seed)
    edges = {f"v{i}": sorted({f"v{rng.randrange(i)}" for _ in range(rng.randint(0, 2))}) if i else []
             for i in range(n)}
    if back_edge:
        lo = rng.randrange(n - 1)
        hi = rng.randrange(lo + 1, n)
        edges[f"v{hi}"].append(f"v{lo}")               # make sure lo reaches hi ...
        edges[f"v{lo}"].append(f"v{hi}")               # ... and hi reads back into lo
    order = list(edges)
    rng.shuffle(order)
    g = _graph(edges, order)
    if back_edge:
        ring = g.find_cycle()
        assert _is_cycle(ring)
        with pytest.raises(pyge.GraphCycleError) as info:
            g.topological_sort()
        assert info.value.nodes and _is_cycle([g.node(m) for m in info.value.nodes])
    else:
        pos = {m.name: i for i, m in enumerate(g.topological_sort())}
        assert len(pos) == n
        assert all(pos[r] < pos[name] for name, reads in edges.items() for r in reads)
        assert g.find_cycle() == []


def test_nodes_with_plain_attributes_are_ordered_by_their_inputs():
    """A node with attributes but no subgraph takes the inlined path: a reader listed before
    its producer is still found out of order, and sorted after it."""
    g = _graph({"a": [], "b": ["a"]}, order=["b", "a"])
    for n in g.nodes:
        n.attrs["axis"] = 0
    assert [n.name for n in g.topological_sort()] == ["a", "b"]


def test_order_check_ignores_stale_position_stamps():
    """The order check stamps positions on nodes: a stamp left by another graph's check, or
    on a node that claims the graph without being listed, must not decide the answer."""
    g = _graph({"a": [], "b": ["a"], "c": ["b"]})
    a, b, c = g.nodes
    assert g.topological_sort() == [a, b, c]
    ghost = Node("Abs", "ghost")
    ghost.add_output(Value("ghost_out"))
    ghost.graph = g                        # claims g, but is not in its node list
    ghost._pos = 99                        # a stale stamp that says "later"
    c.append_input(ghost.outputs[0])
    c.control_preds.append(ghost)
    assert _in_order(g) and g.topological_sort() == [a, b, c]
    g.set_node_order([c, a, b])            # now out of order: the stamps must see it
    assert not _in_order(g) and g.topological_sort() == [a, b, c]
