"""Moving values between numpy (the user's side) and torch (the kernels' side), and a
reference interpreter used by kernel tests and by If/Loop bodies."""
from __future__ import annotations

from typing import Any

import numpy as np
import torch

from ..errors import ExecutionError, PygeError, UnsupportedOperatorError
from ..ir.graph import Graph, Node
from ._util import held
from .registry import KernelContext, lookup, opset_of

NP_TO_TORCH = {
    "float32": torch.float32, "float64": torch.float64, "float16": torch.float16,
    "bfloat16": torch.bfloat16, "int8": torch.int8, "int16": torch.int16, "int32": torch.int32,
    "int64": torch.int64, "uint8": torch.uint8, "bool": torch.bool, "uint16": torch.uint16,
    "uint32": torch.uint32, "uint64": torch.uint64, "complex64": torch.complex64,
    "complex128": torch.complex128,
}
TORCH_TO_NP = {v: k for k, v in NP_TO_TORCH.items()}


def torch_dtype(dtype: str | None) -> torch.dtype | None:
    return NP_TO_TORCH.get(dtype) if dtype else None


def to_torch(x: Any, device: Any = "cpu") -> Any:
    """numpy / python value -> run-time value (see registry conventions)."""
    if x is None:
        return None
    if isinstance(x, torch.Tensor):
        return x.to(device)
    if isinstance(x, list):
        return [to_torch(e, device) for e in x]
    arr = np.asarray(x)
    if arr.dtype == object or arr.dtype.kind in ("U", "S"):
        return arr.astype(object)
    if str(arr.dtype) == "bfloat16":  # ml_dtypes
        return torch.from_numpy(arr.view(np.uint16).copy()).view(torch.bfloat16).to(device)
    if not arr.flags.writeable or not arr.flags.c_contiguous:
        arr = np.array(arr, order="C", copy=True)  # not ascontiguousarray: it makes 0-d arrays 1-d
    t = torch.from_numpy(arr)
    return t.to(device) if str(device) != "cpu" else t


def to_numpy(x: Any) -> Any:
    """run-time value -> numpy (lists stay lists, None stays None)."""
    if x is None:
        return None
    if isinstance(x, list):
        return [to_numpy(e) for e in x]
    if isinstance(x, torch.Tensor):
        t = x.detach()
        if t.device.type != "cpu":
            t = t.cpu()
        if t.dtype == torch.bfloat16:
            # numpy has no bfloat16; ml_dtypes (an onnx dependency) does. Same bits, no rounding.
            import ml_dtypes
            return t.contiguous().view(torch.uint16).numpy().view(ml_dtypes.bfloat16)
        if t.dtype in (torch.uint16, torch.uint32, torch.uint64):
            return t.numpy()
        return t.resolve_conj().resolve_neg().numpy()
    return np.asarray(x)


def build_kernel(node: Node, device: Any, compile_subgraph=None):
    factory = lookup(node.op_type, node.domain, opset_of(node))
    if factory is None:
        raise UnsupportedOperatorError({f"{node.domain + '.' if node.domain else ''}{node.op_type}": node.name})
    implicit = [v.name for v in node.implicit_inputs()] if node.subgraphs else []
    ctx = KernelContext(node=node, opset=opset_of(node), device=device,
                        compile_subgraph=compile_subgraph or (lambda g: compile_reference(g, device)),
                        implicit_names=implicit)
    try:
        return factory(ctx)
    except PygeError:
        raise
    except Exception as err:  # noqa: BLE001 - e.g. a constant too large to allocate: name the node
        raise ExecutionError(f"{describe(node)}, preparing its kernel", err) from err


def describe(node: Node) -> str:
    return f"node {node.name!r} ({node.op_type})"


def compile_reference(graph: Graph, device: Any = "cpu"):
    """A plain topological-order interpreter for `graph` (used for If/Loop bodies and tests).

    Returns runner(inputs: list, outer: dict[name, value]) -> list of graph outputs.
    """
    order = graph.topological_sort()
    kernels = [build_kernel(n, device) for n in order]
    consts = {name: held(to_torch(v.const, device)) for name, v in graph.initializers.items()}
    in_names = [v.name for v in graph.inputs]
    out_names = [v.name for v in graph.outputs]
    plans = []
    for n, k in zip(order, kernels):
        names = [v.name if v is not None else None for v in n.inputs]
        names += [v.name for v in n.implicit_inputs()] if n.subgraphs else []
        plans.append((n, k, names, [o.name for o in n.outputs]))

    def run(inputs: list, outer: dict) -> list:
        env = dict(outer)
        env.update(consts)
        env.update(zip(in_names, inputs))
        for n, k, names, outs in plans:
            args = [env[nm] if nm is not None else None for nm in names]
            try:
                res = k(args)
            except ExecutionError:
                raise
            except Exception as err:  # noqa: BLE001 - name the node, keep the cause
                raise ExecutionError(describe(n), err) from err
            env.update(zip(outs, res))
        return [env[nm] for nm in out_names]

    return run


def run_reference(graph: Graph, feeds: dict[str, Any], device: Any = "cpu") -> dict[str, Any]:
    """Run `graph` with numpy feeds in topological order; returns numpy outputs by name."""
    runner = compile_reference(graph, device)
    inputs = [to_torch(feeds[v.name], device) for v in graph.inputs]
    outs = runner(inputs, {})
    return {v.name: to_numpy(o) for v, o in zip(graph.outputs, outs)}
