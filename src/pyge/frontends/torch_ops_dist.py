"""torch's functional collectives -> onnxruntime's com.microsoft collectives.

torch.export writes a tensor-parallel module's communication as ``_c10d_functional`` ops
(traced under an initialised process group; nothing is sent while tracing):

    all_reduce(input, reduce_op, group_name)            -> AllReduce ("sum"; "avg" adds a Div)
    all_gather_into_tensor(input, group_size, group)    -> AllGather(axis=0, group_size)
    all_to_all_single(input, out_splits, in_splits, g)  -> AllToAll(group_size), equal splits only
    wait_tensor(t)                                      -> t (pyge's kernels complete before
                                                           their consumers run)

pyge runs collectives on the default process group, so a group other than the default one
is refused (``Unsupported``), as are reductions AllReduce cannot express (max, min,
product, ...). These ops are never folded at import time (torch_export._try_fold): each
rank must run them.
"""
from __future__ import annotations

import torch

from ..kernels.collective import DOMAIN, DTYPES
from .aten_table import Unsupported, op


def _overload(name: str):
    """torch.ops._c10d_functional.<name>.default, or None in a torch built without it."""
    try:
        return getattr(torch.ops._c10d_functional, name).default
    except (AttributeError, RuntimeError):
        return None


def _op(name: str):
    target = _overload(name)
    return op(target) if target is not None else (lambda fn: fn)


def _group_size(name) -> int:
    """The size of the process group `name`, which must be the default group."""
    import torch.distributed as dist
    if not (dist.is_available() and dist.is_initialized()):
        raise Unsupported(f"process group {name!r} is not initialised in this process")
    from torch.distributed.distributed_c10d import _resolve_process_group
    try:
        group = _resolve_process_group(name)
    except Exception as err:  # noqa: BLE001 - an unknown name
        raise Unsupported(f"process group {name!r} is unknown here ({type(err).__name__})") from err
    if group is not dist.group.WORLD:
        raise Unsupported(f"process group {name!r} is not the default group, which pyge's "
                          "collectives run on")
    return dist.get_world_size(group)


def _collective(cx, op_type: str, x, final: bool = True, **attrs):
    if x.dtype is not None and x.dtype not in DTYPES[op_type]:
        raise Unsupported(f"{x.dtype} tensors ({op_type} takes {', '.join(DTYPES[op_type])})")
    cx.conv.g.opset_imports.setdefault(DOMAIN, 1)
    v = cx.out(op_type, [x], **attrs) if final else cx.tmp(op_type, [x], x.dtype, x.shape, **attrs)
    v.producer.domain = DOMAIN
    return v


@_op("all_reduce")
def _all_reduce(cx, a):
    how = str(a["reduce_op"]).lower()
    size = _group_size(a["group_name"])
    if how == "sum":
        return _collective(cx, "AllReduce", a["input"])
    if how == "avg":
        total = _collective(cx, "AllReduce", a["input"], final=False)
        return cx.out("Div", [total, cx.scalar(size, total.dtype)])
    raise Unsupported(f"reduce op {how!r} (AllReduce sums; avg is a sum and a division)")


@_op("all_gather_into_tensor")
def _all_gather(cx, a):
    size = _group_size(a["group_name"])
    if int(a["group_size"]) != size:
        raise Unsupported(f"group_size {a['group_size']} differs from the group's size {size}")
    return _collective(cx, "AllGather", a["input"], axis=0, group_size=size)


@_op("all_to_all_single")
def _all_to_all(cx, a):
    size = _group_size(a["group_name"])
    x = a["input"]
    first = x.shape[0] if x.shape else None
    for splits in (a["output_split_sizes"], a["input_split_sizes"]):
        if splits and (len(splits) != size or len(set(splits)) != 1 or
                       not isinstance(first, int) or splits[0] * size != first):
            raise Unsupported(f"split sizes {list(splits)} (AllToAll cuts dim 0 into "
                              f"{size} equal parts)")
    return _collective(cx, "AllToAll", x, group_size=size)


@_op("wait_tensor")
def _wait(cx, a):
    return a["tensor"]
