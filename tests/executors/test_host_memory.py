"""glibc malloc thresholds raised for CPU runs, unless the user chose otherwise."""
from __future__ import annotations

import pytest

from pyge.executors import host_memory


class _Fn:
    """Stands in for a ctypes function (takes argtypes / restype)."""

    def __init__(self, fn):
        self.fn, self.argtypes, self.restype = fn, None, None

    def __call__(self, *a):
        return self.fn(*a)


def _libc(result: int, seen: list):
    class Libc:
        gnu_get_libc_version = object()
        mallopt = _Fn(lambda p, v: seen.append((p, v)) or result)
    return lambda *a: Libc()


@pytest.fixture
def fresh(monkeypatch):
    monkeypatch.setattr(host_memory, "_outcome", None)
    monkeypatch.setattr(host_memory.sys, "platform", "linux")
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
    seen: list = []
    fresh.setattr(host_memory.ctypes, "CDLL", _libc(1, seen))
    assert host_memory.tune_host_malloc() is False
    assert host_memory.host_malloc_state() == why and seen == []


def test_applied_once(fresh):
    seen: list = []
    fresh.setattr(host_memory.ctypes, "CDLL", _libc(1, seen))
    assert host_memory.host_malloc_state() == "not tried"
    assert host_memory.tune_host_malloc() is True
    assert host_memory.tune_host_malloc() is True          # once per process
    assert seen == [(host_memory._M_MMAP_THRESHOLD, host_memory.MMAP_THRESHOLD),
                    (host_memory._M_TRIM_THRESHOLD, host_memory.TRIM_THRESHOLD)]
    assert host_memory.host_malloc_state() == "applied"


def test_refusal_is_reported_not_raised(fresh):
    fresh.setattr(host_memory.ctypes, "CDLL", _libc(0, []))
    assert host_memory.tune_host_malloc() is False
    assert host_memory.host_malloc_state() == "mallopt refused"
