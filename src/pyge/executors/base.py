"""What every executor shares: kernels per plan node, feed checking, output conversion.

Profiling hooks protocol (every executor supports `run(feeds, hooks=None)`): when `hooks`
is given, the executor calls, on the thread that runs the stream,
    hooks.before(node_index, stream)   right before a node's kernel
    hooks.after(node_index, stream)    right after it returns
    hooks.record(event_index, stream)  after a Send (record) step   [optional method]
    hooks.wait(event_index, stream)    after a Recv (wait) step completes [optional method]
Hooks must be cheap and thread-safe; they must not raise.
"""
from __future__ import annotations

from typing import Any, Mapping

import numpy as np
import torch

from ..errors import InputError
from ..ir.graph import Graph
from ..kernels.runtime import build_kernel, describe, to_numpy, to_torch
from ..plan.plan import Plan


def build_kernels(graph: Graph, plan: Plan, device: Any) -> list:
    """One run-time function per plan node (plan node i is graph node `plan.nodes[i].name`)."""
    by_name = {n.name: n for n in graph.nodes}
    return [build_kernel(by_name[pn.name], device) for pn in plan.nodes]


def node_descriptions(graph: Graph, plan: Plan) -> list[str]:
    by_name = {n.name: n for n in graph.nodes}
    return [describe(by_name[pn.name]) for pn in plan.nodes]


_KIND = {"f": "float", "i": "int", "u": "uint", "b": "bool", "O": "string", "U": "string", "S": "string"}


def check_feeds(graph: Graph, plan: Plan, feeds: Mapping[str, Any]) -> list[Any]:
    """Validate user feeds against the graph inputs; returns numpy arrays in input order."""
    if not isinstance(feeds, Mapping):
        raise InputError(f"feeds must be a dict of input name -> array, got {type(feeds).__name__}")
    names = [plan.values[i].name for i in plan.inputs]
    extra = sorted(set(feeds) - set(names))
    if extra:
        raise InputError(f"unexpected feed {extra[0]!r}; the model's inputs are: {', '.join(names)}")
    out = []
    for vi in plan.inputs:
        pv = plan.values[vi]
        if pv.name not in feeds:
            raise InputError(f"missing feed for input {pv.name!r}")
        x = feeds[pv.name]
        if pv.kind != "tensor":
            out.append(x)
            continue
        arr = x if isinstance(x, (np.ndarray, torch.Tensor)) else np.asarray(x)
        dt = str(arr.dtype).replace("torch.", "") if isinstance(arr, torch.Tensor) else str(arr.dtype)
        if arr.dtype == object or getattr(arr.dtype, "kind", "") in ("U", "S"):
            dt = "object"
        if pv.dtype is not None and dt != pv.dtype:
            raise InputError(f"feed {pv.name!r} has dtype {dt}, expected {pv.dtype}")
        if pv.shape is not None:
            shape = tuple(arr.shape)
            ok = len(shape) == len(pv.shape) and all(
                not isinstance(d, int) or d == s for d, s in zip(pv.shape, shape))
            if not ok:
                want = "[" + ",".join(str(d) if d is not None else "?" for d in pv.shape) + "]"
                raise InputError(f"feed {pv.name!r} has shape {list(shape)}, expected {want}")
        out.append(arr)
    return out


def feeds_to_device(arrays: list[Any], device: Any) -> list[Any]:
    return [to_torch(a, device) for a in arrays]


def outputs_to_numpy(plan: Plan, env_out: list[Any]) -> dict[str, Any]:
    return {plan.values[vi].name: to_numpy(x) for vi, x in zip(plan.outputs, env_out)}


def constants(graph: Graph, plan: Plan, device: Any) -> dict[int, Any]:
    out = {}
    for v in plan.values:
        if v.is_const:
            out[v.index] = to_torch(graph.initializers[v.name].const, device)
    return out
