"""Kernels that write their result into memory the plan owns, where that is provably safe.

Why. A small torch operator spends a good part of its call allocating its result; torch's
`out=` variants and in-place methods skip that. The memory plan already gives every planned
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
  input's bytes past the time the plan reserved them for it; in a chain the plan packs
  tightly, the next value to take those bytes is the very node that reads the result.

The views are `torch.from_numpy` slices of one allocation, a storage each of exactly the
planned bytes and not resizable: were a result ever larger than planned, torch's out= would
fail on its node instead of writing over a neighbour. A caller never receives a view (graph
outputs are not planned), and a run rewrites every view before it is read, which also
moves the view's version counter, so caches keyed on identity and version (onednn.Derived)
stay right.
"""
from __future__ import annotations

from typing import Any, Callable, Sequence

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


def _readers(plan: Plan) -> list[list[int]]:
    out: list[list[int]] = [[] for _ in plan.values]
    for n in plan.nodes:
        for vi in dict.fromkeys(n.inputs):
            if vi >= 0:
                out[vi].append(n.index)
    return out


def plan_into(plan: Plan, kernels: Sequence[Callable]) -> Into:
    """Which nodes write into planned views (module doc); the views are allocated here."""
    readers = _readers(plan)
    mem = plan.memory
    span: dict[int, tuple[int, int]] = {}       # value -> its planned [start, end) bytes

    def where(vi: int) -> tuple[int, int] | None:
        v = plan.values[vi]
        if v.buffer < 0 or mem is None or v.nbytes <= 0:
            return None
        off = mem.buffers[v.buffer].offset
        return off, off + v.nbytes

    def writable(vi: int) -> bool:
        v = plan.values[vi]
        return (where(vi) is not None and torch_dtype(v.dtype) is not None
                and _static(v) is not None and not (v.is_output or v.is_input or v.is_const)
                and all(getattr(kernels[r], "fresh", False) for r in readers[vi]))

    targets: list[Any] = [None] * len(plan.nodes)    # node -> (fn, value written) | None
    for n in plan.nodes:
        choose = getattr(kernels[n.index], "into", None)
        if choose is None or len(n.outputs) != 1 or not n.inputs or min(n.inputs) < 0 \
                or not writable(n.outputs[0]):
            continue
        y = n.outputs[0]
        lo, hi = where(y)
        if any((r := where(i)) is not None and r[0] < hi and lo < r[1] for i in n.inputs):
            continue                 # (the planner never overlaps a node's input and output)
        fn = choose([_static(plan.values[i]) for i in n.inputs], _static(plan.values[y]))
        if fn is not None:
            targets[n.index] = (fn, y)
            span[y] = (lo, hi)
    if not span:
        return Into([None] * len(plan.nodes), None, 0)
    size = max(hi for _, hi in span.values())
    base = torch.empty(size, dtype=torch.uint8).numpy()   # (torch's allocation is aligned)
    views = {}
    for vi, (lo, hi) in span.items():
        v = plan.values[vi]
        views[vi] = torch.from_numpy(base[lo:hi]).view(torch_dtype(v.dtype)).reshape(v.shape)
    calls: list = [None] * len(plan.nodes)
    for ni, t in enumerate(targets):
        if t is not None:
            calls[ni] = (t[0], views[t[1]])
    return Into(calls, torch.from_numpy(base), size)
