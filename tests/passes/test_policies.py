"""Built-in stream policies (pass 7): critical_path, min_streams, list_schedule, policy files."""
from __future__ import annotations

import json
import random

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import pyge
from pyge.errors import OptionError
from pyge.ir.clone import clone_graph
from pyge.options import parse_options
from pyge.passes.graph.engines import assign_engines
from pyge.passes.policies import POLICIES, apply_policy
from pyge.passes.policies.chains import min_chain_cover
from pyge.passes.policies.defaults import CUDA_CANDIDATE, default_policy, with_default_policy
from pyge.passes.streams import allocate_streams

ALL = sorted(POLICIES)


def _apply(g, **options):
    g = clone_graph(g)
    assign_engines(g)
    opts = parse_options(options)
    allocate_streams(g, opts)
    apply_policy(g, opts)
    return g, {n.name: n.stream_id for sg in g.all_graphs() for n in sg.nodes}


def _policy(g, policy, k, **more):
    return _apply(g, **{"pyge.streamPolicy": policy, "pyge.maxStreams": str(k), **more})


def _branches(costs: dict[str, float], **attrs):
    """x -> root -> one Abs per entry (cost in us) -> Sum."""
    b = pyge.GraphBuilder("branches")
    root = b.op("Relu", [b.input("x", "float32", (4,))], name="root", _cost_us=1.0)
    outs = [b.op("Abs", [root], name=name, _cost_us=c, **attrs.get(name, {})) for name, c in costs.items()]
    b.graph.outputs.append(b.op("Sum", outs, name="join", _cost_us=1.0))
    return b.build()


def _random_dag(n: int, p: float, seed: int):
    """A random DAG of Add/Relu nodes (edges only forward in the numbering)."""
    rng = random.Random(seed)
    b = pyge.GraphBuilder(f"dag{seed}")
    x = b.input("x", "float32", (4,))
    vals = []
    for i in range(n):
        preds = [vals[j] for j in range(i) if rng.random() < p][:3]
        ins = preds or [x]
        vals.append(b.op("Relu" if len(ins) == 1 else "Sum", ins, name=f"n{i}",
                         _cost_us=float(rng.randint(1, 50))))
    used = {id(v) for n in b.graph.nodes for v in n.inputs}
    for v in vals:
        if id(v) not in used:
            b.graph.outputs.append(v)
    return b.build()


# -- chain cover and matching against brute force --------------------------------------

def _closure(n: int, edges: set[tuple[int, int]]) -> list[int]:
    desc = [0] * n
    for u in reversed(range(n)):
        for (a, v) in edges:
            if a == u:
                desc[u] |= desc[v] | (1 << v)
    return desc


def _width(n: int, desc: list[int]) -> int:
    """Largest antichain, by brute force over subsets."""
    best = 0
    for mask in range(1 << n):
        members = [i for i in range(n) if mask >> i & 1]
        if len(members) > best and all(not (desc[a] >> b & 1) for a in members for b in members):
            best = len(members)
    return best


dags = st.integers(1, 9).flatmap(lambda n: st.tuples(
    st.just(n), st.sets(st.tuples(st.integers(0, n - 1), st.integers(0, n - 1))
                        .filter(lambda e: e[0] < e[1]), max_size=20)))


@settings(max_examples=150, deadline=None)
@given(dags)
def test_min_chain_cover_has_as_many_chains_as_the_width(dag):
    n, edges = dag
    desc = _closure(n, edges)
    chains = min_chain_cover(desc)
    assert len(chains) == _width(n, desc)                                 # Dilworth
    assert sorted(i for c in chains for i in c) == list(range(n))        # a partition
    for c in chains:
        assert all(desc[a] >> b & 1 for a, b in zip(c, c[1:]))           # each pairwise ordered


# -- what every policy guarantees -------------------------------------------------------

@pytest.mark.parametrize("policy", ALL)
@pytest.mark.parametrize("seed", range(4))
def test_policies_are_deterministic_and_stay_within_the_budget(policy, seed):
    g = _random_dag(14, 0.25, seed)
    g1, s1 = _policy(g, policy, 3)
    g2, s2 = _policy(g, policy, 3)
    assert s1 == s2
    assert [n.name for n in g1.nodes] == [n.name for n in g2.nodes]
    assert set(s1.values()) <= {0, 1, 2}
    assert [n.name for n in g1.topological_sort()] == [n.name for n in g1.nodes]


@pytest.mark.parametrize("policy", ALL)
def test_one_stream_budget_gives_one_stream(policy):
    _, s = _policy(_random_dag(10, 0.3, 7), policy, 1)
    assert set(s.values()) == {0}


@pytest.mark.parametrize("policy", ALL)
def test_labelled_nodes_keep_their_stream_and_it_stays_theirs(policy):
    g = _branches({"a": 50.0, "b": 50.0, "c": 50.0, "d": 50.0},
                  a={"_stream_label": "L"}, b={"_user_stream_label": "U"})
    _, ge = _apply(g)
    _, s = _policy(g, policy, 4)
    assert s["a"] == ge["a"] and s["b"] == ge["b"]
    others = {s[n] for n in ("root", "c", "d", "join")}
    assert s["a"] not in others and s["b"] not in others


@pytest.mark.parametrize("policy", ALL)
def test_skip_nodes_follow_a_neighbour(policy):
    b = pyge.GraphBuilder("skips")
    x = b.input("x", "float32", (2, 4))
    r = b.op("Relu", [x], name="r", _cost_us=10.0)
    left = b.op("Abs", [b.op("Reshape", [r, b.constant(np.array([8], np.int64))], name="flat")],
                name="left", _cost_us=100.0)
    right = b.op("Neg", [b.op("Flatten", [r], name="fl2", axis=0)], name="right", _cost_us=100.0)
    b.graph.outputs += [left, right]
    g, s = _policy(b.build(), policy, 2)
    assert s["left"] != s["right"]
    for skip in ("flat", "fl2"):
        node = g.node(skip)
        assert s[skip] in {m.stream_id for m in (*node.predecessors, *node.successors)}


def test_subgraph_nodes_are_left_alone():
    x = pyge.Value("x", "float32", (2,))
    body = pyge.GraphBuilder("then_body")
    body.graph.outputs.append(body.op("Relu", [x], name="inner"))
    other = pyge.GraphBuilder("else_body")
    other.graph.outputs.append(other.op("Abs", [x], name="inner2"))
    b = pyge.GraphBuilder("g")
    cond = b.input("cond", "bool", ())
    xin = b.input("x", "float32", (2,))
    for sg in (body.graph, other.graph):
        for n in sg.nodes:
            n.replace_input_with(x, xin)
    b.graph.outputs.append(b.op("Neg", [xin], name="outer"))
    b.graph.outputs.append(b.op("If", [cond], name="if", then_branch=body.graph, else_branch=other.graph))
    g = b.build()
    _, ge = _apply(g)
    for policy in ALL:
        _, s = _policy(g, policy, 2)
        assert s["inner"] == ge["inner"] and s["inner2"] == ge["inner2"]


# -- what each policy decides -----------------------------------------------------------

def test_critical_path_goes_on_stream_zero_and_the_rest_beside_it():
    _, s = _policy(_branches({"crit": 500.0, "s1": 50.0, "s2": 50.0, "s3": 50.0}), "critical_path", 3)
    assert s["root"] == s["crit"] == s["join"] == 0
    assert {s["s1"], s["s2"], s["s3"]} == {1, 2}


def test_list_schedule_balances_measured_work_and_reads_the_cost_file(tmp_path):
    g = _branches({"big": 300.0, "s1": 100.0, "s2": 100.0, "s3": 100.0})
    _, s = _policy(g, "list_schedule", 2)
    assert s["s1"] == s["s2"] == s["s3"] != s["big"]
    costs = tmp_path / "c.json"      # measured costs say otherwise: s1 is the big one
    costs.write_text(json.dumps({"version": 1, "unit": "us", "costs": {"big": 100, "s1": 300, "s2": 100, "s3": 100}}))
    _, s = _policy(g, "list_schedule", 2, **{"pyge.costFile": str(costs)})
    assert s["big"] == s["s2"] == s["s3"] != s["s1"]


def test_list_schedule_inserts_into_an_idle_gap():
    # B then D share a stream, but D waits for the long A on the other one: the low-priority
    # F is placed later yet fits into that idle gap, before D (HEFT's insertion policy).
    b = pyge.GraphBuilder("gap")
    root = b.op("Relu", [b.input("x", "float32", (4,))], name="root", _cost_us=1.0)
    a = b.op("Abs", [root], name="A", _cost_us=300.0)
    c = b.op("Neg", [a], name="C", _cost_us=100.0)
    bb = b.op("Sigmoid", [root], name="B", _cost_us=100.0)
    d = b.op("Add", [bb, a], name="D", _cost_us=100.0)
    f = b.op("Tanh", [root], name="F", _cost_us=90.0)
    b.graph.outputs += [c, d, f]
    g, s = _policy(b.build(), "list_schedule", 2)
    assert s["root"] == s["A"] == s["C"] != s["B"]
    assert s["F"] == s["B"] == s["D"]
    order = [n.name for n in g.nodes]
    assert order.index("B") < order.index("F") < order.index("D")


@pytest.mark.parametrize("k, expect", [(8, 4), (2, 2)])
def test_min_streams_uses_the_width_then_merges_to_the_budget(k, expect):
    _, s = _policy(_branches({"a": 10.0, "b": 20.0, "c": 30.0, "d": 40.0}), "min_streams", k)
    assert len(set(s.values())) == expect


def test_min_streams_merges_chains_that_never_overlap_first():
    # two sequential diamonds: width 2 each, one pair of streams serves both
    b = pyge.GraphBuilder("diamonds")
    v = b.input("x", "float32", (4,))
    for d in range(2):
        left = b.op("Relu", [v], name=f"l{d}", _cost_us=50.0)
        right = b.op("Abs", [v], name=f"r{d}", _cost_us=50.0)
        v = b.op("Add", [left, right], name=f"j{d}", _cost_us=5.0)
    b.graph.outputs.append(v)
    _, s = _policy(b.build(), "min_streams", 4)
    assert len(set(s.values())) == 2


def test_min_streams_spreads_equal_branches_over_the_budget():
    # 40 equal branches overlap every stream alike; they used to pile onto stream 0 (the
    # union of its busy time does not grow), leaving 1 stream after the light-stream fold
    _, s = _policy(_branches({f"b{i}": 10.0 for i in range(40)}), "min_streams", 4)
    counts = sorted(sum(1 for i in range(40) if s[f"b{i}"] == sid) for sid in set(s.values()))
    assert len(counts) == 4 and counts == [10, 10, 10, 10]

@pytest.mark.parametrize("policy", ALL)
def test_policies_end_to_end_give_the_single_stream_numbers(policy, onnx_data_dir):
    g = pyge.load_onnx(onnx_data_dir / "light" / "light_squeezenet.onnx")
    x = {"data_0": np.random.default_rng(0).standard_normal((1, 3, 224, 224)).astype(np.float32)}
    ref = pyge.compile(g, options={"ge.enableSingleStream": "true"}).run(x)
    m = pyge.compile(g, options={"pyge.streamPolicy": policy, "pyge.maxStreams": "2"})
    assert m.num_streams == 2 and m.events
    m.verify()
    out = m.run(x)
    for k in ref:
        np.testing.assert_allclose(out[k], ref[k], rtol=1e-4, atol=1e-6)


def test_ge_policy_changes_nothing():
    g = _branches({"a": 10.0, "b": 10.0})
    _, ge = _apply(g)
    _, s = _apply(g, **{"pyge.streamPolicy": "ge"})
    assert s == ge


def test_unknown_policy_is_an_option_error():
    with pytest.raises(OptionError, match="pyge.streamPolicy.*critical_path"):
        parse_options({"pyge.streamPolicy": "fastest"})


# -- the default ------------------------------------------------------------------------

def test_default_policy_keeps_ge_until_measured():
    """GE's rules on both devices: the CUDA candidate is unmeasured on hardware so far."""
    assert default_policy("cpu") == {}
    assert default_policy("cuda") == {}
    assert default_policy("cuda:1") == default_policy("cuda")
    assert CUDA_CANDIDATE["pyge.streamPolicy"] in POLICIES
    parse_options(CUDA_CANDIDATE)


def test_the_default_applies_only_when_no_stream_option_is_given(monkeypatch):
    import pyge.passes.policies.defaults as d
    monkeypatch.setitem(d._DEFAULTS, "cuda", dict(CUDA_CANDIDATE))
    assert with_default_policy(None, "cuda") == default_policy("cuda") == CUDA_CANDIDATE
    assert with_default_policy({"pyge.verify": "false"}, "cuda")["pyge.streamPolicy"] == "list_schedule"
    for key, value in [("pyge.streamPolicy", "ge"), ("ge.enableSingleStream", "true"),
                       ("ge.autoMultistreamParallelMode", "LoadBalance:2"), ("pyge.maxStreams", "2")]:
        assert with_default_policy({key: value}, "cuda") == {key: value}
    assert with_default_policy(parse_options({"pyge.streamPolicy": "ge"}), "cuda") == {"pyge.streamPolicy": "ge"}
    assert with_default_policy({}, "cpu") == {}


# -- policy files -----------------------------------------------------------------------

def _write(tmp_path, data, name="p.json"):
    p = tmp_path / name
    p.write_text(data if isinstance(data, str) else json.dumps(data))
    return str(p)


def test_policy_file_sets_named_nodes_and_leaves_the_others(tmp_path):
    g = _branches({"a": 10.0, "b": 10.0, "c": 10.0})
    _, ge = _apply(g)
    path = _write(tmp_path, {"version": 1, "model": "branches", "streams": {"b": 7}})
    _, s = _apply(g, **{"pyge.policyFile": path})
    assert s["b"] == 7
    assert {k: v for k, v in s.items() if k != "b"} == {k: v for k, v in ge.items() if k != "b"}


def test_policy_file_applies_after_the_policy_and_reorders(tmp_path):
    g = _branches({"a": 10.0, "b": 10.0, "c": 10.0})
    path = _write(tmp_path, {"version": 1, "streams": {"root": 0, "a": 1, "b": 1, "c": 0, "join": 0},
                             "order": ["root", "c", "b", "a", "join"]})
    g2, s = _policy(g, "critical_path", 4, **{"pyge.policyFile": path})
    assert s == {"root": 0, "a": 1, "b": 1, "c": 0, "join": 0}
    assert [n.name for n in g2.nodes] == ["root", "c", "b", "a", "join"]


def test_the_reference_example_as_a_one_line_policy_file(tmp_path):
    b = pyge.GraphBuilder("demo")
    x = b.input("input", "float32", (4, 64))
    a = b.op("Abs", [x], name="Abs_1")
    r = b.op("Relu", [x], name="Relu_1")
    b.output(b.op("Add", [a, r], name="Add_1"), "output")
    g = b.build()
    assert pyge.compile(g).num_streams == 1
    m = pyge.compile(g, options={"pyge.policyFile": _write(tmp_path, {"version": 1, "streams": {"Abs_1": 99}})})
    assert m.num_streams == 2 and m.stream_of("Abs_1") != m.stream_of("Relu_1")
    assert {(e.src, e.dst) for e in m.events} == {("Abs_1", "Add_1")}


@pytest.mark.parametrize("content, message", [
    ("{not json", "not valid JSON"),
    ({"version": 2, "streams": {}}, "not a version 1 policy file"),
    ({"version": True, "streams": {}}, "not a version 1 policy file"),     # True == 1 in Python
    ({"version": 1}, 'no "streams" object'),
    ({"version": 1, "streams": {"a": -1}}, "stream -1; accepted values"),
    ({"version": 1, "streams": {"a": True}}, "stream True"),
    ({"version": 1, "streams": {"a": 0, "nope": 1, "nope2": 1}}, "names node 'nope', which is not a node"),
    ({"version": 1, "streams": {}, "order": ["a", "ghost"]}, "names node 'ghost'"),
])
def test_bad_policy_files_are_option_errors_naming_file_and_culprit(tmp_path, content, message):
    g = _branches({"a": 10.0})
    path = _write(tmp_path, content)
    with pytest.raises(OptionError, match="pyge.policyFile") as err:
        _apply(g, **{"pyge.policyFile": path})
    assert path in str(err.value) and message in str(err.value)


def test_missing_policy_file_and_bad_cost_file(tmp_path):
    g = _branches({"a": 10.0})
    with pytest.raises(OptionError, match="cannot be read"):
        _apply(g, **{"pyge.policyFile": str(tmp_path / "absent.json")})
    bad = _write(tmp_path, {"version": 1, "costs": {"a": "slow"}}, "c.json")
    with pytest.raises(OptionError, match="pyge.costFile.*node 'a'"):
        _policy(g, "list_schedule", 2, **{"pyge.costFile": bad})


@pytest.mark.parametrize("content, message", [
    ('{"version": 1, "costs": {"a": 5}, "event_us": "fast"}', "event_us is 'fast'"),
    ('{"version": 1, "costs": {"a": 5}, "event_us": null}', "event_us is None"),
    ('{"version": 1, "costs": {"a": 5}, "event_us": -100}', "event_us is -100"),
    ('{"version": 1, "costs": {"a": 5}, "launch_us": Infinity}', "launch_us is inf"),
    ('{"version": 1, "costs": {"a": NaN}}', "cost of node 'a' is nan"),
    ('{"version": 1, "costs": {"a": 1e308}}', "cost of node 'a' is 1e+308"),
    ('{"version": 1, "unit": "ms", "costs": {"a": 5}}', "unit is 'ms'"),
    ('{"version": true, "costs": {"a": 5}}', "not a version 1 cost file"),
])
def test_bad_cost_file_fields_are_option_errors(tmp_path, content, message):
    # these used to escape as ValueError/TypeError/OverflowError, or be taken as given
    g = _branches({"a": 10.0})
    path = _write(tmp_path, content, "c.json")
    for policy in ALL:
        with pytest.raises(OptionError, match="pyge.costFile") as err:
            _policy(g, policy, 2, **{"pyge.costFile": path})
        assert path in str(err.value) and message in str(err.value)
