"""CPU executor: one worker thread per logical stream, Send/Recv as per-run events.

Threads. The caller's thread runs the first busy stream; one daemon thread per other busy
stream is started at the first run and reused by every later run (a job per run is put on
each worker's queue). Workers hold no reference to the executor, so dropping the model
stops them (weakref.finalize).

Events. Each run gets a fresh `_Job`: the value table, one flag per logical event and one
Condition. RECORD sets a flag and wakes waiters; WAIT returns at once if the flag is set,
else sleeps on the Condition. Every sleep is bounded: a stream that fails sets `aborted` and
wakes everyone, waiters re-check `aborted` before and after each sleep (and the sleep has a
timeout as well, so even a lost wake-up cannot hang a run), and streams check it before
every launch, so all streams stop promptly. The caller then raises ExecutionError naming
the failing node. A job is never shared between runs, so a failed run leaves nothing
behind: the next run starts clean on the same workers.

Concurrent `run` calls on one executor are serialised by a lock (workers and the
intra-op thread setting belong to one run at a time); each caller gets its own results.

Intra-op threads. torch's thread count is process-global, and with OpenMP each thread
keeps its own team size (taken when that thread first runs a parallel op), so every stream
thread calls torch.set_num_threads itself at the start of a run; the caller restores its
own setting afterwards. The main stream (the caller's, the first busy one) gets the budget C
(torch.get_num_threads() when the executor was made) divided by the number of streams
*expected to be busy at once*, i.e. the plan's average parallelism p = total work /
critical-path work (average_parallelism), rounded up: ceil(C / p). Each side stream gets
what is left of C, split evenly, at least 1. In CNNs side streams are short branches and p
stays close to 1, so on 2 cores the main stream keeps both cores and the side streams run on
one. Why not C threads everywhere: every thread with a team of its own adds OpenMP threads,
and once libgomp manages more threads than there are cores it cuts its spin-wait to 100
iterations in every team, so each operator again pays a futex wake-up of its team (the cost
pyge's bounded spin exists to avoid, see pyge/__init__.py), and a multi-thread side team
slows even the single-stream runs of the same process. `benchmarks/bench_omp_wait.py`
(its lb2 column) times the rule; docs/performance.md has the figures.
`pyge.intraOpThreads=N` (N > 0) forces N.
"""
from __future__ import annotations

import math
import queue
import threading
import weakref
from typing import Any, Mapping

import torch

from ..analysis.dag import longest_path
from ..analysis.happens_before import step_preds
from ..errors import ExecutionError, PygeError
from ..ir.graph import Graph
from ..options import parse_options
from ..plan.order import merged_order
from ..plan.plan import LAUNCH, RECORD, Plan
from .base import (Arena, build_kernels, check_feeds, constants, feeds_to_device,
                   node_descriptions, outputs_to_numpy, select_outputs, stream_tables)
from .host_memory import tune_host_malloc

_WAIT_SLICE_S = 0.5      # longest single sleep of a waiter before it re-checks the abort flag


class _Aborted(Exception):
    """Raised inside a stream when another stream failed; never leaves the executor."""


class _Job:
    """Everything one run shares between its stream threads."""

    __slots__ = ("env", "flags", "cond", "aborted", "error", "pending", "hooks", "threads",
                 "side_threads")

    def __init__(self, nslots: int, nevents: int, nworkers: int, hooks, threads: int,
                 side_threads: int = 0):
        self.env: list[Any] = [None] * nslots
        self.flags = [False] * nevents
        self.cond = threading.Condition(threading.Lock())
        self.aborted = False
        self.error: tuple[int, int, BaseException] | None = None   # (node, stream, cause)
        self.pending = nworkers
        self.hooks = hooks
        self.threads = threads              # intra-op threads of the main stream (0: leave)
        self.side_threads = side_threads    # ... and of every side stream

    def record(self, e: int) -> None:
        with self.cond:
            self.flags[e] = True
            self.cond.notify_all()

    def wait(self, e: int) -> None:
        with self.cond:
            while not self.flags[e]:
                if self.aborted:
                    raise _Aborted
                self.cond.wait(_WAIT_SLICE_S)

    def fail(self, node: int, stream: int, err: BaseException) -> None:
        # First failure wins; waking everyone lets blocked streams see `aborted` and leave.
        with self.cond:
            if self.error is None:
                self.error = (node, stream, err)
            self.aborted = True
            self.cond.notify_all()

    def abort(self) -> None:
        with self.cond:
            self.aborted = True
            self.cond.notify_all()

    def worker_done(self) -> None:
        with self.cond:
            self.pending -= 1
            self.cond.notify_all()


def _run_stream(prog: list[tuple], job: _Job, stream: int, main: bool = True) -> None:
    """Run one stream's steps. Hot loop: one tuple per step, no attribute lookups per op."""
    env, flags = job.env, job.flags
    want = job.threads if main else job.side_threads
    if want and torch.get_num_threads() != want:
        torch.set_num_threads(want)
    if job.hooks is not None:
        return _run_stream_hooked(prog, job, stream)
    ni = -1
    try:
        for kind, a, fn, ins, outs, frees in prog:
            if kind == LAUNCH:
                if job.aborted:
                    return
                ni = a
                res = fn([env[i] for i in ins])
                for vi, r in zip(outs, res):
                    env[vi] = r
                for vi in frees:
                    env[vi] = None
            elif kind == RECORD:
                job.record(a)
            elif not flags[a]:
                job.wait(a)
    except _Aborted:
        return
    except BaseException as err:  # noqa: BLE001 - reported by the caller, naming the node
        job.fail(ni, stream, err)


def _run_stream_hooked(prog: list[tuple], job: _Job, stream: int) -> None:
    env, flags, hooks = job.env, job.flags, job.hooks
    on_record = getattr(hooks, "record", None)
    on_wait = getattr(hooks, "wait", None)
    ni = -1
    try:
        for kind, a, fn, ins, outs, frees in prog:
            if kind == LAUNCH:
                if job.aborted:
                    return
                ni = a
                args = [env[i] for i in ins]
                hooks.before(a, stream)
                res = fn(args)
                hooks.after(a, stream)
                for vi, r in zip(outs, res):
                    env[vi] = r
                for vi in frees:
                    env[vi] = None
            elif kind == RECORD:
                job.record(a)
                if on_record is not None:
                    on_record(a, stream)
            else:
                if not flags[a]:
                    job.wait(a)
                if on_wait is not None:
                    on_wait(a, stream)
    except _Aborted:
        return
    except BaseException as err:  # noqa: BLE001
        job.fail(ni, stream, err)


def _worker_main(prog: list[tuple], stream: int, jobs: "queue.SimpleQueue[_Job | None]") -> None:
    while True:
        job = jobs.get()          # idle between runs; a None job means the model is gone
        if job is None:
            return
        try:
            _run_stream(prog, job, stream, main=False)
        finally:
            job.worker_done()
            del job               # hold none of the run's values while idle


def _stop_workers(queues: list, threads: list) -> None:
    """Ask every worker to leave and wait for it. Also runs at interpreter exit (finalize's
    atexit), so no worker is still inside torch when the C++ runtime shuts down."""
    for q in queues:
        q.put(None)
    me = threading.current_thread()
    for t in threads:
        if t is not me:
            t.join(timeout=5)


def average_parallelism(plan: Plan) -> float:
    """Total work / critical-path work of the stream plan (1.0 = no overlap possible).

    Work per node is a proxy: the bytes it writes (1 if unknown). The critical path follows
    stream order and events (analysis.happens_before.step_preds).
    """
    cost = [max(1, sum(plan.values[o].nbytes for o in n.outputs)) for n in plan.nodes]
    critical, _ = longest_path(step_preds(plan), cost)
    return sum(cost) / max(1, critical)


def intra_op_threads(budget: int, parallelism: float, forced: int = 0) -> int:
    """torch threads per stream thread: `forced` if > 0, else the budget divided by the
    number of streams expected to be busy at once (the plan's average parallelism)."""
    if forced > 0:
        return forced
    return max(1, math.ceil(budget / max(1.0, parallelism) - 1e-9))


def side_threads(budget: int, main: int, sides: int, forced: int = 0) -> int:
    """torch threads per side-stream thread: `forced` if > 0, else what the main stream's
    `main` threads leave of the budget, split between the `sides` side streams, at least 1."""
    if forced > 0:
        return forced
    return max(1, (budget - main) // max(1, sides))


class CpuExecutor:
    """Runs a multi-stream plan with one thread per busy logical stream."""

    name = "cpu"

    def __init__(self, graph: Graph, plan: Plan, device: Any = "cpu", options=None,
                 arena: bool = False, calls=None):
        self.plan = plan
        self.graph = graph
        self.device = device
        merged_order(plan)                       # PlanError now rather than a hang later
        kernels = build_kernels(graph, plan, device, calls)
        if str(device) == "cpu":
            tune_host_malloc()          # host_memory.py: no page faults on every run
        # arena=True keeps every planned intermediate at its planned offset in one tensor,
        # as the CUDA executor's "arena" strategy does: a real test of the memory plan's
        # cross-stream reuse under true concurrency (a wrong reuse corrupts results).
        self.arena = Arena(plan, torch.device("cpu")) if arena else None
        if self.arena is not None:
            kernels = [_placing(k, tuple(n.outputs), self.arena) for k, n in zip(kernels, plan.nodes)]
        self.descs = node_descriptions(graph, plan)
        self.consts = constants(graph, plan, device)
        self.none_slot = len(plan.values)
        _, ins = stream_tables(plan)
        self.programs = []
        for steps in plan.streams:
            prog = []
            for st in steps:
                if st.kind == LAUNCH:
                    n = plan.nodes[st.arg]
                    prog.append((LAUNCH, st.arg, kernels[st.arg], ins[st.arg], tuple(n.outputs),
                                 tuple(n.free_after)))
                else:
                    prog.append((st.kind, st.arg, None, (), (), ()))
            self.programs.append(prog)
        self.busy = [s for s, prog in enumerate(self.programs) if prog]
        forced = parse_options(options)["pyge.intraOpThreads"]
        self.parallelism = average_parallelism(plan)
        budget = torch.get_num_threads()
        self.threads = (intra_op_threads(budget, min(self.parallelism, len(self.busy)), forced)
                        if len(self.busy) > 1 or forced else 0)
        self.side_threads = (side_threads(budget, self.threads, len(self.busy) - 1, forced)
                             if len(self.busy) > 1 else 0)
        self._lock = threading.Lock()
        self._queues: list | None = None
        self._threads: list[threading.Thread] = []

    # -- workers -----------------------------------------------------------------------
    def _start_workers(self) -> None:
        if self._queues is not None:
            self._finalizer()     # a worker died: stop the survivors, start a fresh set
        self._queues, self._threads = [], []
        for s in self.busy[1:]:
            q: queue.SimpleQueue = queue.SimpleQueue()
            t = threading.Thread(target=_worker_main, args=(self.programs[s], s, q),
                                 name=f"pyge-{self.plan.graph_name}-s{s}", daemon=True)
            t.start()
            self._queues.append(q)
            self._threads.append(t)
        self._finalizer = weakref.finalize(self, _stop_workers, list(self._queues), list(self._threads))

    def close(self) -> None:
        """Stop the worker threads (they are also stopped when the executor is collected)."""
        with self._lock:
            if self._queues is not None:
                self._finalizer()
                self._queues = None

    # -- running -----------------------------------------------------------------------
    def run(self, feeds: Mapping[str, Any], hooks=None, output_names=None) -> dict[str, Any]:
        """Outputs by name (only `output_names`, in that order, when given)."""
        plan = self.plan
        picked = select_outputs(plan, output_names)
        arrays = check_feeds(self.graph, plan, feeds)
        with self._lock:
            job = _Job(self.none_slot + 1, len(plan.events), len(self.busy) - 1 if self.busy else 0,
                       hooks, self.threads, self.side_threads)
            env = job.env
            for vi, t in self.consts.items():
                env[vi] = t
            fed = feeds_to_device(arrays, self.device)
            for vi, t in zip(plan.inputs, fed):
                env[vi] = t
            self._execute(job)
            outs = [env[i] for i in plan.outputs]
        return outputs_to_numpy(plan, outs, [*self.consts.values(), *fed], picked)

    def _execute(self, job: _Job) -> None:
        if not self.busy:
            return
        if len(self.busy) > 1 and (self._queues is None or not all(t.is_alive() for t in self._threads)):
            self._start_workers()
        saved = torch.get_num_threads()
        try:
            for q in self._queues or ():
                q.put(job)
            _run_stream(self.programs[self.busy[0]], job, self.busy[0])
            self._join(job)
        except BaseException:
            job.abort()           # e.g. KeyboardInterrupt in the caller: stop the workers too
            raise
        finally:
            if torch.get_num_threads() != saved:
                torch.set_num_threads(saved)
        if job.error is not None:
            ni, stream, err = job.error
            if isinstance(err, PygeError) or not isinstance(err, Exception):
                raise err         # ours already name the culprit; KeyboardInterrupt stays one
            desc = self.descs[ni] if ni >= 0 else f"stream {stream}"
            raise ExecutionError(f"{desc} on stream {stream}", err) from err

    def _join(self, job: _Job) -> None:
        """Wait for every worker to finish this job (they stop promptly once aborted)."""
        with job.cond:
            while job.pending:
                job.cond.wait(_WAIT_SLICE_S)
                if job.pending and not all(t.is_alive() for t in self._threads):
                    raise ExecutionError(f"stream worker of {self.plan.graph_name!r}",
                                         RuntimeError("a stream worker thread died"))


def _placing(fn, outs: tuple, arena: Arena):
    place = arena.place

    def run(args: list) -> list:
        return [place(vi, r) for vi, r in zip(outs, fn(args))]
    return run


