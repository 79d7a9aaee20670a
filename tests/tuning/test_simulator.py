"""The plan simulator: streams, events, the shared host and the shared device."""
from __future__ import annotations

import json
import random

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import pyge
from pyge.tuning.costs import OpCosts
from pyge.tuning.simulator import DeviceModel, amdahl, critical_path_bound, simulate


def _compile(graph, streams: dict[str, int], tmp_path):
    path = tmp_path / f"{graph.name}.json"
    path.write_text(json.dumps({"version": 1, "streams": streams}))
    return pyge.compile(graph, options={"pyge.policyFile": str(path)})


def _pair(chained: bool):
    """x -> a, x -> b (independent), or x -> a -> b."""
    b = pyge.GraphBuilder("chain" if chained else "pair")
    x = b.input("x", "float32", (4,))
    a = b.op("Relu", [x], name="a")
    b.graph.outputs += [b.op("Abs", [a if chained else x], name="b")] + ([] if chained else [a])
    return b.build()


def _costs(times: dict[str, float], **kw) -> OpCosts:
    return OpCosts(device="cpu", times=times, times_1t=kw.pop("one", dict(times)), threads=kw.pop("threads", 2),
                   source="measured", **kw)


def _dev(**kw) -> DeviceModel:
    return DeviceModel(**{"kind": "cpu", "cores": 2, **kw})


def test_one_stream_takes_the_sum_plus_overheads(tmp_path):
    m = _compile(_pair(False), {"a": 0, "b": 0}, tmp_path)
    c = _costs({"a": 1e-3, "b": 2e-3})
    assert simulate(m.plan, c, _dev()).makespan == pytest.approx(3e-3)
    r = simulate(m.plan, c, _dev(launch_s=1e-4, host_s=1e-5))
    assert r.makespan == pytest.approx(3e-3 + 2 * 1.1e-4)


def test_independent_ops_overlap_when_the_device_has_room(tmp_path):
    m = _compile(_pair(False), {"a": 0, "b": 1}, tmp_path)
    c = _costs({"a": 1e-3, "b": 1e-3})
    assert simulate(m.plan, c, _dev(cores=2)).makespan == pytest.approx(1e-3)    # a thread each
    assert simulate(m.plan, c, _dev(cores=1)).makespan == pytest.approx(2e-3)    # one core shared


def test_fewer_threads_per_stream_follow_amdahl(tmp_path):
    m = _compile(_pair(False), {"a": 0, "b": 1}, tmp_path)
    c = _costs({"a": 1e-3, "b": 1e-3}, one={"a": 2e-3, "b": 2e-3})        # perfect 2x scaling
    # two streams on two cores: each op gets one thread, so takes 2 ms, in parallel
    assert simulate(m.plan, c, _dev(cores=2)).makespan == pytest.approx(2e-3)
    assert amdahl(1e-3, 2e-3, 2, 2) == pytest.approx(1e-3)
    assert amdahl(1e-3, 2e-3, 2, 1) == pytest.approx(2e-3)
    assert amdahl(1e-3, 1e-3, 4, 1) == pytest.approx(1e-3)                 # no scaling at all
    assert amdahl(1e-3, 0.5e-3, 2, 1) == pytest.approx(1e-3)               # one thread measured faster


def test_one_thread_measured_faster_does_not_beat_the_critical_path(tmp_path):
    # tiny ops often run faster on one thread than on all; the simulator used to take the
    # one-thread time for a 2-stream plan and report 1 ms against a 2 ms critical path
    m = _compile(_pair(False), {"a": 0, "b": 1}, tmp_path)
    c = _costs({"a": 1e-3, "b": 2e-3}, one={"a": 0.5e-3, "b": 1e-3})
    r = simulate(m.plan, c, _dev(cores=2))
    assert r.makespan >= critical_path_bound(m.plan, c) == pytest.approx(2e-3)


def test_a_cross_stream_edge_costs_an_event(tmp_path):
    m = _compile(_pair(True), {"a": 0, "b": 1}, tmp_path)
    assert len(m.plan.events) == 1
    c = _costs({"a": 1e-3, "b": 1e-3})
    assert simulate(m.plan, c, _dev(event_s=5e-5)).makespan == pytest.approx(2e-3 + 5e-5)


def test_the_host_is_shared_by_all_streams(tmp_path):
    m = _compile(_pair(False), {"a": 0, "b": 1}, tmp_path)
    c = _costs({"a": 1e-3, "b": 1e-3})
    r = simulate(m.plan, c, _dev(host_s=1e-4))
    assert r.makespan == pytest.approx(2e-4 + 1e-3)          # the second launch waits for the first
    assert sorted(r.start) == pytest.approx([1e-4, 2e-4])


def test_cuda_kernels_that_fill_the_device_do_not_overlap(tmp_path):
    m = _compile(_pair(False), {"a": 0, "b": 1}, tmp_path)
    c = OpCosts(device="cuda", times={"a": 1e-3, "b": 1e-3}, source="measured")
    full = DeviceModel(kind="cuda")                      # no graph given: demand 1 each
    assert simulate(m.plan, c, full).makespan == pytest.approx(2e-3)
    # the compiled graph's shapes say these are tiny kernels: they overlap
    assert simulate(m.plan, c, full, graph=m.graph).makespan == pytest.approx(1e-3)


def _random_graph(n: int, seed: int):
    rng = random.Random(seed)
    b = pyge.GraphBuilder(f"r{seed}")
    x = b.input("x", "float32", (4,))
    vals = []
    for i in range(n):
        preds = [vals[j] for j in range(i) if rng.random() < 0.3][:2] or [x]
        vals.append(b.op("Relu" if len(preds) == 1 else "Add", preds, name=f"n{i}"))
    used = {id(v) for nd in b.graph.nodes for v in nd.inputs}
    b.graph.outputs += [v for v in vals if id(v) not in used]
    return b.build()


@settings(max_examples=25, deadline=None)
@given(st.integers(2, 10), st.integers(0, 10_000), st.integers(1, 4), st.integers(1, 4))
def test_makespan_lies_between_the_bounds(tmp_path_factory, n, seed, k, cores):
    g = _random_graph(n, seed)
    rng = random.Random(seed)
    streams = {f"n{i}": rng.randrange(k) for i in range(n)}
    m = _compile(g, streams, tmp_path_factory.mktemp("sim"))
    times = {f"n{i}": rng.uniform(1e-5, 1e-3) for i in range(n)}
    c = _costs(times, threads=cores)
    r = simulate(m.plan, c, _dev(cores=cores))
    busy = max(1, m.num_streams)
    demand = max(1, cores // busy) / cores
    assert r.makespan >= critical_path_bound(m.plan, c) - 1e-12
    assert r.makespan >= sum(times.values()) * demand - 1e-12      # the device's total work
    assert r.makespan <= sum(times.values()) + 1e-12                # never worse than serial
    for pn in m.plan.nodes:                                         # dependencies are kept
        for p in {m.plan.values[v].producer for v in pn.inputs if v >= 0} - {-1}:
            assert r.start[pn.index] >= r.end[p] - 1e-12


def test_critical_path_bound_of_a_diamond(tmp_path):
    b = pyge.GraphBuilder("diamond")
    x = b.input("x", "float32", (4,))
    top = b.op("Relu", [x], name="top")
    left, right = b.op("Abs", [top], name="left"), b.op("Neg", [top], name="right")
    b.graph.outputs.append(b.op("Add", [left, right], name="join"))
    m = _compile(b.build(), {"top": 0, "left": 0, "right": 1, "join": 0}, tmp_path)
    c = _costs({"top": 1.0, "left": 5.0, "right": 3.0, "join": 1.0})
    assert critical_path_bound(m.plan, c) == pytest.approx(7.0)
    assert simulate(m.plan, c, _dev()).makespan == pytest.approx(7.0)


def test_cpu_threads_follow_the_executors_rule(tmp_path):
    # executors/cpu.py gives the main stream ceil(C / average parallelism) threads, the side
    # streams what is left (at least 1). The simulator used to give every stream C // k, so
    # a long chain beside one tiny op ran at one-thread speed: 8 ms here instead of ~4
    b = pyge.GraphBuilder("chain_and_tiny")
    x = b.input("x", "float32", (4,))
    v = x
    for name in "abcd":
        v = b.op("Relu", [v], name=name)
    b.graph.outputs += [v, b.op("Abs", [x], name="e")]
    m = _compile(b.build(), {"a": 0, "b": 0, "c": 0, "d": 0, "e": 1}, tmp_path)
    c = _costs({"a": 1e-3, "b": 1e-3, "c": 1e-3, "d": 1e-3, "e": 1e-4},
               one={"a": 2e-3, "b": 2e-3, "c": 2e-3, "d": 2e-3, "e": 2e-4})    # perfect 2x scaling
    assert 4e-3 <= simulate(m.plan, c, _dev(cores=2)).makespan < 4.5e-3
    # an op that does not scale keeps one core busy, whatever threads it holds
    c = _costs({"a": 1e-3, "b": 1e-3, "c": 1e-3, "d": 1e-3, "e": 1e-3})
    assert simulate(m.plan, c, _dev(cores=2)).makespan == pytest.approx(4e-3)
