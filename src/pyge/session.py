"""GE-style sessions: options at session level, overridden per graph; graphs by integer id.

    sess = pyge.Session({"ge.streamMaxParallelNum": "2"})        # session-level options
    sess.add_graph(1, g, {"ge.enableSingleStream": "true"})      # graph-level options win
    sess.build_graph(1)                                           # compile (optional)
    outputs = sess.run_graph(1, [x])                              # builds if needed, then runs

As in GE: a graph id is added once (a second add_graph with the same id is an error until
remove_graph); the options a graph is compiled with are the session's merged with the graph's,
key by key, the graph's taking precedence; option keys and values are checked when they are
given, not when the graph is built. `run_graph` takes inputs as a list in graph-input order
(GE's RunGraph takes a vector of tensors) and then returns a list in graph-output order, or as
a dict of input name -> array and then returns a dict of output name -> array.
The graph is compiled as it is when build_graph (or the first run_graph) is called.
"""
from __future__ import annotations

import threading
from dataclasses import dataclass
from typing import Any, Mapping, Sequence

from .compiler import compile_graph
from .devices import check_device
from .errors import OptionError, PygeError
from .ir.graph import Graph
from .model import feeds_by_name
from .options import Options, parse_options


class SessionError(PygeError):
    """A graph id is unknown or already in use in this session."""


@dataclass
class _Entry:
    graph: Graph
    options: Options            # session options merged with the graph's
    graph_options: dict[str, str]
    model: Any = None            # CompiledModel once built


class Session:
    """Holds graphs by id with their options; compiles and runs them on one device."""

    def __init__(self, options: Mapping[str, Any] | None = None, device: str = "cpu"):
        self._options = parse_options(options)
        self.device = check_device(device)
        self._graphs: dict[int, _Entry] = {}
        self._lock = threading.RLock()

    @property
    def options(self) -> dict[str, str]:
        """The session-level options as given (string values)."""
        return self._options.as_dict()

    # -- graphs --------------------------------------------------------------------------
    def add_graph(self, graph_id: int, graph: Graph, options: Mapping[str, Any] | None = None) -> None:
        """Add `graph` under `graph_id` with graph-level `options` (overriding the session's)."""
        gid = _check_id(graph_id)
        if not isinstance(graph, Graph):
            raise SessionError(f"add_graph({gid}): expected a pyge.Graph, got {type(graph).__name__}")
        if options is not None and not isinstance(options, Mapping):
            raise OptionError(f"add_graph({gid}): options must be a dict, got {type(options).__name__}")
        graph_opts = parse_options(options).as_dict()     # checks keys and values now
        with self._lock:
            if gid in self._graphs:
                raise SessionError(f"graph id {gid} is already in this session; remove_graph({gid}) first")
            self._graphs[gid] = _Entry(graph, self._options.merged(graph_opts), graph_opts)

    def remove_graph(self, graph_id: int) -> None:
        with self._lock:
            self._entry(graph_id)
            del self._graphs[graph_id]

    @property
    def graph_ids(self) -> list[int]:
        return sorted(self._graphs)

    def graph_options(self, graph_id: int) -> dict[str, str]:
        """The options graph `graph_id` is compiled with (session merged with graph level)."""
        return self._entry(graph_id).options.as_dict()

    def is_graph_need_rebuild(self, graph_id: int) -> bool:
        """GE's IsGraphNeedRebuild: True while the graph has not been built."""
        return self._entry(graph_id).model is None

    # -- build and run -------------------------------------------------------------------
    def build_graph(self, graph_id: int, inputs: Sequence[Any] | Mapping[str, Any] | None = None):
        """Compile graph `graph_id` (once; later calls return the same model).

        `inputs`, when given, are checked against the compiled model's inputs (names, dtypes,
        shapes) without running anything. Returns the CompiledModel.
        """
        with self._lock:
            e = self._entry(graph_id)
            if e.model is None:
                e.model = compile_graph(e.graph, device=self.device, options=e.options, graph_id=graph_id)
            model = e.model
        if inputs is not None:
            from .executors.base import check_feeds   # deferred: executors load torch
            check_feeds(model.graph, model.plan, feeds_by_name(model.plan, inputs))
        return model

    def run_graph(self, graph_id: int, inputs: Sequence[Any] | Mapping[str, Any]):
        """Run graph `graph_id`, building it first if needed.

        A list of inputs (graph-input order) gives a list of outputs (graph-output order);
        a dict gives a dict.
        """
        model = self.build_graph(graph_id)
        out = model.run(feeds_by_name(model.plan, inputs))
        if isinstance(inputs, Mapping):
            return out
        return [out[model.plan.values[i].name] for i in model.plan.outputs]

    def compiled_model(self, graph_id: int):
        """The CompiledModel of a built graph (None if not built yet)."""
        return self._entry(graph_id).model

    def close(self) -> None:
        with self._lock:
            self._graphs.clear()

    def __enter__(self) -> "Session":
        return self

    def __exit__(self, *exc) -> None:
        self.close()

    def __repr__(self) -> str:
        built = sum(e.model is not None for e in self._graphs.values())
        return f"<pyge.Session on {self.device}: {len(self._graphs)} graph(s), {built} built>"

    def _entry(self, graph_id: int) -> _Entry:
        e = self._graphs.get(graph_id) if isinstance(graph_id, int) else None
        if e is None:
            known = ", ".join(str(i) for i in sorted(self._graphs)) or "none"
            raise SessionError(f"graph id {graph_id!r} is not in this session (graph ids: {known})")
        return e


def _check_id(graph_id: Any) -> int:
    if isinstance(graph_id, bool) or not isinstance(graph_id, int) or graph_id < 0:
        raise SessionError(f"graph id must be a non-negative integer, got {graph_id!r}")
    return graph_id


__all__ = ["Session", "SessionError"]
