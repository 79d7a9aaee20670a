"""Faults on one stream while others wait on it: a prompt error, never a hang; the model
stays usable; concurrent callers both get correct results."""
from __future__ import annotations

import threading
import time

import numpy as np
import pytest

import pyge
from pyge.executors.cpu import CpuExecutor
from pyge.kernels import register
from pyge.kernels._util import direct
from pyge.executors.sequential import SequentialExecutor

from .helpers import compile_with_streams

# Test-only kernels: TestRaise fails while FAIL["on"], else passes its input through;
# TestSleep sleeps (a long-running stream that must still stop promptly on abort).
FAIL = {"on": True}
SLEEP_S = 0.02


@register("TestRaise", domain="pyge.test")
def _test_raise(ctx):
    def fn(xs):
        if FAIL["on"]:
            raise RuntimeError("boom")
        return [xs[0] * 1.0]
    return fn


@register("TestSleep", domain="pyge.test")
def _test_sleep(ctx):
    def fn(xs):
        time.sleep(SLEEP_S)
        return [xs[0] + 1.0]
    return fn


def _direct_raise(x):
    if FAIL["on"]:
        raise RuntimeError("direct boom")
    return x * 1.0


@register("TestDirectRaise", domain="pyge.test")
def _test_direct_raise(ctx):
    """As TestRaise, but marked direct: the generated code calls it without the lists."""
    return direct(lambda xs: [_direct_raise(xs[0])], _direct_raise)


@register("TestBadFactory", domain="pyge.test")
def _test_bad_factory(ctx):
    if FAIL["on"]:      # as when a kernel's constant is too large to allocate
        raise RuntimeError("DefaultCPUAllocator: can't allocate memory")
    return lambda xs: [xs[0] * 1.0]


@pytest.fixture(autouse=True)
def _failing():
    FAIL["on"] = True
    yield
    FAIL["on"] = False


def _fault_graph(chain: int = 50):
    """x -> Boom (stream 1); A chain on stream 0 and B on stream 2 both wait on Boom;
    a long TestSleep chain on stream 3 that nobody waits on until the end."""
    b = pyge.GraphBuilder("faults")
    x = b.input("x", "float32", (2, 3))
    boom = b.op("TestRaise", [x], name="Boom", domain="pyge.test")
    a = b.op("Relu", [x], name="A0")
    a = b.op("Add", [a, boom], name="A1")
    c = b.op("Abs", [x], name="B0")
    c = b.op("Mul", [c, boom], name="B1")
    s = x
    for i in range(chain):
        s = b.op("TestSleep", [s], name=f"S{i}", domain="pyge.test")
    y = b.op("Add", [a, c], name="Y0")
    y = b.op("Add", [y, s], name="Y1")
    b.output(y, "y")
    streams = {"Boom": 1, "A0": 0, "A1": 0, "B0": 2, "B1": 2, "Y0": 0, "Y1": 0}
    streams.update({f"S{i}": 3 for i in range(chain)})
    return b.build(), streams


def _expected(x: np.ndarray, chain: int) -> np.ndarray:
    return (np.maximum(x, 0) + x) + np.abs(x) * x + (x + chain)


@pytest.mark.timeout(20)
@pytest.mark.parametrize("fail_stream", [1, 0])
def test_fault_stops_every_stream_promptly(fail_stream):
    g, streams = _fault_graph()
    if fail_stream == 0:                 # the failing stream is the caller's own thread
        streams = {**streams, "Boom": 0, "A0": 1, "A1": 1}
    model = compile_with_streams(g, streams)
    assert isinstance(model.executor, CpuExecutor)
    x = np.arange(6, dtype=np.float32).reshape(2, 3) - 2
    t0 = time.perf_counter()
    with pytest.raises(pyge.ExecutionError, match="Boom") as info:
        model.run({"x": x})
    elapsed = time.perf_counter() - t0
    # The sleep chain alone takes 50 * 20 ms = 1 s: aborting must cut it short.
    assert elapsed < 0.5, f"abort took {elapsed:.2f} s"
    assert "RuntimeError" in str(info.value) and "boom" in str(info.value)
    assert isinstance(info.value.cause, RuntimeError)
    # Usable afterwards: the same workers run the next job to completion.
    FAIL["on"] = False
    out = model.run({"x": x})["y"]
    np.testing.assert_allclose(out, _expected(x, 50), rtol=1e-6)


@pytest.mark.timeout(20)
def test_fault_repeated_runs_never_hang():
    g, streams = _fault_graph(chain=3)
    model = compile_with_streams(g, streams)
    x = np.ones((2, 3), np.float32)
    for _ in range(20):
        with pytest.raises(pyge.ExecutionError, match="Boom"):
            model.run({"x": x})
    FAIL["on"] = False
    np.testing.assert_allclose(model.run({"x": x})["y"], _expected(x, 3), rtol=1e-6)


@pytest.mark.timeout(20)
def test_pyge_errors_pass_through_unwrapped():
    g, streams = _fault_graph(chain=2)
    model = compile_with_streams(g, streams)
    with pytest.raises(pyge.InputError, match="missing feed"):
        model.run({})
    with pytest.raises(pyge.InputError, match="shape"):
        model.run({"x": np.ones((3, 3), np.float32)})


@pytest.mark.timeout(20)
def test_two_threads_run_one_model_concurrently():
    FAIL["on"] = False
    g, streams = _fault_graph(chain=4)
    model = compile_with_streams(g, streams)
    results: dict[int, list] = {0: [], 1: []}
    errors: list[BaseException] = []

    def caller(tid: int):
        try:
            for i in range(5):
                x = np.full((2, 3), tid * 10 + i, np.float32) - 3
                results[tid].append((x, model.executor.run({"x": x})["y"]))
        except BaseException as err:  # noqa: BLE001 - reported below
            errors.append(err)

    threads = [threading.Thread(target=caller, args=(t,)) for t in (0, 1)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(15)
    assert not errors, errors
    for tid in (0, 1):
        assert len(results[tid]) == 5
        for x, y in results[tid]:
            np.testing.assert_allclose(y, _expected(x, 4), rtol=1e-6)


@pytest.mark.timeout(20)
@pytest.mark.parametrize("streams", [{"K": 0, "R": 0}, {"K": 1, "R": 0}])
def test_kernel_that_cannot_be_prepared_is_named(streams):
    """A kernel factory failing (kernels are prepared at the first run) is an ExecutionError
    naming the node, not the factory's bare exception; the model is usable once it can be."""
    b = pyge.GraphBuilder("prep")
    x = b.input("x", "float32", (2, 3))
    k = b.op("TestBadFactory", [x], name="K", domain="pyge.test")
    b.output(b.op("Add", [k, b.op("Relu", [x], name="R")], name="Y"), "y")
    model = compile_with_streams(b.build(), streams)
    x = np.ones((2, 3), np.float32)
    with pytest.raises(pyge.ExecutionError, match=r"node 'K' \(TestBadFactory\), preparing its kernel: "
                                                   r"RuntimeError: DefaultCPUAllocator"):
        model.run({"x": x})
    FAIL["on"] = False
    np.testing.assert_allclose(model.run({"x": x})["y"], 2 * x)


class _Trace:
    """Hooks as profiling uses them: every call, from whichever thread makes it."""

    def __init__(self):
        self.calls: list[tuple[str, int, int]] = []
        self._lock = threading.Lock()

    def _add(self, kind: str, i: int, s: int) -> None:
        with self._lock:
            self.calls.append((kind, i, s))

    def before(self, ni, s):
        self._add("before", ni, s)

    def after(self, ni, s):
        self._add("after", ni, s)

    def record(self, e, s):
        self._add("record", e, s)

    def wait(self, e, s):
        self._add("wait", e, s)


@pytest.mark.timeout(20)
def test_fault_under_hooks_stops_every_stream_promptly():
    """The hooked generated code (a profiled run) aborts as the plain one does: the failing
    node is named, the sleeping stream is cut short, its kernel got `before` but no `after`;
    the next hooked run sees every node once, on its plan stream."""
    g, streams = _fault_graph()
    model = compile_with_streams(g, streams)
    x = np.arange(6, dtype=np.float32).reshape(2, 3) - 2
    trace = _Trace()
    t0 = time.perf_counter()
    with pytest.raises(pyge.ExecutionError, match="Boom"):
        model.executor.run({"x": x}, hooks=trace)
    assert time.perf_counter() - t0 < 0.5
    boom = next(n.index for n in model.plan.nodes if n.name == "Boom")
    assert ("before", boom, 1) in trace.calls
    assert not any(c[0] == "after" and c[1] == boom for c in trace.calls)
    FAIL["on"] = False
    trace = _Trace()
    out = model.executor.run({"x": x}, hooks=trace)["y"]
    np.testing.assert_allclose(out, _expected(x, 50), rtol=1e-6)
    afters = sorted((i, s) for kind, i, s in trace.calls if kind == "after")
    assert afters == sorted((n.index, n.stream) for n in model.plan.nodes)
    assert any(c[0] == "wait" for c in trace.calls) and any(c[0] == "record" for c in trace.calls)


@pytest.mark.timeout(20)
@pytest.mark.parametrize("hooked", [False, True])
@pytest.mark.parametrize("executor", ["cpu", "sequential"])
def test_fault_in_a_direct_kernel_is_named(executor, hooked):
    """A direct kernel (called by the generated code without result lists) that raises is
    reported at its node, on a side stream the main one waits for, and in the reference."""
    b = pyge.GraphBuilder("direct_fault")
    x = b.input("x", "float32", (2, 3))
    d = b.op("TestDirectRaise", [x], name="D", domain="pyge.test")
    b.output(b.op("Add", [d, b.op("Relu", [x], name="R")], name="Y"), "y")
    model = compile_with_streams(b.build(), {"D": 1, "R": 0, "Y": 0})
    ex = model.executor if executor == "cpu" else \
        SequentialExecutor(model.graph, model.plan, "cpu", model.options)
    x = np.ones((2, 3), np.float32)
    hooks = _Trace() if hooked else None
    with pytest.raises(pyge.ExecutionError, match=r"'D'.*direct boom") as info:
        ex.run({"x": x}, hooks=hooks)
    assert isinstance(info.value.cause, RuntimeError)
    FAIL["on"] = False
    np.testing.assert_allclose(ex.run({"x": x}, hooks=hooks)["y"], 2 * x)
