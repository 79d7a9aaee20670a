"""Automatic mode: LoadBalance:N and MainStream:N over a cost model; option validation."""
from __future__ import annotations

import numpy as np
import pytest

import pyge
from pyge.frontends.onnx_loader import refine_types
from pyge.ir.clone import clone_graph
from pyge.passes.engines import assign_engines
from pyge.passes.streams import allocate_streams
from pyge.passes.streams.cost import LAUNCH_S, flops, node_cost


def _alloc(g, mode: str):
    g = clone_graph(g)
    assign_engines(g)
    allocate_streams(g, {"ge.autoMultistreamParallelMode": mode})
    return g, {n.name: n.stream_id for n in g.nodes}


def _branches(costs: dict[str, float]):
    """x -> root -> one node per entry (measured cost in us) -> join."""
    b = pyge.GraphBuilder("branches")
    root = b.op("Relu", [b.input("x", "float32", (4,))], name="root", _cost_us=1.0)
    outs = [b.op("Abs", [root], name=name, _cost_us=c) for name, c in costs.items()]
    b.graph.outputs.append(b.op("Sum", outs, name="join", _cost_us=1.0))
    return b.build()


def test_two_equal_chains_go_to_two_streams_each_kept_whole():
    b = pyge.GraphBuilder("two_chains")
    x = b.input("x", "float32", (4,))
    ends = []
    for c in "ab":
        v = x
        for i in range(3):
            v = b.op("Relu", [v], name=f"{c}{i}", _cost_us=100.0)
        ends.append(v)
    b.graph.outputs.append(b.op("Add", ends, name="join", _cost_us=1.0))
    _, s = _alloc(b.build(), "LoadBalance:2")
    assert s["a0"] == s["a1"] == s["a2"] != s["b0"] == s["b1"] == s["b2"]


def test_load_balance_balances_estimated_work():
    _, s = _alloc(_branches({"big": 300.0, "s1": 100.0, "s2": 100.0, "s3": 100.0}), "LoadBalance:2")
    assert s["s1"] == s["s2"] == s["s3"] != s["big"]


def test_load_balance_uses_the_main_stream_when_it_is_free_main_stream_does_not():
    costs = {"long": 100.0, "b": 60.0, "c": 60.0, "d": 60.0}
    _, lb = _alloc(_branches(costs), "LoadBalance:2")
    assert lb["d"] == lb["long"] != lb["b"] == lb["c"]
    _, ms = _alloc(_branches(costs), "MainStream:2")
    assert ms["root"] == ms["long"] == ms["join"]
    assert ms["b"] == ms["c"] == ms["d"] != ms["long"]


def test_main_stream_keeps_the_critical_path_and_spreads_the_rest():
    _, s = _alloc(_branches({"crit": 500.0, "s1": 50.0, "s2": 50.0, "s3": 50.0}), "MainStream:3")
    main = s["root"]
    assert s["crit"] == s["join"] == main
    side = {s["s1"], s["s2"], s["s3"]}
    assert main not in side and len(side) == 2


@pytest.mark.parametrize("mode", ["LoadBalance:1", "MainStream:1"])
def test_one_stream_means_one_stream(mode):
    _, s = _alloc(_branches({"a": 10.0, "b": 10.0}), mode)
    assert set(s.values()) == {0}


def test_serial_nodes_stay_on_the_main_stream():
    b = pyge.GraphBuilder("serial")
    v = b.input("x", "float32", (4,))
    for i in range(4):
        v = b.op("Relu", [v], name=f"n{i}")
    b.graph.outputs.append(v)
    _, s = _alloc(b.build(), "MainStream:4")
    assert set(s.values()) == {0}


def test_nodes_are_reordered_by_simulated_start_and_stay_topological():
    g, s = _alloc(_branches({"big": 300.0, "s1": 100.0, "s2": 100.0}), "LoadBalance:2")
    names = [n.name for n in g.nodes]
    assert [n.name for n in g.topological_sort()] == names
    assert names[0] == "root" and names[-1] == "join"


def test_labelled_nodes_keep_their_stream_in_auto_mode():
    b = pyge.GraphBuilder("labelled")
    x = b.input("x", "float32", (4,))
    outs = [b.op("Relu", [x], name="l", _stream_label="L", _cost_us=100.0),
            b.op("Abs", [x], name="u1", _cost_us=100.0), b.op("Neg", [x], name="u2", _cost_us=100.0)]
    b.graph.outputs.append(b.op("Sum", outs, name="join"))
    _, s = _alloc(b.build(), "LoadBalance:2")
    assert s["l"] not in (s["u1"], s["u2"])
    assert s["u1"] != s["u2"]


def test_cost_model_from_shapes():
    b = pyge.GraphBuilder("costs")
    x = b.input("x", "float32", (1, 64, 56, 56))
    w = b.initializer("w", np.zeros((64, 64, 3, 3), "float32"))
    conv = b.op("Conv", [x, w], name="conv", pads=[1, 1, 1, 1])
    relu = b.op("Relu", [conv], name="relu")
    b.graph.outputs.append(relu)
    g = b.build()
    refine_types(g)
    c, r = g.node("conv"), g.node("relu")
    assert flops(c) == 2 * 64 * 56 * 56 * 64 * 9
    assert node_cost(c) > 10 * node_cost(r) > 0
    r.attrs["_cost_us"] = 42.0
    assert node_cost(r) == pytest.approx(42e-6)
    r.attrs.pop("_cost_us")
    assert node_cost(r) > LAUNCH_S


# -- options are validated up front -------------------------------------------------------

@pytest.mark.parametrize("key, value, match", [
    ("ge.autoMultistreamParallelMode", "LoadBalance:0", "out of range; accepted values: None, LoadBalance:N"),
    ("ge.autoMultistreamParallelMode", "LoadBalance:65", "out of range"),
    ("ge.autoMultistreamParallelMode", "Greedy:2", "malformed; accepted values: None, LoadBalance:N or MainStream:N"),
    ("ge.streamMaxParallelNum", "zero", "malformed; accepted values: N"),
    ("ge.enableSingleStream", "yes", "accepted values: true, false"),
    ("ge.noSuchOption", "1", "unknown option 'ge.noSuchOption'; accepted keys: .*ge.enableSingleStream"),
])
def test_bad_options_name_the_key_and_accepted_values(key, value, match):
    with pytest.raises(pyge.OptionError, match=match):
        pyge.compile(_branches({"a": 1.0}), options={key: value})


def test_auto_mode_through_compile_runs_and_matches():
    g = _branches({"a": 100.0, "b": 100.0})
    m = pyge.compile(g, options={"ge.autoMultistreamParallelMode": "LoadBalance:2"})
    assert m.num_streams == 2
    x = np.linspace(-1, 1, 4, dtype=np.float32)
    ref = pyge.compile(g, options={"ge.enableSingleStream": "true"}).run({"x": x})
    for k, v in m.run({"x": x}).items():
        np.testing.assert_array_equal(v, ref[k])
