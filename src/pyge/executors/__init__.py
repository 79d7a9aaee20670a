"""Executors read a finished plan (and the graph, for kernels); they never call passes.

    cpu, one stream      SequentialExecutor (no threads to hand work to)
    cpu, several streams CpuExecutor (one worker thread per busy stream)
    cuda                 CudaExecutor (one torch.cuda.Stream per stream, CUDA graph replay)
"""
from __future__ import annotations

from ..errors import OptionError
from .sequential import SequentialExecutor


def _busy_streams(plan) -> int:
    return sum(1 for steps in plan.streams if steps)


def check_usable(device: str) -> None:
    """Raise OptionError unless `device` can run a model here: a cuda device needs a usable
    GPU. pyge.compile calls it, so that a missing GPU fails the compile, not the first run.
    (Tests without a GPU stand in a fake by replacing `cuda._device`, which this calls.)"""
    if str(device).startswith("cuda"):
        from . import cuda
        cuda._device(device)


def make_executor(graph, plan, device: str = "cpu", options=None, calls=None):
    """The executor for `plan` on `device`. `calls`: the kernels of a dynamic-shape root's
    call nodes, by sub-model name (executors/partitioned.py; base.build_kernels)."""
    dev = str(device)
    if dev == "cpu":
        if _busy_streams(plan) > 1:
            from .cpu import CpuExecutor
            return CpuExecutor(graph, plan, "cpu", options, calls=calls)
        return SequentialExecutor(graph, plan, "cpu", options, calls=calls)
    if dev == "cuda" or dev.startswith("cuda:"):
        from .cuda import CudaExecutor
        return CudaExecutor(graph, plan, dev, options, calls=calls)
    raise OptionError(f"unknown device {device!r}; accepted values: cpu, cuda, cuda:N")
