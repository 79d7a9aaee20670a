"""One thread runs every stream's launches in a merged order that respects every wait.

The reference executor: multi-stream plans run here give the numbers a concurrent run
must reproduce.
"""
from __future__ import annotations

from typing import Any, Mapping

from ..errors import ExecutionError, PygeError
from ..ir.graph import Graph
from ..plan.plan import Plan
from .base import build_kernels, check_feeds, constants, feeds_to_device, node_descriptions, outputs_to_numpy


class SequentialExecutor:
    name = "sequential"

    def __init__(self, graph: Graph, plan: Plan, device: Any = "cpu", options=None):
        self.plan = plan
        self.graph = graph
        self.device = device
        self.kernels = build_kernels(graph, plan, device)
        self.descs = node_descriptions(graph, plan)
        self.consts = constants(graph, plan, device)
        self.order = plan.launch_order()

    def run(self, feeds: Mapping[str, Any], hooks=None) -> dict[str, Any]:
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
                                [*self.consts.values(), *fed])
