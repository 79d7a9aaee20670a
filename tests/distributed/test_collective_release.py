"""A collective kernel returns only once the backend has let go of the tensors it was handed.

gloo's wait() returns a moment before its worker thread drops the work's tensors; a worker
that drops them after the interpreter has begun to finalise aborts the process (the
"Releasing" paragraph of kernels/collective.py). Here a stand-in backend keeps a C++
reference to each tensor (a view of it, whose autograd metadata holds its base) for a while
after its wait() returns, as a late worker does, so that the kernel's wait is seen
deterministically.
"""
from __future__ import annotations

import logging
import threading
import time

import numpy as np
import pytest
import torch.distributed as dist

import pyge
from pyge.kernels import collective

from .conftest import feeds_for, one_collective

# op_type, attributes, the torch.distributed function its kernel calls
_GATHER = "all_gather_single" if hasattr(dist, "all_gather_single") else "all_gather_into_tensor"
OPS = [("AllReduce", {}, "all_reduce"),
       ("AllGather", {"group_size": 1}, _GATHER),
       ("AllToAll", {"group_size": 1}, "all_to_all_single")]


class LateWorker:
    """Wraps a torch.distributed function: runs it for real, then holds a C++ reference to
    every tensor it was given for `hold_s` after the returned work's wait() has returned."""

    def __init__(self, real, hold_s: float):
        self.real, self.hold_s = real, hold_s
        self.released = threading.Event()

    def __call__(self, *tensors, group=None, async_op=False, **kw):
        self.real(*tensors, group=group, **kw)
        views = [t.view(t.shape) for t in tensors]
        assert all(t._use_count() > 1 for t in tensors)      # the stand-in really holds them
        threading.Thread(target=self._let_go, args=(views,), daemon=True).start()
        return _DoneWork()

    def _let_go(self, views: list) -> None:
        time.sleep(self.hold_s)
        self.released.set()      # first: the kernel may return the moment the views go
        views.clear()


class _DoneWork:
    def wait(self, timeout=None) -> bool:
        return True


def _patch(monkeypatch, fn_name: str, hold_s: float) -> LateWorker:
    late = LateWorker(getattr(dist, fn_name), hold_s)
    monkeypatch.setattr(dist, fn_name, late)
    return late


@pytest.mark.parametrize("op_type,attrs,fn_name", OPS)
def test_the_kernel_waits_for_a_late_worker(group, monkeypatch, op_type, attrs, fn_name):
    late = _patch(monkeypatch, fn_name, hold_s=0.2)
    g = one_collective(op_type, **attrs)
    m = pyge.compile(g)
    feeds = feeds_for(g)
    t0 = time.monotonic()
    out = m.run(feeds)
    assert late.released.is_set(), "run() returned while the backend still held the tensors"
    assert time.monotonic() - t0 >= 0.2
    np.testing.assert_allclose(out["y"], np.maximum(feeds["x"], 0), rtol=0, atol=0)


def test_the_wait_is_bounded_and_logged(group, monkeypatch, caplog):
    late = _patch(monkeypatch, "all_reduce", hold_s=30.0)
    monkeypatch.setattr(collective, "RELEASE_WAIT_S", 0.05)
    g = one_collective("AllReduce")
    m = pyge.compile(g)
    feeds = feeds_for(g)
    t0 = time.monotonic()
    with caplog.at_level(logging.DEBUG, logger=collective.__name__):
        out = m.run(feeds)
    assert time.monotonic() - t0 < 5.0
    assert not late.released.is_set()
    assert "the backend still holds its tensors 0.05 s after the collective" in caplog.text
    assert "node 'AllReduce' (AllReduce) on rank 0 of 1" in caplog.text
    np.testing.assert_allclose(out["y"], np.maximum(feeds["x"], 0), rtol=0, atol=0)


@pytest.mark.parametrize("op_type,attrs,fn_name", OPS)
def test_real_gloo_lets_go_within_the_bound(group, monkeypatch, op_type, attrs, fn_name):
    """The kernel hands gloo tensors it alone holds, so a use count of one is 'let go': on
    the real backend every wait ends well inside the bound, and nothing stays held."""
    seen: list = []
    real_wait = collective.wait_released

    def recording(handed, limit_s=None):
        t0 = time.perf_counter()
        ok = real_wait(handed, limit_s)
        seen.append((ok, time.perf_counter() - t0, [t._use_count() for t in handed]))
        return ok
    monkeypatch.setattr(collective, "wait_released", recording)
    g = one_collective(op_type, **attrs)
    m = pyge.compile(g)
    feeds = feeds_for(g)
    for _ in range(30):
        np.testing.assert_allclose(m.run(feeds)["y"], np.maximum(feeds["x"], 0), rtol=0, atol=0)
    assert len(seen) == 30
    assert all(ok for ok, _, _ in seen)
    assert all(counts and set(counts) == {1} for _, _, counts in seen)
    assert max(s for _, s, _ in seen) < 0.5 * collective.RELEASE_WAIT_S


def test_wait_released_sees_a_reference_go(group):
    import torch
    t = torch.ones(3)
    view = t.view(3)              # holds t in C++
    assert t._use_count() == 2
    assert not collective.wait_released((t,), limit_s=0.01)

    def drop():
        time.sleep(0.05)
        box.clear()
    box = [view]
    del view
    threading.Thread(target=drop).start()
    assert collective.wait_released((t,), limit_s=5.0)
    assert t._use_count() == 1
