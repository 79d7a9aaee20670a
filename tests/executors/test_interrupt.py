"""Ctrl-C while a side stream's kernel is stuck: the caller gets KeyboardInterrupt at once,
and the next run does not queue behind the abandoned kernel (issue 20 item 7)."""
from __future__ import annotations

import signal
import threading
import time

import numpy as np
import pytest

import pyge
from pyge.executors.cpu import CpuExecutor
from pyge.kernels import register

from .helpers import compile_with_streams

# TestBlock blocks on GATE while BLOCK["on"] (bounded, so that a broken test cannot hang).
GATE = threading.Event()
BLOCK = {"on": True}
STARTED = threading.Event()


@register("TestBlock", domain="pyge.test")
def _test_block(ctx):
    def fn(xs):
        if BLOCK["on"]:
            STARTED.set()
            GATE.wait(15)
        return [xs[0] + 1.0]
    return fn


@pytest.fixture(autouse=True)
def _blocking():
    # Python's Ctrl-C handler for the test: a process started in the background by a shell
    # without job control (`pytest ... &`) inherits SIGINT ignored, and Python then installs
    # none, so the interrupt the tests send would do nothing.
    old = signal.signal(signal.SIGINT, signal.default_int_handler)
    GATE.clear()
    STARTED.clear()
    BLOCK["on"] = True
    yield
    BLOCK["on"] = False
    GATE.set()               # let any abandoned kernel return
    signal.signal(signal.SIGINT, old)


def _graph(main_waits: bool):
    """Stuck (TestBlock) on stream 1. main_waits: stream 0's last node reads it (the caller
    sleeps in a Recv); else Stuck's value is an output of its own (the caller sleeps in the
    join after its own stream)."""
    b = pyge.GraphBuilder("interrupt")
    x = b.input("x", "float32", (2, 3))
    k = b.op("TestBlock", [x], name="Stuck", domain="pyge.test")
    r = b.op("Relu", [x], name="R")
    if main_waits:
        b.output(b.op("Add", [k, r], name="Y"), "y")
        return b.build(), {"Stuck": 1, "R": 0, "Y": 0}
    b.output(r, "y")
    b.output(k, "k")
    return b.build(), {"Stuck": 1, "R": 0}


def _interrupt_when_stuck() -> threading.Thread:
    """Send SIGINT to the main thread once the kernel is stuck (never after the test)."""
    main = threading.main_thread().ident

    def send():
        if STARTED.wait(5) and not GATE.is_set():
            time.sleep(0.1)
            signal.pthread_kill(main, signal.SIGINT)
    t = threading.Thread(target=send, daemon=True)
    t.start()
    return t


def _interrupted_run(model, x) -> float:
    sender = _interrupt_when_stuck()
    t0 = time.perf_counter()
    with pytest.raises(KeyboardInterrupt):
        model.run({"x": x})
        time.sleep(5)        # the run returned before the interrupt came: fail below, not hang
    sender.join(5)
    return time.perf_counter() - t0


@pytest.mark.timeout(30)
@pytest.mark.skipif(not hasattr(signal, "pthread_kill"), reason="needs signal.pthread_kill (POSIX)")
@pytest.mark.parametrize("main_waits", [True, False], ids=["caller-in-recv", "caller-in-join"])
def test_ctrl_c_returns_at_once_and_the_next_run_uses_a_fresh_worker(main_waits):
    g, streams = _graph(main_waits)
    model = compile_with_streams(g, streams)
    ex = model.executor
    assert isinstance(ex, CpuExecutor) and ex.busy == [0, 1]
    x = np.arange(6, dtype=np.float32).reshape(2, 3) - 2
    elapsed = _interrupted_run(model, x)
    assert elapsed < 3, f"KeyboardInterrupt took {elapsed:.1f} s"   # the kernel holds for 15 s
    (stuck,) = ex._abandoned
    assert stuck[0].is_alive()                       # still inside TestBlock
    BLOCK["on"] = False
    t0 = time.perf_counter()
    out = model.run({"x": x})
    assert time.perf_counter() - t0 < 2              # not queued behind the stuck kernel
    if main_waits:
        np.testing.assert_allclose(out["y"], (x + 1) + np.maximum(x, 0))
    else:
        np.testing.assert_allclose(out["k"], x + 1)
    assert stuck[0] not in ex.worker_threads()
    GATE.set()
    stuck[0].join(5)
    assert not stuck[0].is_alive()                   # it left once its kernel returned
    np.testing.assert_allclose(model.run({"x": x})["y"], out["y"])


def _refused_while_stuck_then_runs(ex: CpuExecutor, x, match: str) -> None:
    """Ctrl-C strands a kernel that may still write ex's fixed buffers: the next run fails
    fast naming it (y = Stuck + R, with Stuck x + 1 and R relu(x) of x = ones), and once the
    kernel has returned a run gives the right result."""
    try:
        assert _interrupted_run(ex, x) < 3
        BLOCK["on"] = False
        t0 = time.perf_counter()
        with pytest.raises(pyge.ExecutionError, match=match):
            ex.run({"x": x})
        assert time.perf_counter() - t0 < 1
        GATE.set()
        ex._abandoned[0][0].join(5)
        np.testing.assert_allclose(ex.run({"x": x})["y"], x + 1 + x)
    finally:
        ex.close()


@pytest.mark.timeout(30)
@pytest.mark.skipif(not hasattr(signal, "pthread_kill"), reason="needs signal.pthread_kill (POSIX)")
def test_with_an_arena_the_next_run_fails_fast_naming_the_busy_node():
    g, streams = _graph(main_waits=True)
    base = compile_with_streams(g, streams)
    ex = CpuExecutor(base.graph, base.plan, "cpu", base.options, arena=True)
    x = np.ones((2, 3), np.float32)
    _refused_while_stuck_then_runs(ex, x, r"node 'Stuck' \(TestBlock\) of an interrupted run "
                                          r"is still running")


@pytest.mark.timeout(30)
@pytest.mark.skipif(not hasattr(signal, "pthread_kill"), reason="needs signal.pthread_kill (POSIX)")
def test_with_planned_buffers_the_next_run_fails_fast_too():
    """Kernels writing into planned buffers (executors/into.py: R here) make an arena as
    arena=True does: a run while an abandoned kernel may still write them is refused."""
    b = pyge.GraphBuilder("interrupt_into")
    x = b.input("x", "float32", (2, 3))
    k = b.op("Abs", [x], name="Stuck")               # its kernel is replaced by TestBlock's
    b.output(b.op("Add", [k, b.op("Relu", [x], name="R")], name="Y"), "y")
    base = compile_with_streams(b.build(), {"Stuck": 1, "R": 0, "Y": 0})
    ex = CpuExecutor(base.graph, base.plan, "cpu", base.options)
    ex.kernels = [_test_block(None) if n.name == "Stuck" else fn
                  for n, fn in zip(base.plan.nodes, ex.kernels)]
    assert ex.into().calls[[n.name for n in base.plan.nodes].index("R")] is not None
    _refused_while_stuck_then_runs(ex, np.ones((2, 3), np.float32),
                                   r"node 'Stuck' \(Abs\) of an interrupted run")


@pytest.mark.timeout(30)
def test_close_does_not_wait_for_an_abandoned_kernel():
    g, streams = _graph(main_waits=True)
    model = compile_with_streams(g, streams)
    if not hasattr(signal, "pthread_kill"):
        pytest.skip("needs signal.pthread_kill (POSIX)")
    _interrupted_run(model, np.ones((2, 3), np.float32))
    t0 = time.perf_counter()
    model.executor.close()
    assert time.perf_counter() - t0 < 1
