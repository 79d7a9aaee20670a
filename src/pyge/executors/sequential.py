"""One thread runs every stream's launches in a merged order that respects every wait.

The reference executor: multi-stream plans run here give the numbers a concurrent run
must reproduce.
"""
from __future__ import annotations

from typing import Any, Mapping

import torch

from ..errors import ExecutionError, PygeError
from ..ir.graph import Graph
from ..options import parse_options
from ..plan.order import merged_order
from ..plan.plan import Plan
from .base import (build_kernels, check_feeds, constants, feeds_to_device, node_descriptions, outputs_to_numpy,
                   select_outputs)
from .host_memory import tune_host_malloc


class SequentialExecutor:
    name = "sequential"

    def __init__(self, graph: Graph, plan: Plan, device: Any = "cpu", options=None, calls=None):
        self.plan = plan
        self.graph = graph
        self.device = device
        self.kernels = build_kernels(graph, plan, device, calls)
        if str(device) == "cpu":
            tune_host_malloc()          # host_memory.py: no page faults on every run
        self.descs = node_descriptions(graph, plan)
        self.consts = constants(graph, plan, device)
        self.order = merged_order(plan)
        # pyge.intraOpThreads=N (N > 0) holds for the run's thread here too; 0 leaves torch's
        # setting alone (one stream: nothing to share the cores with).
        self.threads = parse_options(options)["pyge.intraOpThreads"]

    def run(self, feeds: Mapping[str, Any], hooks=None, output_names=None) -> dict[str, Any]:
        """Outputs by name (only `output_names`, in that order, when given)."""
        picked = select_outputs(self.plan, output_names)
        if not self.threads or self.threads == torch.get_num_threads():
            return self._run(feeds, hooks, picked)
        saved = torch.get_num_threads()
        torch.set_num_threads(self.threads)
        try:
            return self._run(feeds, hooks, picked)
        finally:
            torch.set_num_threads(saved)

    def _run(self, feeds: Mapping[str, Any], hooks, picked) -> dict[str, Any]:
        plan = self.plan
        arrays = check_feeds(self.graph, plan, feeds)
        env: list[Any] = [None] * len(plan.values)
        for vi, t in self.consts.items():
            env[vi] = t
        fed = feeds_to_device(arrays, self.device)
        for vi, t in zip(plan.inputs, fed):
            env[vi] = t
        for ni in self.order:
            pn = plan.nodes[ni]
            args = [env[i] if i >= 0 else None for i in pn.inputs]
            try:
                if hooks is not None:
                    hooks.before(ni, pn.stream)
                res = self.kernels[ni](args)
                if hooks is not None:
                    hooks.after(ni, pn.stream)
            except PygeError:
                raise
            except Exception as err:  # noqa: BLE001 - name the node, keep the cause
                raise ExecutionError(self.descs[ni], err) from err
            for vi, r in zip(pn.outputs, res):
                env[vi] = r
            for vi in pn.free_after:
                env[vi] = None
        return outputs_to_numpy(plan, [env[i] for i in plan.outputs],
                                [*self.consts.values(), *fed], picked)
