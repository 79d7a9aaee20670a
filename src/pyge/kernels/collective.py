"""onnxruntime's com.microsoft collectives, run through torch.distributed's default group.

Semantics follow onnxruntime's contrib schemas and its NCCL kernels (every rank of the group
takes part; inputs and outputs are variadic and map one to one):

    AllReduce   elementwise sum over the ranks; float16, bfloat16, float, double
    AllGather   the ranks' tensors concatenated along `axis` in rank order, so that dim
                grows `group_size` times; `group_size` must be the group's size. `axis`
                defaults to 0 as in onnxruntime's kernel and shape inference (its schema
                text says 1, but nothing reads that default). Also int64 and bool.
    AllToAll    the flattened input cut into `group_size` equal chunks, chunk r sent to
                rank r; the output's chunk r is what rank r sent (same shape as the input).

Gather and all-to-all only move bytes, so they send the tensor's bytes (any dtype, one code
path); all-reduce adds, so it sends the tensor itself.

Waiting. On the host backends (gloo) a collective is started asynchronously and waited for
at most pyge.collectiveTimeout (the node's `_pyge_collective_timeout` attribute, set by the
compiler); a failure or a timeout raises ExecutionError naming the node and this rank, and
marks the group broken (collective_group.py). On NCCL the collective is issued synchronously
on the current CUDA stream, which is the pyge logical stream of the node: ProcessGroupNCCL
runs a synchronous collective on the caller's current stream, so events order it like any
other kernel and a CUDA graph can capture it; NCCL's own watchdog enforces the group's
timeout there (pyge sets it when it initialises the group).

Releasing. gloo's wait() returns when the work is marked complete, a moment before the
worker thread drops its references to the work's tensors. A tensor with a Python object
takes the GIL when its count of C++ references falls to one (c10's PyObject preservation),
so a worker that drops late, after the interpreter has begun to finalise, is ended by
Python inside a noexcept destructor, and the process aborts ("terminate called without an
active exception") after correct output. So the kernel waits, briefly and bounded, until
gloo holds none of the tensors it was handed before it returns them.
"""
from __future__ import annotations

import datetime
import logging
import time

import torch

from ..errors import DistributedError, ExecutionError, GraphError
from ..ir.graph import Node
from ..ir.node import holds_graph
from .collective_group import default_group, is_broken, mark_broken
from .registry import KernelContext, register

log = logging.getLogger(__name__)

DOMAIN = "com.microsoft"
OP_TYPES = ("AllReduce", "AllGather", "AllToAll")
TIMEOUT_ATTR = "_pyge_collective_timeout"
DEFAULT_TIMEOUT_S = 60.0
_FLOATS = ("float16", "bfloat16", "float32", "float64")
DTYPES = {"AllReduce": _FLOATS, "AllGather": _FLOATS + ("int64", "bool"),
          "AllToAll": _FLOATS + ("int64", "bool")}


def is_collective(node: Node) -> bool:
    return node.op_type in OP_TYPES and node.domain == DOMAIN


def holds_collective(node: Node) -> bool:
    """The node is a collective, or runs one inside a subgraph (an If or Loop body)."""
    if is_collective(node):
        return True
    if not node.attrs or not holds_graph(node.attrs):   # the usual case: no body to look in
        return False
    return any(holds_collective(n) for g in node.subgraphs for n in g.nodes)


def group_size_of(node: Node) -> int | None:
    """The `group_size` attribute (default 1) of AllGather / AllToAll; None for AllReduce."""
    return None if node.op_type == "AllReduce" else int(node.attrs.get("group_size", 1))


def gather_axis(node: Node, rank: int) -> int:
    axis = int(node.attrs.get("axis", 0))
    if not -rank <= axis < rank:
        raise GraphError(f"node {node.name!r} (AllGather): axis {axis} is out of range for a "
                         f"rank-{rank} input")
    return axis % rank


def output_shape(node: Node, shape: tuple | None) -> tuple | None:
    """The output shape for an input of `shape` (None when the input's rank is unknown)."""
    if shape is None or node.op_type != "AllGather":
        return shape
    axis = gather_axis(node, len(shape))
    d = shape[axis]
    out = list(shape)
    out[axis] = d * group_size_of(node) if isinstance(d, int) else None
    return tuple(out)


def check_world(node: Node, world_size: int) -> None:
    """group_size must be the group's size: onnxruntime's kernels run on the whole group."""
    size = group_size_of(node)
    if size is not None and size != world_size:
        raise DistributedError(f"node {node.name!r} ({node.op_type}) has group_size={size}, but the "
                               f"default process group has {world_size} rank(s); every rank "
                               "takes part, so group_size must equal the world size")


class _Issuer:
    """Starts one collective, waits for it (bounded on host backends), names failures."""

    def __init__(self, ctx: KernelContext):
        node = ctx.node
        self.desc = f"node {node.name!r} ({node.op_type})"
        self.timeout = float(node.attrs.get(TIMEOUT_ATTR, DEFAULT_TIMEOUT_S))
        self.info = default_group(ctx.device, self.timeout, self.desc)
        check_world(node, self.info.world_size)
        self.where = f"{self.desc} on {self.info.where()}"
        self.sync = self.info.backend == "nccl"
        self.group = self.info.group

    def __call__(self, start, handed: tuple = ()) -> None:
        """`start(async_op)` issues the collective and returns its work handle (or None);
        `handed` are the tensors it gives the backend, each held by the kernel alone."""
        if is_broken(self.group):
            raise ExecutionError(self.where, DistributedError(
                "the default process group is broken by an earlier collective failure; "
                "destroy it and initialise a fresh one"))
        t0 = time.monotonic()
        try:
            if self.sync:
                start(False)
            else:
                start(True).wait(timeout=datetime.timedelta(seconds=self.timeout))
        except Exception as err:  # noqa: BLE001 - whatever the backend raises: name node and rank
            cause: BaseException = err
            if time.monotonic() - t0 >= 0.95 * self.timeout and "timed out" in str(err).lower():
                cause = TimeoutError(f"no answer within pyge.collectiveTimeout={self.timeout:g} s "
                                     "(a rank is missing, stuck, or issues its collectives in "
                                     "another order)")
            mark_broken(self.group, f"{self.where}: {type(cause).__name__}")
            raise ExecutionError(self.where, cause) from err
        if not self.sync and not wait_released(handed):
            log.debug("%s: the backend still holds its tensors %g s after the collective",
                      self.where, RELEASE_WAIT_S)


RELEASE_WAIT_S = 1.0


def wait_released(handed, limit_s: float | None = None) -> bool:
    """Wait until no C++ owner but its Python object holds each tensor of `handed` (the
    backend's worker has let go: see "Releasing" above); False if that took over `limit_s`.

    Usually the first look finds them free. The wait sleeps rather than spins: the worker's
    last release takes the GIL. It is bounded, so that a backend which keeps a tensor for
    longer costs a second, not a hang."""
    deadline = time.monotonic() + (RELEASE_WAIT_S if limit_s is None else limit_s)
    pause = 1e-5
    while any(t._use_count() > 1 for t in handed):
        if time.monotonic() > deadline:
            return False
        time.sleep(pause)
        pause = min(2 * pause, 1e-3)
    return True


def _bytes(x: torch.Tensor) -> torch.Tensor:
    """x's elements as one contiguous 1-D uint8 tensor (a view when x is contiguous)."""
    return x.contiguous().reshape(-1).view(torch.uint8)


@register("AllReduce", domain=DOMAIN)
def _all_reduce(ctx: KernelContext):
    import torch.distributed as dist
    issue = _Issuer(ctx)
    group = issue.group

    def fn(xs: list) -> list:
        outs = []
        for x in xs:
            # all_reduce works in place, and x may be a feed, a weight or a value other
            # nodes still read: reduce a copy.
            y = x.clone(memory_format=torch.contiguous_format)
            issue(lambda async_op: dist.all_reduce(y, group=group, async_op=async_op), (y,))
            outs.append(y)
        return outs
    return fn


@register("AllGather", domain=DOMAIN)
def _all_gather(ctx: KernelContext):
    import torch.distributed as dist
    issue = _Issuer(ctx)
    group, world, node = issue.group, issue.info.world_size, ctx.node
    # all_gather_single is all_gather_into_tensor's newer name (which newer torch deprecates).
    gather = getattr(dist, "all_gather_single", None) or dist.all_gather_into_tensor

    def fn(xs: list) -> list:
        outs = []
        for x in xs:
            axis = gather_axis(node, x.dim())
            send = _bytes(x)
            recv = send.new_empty(world * send.numel())
            issue(lambda async_op: gather(recv, send, group=group, async_op=async_op), (recv, send))
            parts = recv.view(x.dtype).reshape((world,) + tuple(x.shape))
            # [rank, d0, .., dk] -> rank next to `axis`, merged with it: rank-major concatenation
            outs.append(parts.movedim(0, axis).reshape(output_shape(node, tuple(x.shape))))
        return outs
    return fn


@register("AllToAll", domain=DOMAIN)
def _all_to_all(ctx: KernelContext):
    import torch.distributed as dist
    issue = _Issuer(ctx)
    group, world = issue.group, issue.info.world_size

    def fn(xs: list) -> list:
        outs = []
        for x in xs:
            if x.numel() % world:
                raise ExecutionError(issue.where, ValueError(
                    f"{x.numel()} elements cannot be cut into {world} equal chunks"))
            send = _bytes(x)
            recv = torch.empty_like(send)
            issue(lambda async_op: dist.all_to_all_single(recv, send, group=group,
                                                          async_op=async_op), (recv, send))
            outs.append(recv.view(x.dtype).reshape(x.shape))
        return outs
    return fn


__all__ = ["DOMAIN", "OP_TYPES", "DTYPES", "TIMEOUT_ATTR", "is_collective", "holds_collective",
           "output_shape", "check_world", "gather_axis", "group_size_of", "wait_released"]

