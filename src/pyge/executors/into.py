"""Kernels that write their result into memory the plan owns, where that is provably safe.

Why. A small torch operator spends a good part of its call allocating its result; torch's
`out=` variants skip that. The memory plan already gives every planned
intermediate a fixed offset in one arena (passes/memory/planner.py), proven safe across
streams by happens-before; this module lets the generated code (codegen.py) hand a kernel
its value's fixed view as `out=`, instead of letting torch allocate.

The kernel protocol (attributes a kernel factory may set on the kernel it returns):
    fresh      True: every result is new memory (never a view of an input, nor a tensor
               the kernel keeps), and the kernel keeps no reference to its inputs.
    into       into(ins, out) -> fn or None, asked once per node here: `ins` holds per
               input (dtype name, shape tuple) as the plan has them (None where unknown or
               not static), `out` the same for the node's one output. fn(*xs, out=view)
               computes exactly the kernel's result into `view` and returns it; None where
               those planned types do not allow it (a dtype or broadcast the call would
               change).

Which values, and why each rule:
- **out=**. Value y, the one output of node n, is written into its view when y is planned
  (a static-size intermediate: never a graph input, output or constant), n's kernel offers
  `into` for the planned types, and every reader of y is `fresh`. The last rule is the
  aliasing one: the memory plan frees y's bytes after its last reader, so no view of y
  (Reshape, Slice, Identity, Cast to its own type return views in torch) may outlive it,
  nor may y reach the caller through one.
- **Not in place.** Overwriting a dying input (tanh_) would leave the result in the
  input's bytes past the time the plan reserved them for it; in a chain, which the plan
  packs tightly, the next value put in those bytes is written by the very node that reads
  the result.

The views are `torch.from_numpy` slices of one allocation, a storage each of exactly the
planned bytes and not resizable: were a result ever larger than planned, torch's out= would
fail on its node instead of writing over a neighbour. A caller never receives a view (graph
outputs are not planned), and a run rewrites every view before it is read, which also
moves the view's version counter, so caches keyed on identity and version (onednn.Derived)
stay right.
"""
from __future__ import annotations

import gc
from typing import Any, Callable, Sequence

import numpy as np
import torch

from ..kernels.convert import torch_dtype
from ..plan.plan import Plan


class Into:
    """Per plan node, the call the generated code makes instead of the kernel: (fn, view),
    called fn(*inputs, out=view); None: the kernel itself."""

    __slots__ = ("calls", "storage", "nbytes")

    def __init__(self, calls: list, storage: torch.Tensor | None, nbytes: int):
        self.calls = calls
        self.storage = storage          # the one allocation the views are slices of
        self.nbytes = nbytes

    def __bool__(self) -> bool:
        return self.storage is not None


def _static(v) -> tuple | None:
    if v.kind != "tensor" or v.dtype is None or v.shape is None \
            or not all(isinstance(d, int) for d in v.shape):
        return None
    return v.dtype, tuple(v.shape)


def _view(raw: np.ndarray, v) -> torch.Tensor:
    """Value v's tensor over `raw` (its planned bytes): numpy's view and reshape, then one
    from_numpy (cheaper than torch's three steps); through torch for a type numpy lacks."""
    try:
        return torch.from_numpy(raw.view(np.dtype(v.dtype)).reshape(v.shape))
    except TypeError:                                    # bfloat16
        return torch.from_numpy(raw).view(torch_dtype(v.dtype)).reshape(v.shape)


def _fresh_readers(plan: Plan, kernels: Sequence[Callable]) -> list[bool]:
    """Per value, whether every node reading it has a fresh kernel (no list per value:
    this runs once per executor, on graphs of 100,000 nodes too)."""
    ok = [True] * len(plan.values)
    for n in plan.nodes:
        if not getattr(kernels[n.index], "fresh", False):
            for vi in n.inputs:
                if vi >= 0:
                    ok[vi] = False
    return ok


def plan_into(plan: Plan, kernels: Sequence[Callable]) -> Into:
    """Which nodes write into planned views (module doc); the views are allocated here.
    Once per executor, linear in the plan (the cyclic collector is paused meanwhile: it
    would rescan the plan's objects for every few hundred tensors made)."""
    if plan.memory is None or not plan.memory.buffers:
        return Into([None] * len(plan.nodes), None, 0)
    was_enabled = gc.isenabled()
    gc.disable()
    try:
        return _plan_into(plan, kernels)
    finally:
        if was_enabled:
            gc.enable()


def _plan_into(plan: Plan, kernels: Sequence[Callable]) -> Into:
    fresh = _fresh_readers(plan, kernels)
    offsets = [b.offset for b in plan.memory.buffers]
    values = plan.values
    span: dict[int, tuple[int, int]] = {}       # value written -> its planned [start, end)
    calls: list[Any] = [None] * len(plan.nodes)
    for n in plan.nodes:
        choose = getattr(kernels[n.index], "into", None)
        if choose is None or len(n.outputs) != 1 or not n.inputs or min(n.inputs) < 0:
            continue
        y = values[n.outputs[0]]
        if y.buffer < 0 or y.nbytes <= 0 or not fresh[y.index] or y.is_output \
                or y.is_input or y.is_const or torch_dtype(y.dtype) is None:
            continue
        lo = offsets[y.buffer]
        hi = lo + y.nbytes
        ins = [values[i] for i in n.inputs]
        if any(v.buffer >= 0 and offsets[v.buffer] < hi and lo < offsets[v.buffer] + v.nbytes
               for v in ins):
            continue                 # (the planner never overlaps a node's input and output)
        out = _static(y)
        fn = choose([_static(v) for v in ins], out) if out is not None else None
        if fn is not None:
            calls[n.index] = (fn, y.index)
            span[y.index] = (lo, hi)
    if not span:
        return Into(calls, None, 0)
    size = max(hi for _, hi in span.values())
    base = torch.empty(size, dtype=torch.uint8).numpy()   # (torch's allocation is aligned)
    views = {vi: _view(base[lo:hi], values[vi]) for vi, (lo, hi) in span.items()}
    for ni, c in enumerate(calls):
        if c is not None:
            calls[ni] = (c[0], views[c[1]])
    return Into(calls, torch.from_numpy(base), size)


def cached_into(cache: tuple | None, plan: Plan, kernels: Sequence[Callable], on: bool) -> tuple:
    """An executor's (kernels, Into): `cache` while it was made for these kernels (tests
    replace them to spy), else plan_into made again (an empty Into where `on` is False)."""
    if cache is None or cache[0] is not kernels:
        cache = (kernels, plan_into(plan, kernels) if on
                 else Into([None] * len(plan.nodes), None, 0))
    return cache

