"""GE's DAG stream pass (ge.autoMultistreamParallelMode): residual DAG, minimum path cover by
Hopcroft-Karp (against a brute-force oracle), the LoadBalance / MainStream / WeightedLoadBalance
merges, labels, and the mode through compile."""
from __future__ import annotations

import json
import logging

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import pyge
from pyge.passes.graph.infer_types import infer_types
from pyge.ir.clone import clone_graph
from pyge.passes.custom import run_stream_passes
from pyge.passes.graph.engines import assign_engines
from pyge.passes.streams import allocate_streams, follow_parents
from pyge.passes.streams.cost import LAUNCH_S, flops, node_cost
from pyge.passes.streams.dag_cover import max_matching, path_cover, residual_dag

from _dags import sum_dags
from _event_oracle import events_of, oracle_events

AUTO = "ge.autoMultistreamParallelMode"

pytestmark = pytest.mark.usefixtures("no_custom_passes")


def _alloc(g, mode: str, **options):
    """Built-in chain, then the stream passes (the DAG pass first), as compile runs them."""
    g = clone_graph(g)
    assign_engines(g)
    opts = {AUTO: mode, **options}
    drawn = allocate_streams(g, opts).max_drawn
    run_stream_passes(g, opts, drawn)
    follow_parents(g)
    return g, {n.name: n.stream_id for sg in g.all_graphs() for n in sg.nodes}


# -- the minimum path cover, against brute force ----------------------------------------------

def _brute_max_matching(succs: list[list[int]]) -> int:
    """Most edges with at most one out of and one into every node (exhaustive)."""
    best = 0

    def go(u: int, used: frozenset, size: int) -> None:
        nonlocal best
        if size + (len(succs) - u) <= best:
            return
        if u == len(succs):
            best = max(best, size)
            return
        go(u + 1, used, size)
        for v in succs[u]:
            if v not in used:
                go(u + 1, used | {v}, size + 1)
    go(0, frozenset(), 0)
    return best


def _succs(g) -> list[list[int]]:
    return residual_dag(g).succs


@settings(max_examples=80, deadline=None)
@given(sum_dags(max_nodes=9, max_inputs=3))
def test_path_cover_is_minimum_and_follows_edges(g):
    g = clone_graph(g)
    assign_engines(g)
    succs = _succs(g)
    paths = path_cover(succs)
    flat = sorted(i for p in paths for i in p)
    assert flat == list(range(len(succs)))                      # a partition of the nodes
    assert all(b in succs[a] for p in paths for a, b in zip(p, p[1:]))   # along direct edges
    assert len(paths) == len(succs) - _brute_max_matching(succs)          # and minimum


@settings(max_examples=80, deadline=None)
@given(st.integers(1, 8).flatmap(lambda n: st.lists(
    st.lists(st.integers(0, n - 1), max_size=n, unique=True), min_size=n, max_size=n)))
def test_hopcroft_karp_finds_a_maximum_matching(succs):
    match = max_matching(succs)
    taken = [v for v in match if v >= 0]
    assert len(taken) == len(set(taken))
    assert all(v < 0 or v in succs[u] for u, v in enumerate(match))
    assert len(taken) == _brute_max_matching(succs)


def test_residual_dag_bridges_labelled_and_weightless_nodes():
    b = pyge.GraphBuilder("bridge")
    x = b.input("x", "float32", (2, 2))
    a = b.op("Relu", [x], name="a")
    r = b.op("Reshape", [a, b.constant([4])], name="reshape")
    lab = b.op("Abs", [r], name="lab", _stream_label="L")
    c = b.op("Neg", [lab], name="c")
    b.graph.outputs.append(c)
    g = clone_graph(b.build())
    assign_engines(g)
    dag = residual_dag(g)
    assert [n.name for n in dag.nodes] == ["a", "c"] and dag.succs == [[1], []]
    assert [n.name for n in dag.serial] == ["lab"] and [n.name for n in dag.weightless] == ["reshape"]


# -- merging onto at most N streams -----------------------------------------------------------

def _chains(k: int, length: int = 3):
    """k equal chains over one input, joined by one Sum."""
    b = pyge.GraphBuilder("chains")
    x = b.input("x", "float32", (4,))
    ends = []
    for c in range(k):
        v = x
        for i in range(length):
            v = b.op("Relu", [v], name=f"c{c}_{i}")
        ends.append(v)
    b.graph.outputs.append(b.op("Sum", ends, name="join"))
    return b.build()


@settings(max_examples=40, deadline=None)
@given(sum_dags(max_nodes=14, max_inputs=3), st.integers(1, 4),
       st.sampled_from(["LoadBalance", "MainStream"]))
def test_never_more_than_n_streams_and_deterministic(g, n, strategy):
    mode = f"{strategy}:{n}"
    _, a = _alloc(g, mode)
    _, b = _alloc(g, mode)
    assert a == b and len(set(a.values())) <= n


def test_load_balance_keeps_paths_whole_on_their_own_streams():
    _, s = _alloc(_chains(2), "LoadBalance:2")
    assert s["c0_0"] == s["c0_1"] == s["c0_2"] != s["c1_0"] == s["c1_1"] == s["c1_2"]


@pytest.mark.parametrize("mode", ["LoadBalance:1", "MainStream:1", "WeightedLoadBalance:1"])
def test_one_stream_means_one_stream(mode):
    _, s = _alloc(_chains(3), mode)
    assert len(set(s.values())) == 1


def test_main_stream_puts_the_spine_on_the_main_stream():
    """Levels holding one node (the chain before and after the fork) are the spine; a side
    branch long enough to be worth its two events goes to another stream."""
    b = pyge.GraphBuilder("spine")
    v = b.input("x", "float32", (4,))
    for i in range(3):
        v = b.op("Relu", [v], name=f"pre{i}")
    forks = []
    for f in range(2):
        w = v
        for i in range(3):
            w = b.op("Abs", [w], name=f"f{f}_{i}")
        forks.append(w)
    v = b.op("Add", forks, name="join")
    for i in range(2):
        v = b.op("Relu", [v], name=f"post{i}")
    b.graph.outputs.append(v)
    g, s = _alloc(b.build(), "MainStream:3")
    main = s["pre0"]
    assert s["pre1"] == s["pre2"] == s["join"] == s["post0"] == s["post1"] == main
    assert len({s["f0_0"], s["f1_0"]}) == 2 and len(set(s.values())) == 2


def test_labelled_nodes_keep_one_stream_per_label_beside_the_n():
    b = pyge.GraphBuilder("labelled")
    x = b.input("x", "float32", (4,))
    outs = [b.op("Relu", [x], name="l1", _stream_label="L"), b.op("Exp", [x], name="l2", _stream_label="L"),
            b.op("Abs", [x], name="u1"), b.op("Neg", [x], name="u2")]
    b.graph.outputs.append(b.op("Sum", outs, name="join"))
    _, s = _alloc(b.build(), "LoadBalance:1")
    assert s["l1"] == s["l2"] and s["l1"] not in (s["u1"], s["u2"], s["join"])
    assert len(set(s.values())) == 2


def test_weightless_nodes_follow_a_neighbour():
    b = pyge.GraphBuilder("views")
    x = b.input("x", "float32", (2, 2))
    ends = []
    for c in range(2):
        v = b.op("Relu", [x], name=f"a{c}")
        v = b.op("Reshape", [v, b.constant([4])], name=f"r{c}")
        ends.append(b.op("Abs", [v], name=f"b{c}"))
    b.graph.outputs += ends
    _, s = _alloc(b.build(), "LoadBalance:2")
    assert s["r0"] == s["a0"] == s["b0"] != s["r1"] == s["a1"] == s["b1"]


def _if_model(n_side: int = 3):
    """x -> n_side side chains and an If whose branches compute too; everything summed."""
    b = pyge.GraphBuilder("root")
    cond, x = b.input("cond", "bool", ()), b.input("x", "float32", (4,))
    then_b, else_b = pyge.GraphBuilder("then_body"), pyge.GraphBuilder("else_body")
    then_b.graph.outputs.append(then_b.op("Abs", [then_b.op("Relu", [x], name="t_relu")], name="t_abs"))
    else_b.graph.outputs.append(else_b.op("Neg", [x], name="e_neg"))
    outs = [b.op("If", [cond], name="if", then_branch=then_b.graph, else_branch=else_b.graph)]
    outs += [b.op("Exp", [b.op("Relu", [x], name=f"s{i}")], name=f"e{i}") for i in range(n_side)]
    b.graph.outputs.append(b.op("Sum", outs, name="join"))
    return b.build()


@pytest.mark.parametrize("mode", ["LoadBalance:2", "MainStream:2", "LoadBalance:1"])
def test_models_with_if_nodes_report_at_most_n_streams(mode):
    m = pyge.compile(_if_model(), options={AUTO: mode})
    n = int(mode.split(":")[1])
    assert m.num_streams <= n
    assert m.stream_of("t_abs") == m.stream_of("e_neg") == m.stream_of("if")
    feeds = {"cond": np.array(True), "x": np.linspace(-1, 1, 4, dtype=np.float32)}
    ref = pyge.compile(_if_model(), options={"ge.enableSingleStream": "true"}).run(feeds)
    for k, v in m.run(feeds).items():
        np.testing.assert_array_equal(v, ref[k])


def test_auto_mode_and_single_stream_is_an_error_naming_both():
    with pytest.raises(pyge.OptionError, match=r"ge.autoMultistreamParallelMode='LoadBalance:2' conflicts "
                                               r"with ge.enableSingleStream=true"):
        pyge.compile(_chains(2), options={AUTO: "LoadBalance:2", "ge.enableSingleStream": "true"})


def test_user_passes_run_after_the_dag_pass_on_the_same_context():
    seen = []

    @pyge.custom_stream_pass("After")
    def after(graph, ctx):
        seen.append((ctx.get_curr_max_stream_id(), ctx.get_stream_id(graph.find_node("c0_0"))))
        return pyge.GRAPH_SUCCESS
    m = pyge.compile(_chains(2), options={AUTO: "LoadBalance:2"})
    (mx, sid), = seen
    assert sid > 0 and mx >= sid          # the DAG pass drew new ids before the user's pass ran
    assert m.custom_streams == []         # the DAG pass is built in: its streams are not custom


# -- WeightedLoadBalance ----------------------------------------------------------------------

def _weighted_graph():
    """x -> four branches of one node; big is as long as the three small together."""
    b = pyge.GraphBuilder("weighted")
    x = b.input("x", "float32", (4,))
    outs = [b.op("Relu", [x], name=n) for n in ("big", "s1", "s2", "s3")]
    b.graph.outputs.append(b.op("Sum", outs, name="join"))
    return b.build()


def _cost_file(tmp_path, costs: dict[str, float]):
    p = tmp_path / "costs.json"
    p.write_text(json.dumps({"version": 1, "unit": "us", "costs": costs}))
    return str(p)


def test_weighted_load_balance_reads_measured_times(tmp_path):
    path = _cost_file(tmp_path, {"big": 300.0, "s1": 100.0, "s2": 100.0, "s3": 100.0, "join": 1.0})
    _, s = _alloc(_weighted_graph(), "WeightedLoadBalance:2", **{"pyge.costFile": path})
    assert s["s1"] == s["s2"] == s["s3"] != s["big"]


def test_weighted_load_balance_reads_a_profile_trace(tmp_path):
    g = _weighted_graph()
    prof = pyge.compile(g).profile({"x": np.ones(4, np.float32)}, runs=2)
    trace = tmp_path / "trace.json"
    prof.save_trace(str(trace))
    _, s = _alloc(g, "WeightedLoadBalance:2", **{"pyge.costFile": str(trace)})
    assert len(set(s.values())) <= 2 and all(v >= 0 for v in s.values())


def test_weighted_load_balance_without_matching_times_falls_back(tmp_path, caplog):
    path = _cost_file(tmp_path, {"nobody": 5.0})
    with caplog.at_level(logging.WARNING):
        _, w = _alloc(_weighted_graph(), "WeightedLoadBalance:2", **{"pyge.costFile": path})
    _, lb = _alloc(_weighted_graph(), "LoadBalance:2")
    assert w == lb and "names none of graph" in caplog.text


# -- the cost model and the options -----------------------------------------------------------

def test_cost_model_from_shapes():
    b = pyge.GraphBuilder("costs")
    x = b.input("x", "float32", (1, 64, 56, 56))
    w = b.initializer("w", np.zeros((64, 64, 3, 3), "float32"))
    conv = b.op("Conv", [x, w], name="conv", pads=[1, 1, 1, 1])
    relu = b.op("Relu", [conv], name="relu")
    b.graph.outputs.append(relu)
    g = b.build()
    infer_types(g)
    c, r = g.node("conv"), g.node("relu")
    assert flops(c) == 2 * 64 * 56 * 56 * 64 * 9
    assert node_cost(c) > 10 * node_cost(r) > 0
    r.attrs["_cost_us"] = 42.0
    assert node_cost(r) == pytest.approx(42e-6)
    r.attrs.pop("_cost_us")
    assert node_cost(r) > LAUNCH_S


@pytest.mark.parametrize("key, value, match", [
    (AUTO, "LoadBalance:0", "out of range; accepted values: None, LoadBalance:N"),
    (AUTO, "LoadBalance:65", "out of range"),
    (AUTO, "Greedy:2", "malformed; accepted values: None, LoadBalance:N, MainStream:N or WeightedLoadBalance:N"),
    ("ge.streamMaxParallelNum", "zero", "malformed; accepted values: N"),
    ("ge.enableSingleStream", "yes", "accepted values: true, false"),
    ("ge.noSuchOption", "1", "unknown option 'ge.noSuchOption'; accepted keys: .*ge.enableSingleStream"),
])
def test_bad_options_name_the_key_and_accepted_values(key, value, match):
    with pytest.raises(pyge.OptionError, match=match):
        pyge.compile(_chains(1), options={key: value})


def test_auto_mode_through_compile_runs_and_matches():
    g = _chains(2)
    m = pyge.compile(g, options={AUTO: "LoadBalance:2"})
    assert m.num_streams == 2
    x = np.linspace(-1, 1, 4, dtype=np.float32)
    ref = pyge.compile(g, options={"ge.enableSingleStream": "true"}).run({"x": x})
    for k, v in m.run({"x": x}).items():
        np.testing.assert_array_equal(v, ref[k])


@settings(max_examples=30, deadline=None)
@given(sum_dags(max_nodes=14, max_inputs=3), st.integers(2, 4),
       st.sampled_from(["LoadBalance", "MainStream", "clusters", "nodes"]))
def test_compiled_plans_have_exactly_the_minimal_events_and_verify(g, n, how):
    """Whatever the stream rules chose, the events are the cross-stream edges of the
    transitive reduction (the brute-force oracle of test_events_property) and verify."""
    if how in ("LoadBalance", "MainStream"):
        opts = {AUTO: f"{how}:{n}"}
    else:
        opts = {"ge.streamMaxParallelNum": str(n), "pyge.streamAllocation": how}
    m = pyge.compile(g, options={**opts, "pyge.memoryReuse": "false"})
    assert events_of(m.plan) == oracle_events(m.plan)
    m.verify()
