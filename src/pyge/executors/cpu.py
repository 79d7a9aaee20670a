"""CPU executor: one worker thread per logical stream, Send/Recv as per-run events.

Threads. The caller's thread runs the first busy stream; one daemon thread per other busy
stream is started at the first run and reused by every later run (a job per run is put on
each worker's queue). Workers hold no reference to the executor, so dropping the model
stops them (weakref.finalize). Each stream's steps run as generated straight-line code
(codegen.py), compiled when the executor is made (the hooked variant at the first run
with hooks).

Interruption. A KeyboardInterrupt in the caller (Ctrl-C while its stream waits or runs)
aborts the run and is re-raised at once, without waiting for the other streams. A worker
still inside a kernel then cannot be stopped (Python cannot stop a thread): it is
abandoned, it leaves as soon as that kernel returns, and the next run starts a fresh worker
for its stream instead of queueing behind it. An executor with an arena (fixed buffers
that the abandoned kernel may still write: arena=True, or kernels writing into planned
buffers, into.py) fails the next run instead, naming the node still running, until that
kernel has returned.

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

import logging
import math
import queue
import sys
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
from ..plan.plan import Plan
from .base import (Arena, build_kernels, check_feeds, constants, fast_feeds, feeds_to_device,
                   node_descriptions, outputs_to_numpy, select_outputs, storage_keys,
                   tensor_feeds, tensor_outputs)
from .codegen import Aborted, compile_program, local_values, output_kinds, result_checkers
from .contention import TeamSizer
from .host_memory import tune_host_malloc
from .into import Into, cached_into

log = logging.getLogger(__name__)

_WAIT_SLICE_S = 0.5      # longest single sleep of a waiter before it re-checks the abort flag
_EXIT_JOIN_S = 5.0       # how long interpreter exit waits for an idle worker to leave
_ABANDONED_JOIN_S = 0.2  # ... and for one abandoned inside a kernel


class _Job:
    """Everything one run shares between its stream threads."""

    __slots__ = ("env", "flags", "cond", "aborted", "error", "live", "hooks", "threads",
                 "side_threads", "progs")

    def __init__(self, env: list, nevents: int, workers: list[int], hooks, progs: dict,
                 threads: int, side_threads: int = 0):
        self.env = env
        self.flags = [False] * nevents
        self.cond = threading.Condition(threading.Lock())
        self.aborted = False
        self.error: tuple[int, int, BaseException] | None = None   # (node, stream, cause)
        self.live = set(workers)            # worker streams that have not finished this job
        self.hooks = hooks
        self.progs = progs                  # stream -> generated program (codegen.py)
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
                    raise Aborted
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

    def worker_done(self, stream: int) -> None:
        with self.cond:
            self.live.discard(stream)
            self.cond.notify_all()


def _run_stream(job: _Job, stream: int, main: bool) -> None:
    """Run one stream's program of `job` on this thread, with the stream's intra-op threads."""
    want = job.threads if main else job.side_threads
    if want and torch.get_num_threads() != want:
        torch.set_num_threads(want)
    try:
        job.progs[stream](job.env, job)
    except KeyboardInterrupt:
        if main:                # the caller's Ctrl-C: leave now (already recorded as the failure)
            raise


def _worker_main(stream: int, jobs: "queue.SimpleQueue[_Job | None]") -> None:
    while True:
        job = jobs.get()          # idle between runs; a None job means: leave
        if job is None:
            return
        try:
            _run_stream(job, stream, main=False)
        finally:
            job.worker_done(stream)
            del job               # hold none of the run's values while idle


def _stop_workers(workers: dict, abandoned: list) -> None:
    """Ask every worker to leave and wait for it. Also runs at interpreter exit (finalize's
    atexit), so no idle worker is still inside torch when the C++ runtime shuts down; one
    abandoned inside a kernel is given a moment only."""
    for q, _ in workers.values():
        q.put(None)
    me = threading.current_thread()
    for _, t in workers.values():
        if t is not me:
            t.join(timeout=_EXIT_JOIN_S)
    workers.clear()
    for t, _ in abandoned:
        if t is not me:
            t.join(timeout=_ABANDONED_JOIN_S)
    abandoned.clear()


def busy_node(thread: threading.Thread) -> int:
    """The plan node a thread's generated program is running (-1 if none is seen): read from
    the thread's frames, so the programs pay nothing for it."""
    frame = sys._current_frames().get(thread.ident)    # noqa: SLF001 - an error path only
    while frame is not None:
        if frame.f_code.co_filename.startswith("<pyge generated"):
            try:
                return int(frame.f_locals.get("ni", -1))
            except (TypeError, ValueError):
                return -1
        frame = frame.f_back
    return -1


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
                 arena: bool = False, calls=None, into: bool = True):
        """`arena`: copy every result into its planned place (a test of the memory plan);
        `into`: else let kernels that can write into planned buffers do (into.py)."""
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
        self.kernels = kernels
        self.descs = node_descriptions(graph, plan)
        self.consts = constants(graph, plan, device)
        self._const_keys = storage_keys(self.consts.values())     # constants: the same every run
        self._fast_feeds = fast_feeds(plan) if str(device) == "cpu" else (lambda feeds: None)
        self._tensor_feeds = tensor_feeds(plan) if str(device) == "cpu" else (lambda xs: None)
        self._env0: list[Any] = [None] * len(plan.values)         # a run's table starts as this
        for vi, t in self.consts.items():
            self._env0[vi] = t
        self.busy = [s for s, steps in enumerate(plan.streams) if steps]
        self._steps = [[(st.kind, st.arg) for st in steps] for steps in plan.streams]
        self._owner = local_values(plan, self._steps)
        self._kinds = output_kinds(plan)
        self._checks = result_checkers(plan, self._kinds)
        self._programs: dict[bool, tuple] = {}   # hooked -> (kernels they were made from, programs)
        self._into_on = into and not arena and str(device) == "cpu"
        self._into: tuple | None = None          # (kernels it was made from, Into)
        self.programs(False)
        self.forced = forced = parse_options(options)["pyge.intraOpThreads"]
        self._sizer = TeamSizer()
        self.parallelism = average_parallelism(plan)
        budget = torch.get_num_threads()
        self.threads = (intra_op_threads(budget, min(self.parallelism, len(self.busy)), forced)
                        if len(self.busy) > 1 or forced else 0)
        self.side_threads = (side_threads(budget, self.threads, len(self.busy) - 1, forced)
                             if len(self.busy) > 1 else 0)
        self._lock = threading.Lock()
        # stream -> (queue, thread) of its live worker; (thread, stream) of abandoned ones.
        # The finalizer holds these two containers, not the executor.
        self._workers: dict[int, tuple] = {}
        self._abandoned: list[tuple[threading.Thread, int]] = []
        self._finalizer = weakref.finalize(self, _stop_workers, self._workers, self._abandoned)

    def programs(self, hooked: bool) -> dict:
        """Per busy stream, its generated function (with hooks calls if `hooked`), made at
        first need and again if `kernels` was replaced."""
        made = self._programs.get(hooked)
        if made is None or made[0] is not self.kernels:
            calls = self.into().calls if self.into() else None
            made = self._programs[hooked] = (self.kernels, {
                s: compile_program(self.plan, self._steps[s], s, s, self.kernels, self._owner,
                                   self._kinds, self._checks, hooked=hooked, into=calls)
                for s in self.busy})
        return made[1]

    def into(self) -> Into:
        """Which nodes write into planned buffers (into.py), for the current kernels."""
        self._into = cached_into(self._into, self.plan, self.kernels, self._into_on)
        return self._into[1]

    # -- workers -----------------------------------------------------------------------
    def _ensure_workers(self) -> None:
        """A live worker for every side stream: the first run starts them; later runs
        replace one that died or was abandoned inside a kernel by an interrupted run."""
        self._abandoned[:] = [(t, s) for t, s in self._abandoned if t.is_alive()]
        if (self.arena is not None or self.into()) and self._abandoned:
            t, s = self._abandoned[0]
            ni = busy_node(t)
            what = self.descs[ni] if ni >= 0 else f"a node of stream {s}"
            raise ExecutionError(f"stream {s} of {self.plan.graph_name!r}", RuntimeError(
                f"{what} of an interrupted run is still running and may still write this "
                f"executor's arena; run again once it has returned"))
        for s in self.busy[1:]:
            w = self._workers.get(s)
            if w is not None and w[1].is_alive():
                continue
            q: queue.SimpleQueue = queue.SimpleQueue()
            t = threading.Thread(target=_worker_main, args=(s, q), daemon=True,
                                 name=f"pyge-{self.plan.graph_name}-s{s}")
            t.start()
            self._workers[s] = (q, t)

    def _abandon(self, job: _Job) -> None:
        """After an interrupted run: workers still inside `job` leave when their kernel
        returns, and their streams get fresh workers at the next run."""
        with job.cond:
            live = sorted(job.live)
        for s in live:
            w = self._workers.pop(s, None)
            if w is None:
                continue
            q, t = w
            q.put(None)
            self._abandoned.append((t, s))
            ni = busy_node(t)
            log.warning("%s: stream %d is still running %s of an interrupted run; the next "
                        "run uses a fresh worker", self.plan.graph_name, s,
                        self.descs[ni] if ni >= 0 else "a kernel")

    def worker_threads(self) -> list[threading.Thread]:
        """The live stream workers, in stream order (none before the first run)."""
        return [self._workers[s][1] for s in sorted(self._workers)]

    def close(self) -> None:
        """Stop the worker threads (they are also stopped when the executor is collected)."""
        with self._lock:
            _stop_workers(self._workers, self._abandoned)

    # -- running -----------------------------------------------------------------------
    def run(self, feeds: Mapping[str, Any], hooks=None, output_names=None) -> dict[str, Any]:
        """Outputs by name (only `output_names`, in that order, when given)."""
        plan = self.plan
        picked = select_outputs(plan, output_names)
        fed = self._fast_feeds(feeds)
        if fed is None:
            fed = feeds_to_device(check_feeds(self.graph, plan, feeds), self.device)
        return outputs_to_numpy(plan, self._run_fed(fed, hooks), fed, picked, self._const_keys)

    def run_tensors(self, inputs: list, hooks=None) -> list | None:
        """Every output, in order, as CPU tensors, for inputs already CPU tensors of their
        planned dtypes and static shapes in input order; None (nothing run) for any other
        inputs, which `run` then takes. A partitioned model's call node runs its sub-model
        so, without the numpy round trip of its feeds and outputs."""
        fed = self._tensor_feeds(inputs)
        if fed is None:
            return None
        return tensor_outputs(self.plan, self._run_fed(fed, hooks), fed, self._const_keys)

    def _run_fed(self, fed: list, hooks) -> list:
        """One run of run-time inputs `fed` (in input order); the outputs' values."""
        plan = self.plan
        with self._lock:
            # forced threads stay; else smaller teams while the machine is busy (contention.py)
            team = self._sizer.begin(self.threads) if self.threads > 1 and not self.forced \
                else self.threads
            job = _Job(list(self._env0), len(plan.events), self.busy[1:], hooks,
                       self.programs(hooks is not None), team, min(self.side_threads, team or 1))
            env = job.env
            for vi, t in zip(plan.inputs, fed):
                env[vi] = t
            try:
                self._execute(job)
            finally:
                if self.threads > 1 and not self.forced:
                    self._sizer.end()
            return [env[i] for i in plan.outputs]

    def _execute(self, job: _Job) -> None:
        if not self.busy:
            return
        if len(self.busy) > 1:
            self._ensure_workers()
        saved = torch.get_num_threads()
        try:
            for s in self.busy[1:]:
                self._workers[s][0].put(job)
            _run_stream(job, self.busy[0], main=True)
            self._join(job)
        except BaseException:
            job.abort()           # e.g. KeyboardInterrupt in the caller: stop the workers too
            self._abandon(job)
            raise
        finally:
            if torch.get_num_threads() != saved:
                torch.set_num_threads(saved)
        if job.error is not None:
            ni, stream, err = job.error
            if isinstance(err, (PygeError, KeyboardInterrupt)):
                raise err         # ours already name the culprit; KeyboardInterrupt stays one
            desc = self.descs[ni] if ni >= 0 else f"stream {stream}"
            raise ExecutionError(f"{desc} on stream {stream}", err) from err

    def _join(self, job: _Job) -> None:
        """Wait for every worker to finish this job (they stop promptly once aborted)."""
        with job.cond:
            while job.live:
                job.cond.wait(_WAIT_SLICE_S)
                if job.live and not all(self._workers[s][1].is_alive() for s in job.live):
                    raise ExecutionError(f"stream worker of {self.plan.graph_name!r}",
                                         RuntimeError("a stream worker thread died"))


def _placing(fn, outs: tuple, arena: Arena):
    place = arena.place

    def run(args: list) -> list:
        return [place(vi, r) for vi, r in zip(outs, fn(args))]
    return run
