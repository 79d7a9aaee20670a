"""ai.onnx.preview.training kernels: Gradient.

Gradient(xs=[...], zs=[...], y="...") has no graph attribute: the differentiated function
is the part of the *enclosing* graph that computes ``y`` from the tensors named in ``xs``
and ``zs``. The node's inputs are the values at which to evaluate it (the i-th input feeds
the i-th name of xs + zs), so they may differ from the values the graph itself computes.

We therefore slice that forward sub-graph out at compile time, and at run time re-run it
with torch autograd enabled on fresh leaf tensors, then take d(sum y)/dx for each x in xs
(for a non-scalar y this is the gradient of the sum of its elements, i.e. a vector-Jacobian
product with ones). Outputs for xs that y does not depend on are zeros.
"""
from __future__ import annotations

import torch

from ..errors import ExecutionError, GraphError
from ..ir.graph import Graph, Node, Value
from ._util import describe
from .build import build_kernel
from .convert import to_torch
from .registry import KernelContext, register

DOMAIN = "ai.onnx.preview.training"


def _forward_slice(ctx: KernelContext, graph: Graph, y: Value, stop: set[str]) -> list[Node]:
    """Nodes of `graph` on the paths from the `stop` names to `y`, in topological order."""
    me = ctx.node.name
    needed: dict[int, Node] = {}
    todo = [y]
    seen: set[int] = set()
    while todo:
        v = todo.pop()
        if id(v) in seen or v.name in stop:
            continue
        seen.add(id(v))
        p = v.producer
        if p is None:
            if v.const is None:
                raise GraphError(f"node {me!r} (Gradient): {y.name!r} depends on {v.name!r}, "
                                 f"which is neither in 'xs'/'zs' nor a constant")
            continue
        if p.graph is not graph:
            raise GraphError(f"node {me!r} (Gradient): {y.name!r} depends on outer-scope value {v.name!r}")
        if p is ctx.node:
            raise GraphError(f"node {me!r} (Gradient): 'y' cannot depend on the Gradient node itself")
        needed[id(p)] = p
        todo.extend(p.all_inputs())
    return [n for n in graph.topological_sort() if id(n) in needed]


@register("Gradient", since=1, domain=DOMAIN)
def gradient(ctx):
    node = ctx.node
    xs_names = list(ctx.attr("xs", []) or [])
    zs_names = list(ctx.attr("zs", []) or [])
    y_name = ctx.attr("y")
    if not xs_names or not y_name:
        raise GraphError(f"node {node.name!r} (Gradient) needs attributes 'xs' and 'y'")
    if ctx.num_inputs != len(xs_names) + len(zs_names):
        raise GraphError(f"node {node.name!r} (Gradient): {ctx.num_inputs} inputs for "
                         f"{len(xs_names) + len(zs_names)} names in xs + zs")
    graph = node.graph
    values = graph.values() if graph is not None else {}
    y = values.get(y_name)
    if y is None:
        raise GraphError(f"node {node.name!r} (Gradient): 'y' names unknown value {y_name!r}")
    feed_names = xs_names + zs_names
    order = _forward_slice(ctx, graph, y, set(feed_names))
    # Kernels for the forward slice are built separately from the graph's own: the executor
    # may run the graph's copies with autograd off, or fuse and reuse their buffers.
    kernels = [build_kernel(n, ctx.device, ctx.compile_subgraph) for n in order]
    consts = {}
    for n in order:
        for v in n.all_inputs():
            if v.const is not None and v.name not in feed_names:
                consts[v.name] = to_torch(v.const, ctx.device)

    def run(inputs):
        # Executors may run the graph under torch.inference_mode(), where autograd is off
        # and "inference tensors" cannot be saved for backward: leave it, and clone them.
        with torch.inference_mode(False), torch.enable_grad():
            return _differentiate([_plain(v) for v in inputs])

    def _differentiate(inputs):
        env = {k: _plain(v) for k, v in consts.items()}
        leaves = []
        for name, v in zip(xs_names, inputs):
            if not isinstance(v, torch.Tensor) or not (v.is_floating_point() or v.is_complex()):
                raise ExecutionError(describe(node), TypeError(
                    f"cannot differentiate w.r.t. {name!r}: not a float tensor"))
            leaf = v.detach().requires_grad_(True)
            leaves.append(leaf)
            env[name] = leaf
        env.update(zip(zs_names, inputs[len(xs_names):]))
        for n, k in zip(order, kernels):
            args = [env[v.name] if v is not None else None for v in n.inputs]
            args += [env[v.name] for v in n.implicit_inputs()] if n.subgraphs else []
            env.update(zip((o.name for o in n.outputs), k(args)))
        out = env[y_name]
        if not isinstance(out, torch.Tensor) or not out.requires_grad:
            # y does not depend on any x (or only through non-differentiable ops).
            return [torch.zeros_like(x) for x in leaves][:ctx.num_outputs]
        grads = torch.autograd.grad(out, leaves, grad_outputs=torch.ones_like(out),
                                    allow_unused=True)
        res = [torch.zeros_like(x) if g is None else g.detach() for x, g in zip(leaves, grads)]
        return res[:ctx.num_outputs]
    return run


def _plain(v):
    return v.clone() if isinstance(v, torch.Tensor) and v.is_inference() else v
