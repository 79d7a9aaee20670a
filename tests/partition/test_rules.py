"""The partition pass itself (passes/partition/): which nodes are unknown and why, GE's four
clustering steps, and the parts it builds."""
from __future__ import annotations

import numpy as np
import pytest

import pyge
from pyge.passes.graph.engines import assign_engines
from pyge.passes.graph.infer_types import infer_types
from pyge.passes.partition import partition_graph
from pyge.passes.partition.clusters import cluster_graph
from pyge.passes.partition.unknown import unknown_nodes

from .conftest import graph_of


def _prepared(g):
    infer_types(g)
    assign_engines(g)
    return g


def _reasons(g, device="cpu"):
    by_id = {id(n): n.name for n in g.nodes}
    return {by_id[k]: why for k, why in unknown_nodes(g, device).items()}


def _chain(b, x, prefix, n):
    for i in range(n):
        x = b.op("Relu" if i % 2 else "Abs", [x], name=f"{prefix}{i}")
    return x


def test_data_dependent_and_symbolic_nodes_are_unknown():
    det = _reasons(_prepared(graph_of("detection")))
    assert "data-dependent" in det["nms"] and set(det) == {"nms", "cast", "rsum"}
    symb = _reasons(_prepared(graph_of("symbolic_batch")))
    assert "symbolic dim 'N'" in symb["dyn_mm"]
    assert not any(n.startswith("st_") for n in symb)


def _if_graph():
    b = pyge.GraphBuilder("ifg")
    cond = b.input("cond", "bool", ())
    x = b.input("x", "float32", (4,))
    t = pyge.GraphBuilder("then_b")
    t.graph.outputs.append(t.op("Abs", [x], name="t_abs"))
    e = pyge.GraphBuilder("else_b")
    e.graph.outputs.append(e.op("Neg", [x], name="e_neg"))
    y = b.op("If", [cond], name="if", then_branch=t.graph, else_branch=e.graph)
    b.output(_chain(b, y, "post", 4), "y")
    return b.build()


def test_host_kernels_are_unknown_on_cuda_only():
    g = _prepared(_if_graph())
    assert "if" not in _reasons(g, "cpu")
    assert "host" in _reasons(g, "cuda")["if"]


def test_a_subgraph_holding_an_unknown_node_makes_its_node_unknown():
    b = pyge.GraphBuilder("outer")
    cond = b.input("cond", "bool", ())
    x = b.input("x", "float32", (4,))
    t = pyge.GraphBuilder("then_b")
    t.graph.outputs.append(t.op("ReduceSum", [t.op("Cast", [t.op("NonZero", [x], name="t_nz")], name="t_c", to=1)],
                                name="t_sum", keepdims=0))
    e = pyge.GraphBuilder("else_b")
    e.graph.outputs.append(e.op("ReduceSum", [x], name="e_sum", keepdims=0))
    b.output(b.op("If", [cond], name="if", then_branch=t.graph, else_branch=e.graph), "y")
    why = _reasons(_prepared(b.build()))["if"]
    assert "subgraph" in why and "NonZero" in why


def test_a_constant_read_only_by_unknown_nodes_goes_with_them():
    b = pyge.GraphBuilder("cst")
    x = b.input("x", "float32", (6,))
    k = b.op("Constant", [], name="k", value=np.array([1.0], np.float32))
    k2 = b.op("Constant", [], name="k2", value=np.array([2.0], np.float32))
    nz = b.op("Cast", [b.op("NonZero", [b.op("Greater", [x, k2], name="gt")], name="nz")], name="c", to=1)
    b.graph.outputs.append(b.op("Add", [nz, k], name="add"))
    b.graph.outputs.append(_chain(b, x, "s", 4))
    g = _prepared(b.build())
    reasons = _reasons(g)
    assert "Constant" in reasons["k"]          # only the unknown Add reads it
    assert "k2" not in reasons                 # the known Greater reads it


def _diamond(mid: int):
    """x -> NonZero -> Cast -> [mid known nodes] -> Add(with NonZero's output) -> a second unknown."""
    b = pyge.GraphBuilder("dia")
    x = b.input("x", "float32", (6,))
    nz = b.op("NonZero", [x], name="nz")
    c = b.op("Cast", [nz], name="cast", to=1)
    k = _chain(b, c, "k", mid)
    b.graph.outputs.append(b.op("NonZero", [b.op("Add", [k, c], name="join")], name="nz2"))
    b.graph.outputs.append(_chain(b, x, "side", 5))
    return b.build()


def test_step1_nodes_between_unknown_nodes_become_unknown():
    g = _prepared(_diamond(4))
    unknown = set(unknown_nodes(g, "cpu"))
    clusters = cluster_graph(g, unknown, 4)
    dyn = [c for c in clusters if not c.known]
    assert len(dyn) == 1 and {n.name for n in dyn[0].nodes} >= {"nz", "cast", "k0", "k3", "join", "nz2"}
    [static] = [c for c in clusters if c.known]
    assert [n.name for n in static.nodes] == [f"side{i}" for i in range(5)]


@pytest.mark.parametrize("limit, statics", [(4, 1), (5, 1), (6, 0), (-1, 0)])
def test_step3_the_lower_limit(limit, statics):
    g = _prepared(_diamond(2))
    part = partition_graph(g, "cpu", limit)
    assert len(part.statics) == statics
    if statics:
        assert part.statics[0].name == "dia_static_0"


def test_a_fully_static_graph_is_not_partitioned_unless_the_limit_is_minus_one():
    g = _prepared(graph_of("static_chain"))
    assert partition_graph(g, "cpu", 4) is None
    part = partition_graph(g, "cpu", -1)
    assert part is not None and part.statics == [] and len(part.root.nodes) == len(g.nodes)


def test_the_submodel_graph_has_the_crossing_values_as_inputs_and_outputs():
    part = partition_graph(_prepared(graph_of("nonzero_middle")), "cpu", 4)
    [static] = part.statics
    sub = static.graph
    assert [v.name for v in sub.inputs] == ["x"]
    assert {v.name for v in sub.outputs} >= {"pre", "post0"}
    assert {"w1", "w2"} <= set(sub.initializers)
    calls = [n for n in part.root.nodes if n.op_type == "PartitionedCall"]
    assert [n.attrs["submodel"] for n in calls] == ["mid_static_0"]


def test_the_all_static_shortcut_gives_what_the_rules_give(monkeypatch):
    """unknown_nodes answers {} without the per-node rules when one walk finds nothing they
    could name; on random chains with a symbolic or missing dim, a sequence, a NonZero or a
    TopK here and there, it gives exactly what the rules alone give, and is taken."""
    import random

    from pyge.ir.value import SEQUENCE
    from pyge.passes.partition import unknown
    rng = random.Random(3)
    shortcut = unknown._all_static
    kinds = set()
    for _ in range(200):
        b = pyge.GraphBuilder("r")
        x = b.input("x", "float32", (4,))
        k = b.constant(np.array([2], np.int64), "k")
        for i in range(rng.randint(1, 8)):
            op = rng.choice(["Relu", "Abs", "Relu", "NonZero", "TopK"])
            x = b.op(op, [x, k] if op == "TopK" else [x], name=f"n{i}")
            x.shape = (4,)
        b.output(x, "y")
        g = b.build()
        vals = [o for n in g.nodes for o in n.outputs]
        for v in rng.sample(vals, rng.randint(0, 2)):
            v.shape, v.kind = rng.choice([(("N",), v.kind), ((None,), v.kind), (None, v.kind),
                                          ((4,), SEQUENCE), ((-1,), v.kind)])
        for device in ("cpu", "cuda"):
            quick = shortcut(g, device)
            monkeypatch.setattr(unknown, "_all_static", lambda *a: False)
            want = unknown_nodes(g, device)
            monkeypatch.setattr(unknown, "_all_static", shortcut)
            assert unknown_nodes(g, device) == want
            assert not (quick and want)
            kinds.add((quick, bool(want)))
    assert (True, False) in kinds and (False, True) in kinds
