"""Executors read a finished plan (and the graph, for kernels); they never call passes."""
from __future__ import annotations

from typing import Any

from ..errors import OptionError
from .sequential import SequentialExecutor


def make_executor(graph, plan, device: str = "cpu", options=None):
    dev = str(device)
    if dev == "cpu":
        return SequentialExecutor(graph, plan, "cpu", options)
    if dev.startswith("cuda"):
        raise OptionError(f"device {device!r}: the CUDA executor is not available yet")
    raise OptionError(f"unknown device {device!r}; accepted values: cpu, cuda")
