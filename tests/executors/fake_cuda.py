"""A stand-in for torch.cuda on the CPU that checks CUDA's ordering rules as the executor runs.

No GPU here, and a wrong event makes no visible difference on the CPU: every kernel runs
at once, in issue order. So the fake does what a race checker does on a GPU (PyTorch's
CUDA sanitizer, compute-sanitizer's racecheck): it follows each logical stream's place in a
happens-before order and every byte each kernel reads or writes, and reports the accesses
a real device could run in either order.

Happens-before: each stream has a vector clock. A kernel ticks its stream's own entry;
`event.record(s)` snapshots s's clock; `s.wait_event(e)` joins the snapshot of the
*latest record issued before the wait* (CUDA's rule; a never-recorded event is a no-op);
`s.wait_stream(t)` joins t's clock; `synchronize()` orders everything before everything
after. Two accesses to overlapping bytes, at least one a write, on different streams and
not ordered, are a race.

Accesses: a TorchDispatchMode sees every ATen op the kernels run, with the current stream;
an argument the op's schema marks as written (`Tensor(a!)`) is a write, any other tensor
argument that is not merely aliased (a view's input) a read, a fresh result a write to new
memory. Bytes are (storage, byte range), so two values at one planned arena offset collide
even if no tensor is shared. A storage's records go when it dies (a weak reference to it),
and a fresh result starts a new tenant at its address: reuse of freed memory is the
allocator's business, and on CUDA its rule is checked separately:

- record_stream: a tensor allocated on one logical stream and read on another must have
  `record_stream(reader)` before that read (`cuda_memory.record_use`), or the caching
  allocator may hand its block to new work of the allocating stream while the reader still
  reads it. Exempt: host reads (`.cpu()` copies, which block), tensors the executor keeps
  for good (`keep_alive`), and tensors allocated on the caller's stream (static inputs; the
  caller frees anything else only after the run has joined every stream back).

Capture (torch.cuda.graph), as CUDA enforces it: every kernel issued while capturing must
be on a stream that joined the capture (waited, directly or through other streams, on the
capture stream or on an event recorded during this capture); waiting on an event recorded
before the capture is an isolation error; at the end every stream that joined must have
joined back into the capture stream (else the capture is "unjoined").

Every violation is appended to `violations` as a one-line string; nothing is raised, so a
broken capture cannot hide a finding behind the executor's fall-back to eager mode.
Knobs for tests that show the checks can fail: `ignore_waits` (wait_event does nothing)
and `ignore_joins_of` (a stream name whose wait_stream into the capture stream is dropped).
"""
from __future__ import annotations

import contextlib
import time
import weakref
from typing import Any, Iterable

import torch
from torch.utils._python_dispatch import TorchDispatchMode
from torch.utils._pytree import tree_flatten


def _join(a: dict, b: dict) -> None:
    for k, v in b.items():
        if a.get(k, 0) < v:
            a[k] = v


class FakeStream:
    def __init__(self, cuda: "FakeCuda", name: str):
        self.cuda, self.name = cuda, name
        self.vc: dict[str, int] = {name: 0}
        self.capture: int | None = None          # id of the capture this stream joined

    def tick(self) -> int:
        self.vc[self.name] += 1
        return self.vc[self.name]

    def wait_stream(self, other: "FakeStream") -> None:
        self.cuda.log.append(("wait_stream", self.name, other.name))
        c = self.cuda
        if c.capturing is not None and other.name == c.ignore_joins_of and self.capture == c.capturing:
            return
        c.check_capture_dependency(self, other.capture, f"wait_stream({other.name})")
        _join(self.vc, other.vc)

    def wait_event(self, ev: "FakeEvent") -> None:
        self.cuda.log.append(("wait_event", self.name, ev.name))
        if self.cuda.ignore_waits or ev.vc is None:
            return
        self.cuda.check_capture_dependency(self, ev.capture, f"wait_event({ev.name})")
        _join(self.vc, ev.vc)

    def __repr__(self):
        return self.name


class FakeEvent:
    def __init__(self, cuda: "FakeCuda", name: str):
        self.cuda, self.name = cuda, name
        self.vc: dict[str, int] | None = None
        self.capture: int | None = None
        self.t: float | None = None          # host time of the record: kernels ran at issue

    def record(self, stream: FakeStream | None = None) -> None:
        stream = stream or self.cuda.current
        self.cuda.log.append(("record", stream.name, self.name))
        self.cuda.check_in_capture(stream, f"record({self.name})")
        self.vc, self.capture, self.t = dict(stream.vc), stream.capture, time.perf_counter()

    def elapsed_time(self, end: "FakeEvent") -> float:
        """Milliseconds from this record to end's (CUDA refuses unrecorded events)."""
        if self.t is None or end.t is None:
            raise RuntimeError("elapsed_time: both events must be recorded")
        return (end.t - self.t) * 1e3


class FakeGraph:
    def __init__(self, cuda: "FakeCuda | None" = None):
        self.cuda = cuda
        self.replays = 0
        self.replay_fn = lambda: None   # the fake capture really ran: outputs are current
        self.accesses: list[tuple] = []  # (storage, first byte, end, write) the graph touches

    def replay(self):
        self.replays += 1
        if self.cuda is not None:
            self.cuda.replay(self)
        self.replay_fn()


class _Record:
    __slots__ = ("lo", "hi", "write", "stream", "clock", "what")

    def __init__(self, lo, hi, write, stream, clock, what):
        self.lo, self.hi, self.write, self.stream, self.clock, self.what = lo, hi, write, stream, clock, what


def _storage_key(t: torch.Tensor) -> int | None:
    if t.layout != torch.strided:
        return None
    return t.untyped_storage().data_ptr()


def _span(t: torch.Tensor) -> tuple[int, int, int] | None:
    """(storage address, first byte, one past the last byte) a strided tensor covers."""
    if t.layout != torch.strided or t.numel() == 0:
        return None
    base = t.untyped_storage().data_ptr()
    lo = hi = t.storage_offset()
    for size, stride in zip(t.shape, t.stride()):
        if stride >= 0:
            hi += (size - 1) * stride
        else:
            lo += (size - 1) * stride
    n = t.element_size()
    return base, base + lo * n, base + (hi + 1) * n


class FakeCuda:
    """Just enough of torch.cuda for CudaExecutor, with the checks above; the device is the CPU."""

    def __init__(self):
        self.log: list[tuple] = []
        self.violations: list[str] = []
        self.all_streams: list[FakeStream] = []
        self.n_streams = self.n_events = self.n_captures = 0
        self.caller = self._new_stream("caller")
        self.current = self.caller
        self.capturing: int | None = None
        self.CUDAGraph = lambda: FakeGraph(self)
        self.ignore_waits = False
        self.ignore_joins_of: str | None = None
        self._records: dict[int, list[_Record]] = {}       # storage address -> accesses
        self._alloc: dict[int, tuple[str, set]] = {}       # storage address -> (stream, recorded)
        self._kept: set[int] = set()
        self._watched: dict[int, weakref.ref] = {}         # storage address -> its live storage
        self._outer_records: dict | None = None            # the records set aside during a capture

    def _new_stream(self, name: str) -> FakeStream:
        s = FakeStream(self, name)
        self.all_streams.append(s)
        return s

    # -- torch.cuda's surface --------------------------------------------------------
    def is_available(self):
        return True

    def Stream(self, device=None):  # noqa: N802 - torch's spelling
        self.n_streams += 1
        return self._new_stream(f"s{self.n_streams - 1}")

    def Event(self, enable_timing=False):  # noqa: N802
        self.n_events += 1
        return FakeEvent(self, f"e{self.n_events - 1}")

    def current_stream(self, device=None):
        return self.current

    def device(self, dev):
        return contextlib.nullcontext()

    @contextlib.contextmanager
    def stream(self, s):
        saved, self.current = self.current, s
        try:
            yield
        finally:
            self.current = saved

    def set_stream(self, s):
        self.current = s

    def synchronize(self, device=None):
        self.log.append(("synchronize",))
        if self.capturing is not None:           # CUDA refuses it (and orders nothing)
            self.violations.append(f"capture {self.capturing}: synchronize() while capturing")
            return
        everything: dict[str, int] = {}
        for s in self.all_streams:
            _join(everything, s.vc)
        for s in self.all_streams:
            _join(s.vc, everything)

    @contextlib.contextmanager
    def graph(self, g, stream=None, capture_error_mode=None):
        self.synchronize()          # torch.cuda.graph synchronizes before capture_begin
        self.n_captures += 1
        cid = self.capturing = self.n_captures
        saved, self.current = self.current, stream
        stream.capture = cid
        # Captured kernels run at each replay, not now: check them against one another in a
        # record set of their own, and keep what they touch for replay().
        # (Memory the capture allocates was free before it, so the storage it held earlier
        # died and took its records out of the outer set: see _forget.)
        outer, self._records = self._records, {}
        self._outer_records = outer
        try:
            yield
        finally:
            g.accesses = [(key, r.lo, r.hi, r.write) for key, rs in self._records.items() for r in rs]
            self._records, self._outer_records = outer, None
            for s in self.all_streams:
                if s.capture == cid and s is not stream and stream.vc.get(s.name, 0) < s.vc[s.name]:
                    self.violations.append(f"capture {cid}: stream {s.name} never joined back "
                                           f"into the capture stream {stream.name} (unjoined)")
                if s.capture == cid:
                    s.capture = None
            self.capturing = None
            self.current = saved

    # -- capture rules ---------------------------------------------------------------
    def check_in_capture(self, stream: FakeStream, what: str) -> None:
        if self.capturing is not None and stream.capture != self.capturing:
            self.violations.append(f"capture {self.capturing}: {what} on stream {stream.name}, "
                                   "which has not joined the capture")

    def check_capture_dependency(self, stream: FakeStream, source_capture: int | None, what: str) -> None:
        if self.capturing is None:
            return
        if source_capture == self.capturing:
            if stream.capture != self.capturing:
                stream.capture = self.capturing        # the stream joins the capture ...
                stream.tick()                          # ... and must be joined back, work or not
        elif stream.capture == self.capturing:
            self.violations.append(f"capture {self.capturing}: {what} on stream {stream.name} "
                                   "depends on work outside the capture (isolation)")

    # -- accesses --------------------------------------------------------------------
    def access(self, t: Any, write: bool, what: str, fresh: bool = False,
               stream: FakeStream | None = None, host: bool = False) -> None:
        for x in tree_flatten(t)[0]:
            if isinstance(x, torch.Tensor):
                self._access(x, write, what, fresh, stream or self.current, host)

    def _access(self, t, write, what, fresh, stream, host):
        span = _span(t)
        if span is None:
            return
        key, lo, hi = span
        self._watch_storage(t.untyped_storage(), key)
        if fresh:
            self._alloc[key] = (stream.name, set())
        else:
            self.check_in_capture(stream, what)
            owner = self._alloc.get(key)
            if (owner is not None and not host and key not in self._kept
                    and owner[0] not in (stream.name, "caller") and stream.name not in owner[1]):
                self.violations.append(f"{what} on stream {stream.name} reads a tensor allocated on "
                                       f"stream {owner[0]} without record_stream({stream.name})")
        self._check(key, lo, hi, write, what, stream)

    def _watch_storage(self, storage, key: int) -> None:
        """Forget a storage's records when it dies. Tensors made outside the dispatcher
        (torch.from_numpy, torch.tensor) may later take its address, and must not inherit
        its accesses or its allocating stream. (Storage Python objects are preserved per
        storage, so a weak reference to one lives exactly as long as the memory.)"""
        w = self._watched.get(key)
        if w is not None and w() is storage:
            return
        self._watched[key] = weakref.ref(storage, lambda ref, key=key: self._forget(key, ref))

    def _forget(self, key: int, ref) -> None:
        if self._watched.get(key) is not ref:
            return                       # the address has a newer tenant already
        del self._watched[key]
        for records in (self._records, self._outer_records):
            if records is not None:
                records.pop(key, None)
        self._alloc.pop(key, None)
        self._kept.discard(key)

    def replay(self, g: FakeGraph) -> None:
        """A replay runs the captured work in the order of the current stream."""
        for key, lo, hi, write in g.accesses:
            self._check(key, lo, hi, write, "graph replay", self.current)

    def _check(self, key, lo, hi, write, what, stream) -> None:
        clock = stream.tick()
        records = self._records.setdefault(key, [])
        for r in records:
            if r.hi <= lo or hi <= r.lo or not (write or r.write) or r.stream == stream.name:
                continue
            if stream.vc.get(r.stream, 0) < r.clock:
                kind = "write" if write else "read"
                prev = "write" if r.write else "read"
                self.violations.append(
                    f"race: {kind} by {what} on stream {stream.name} and {prev} by {r.what} on "
                    f"stream {r.stream} of bytes [{max(lo, r.lo) - key}, {min(hi, r.hi) - key}) "
                    "are not ordered by any event")
        if write:     # a write supersedes what it covers (later accesses must follow it)
            records[:] = [r for r in records if not (lo <= r.lo and r.hi <= hi)]
        records.append(_Record(lo, hi, write, stream.name, clock, what))

    def record_stream(self, x: Any, stream: FakeStream) -> None:
        """cuda_memory.record_use, on the fake."""
        for t in tree_flatten(x)[0]:
            owner = self._alloc.get(_storage_key(t)) if isinstance(t, torch.Tensor) else None
            if owner is not None:
                owner[1].add(stream.name)

    def keep_alive(self, tensors: Iterable[Any]) -> None:
        """Tensors that are never freed (a captured graph's static outputs)."""
        for t in tree_flatten(list(tensors))[0]:
            if isinstance(t, torch.Tensor) and t.layout == torch.strided:
                self._kept.add(_storage_key(t))


class AccessMode(TorchDispatchMode):
    """Reports every ATen op's tensor reads and writes to a FakeCuda, on its current stream."""

    def __init__(self, cuda: FakeCuda):
        super().__init__()
        self.cuda = cuda

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        kwargs = kwargs or {}
        out = func(*args, **kwargs)
        schema = func._schema
        what = str(func.overloadpacket.__name__)
        named = dict(zip((a.name for a in schema.arguments), args))
        named.update(kwargs)
        for arg in schema.arguments:
            if arg.name not in named:
                continue
            alias = arg.alias_info
            if alias is not None and not alias.is_write:
                continue                          # only aliased (a view's input): no access
            self.cuda.access(named[arg.name], write=alias is not None, what=what)
        outs = out if len(schema.returns) > 1 else (out,)
        # A result is new memory unless it shares an input's storage: unsafe_split and
        # _unsafe_view return views without saying so in their schema.
        inputs = {_storage_key(t) for t in tree_flatten((args, kwargs))[0] if isinstance(t, torch.Tensor)}
        for ret, value in zip(schema.returns, outs):
            if ret.alias_info is not None:
                continue
            for t in tree_flatten(value)[0]:
                if isinstance(t, torch.Tensor) and _storage_key(t) not in inputs:
                    self.cuda.access(t, write=True, what=what, fresh=True)
        return out


class TorchProxy:
    """torch, with .cuda replaced."""

    def __init__(self, fake: FakeCuda):
        self.cuda = fake

    def __getattr__(self, name):
        return getattr(torch, name)
