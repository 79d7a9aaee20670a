"""glibc malloc thresholds raised for CPU runs, unless the user chose otherwise."""
from __future__ import annotations

import sys

import pytest

from pyge.executors import host_memory


@pytest.fixture
def fresh(monkeypatch):
    monkeypatch.setattr(host_memory, "_state", {"done": False, "applied": False, "why": "not tried"})
    for k in ("PYGE_CPU_MALLOC", "MALLOC_MMAP_THRESHOLD_", "MALLOC_TRIM_THRESHOLD_", "MALLOC_TOP_PAD_",
              "GLIBC_TUNABLES", "LD_PRELOAD"):
        monkeypatch.delenv(k, raising=False)
    return monkeypatch


@pytest.mark.parametrize("env,why", [({"PYGE_CPU_MALLOC": "system"}, "PYGE_CPU_MALLOC=system"),
                                     ({"MALLOC_TRIM_THRESHOLD_": "0"}, "MALLOC_TRIM_THRESHOLD_ is set"),
                                     ({"LD_PRELOAD": "/usr/lib/libjemalloc.so.2"}, "LD_PRELOAD names an allocator")])
def test_user_choice_is_respected(fresh, env, why):
    for k, v in env.items():
        fresh.setenv(k, v)
    calls = []
    fresh.setattr(host_memory.ctypes, "CDLL", lambda *a: calls.append(a))   # must not be reached
    assert host_memory.tune_host_malloc() is False
    assert host_memory.host_malloc_state() == why and calls == []


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="mallopt is glibc's (Linux)")
def test_applied_once_on_glibc(fresh):
    import ctypes
    if not hasattr(ctypes.CDLL(None), "gnu_get_libc_version"):
        pytest.skip("not glibc (musl or another libc): nothing to tune")
    seen = []
    real = ctypes.CDLL

    class Libc:
        def __init__(self, *a):
            self._libc = real(None)
            self.gnu_get_libc_version = self._libc.gnu_get_libc_version

        @property
        def mallopt(self):
            def call(param, value):
                seen.append((param, value))
                return 1
            return _Fn(call)

    fresh.setattr(host_memory.ctypes, "CDLL", Libc)
    assert host_memory.tune_host_malloc() is True
    assert host_memory.tune_host_malloc() is True          # once per process
    assert seen == [(host_memory._M_MMAP_THRESHOLD, host_memory.MMAP_THRESHOLD),
                    (host_memory._M_TRIM_THRESHOLD, host_memory.TRIM_THRESHOLD)]
    assert host_memory.host_malloc_state() == "applied"


class _Fn:
    """A callable that accepts ctypes' argtypes/restype attributes."""

    def __init__(self, fn):
        self.fn, self.argtypes, self.restype = fn, None, None

    def __call__(self, *a):
        return self.fn(*a)


def test_refusal_is_reported_not_raised(fresh):
    class Libc:
        gnu_get_libc_version = object()
        mallopt = _Fn(lambda p, v: 0)
    fresh.setattr(host_memory.ctypes, "CDLL", lambda *a: Libc())
    fresh.setattr(host_memory.sys, "platform", "linux")
    assert host_memory.tune_host_malloc() is False
    assert host_memory.host_malloc_state() == "mallopt refused"
