"""One thread runs every stream's launches in a merged order that respects every wait.

The reference executor: multi-stream plans run here give the numbers a concurrent run
must reproduce. The launches run as one generated straight-line function (codegen.py),
compiled when the executor is made (the hooked variant at the first run with hooks).
Kernels that can write their results into the memory plan's buffers do (into.py); those
buffers belong to one run at a time, so runs are then serialised by a lock.
"""
from __future__ import annotations

import threading
from typing import Any, Mapping

import torch

from ..errors import ExecutionError, PygeError
from ..ir.graph import Graph
from ..options import parse_options
from ..plan.order import merged_order
from ..plan.plan import LAUNCH, Plan
from .base import (build_kernels, check_feeds, constants, fast_feeds, feeds_to_device, node_descriptions,
                   outputs_to_numpy, select_outputs, storage_keys, tensor_feeds, tensor_outputs)
from .codegen import compile_program, local_values, output_kinds, result_checkers
from .contention import TeamSizer
from .host_memory import tune_host_malloc
from .into import Into, cached_into


class _Solo:
    """The job of a one-thread run: the generated program's view of it (no events)."""

    __slots__ = ("flags", "aborted", "hooks", "error")

    def __init__(self, hooks):
        self.flags = ()
        self.aborted = False
        self.hooks = hooks
        self.error: tuple[int, BaseException] | None = None

    def fail(self, node: int, stream: int, err: BaseException) -> None:
        self.error = (node, err)


class SequentialExecutor:
    name = "sequential"

    def __init__(self, graph: Graph, plan: Plan, device: Any = "cpu", options=None, calls=None,
                 into: bool = True):
        """`into`: let kernels write into the memory plan's buffers (into.py) on the CPU."""
        self.plan = plan
        self.graph = graph
        self.device = device
        self.kernels = build_kernels(graph, plan, device, calls)
        if str(device) == "cpu":
            tune_host_malloc()          # host_memory.py: no page faults on every run
        self.descs = node_descriptions(graph, plan)
        self.consts = constants(graph, plan, device)
        self._const_keys = storage_keys(self.consts.values())     # constants: the same every run
        self._env0: list[Any] = [None] * len(plan.values)         # a run's table starts as this
        for vi, t in self.consts.items():
            self._env0[vi] = t
        self._fast_feeds = fast_feeds(plan) if str(device) == "cpu" else (lambda feeds: None)
        self._tensor_feeds = tensor_feeds(plan) if str(device) == "cpu" else (lambda xs: None)
        self.order = merged_order(plan)
        self._steps = [(LAUNCH, ni) for ni in self.order]
        self._owner = local_values(plan, [self._steps])
        self._kinds = output_kinds(plan)
        self._checks = result_checkers(plan, self._kinds)
        self._programs: dict[bool, tuple] = {}   # hooked -> (kernels it was made from, program)
        self._into_on = into and str(device) == "cpu"
        self._into: tuple | None = None          # (kernels it was made from, Into)
        self._lock = threading.Lock()
        self.program(False)
        # pyge.intraOpThreads=N (N > 0) holds for the run's thread here too; 0 takes torch's
        # setting (one stream: nothing to share the cores with), less while other work
        # competes for the cores (contention.py).
        self.threads = parse_options(options)["pyge.intraOpThreads"]
        self._sizer = TeamSizer()

    def program(self, hooked: bool):
        """The generated function of the launches (with hooks calls if `hooked`), made at
        first need and again if `kernels` was replaced (tests wrap kernels to spy on them)."""
        made = self._programs.get(hooked)
        if made is None or made[0] is not self.kernels:
            into = self.into()
            made = self._programs[hooked] = (self.kernels, compile_program(
                self.plan, self._steps, 0, -1, self.kernels, self._owner, self._kinds,
                self._checks, hooked=hooked, abortable=False,
                into=into.calls if into else None))
        return made[1]

    def into(self) -> Into:
        """Which nodes write into planned buffers (into.py), for the current kernels."""
        self._into = cached_into(self._into, self.plan, self.kernels, self._into_on)
        return self._into[1]

    def run(self, feeds: Mapping[str, Any], hooks=None, output_names=None) -> dict[str, Any]:
        """Outputs by name (only `output_names`, in that order, when given)."""
        plan = self.plan
        picked = select_outputs(plan, output_names)
        fed = self._fast_feeds(feeds)
        if fed is None:
            fed = feeds_to_device(check_feeds(self.graph, plan, feeds), self.device)
        return outputs_to_numpy(plan, self._call(fed, hooks), fed, picked, self._const_keys)

    def run_tensors(self, inputs: list, hooks=None) -> list | None:
        """Every output, in order, as CPU tensors, for inputs already CPU tensors of their
        planned dtypes and static shapes in input order; None (nothing run) for any other
        inputs, which `run` then takes (CpuExecutor.run_tensors)."""
        fed = self._tensor_feeds(inputs)
        if fed is None:
            return None
        return tensor_outputs(self.plan, self._call(fed, hooks), fed, self._const_keys)

    def _call(self, fed: list, hooks) -> list:
        """One run of run-time inputs `fed` with the run's thread team; the outputs' values."""
        saved = torch.get_num_threads()
        # forced, or torch's own setting: smaller while the machine is busy (contention.py)
        team = self.threads or (self._sizer.begin(saved) if saved > 1 else saved)
        try:
            if team != saved:
                torch.set_num_threads(team)
            if self.into():
                with self._lock:             # the planned buffers: one run at a time
                    return self._run(fed, hooks)
            return self._run(fed, hooks)
        finally:
            if not self.threads and saved > 1:
                self._sizer.end()
            if team != saved:
                torch.set_num_threads(saved)

    def _run(self, fed: list, hooks) -> list:
        plan = self.plan
        env = list(self._env0)
        for vi, t in zip(plan.inputs, fed):
            env[vi] = t
        job = _Solo(hooks)
        self.program(hooks is not None)(env, job)
        if job.error is not None:
            ni, err = job.error
            if isinstance(err, PygeError):
                raise err         # ours already name the culprit
            raise ExecutionError(self.descs[ni], err) from err
        return [env[i] for i in plan.outputs]
