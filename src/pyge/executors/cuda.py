"""CUDA executor: one torch.cuda.Stream per logical stream, torch.cuda.Event per Send/Recv,
and static plans captured once into a CUDA graph and replayed ("sunk", as GE sinks a
static model to the device).

Issuing. One host thread issues every step in plan.order.host_order (base.merged_steps: a
WAIT is issued after its RECORD; physical event ids are reused on the strength of this order),
switching the current stream once per run of same-stream steps.
The GPU, not the host, provides the concurrency. Each run forks every logical stream
from the caller's current stream and joins every stream back into it before returning
(also when a kernel raises), so work the caller queues afterwards is ordered after the
whole model.

Modes.
- graph (default for static plans): the first run copies the feeds into static input
  tensors, runs once eagerly on the logical streams (warm-up: cuBLAS/cuDNN handles and
  workspaces, per-stream allocator pools), then captures one run with torch.cuda.graph on a
  capture stream that forks to the logical streams through events and joins back. Every
  later run copies the feeds into the static inputs, replays, and returns copies of the
  static outputs. If capture fails (a kernel syncs with the host), the executor says why in
  `capture_error`, logs a warning and stays in eager mode.
- eager: plans with dynamic shapes or host-side ops (cuda_memory.graph_blocker), or
  `pyge.cudaGraph=false`; also every run given `hooks`.

Profiling. `run(feeds, hooks=h)` and `run_eager(feeds, hooks=h)` run eagerly (a replay has
no per-op host calls). `hooks.before(node, stream)` / `hooks.after(node, stream)` are called
on the issuing thread with that logical stream current, so a profiler can record
`torch.cuda.Event(enable_timing=True)` on `torch.cuda.current_stream()` around each kernel;
`hooks.record` / `hooks.wait` follow each Send / Recv. `executor.streams[s]` is the
torch.cuda.Stream of logical stream s.

Outputs are numpy arrays, or device tensors with `run(feeds, output_device="cuda")` (fresh
tensors: a later replay does not overwrite them). Memory strategies: cuda_memory.py.
Concurrent `run` calls are serialised by a lock (static buffers belong to one run at a time).
"""
from __future__ import annotations

import logging
import threading
from typing import Any, Mapping

import torch

from ..errors import ExecutionError, OptionError, PygeError
from ..ir.graph import Graph
from ..kernels.convert import to_torch
from ..options import parse_options
from ..plan.plan import LAUNCH, RECORD, Plan
from .base import (Arena, build_kernels, check_feeds, constants, feeds_to_device, merged_steps,
                   node_descriptions, outputs_to_numpy, pick, select_outputs, stream_tables, unshared)
from .cuda_memory import graph_blocker, record_use

log = logging.getLogger(__name__)


def _device(device: Any) -> torch.device:
    if not torch.cuda.is_available():
        raise OptionError(f"device {str(device)!r}: CUDA is not available "
                          "(no GPU, or a CPU build of torch); use device='cpu'")
    dev = torch.device(device)
    if dev.index is None:
        dev = torch.device("cuda", torch.cuda.current_device())
    if dev.index >= torch.cuda.device_count():
        raise OptionError(f"device {str(device)!r}: only {torch.cuda.device_count()} CUDA device(s)")
    return dev


class CudaExecutor:
    name = "cuda"

    def __init__(self, graph: Graph, plan: Plan, device: Any = "cuda", options=None,
                 memory: str = "pool", calls=None):
        if memory not in ("pool", "arena"):
            raise OptionError(f"CUDA memory strategy {memory!r}; accepted values: pool, arena")
        self.device = _device(device)
        self.plan, self.graph, self.memory_strategy = plan, graph, memory
        with torch.cuda.device(self.device):
            kernels = build_kernels(graph, plan, self.device, calls)
            self.consts = constants(graph, plan, self.device)
        self.descs = node_descriptions(graph, plan)
        self.none_slot = len(plan.values)
        self.segments = self._segments(plan, kernels)
        # Parsed, so that a plain {"pyge.cudaGraph": "false"} means false (bool("false") is True).
        enabled = bool(parse_options(options)["pyge.cudaGraph"])
        self.eager_reason = graph_blocker(plan, enabled)
        self.mode = "eager" if self.eager_reason else "graph"
        self.capture_error: str | None = None
        self._lock = threading.Lock()
        self._streams: list | None = None
        self._events: list | None = None
        self._arena: Arena | None = None
        self._graph = None
        self._static_in: list | None = None
        self._static_out: list | None = None

    @staticmethod
    def _segments(plan: Plan, kernels: list) -> list[tuple[int, list[tuple]]]:
        """Merged steps grouped into runs of one stream; a launch carries what it needs."""
        _, ins = stream_tables(plan)
        prod_stream = [plan.nodes[v.producer].stream if v.producer >= 0 else -1 for v in plan.values]
        segments: list[tuple[int, list[tuple]]] = []
        for s, kind, a in merged_steps(plan):
            if not segments or segments[-1][0] != s:
                segments.append((s, []))
            if kind == LAUNCH:
                n = plan.nodes[a]
                # Values made on another stream: the allocator must learn this stream reads them.
                cross = tuple(vi for vi in dict.fromkeys(n.inputs) if vi >= 0 and prod_stream[vi] not in (-1, s))
                segments[-1][1].append((LAUNCH, a, kernels[a], ins[a], tuple(n.outputs),
                                        tuple(n.free_after), cross))
            else:
                segments[-1][1].append((kind, a, None, (), (), (), ()))
        return segments

    @property
    def streams(self) -> list:
        self._ensure_streams()
        return list(self._streams)

    def _ensure_streams(self) -> None:
        if self._streams is None:
            with torch.cuda.device(self.device):
                self._streams = [torch.cuda.Stream(self.device) for _ in self.plan.streams]
                # One CUDA event per *physical* id (pyge.maxEventNum may cap them): safe because
                # steps are issued in host_order, the order the ids were reused for.
                physical = [torch.cuda.Event() for _ in range(self.plan.num_physical_events)]
                self._events = [physical[e.event_id] for e in self.plan.events]
        if self.memory_strategy == "arena" and self._arena is None:
            self._arena = Arena(self.plan, self.device)

    # -- public ------------------------------------------------------------------------
    def run(self, feeds: Mapping[str, Any], hooks=None, output_device: str | None = None,
            output_names=None) -> dict[str, Any]:
        """Outputs by name (only `output_names`, in that order, when given: the others are
        computed but not copied to the host)."""
        if hooks is not None:
            return self.run_eager(feeds, hooks, output_device, output_names)
        picked = select_outputs(self.plan, output_names)
        arrays = check_feeds(self.graph, self.plan, feeds)
        with self._lock, torch.cuda.device(self.device):
            self._ensure_streams()
            if self.mode == "graph" and self._graph is None:
                self._capture(arrays)
            if self.mode == "graph":
                for st, a in zip(self._static_in, arrays):
                    st.copy_(a if isinstance(a, torch.Tensor) else to_torch(a, "cpu"))
                self._graph.replay()
                return self._outputs(self._static_out, output_device, copy=True, picked=picked)
            fed = feeds_to_device(arrays, self.device)
            outs = self._issue_run(fed, None)
            return self._outputs(outs, output_device, copy=False, owned=[*self.consts.values(), *fed],
                                 picked=picked)

    def run_eager(self, feeds: Mapping[str, Any], hooks=None, output_device: str | None = None,
                  output_names=None) -> dict[str, Any]:
        """Run without the CUDA graph (per-op host calls; hooks are honoured)."""
        picked = select_outputs(self.plan, output_names)
        arrays = check_feeds(self.graph, self.plan, feeds)
        with self._lock, torch.cuda.device(self.device):
            self._ensure_streams()
            fed = feeds_to_device(arrays, self.device)
            outs = self._issue_run(fed, hooks)
            return self._outputs(outs, output_device, copy=False, owned=[*self.consts.values(), *fed],
                                 picked=picked)

    def _outputs(self, outs: list, output_device: str | None, copy: bool, owned=(),
                 picked: list[int] | None = None) -> dict[str, Any]:
        if output_device is not None and str(output_device).startswith("cuda"):
            names = pick([self.plan.values[vi].name for vi in self.plan.outputs], picked)
            outs = pick(outs, picked)
            if copy:
                return {n: _clone(t) for n, t in zip(names, outs)}
            # Fresh results as they are; an output that is a weight, a feed, a tensor a
            # kernel returns every run, or another output (Identity of either) is copied
            # (on the caller's stream, which has joined every logical stream), so the
            # caller writing into it changes nothing later runs read.
            caller = torch.cuda.current_stream(self.device)
            for t in outs:          # made on a side stream, used on the caller's from now on
                record_use(t, caller)
            return dict(zip(names, unshared(outs, owned)))
        return outputs_to_numpy(self.plan, outs, positions=picked)   # .cpu() syncs with the caller's stream

    # -- issuing -----------------------------------------------------------------------
    def _issue_run(self, inputs: list, hooks) -> list:
        """Fork every stream from the caller's stream, issue all steps, join them back."""
        plan = self.plan
        caller = torch.cuda.current_stream(self.device)
        env: list[Any] = [None] * (self.none_slot + 1)
        for vi, t in self.consts.items():
            env[vi] = t
        for vi, t in zip(plan.inputs, inputs):
            env[vi] = t
        for s in self._streams:
            s.wait_stream(caller)
        done = False
        try:
            self._issue(env, hooks)
            done = True
        finally:
            # Join even after an error: the caller's later work (and frees of the inputs,
            # which the side streams read without record_stream) must follow every stream.
            try:
                for s in self._streams:
                    caller.wait_stream(s)
            except Exception:  # noqa: BLE001 - an invalidated capture; the first error wins
                if done:
                    raise
        return [env[i] for i in plan.outputs]

    def _issue(self, env: list, hooks) -> None:
        streams, events, arena = self._streams, self._events, self._arena
        on_record = getattr(hooks, "record", None)
        on_wait = getattr(hooks, "wait", None)
        for s, steps in self.segments:
            stream = streams[s]
            with torch.cuda.stream(stream):
                for kind, a, fn, ins, outs, frees, cross in steps:
                    if kind == LAUNCH:
                        args = [env[i] for i in ins]
                        for vi in cross:
                            record_use(env[vi], stream)
                        res = self._launch(a, fn, args, s, hooks)
                        for vi, r in zip(outs, res):
                            env[vi] = arena.place(vi, r) if arena is not None else r
                        for vi in frees:
                            env[vi] = None
                    elif kind == RECORD:
                        events[a].record(stream)
                        if on_record is not None:
                            on_record(a, s)
                    else:
                        stream.wait_event(events[a])
                        if on_wait is not None:
                            on_wait(a, s)

    def _launch(self, ni: int, fn, args: list, s: int, hooks) -> list:
        try:
            if hooks is None:
                return fn(args)
            hooks.before(ni, s)
            res = fn(args)
            hooks.after(ni, s)
            return res
        except PygeError:
            raise
        except Exception as err:  # noqa: BLE001 - name the node, keep the cause
            raise ExecutionError(f"{self.descs[ni]} on stream {s}", err) from err

    # -- capture -----------------------------------------------------------------------
    def _capture(self, arrays: list) -> None:
        self._static_in = [_owned(to_torch(a, self.device)) for a in arrays]
        self._issue_run(self._static_in, None)          # warm-up, outside the capture
        torch.cuda.synchronize(self.device)
        graph = torch.cuda.CUDAGraph()
        cap = torch.cuda.Stream(self.device)
        caller = torch.cuda.current_stream(self.device)
        try:
            with torch.cuda.graph(graph, stream=cap, capture_error_mode="thread_local"):
                outs = self._issue_run(self._static_in, None)
        except Exception as err:  # noqa: BLE001 - any capture failure: fall back to eager
            self.capture_error = f"{type(err).__name__}: {str(err).strip().splitlines()[0] if str(err).strip() else ''}"
            log.warning("CUDA graph capture of %r failed, running eagerly: %s",
                        self.plan.graph_name, self.capture_error)
            self.mode = "eager"
            self._graph = self._static_out = None
            # torch.cuda.graph does not restore the current stream when capture_end raises.
            torch.cuda.set_stream(caller)
            # The streams and events took part in a broken capture: start afresh.
            self._streams = self._events = None
            try:
                torch.cuda.synchronize(self.device)
            except Exception:  # noqa: BLE001
                pass
            self._ensure_streams()
            return
        self._graph = graph
        self._static_out = outs


def _owned(t: Any) -> Any:
    """A device tensor the executor owns (to_torch may return the caller's own tensor)."""
    return t.clone() if isinstance(t, torch.Tensor) else t


def _clone(t: Any) -> Any:
    if isinstance(t, torch.Tensor):
        return t.clone()
    if isinstance(t, list):
        return [_clone(e) for e in t]
    return t

