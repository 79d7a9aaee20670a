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
