"""Keep glibc from handing a CPU run's freed activations back to the kernel.

Every CPU run allocates its intermediates afresh (torch has no caching allocator on the CPU)
and frees them at their release points. glibc serves blocks above its mmap threshold with
mmap and returns freed heap tops above its trim threshold to the kernel, so the next run
touches new pages and pays a fault for every 4 KiB page. Raising both thresholds keeps those
pages in the process for the next run, which is what onnxruntime's arena and PyTorch's advice
(jemalloc / tcmalloc for CPU inference) achieve in their own ways. The price is resident
memory: freed blocks below 32 MiB stay with the process instead of going back to the system.
`benchmarks/bench_omp_wait.py` times whole models with and without this ("malloc left
alone"); docs/performance.md has the figures.

Applied once, when the first CPU executor is built, on glibc only, and never when the user has
chosen: set PYGE_CPU_MALLOC=system to leave malloc alone; it is also left alone when any of
MALLOC_MMAP_THRESHOLD_, MALLOC_TRIM_THRESHOLD_, MALLOC_TOP_PAD_ or GLIBC_TUNABLES is set, or
when LD_PRELOAD names another allocator (jemalloc, tcmalloc, mimalloc).
"""
from __future__ import annotations

import ctypes
import logging
import os
import sys
import threading

log = logging.getLogger(__name__)

_M_TRIM_THRESHOLD = -1
_M_MMAP_THRESHOLD = -3
MMAP_THRESHOLD = 32 * 1024 * 1024        # glibc's largest allowed value on 64-bit
TRIM_THRESHOLD = 512 * 1024 * 1024

_lock = threading.Lock()
_outcome: str | None = None      # "applied", or why not; None until the first CPU executor


def _user_choice() -> str | None:
    if os.environ.get("PYGE_CPU_MALLOC", "").strip().lower() == "system":
        return "PYGE_CPU_MALLOC=system"
    for k in ("MALLOC_MMAP_THRESHOLD_", "MALLOC_TRIM_THRESHOLD_", "MALLOC_TOP_PAD_", "GLIBC_TUNABLES"):
        if k in os.environ:
            return f"{k} is set"
    pre = os.environ.get("LD_PRELOAD", "")
    if any(a in pre for a in ("jemalloc", "tcmalloc", "mimalloc")):
        return "LD_PRELOAD names an allocator"
    if not sys.platform.startswith("linux"):
        return "not Linux"
    return None


def _apply() -> str:
    why = _user_choice()
    if why is not None:
        return why
    try:
        libc = ctypes.CDLL(None)
        if not hasattr(libc, "gnu_get_libc_version"):
            return "not glibc"
        mallopt = libc.mallopt
        mallopt.argtypes, mallopt.restype = [ctypes.c_int, ctypes.c_int], ctypes.c_int
        ok = mallopt(_M_MMAP_THRESHOLD, MMAP_THRESHOLD) == 1
        ok = mallopt(_M_TRIM_THRESHOLD, TRIM_THRESHOLD) == 1 and ok
    except (OSError, AttributeError) as err:
        return f"no mallopt ({err})"
    return "applied" if ok else "mallopt refused"


def tune_host_malloc() -> bool:
    """Raise glibc's mmap and trim thresholds once per process; True if they are raised."""
    global _outcome
    with _lock:
        if _outcome is None:
            _outcome = _apply()
            log.debug("host malloc thresholds: %s", _outcome)
        return _outcome == "applied"


def host_malloc_state() -> str:
    """'applied', or why the thresholds were left alone ('not tried' before the first CPU run)."""
    return _outcome or "not tried"
