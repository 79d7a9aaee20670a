"""Memory for the CUDA executor: when a plan may be captured, and the planned arena.

Two strategies (CudaExecutor's `memory` argument):

- "pool" (default). Kernels allocate through PyTorch's caching allocator; inside a capture
  that is the graph's private pool, so replay sees the addresses of the capture and no
  allocator runs. Cross-stream safety: a tensor read on a stream other than the one it was
  allocated on is marked with `record_stream(reader)`. The allocator then never hands its
  block to another tensor before the reader is done: in eager mode it waits on an event,
  during capture it keeps the block out of reuse until the capture ends. Same-stream reuse
  is stream-ordered and therefore safe. Release points drop references as on the CPU.
  Why default: no extra work per op (the arena needs one copy per planned value), and the
  ordering argument rests on the allocator's documented stream semantics.
- "arena". One uint8 tensor of `plan.memory.peak_bytes`, allocated once outside capture;
  every planned value is a fixed view at its planned offset, and a kernel's result is
  copied into its view on the producing stream (the kernel's own temporary is freed right
  away, on its own stream, so the allocator can only hand it back to later work of that
  stream). Cross-stream reuse of arena bytes is exactly what memory.plan_memory allowed:
  only where events already order every reader before the next writer. This is GE's model
  (one arena, fixed offsets) and makes `model.memory.peak_bytes` the real footprint.
  Results that are *views into the arena* but not themselves planned (e.g. a graph output
  that is a Reshape of an intermediate) are cloned: their bytes would be reused.
  (base.Arena; the CPU executor can use it too, which is how the tests exercise it.)
"""
from __future__ import annotations

from typing import Any

import torch

from ..kernels.host_ops import HOST_OPS
from ..plan.plan import Plan


def _static_shape(shape) -> bool:
    return shape is not None and all(isinstance(d, int) and d >= 0 for d in shape)


def graph_blocker(plan: Plan, enabled: bool = True) -> str | None:
    """Why this plan cannot be captured into a CUDA graph (None: it can)."""
    if not enabled:
        return "pyge.cudaGraph=false"
    read = {vi for n in plan.nodes for vi in n.inputs} | set(plan.outputs)
    for v in plan.values:
        if v.index not in read:
            # A result nobody reads (Dropout's mask in opset 7-9 models has no inferred type):
            # nothing copies it or depends on its shape, and a kernel that syncs for it fails
            # the capture, which then falls back to eager mode as for any other kernel.
            continue
        if v.kind != "tensor" or v.dtype in (None, "object"):
            return f"value {v.name!r} is a {v.kind} of {v.dtype} (host-side or untyped)"
        if not _static_shape(v.shape):
            return f"value {v.name!r} has a dynamic shape {v.shape}"
    for n in plan.nodes:
        if n.op_type in HOST_OPS:
            return f"node {n.name!r} ({n.op_type}) runs host-side logic"
    return _collective_blocker(plan)


def _collective_blocker(plan: Plan) -> str | None:
    """Collectives are captured where their backend allows it, as torch decides
    (kernels/collective_group.capture_blocker: NCCL from 2.9.6 on; host backends never)."""
    from ..plan.collectives import plan_collectives
    held = plan_collectives(plan)
    if not held:
        return None
    from ..kernels.collective_group import cuda_capture_blocker
    why = cuda_capture_blocker()
    first = plan.nodes[held[0]]
    return f"node {first.name!r} ({first.op_type}): {why}" if why else None


def record_use(x: Any, stream: "torch.cuda.Stream") -> None:
    """Tell the allocator that `stream` reads x (a tensor, or a list of them)."""
    if isinstance(x, torch.Tensor):
        if x.is_cuda:
            x.record_stream(stream)
    elif isinstance(x, list):
        for e in x:
            record_use(e, stream)
