"""The generated straight-line programs (executors/codegen.py): the same numbers as the
reference interpreter, cut into chunks or not; values released where the plan says; hooks
and tracebacks through the generated source."""
from __future__ import annotations

import linecache
import random
import traceback
import weakref

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import pyge
from pyge.executors import codegen
from pyge.executors.cpu import CpuExecutor
from pyge.executors.interpreter import run_reference
from pyge.executors.sequential import SequentialExecutor
from pyge.kernels import register

from .helpers import compile_with_streams, random_feeds, random_graph, random_streams, replan


def _same(a: dict, b: dict) -> None:
    assert a.keys() == b.keys()
    for k in a:
        np.testing.assert_allclose(a[k], b[k], rtol=1e-6, atol=1e-6, err_msg=k)


@settings(max_examples=25, deadline=None, suppress_health_check=[HealthCheck.too_slow,
                                                                 HealthCheck.function_scoped_fixture])
@given(seed=st.integers(0, 10_000), nodes=st.integers(1, 30), k=st.integers(1, 4),
       chunk=st.sampled_from([1, 2, 3, 7, 1000]))
def test_chunked_programs_equal_the_reference(monkeypatch, seed, nodes, k, chunk):
    monkeypatch.setattr(codegen, "CHUNK", chunk)
    rng = random.Random(seed)
    g = random_graph(rng, nodes)
    single = pyge.compile(g, "cpu", {"ge.enableSingleStream": "true"})
    feeds = random_feeds(single, seed)
    want = run_reference(single.graph, feeds)
    _same(SequentialExecutor(single.graph, single.plan, "cpu").run(feeds), want)
    if k > 1:
        multi = replan(single, random_streams(k, seed))
        if isinstance(multi.executor, CpuExecutor):
            try:
                for _ in range(2):
                    _same(multi.executor.run(feeds), want)
            finally:
                multi.executor.close()


SEEN: dict[str, object] = {}


@register("TestKeep", domain="pyge.test")
def _test_keep(ctx):
    def fn(xs):
        y = xs[0] * 2.0
        SEEN["ref"] = weakref.ref(y)
        return [y]
    return fn


@register("TestLook", domain="pyge.test")
def _test_look(ctx):
    def fn(xs):
        SEEN["alive_later"] = SEEN["ref"]() is not None
        return [xs[0] + 0.0]
    return fn


@pytest.mark.parametrize("chunk", [1000, 1])
@pytest.mark.parametrize("streams", [None, {"K": 1, "A": 1, "W": 1, "B": 0, "L": 0, "Y": 0}])
def test_a_released_value_is_dropped(monkeypatch, chunk, streams):
    """K's output is last read by A; by the time L runs (after A), nothing holds it, though
    the stream of K and A is still running (W waits for L)."""
    monkeypatch.setattr(codegen, "CHUNK", chunk)
    b = pyge.GraphBuilder("release")
    x = b.input("x", "float32", (4, 4))
    kept = b.op("TestKeep", [x], name="K", domain="pyge.test")
    a = b.op("Relu", [kept], name="A")
    c = b.op("Neg", [x], name="B")
    look = b.op("TestLook", [b.op("Add", [a, c], name="L0")], name="L", domain="pyge.test")
    b.output(b.op("Abs", [look], name="Y"), "y")
    b.output(b.op("Add", [a, look], name="W"), "w")
    g = b.build()
    streams = None if streams is None else {**streams, "L0": 0}
    model = (pyge.compile(g, "cpu", {"ge.enableSingleStream": "true"}) if streams is None
             else compile_with_streams(g, streams))
    x = np.arange(16, dtype=np.float32).reshape(4, 4) - 8
    np.testing.assert_allclose(model.run({"x": x})["y"], np.abs(np.maximum(2 * x, 0) - x))
    assert SEEN["alive_later"] is False


def test_generated_source_is_readable_and_in_tracebacks():
    @register("TestFails", domain="pyge.test")
    def _fails(ctx):
        def fn(xs):
            raise ValueError("bad value")
        return fn

    b = pyge.GraphBuilder("src")
    x = b.input("x", "float32", (2, 2))
    b.output(b.op("TestFails", [b.op("Tanh", [x], name="T")], name="F", domain="pyge.test"), "y")
    model = pyge.compile(b.build(), "cpu")
    ex = model.executor
    src = "".join(linecache.getlines(ex.program(False).__code__.co_filename))
    assert "= d0(env[0])" in src             # Tanh: a direct call, no lists
    assert "r = k1([v1])" in src and "fix(1, r)" in src
    with pytest.raises(pyge.ExecutionError, match="node 'F' \\(TestFails\\)") as info:
        model.run({"x": np.ones((2, 2), np.float32)})
    frames = traceback.extract_tb(info.value.cause.__traceback__)
    gen = [f for f in frames if f.filename.startswith("<pyge generated")]
    assert gen and gen[0].line == "r = k1([v1])"


def test_sequential_hooks_get_each_nodes_stream():
    """A merged program (the reference run of a multi-stream plan) names each node's own
    plan stream to the hooks."""
    rng = random.Random(3)
    single = pyge.compile(random_graph(rng, 12), "cpu", {"ge.enableSingleStream": "true"})
    multi = replan(single, random_streams(3, 3))
    calls = []

    class Hooks:
        def before(self, ni, s):
            calls.append((ni, s))

        def after(self, ni, s):
            pass

    ex = SequentialExecutor(multi.graph, multi.plan, "cpu")
    _same(ex.run(random_feeds(single), hooks=Hooks()), single.run(random_feeds(single)))
    assert sorted(ni for ni, _ in calls) == list(range(len(multi.plan.nodes)))
    assert all(multi.plan.nodes[ni].stream == s for ni, s in calls)
