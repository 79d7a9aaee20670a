"""CompiledModel: what pyge.compile returns."""
from __future__ import annotations

import threading
from typing import Any, Mapping

from .errors import PygeError
from .ir.graph import Graph
from .options import Options
from .plan.plan import Event, MemoryPlan, Plan


class CompiledModel:
    """A compiled plan plus the graph it was built from, bound to a device."""

    def __init__(self, graph: Graph, plan: Plan, device: str, options: Options,
                 timings: list | None = None):
        self.graph = graph
        self.plan = plan
        self.device = device
        self.options = options
        self.compile_timings = list(timings or [])
        self._executor = None
        self._lock = threading.Lock()

    # -- running -----------------------------------------------------------------------
    @property
    def executor(self):
        if self._executor is None:
            from .executors import make_executor
            self._executor = make_executor(self.graph, self.plan, self.device, self.options)
        return self._executor

    def run(self, feeds: Mapping[str, Any], **kwargs) -> dict[str, Any]:
        """Run once; returns output name -> numpy array.

        Concurrent calls on one model are serialised by a lock (one run owns the stream
        workers and, on CUDA, the captured buffers at a time); each caller gets its own results.
        """
        with self._lock:
            return self.executor.run(feeds, **kwargs)

    def profile(self, feeds: Mapping[str, Any], runs: int = 10, warmup: int = 1):
        from .profiling import profile_model
        with self._lock:
            return profile_model(self, feeds, runs=runs, warmup=warmup)

    # -- what the compiler decided -----------------------------------------------------
    def stream_of(self, name: str) -> int:
        for n in self.plan.nodes:
            if n.name == name:
                return n.stream
        for g in self.graph.all_graphs()[1:]:
            for n in g.nodes:
                if n.name == name:
                    return n.stream_id
        raise KeyError(f"no node named {name!r} in compiled model {self.plan.graph_name!r}")

    @property
    def num_streams(self) -> int:
        return self.plan.num_streams

    @property
    def streams(self) -> list[list[str]]:
        """Per stream, its operator nodes' names in execution order."""
        from .plan.plan import LAUNCH
        return [[self.plan.nodes[s.arg].name for s in steps if s.kind == LAUNCH]
                for steps in self.plan.streams]

    @property
    def events(self) -> list[Event]:
        return list(self.plan.events)

    @property
    def num_events(self) -> int:
        return self.plan.num_physical_events

    @property
    def custom_streams(self) -> list[int]:
        return list(self.plan.custom_streams)

    @property
    def memory(self) -> MemoryPlan:
        return self.plan.memory

    def verify(self) -> None:
        """Raise VerificationError if a dependency or buffer reuse is unordered across streams."""
        from .passes.verify import verify_plan
        verify_plan(self.plan)

    def save(self, path) -> None:
        from .modelfile import save_model
        save_model(self, path)

    def __repr__(self) -> str:
        return (f"<CompiledModel {self.plan.graph_name!r} on {self.device}: {len(self.plan.nodes)} nodes, "
                f"{self.num_streams} streams, {len(self.plan.events)} events>")


__all__ = ["CompiledModel", "PygeError"]
