"""Control-flow kernels: If, Loop, Scan, SequenceMap.

Each factory compiles its body graph(s) once with ``ctx.compile_subgraph`` (which the
executor layer supplies: pyge.executors.interpreter) and gets a
``runner(inputs, outer) -> outputs``. Outer-scope values read by the bodies arrive after
the node's explicit inputs, in the order of ``ctx.implicit_names``; they are handed to the
runner as the ``outer`` name -> value map (body inputs shadow outer names of the same name).
"""
from __future__ import annotations

from typing import Any

import numpy as np
import torch

from ..errors import ExecutionError, GraphError
from ..ir.graph import Graph
from ._util import describe, run_error
from .convert import torch_dtype
from .registry import KernelContext, register


def _body(ctx: KernelContext, attr: str) -> tuple[Graph, Any]:
    g = ctx.attr(attr)
    if not isinstance(g, Graph):
        raise GraphError(f"node {ctx.node.name!r} ({ctx.node.op_type}) needs graph attribute {attr!r}")
    if ctx.compile_subgraph is None:
        # The executor layer chooses how a body runs (kernels never import executors); a
        # caller that builds this kernel without saying so has nothing to run it with.
        raise ExecutionError(f"{describe(ctx.node)}, preparing its kernel", LookupError(
            f"no subgraph compiler to run its body {attr!r} with (kernels with bodies are "
            f"built through pyge.executors)"))
    return g, ctx.compile_subgraph(g)


def _split_outer(ctx: KernelContext, xs: list) -> tuple[list, dict]:
    n = ctx.num_inputs
    return list(xs[:n]), dict(zip(ctx.implicit_names, xs[n:]))


def _to_bool(ctx: KernelContext, x: Any, what: str) -> bool:
    if x.numel() != 1:
        raise run_error(ctx, f"{what} must hold exactly one element, got shape {tuple(x.shape)}")
    return bool(x.reshape(-1)[0].item())


def _stack(ctx: KernelContext, parts: list, axis: int, proto, device) -> Any:
    """Stack per-iteration scan outputs on a new `axis`; `proto` (a body output Value)
    gives dtype and element shape when there were no iterations at all."""
    if parts:
        if isinstance(parts[0], np.ndarray):  # string tensors
            return np.stack(parts, axis=axis)
        return torch.stack(parts, dim=axis)
    shape = proto.shape
    if shape is None or not all(isinstance(d, int) for d in shape):
        # Zero iterations and the element shape is not statically known: the best we can
        # say is "empty" (a 1-D tensor of length 0 with the body output's dtype).
        shape = []
    shape = list(shape)
    shape.insert(axis if axis >= 0 else len(shape) + 1 + axis, 0)
    if proto.dtype == "object":
        return np.empty(shape, dtype=object)
    return torch.empty(shape, dtype=torch_dtype(proto.dtype) or torch.float32, device=device)


# -- If ----------------------------------------------------------------------------------


@register("If", since=1)
def if_(ctx):
    _, then_run = _body(ctx, "then_branch")
    _, else_run = _body(ctx, "else_branch")
    n_out = ctx.num_outputs

    def run(xs):
        explicit, outer = _split_outer(ctx, xs)
        branch = then_run if _to_bool(ctx, explicit[0], "the If condition") else else_run
        outs = branch([], outer)
        if len(outs) != n_out:
            raise run_error(ctx, f"branch produced {len(outs)} outputs, the node has {n_out}")
        return outs
    return run


# -- Loop --------------------------------------------------------------------------------


@register("Loop", since=1)
def loop(ctx):
    body, run_body = _body(ctx, "body")
    n_carried = ctx.num_inputs - 2
    # Body: (iteration_num, cond, carried...) -> (cond, carried..., scan outputs...)
    n_scan = len(body.outputs) - 1 - n_carried
    if len(body.inputs) != 2 + n_carried or n_scan < 0:
        raise GraphError(f"node {ctx.node.name!r} (Loop): body has {len(body.inputs)} inputs and "
                         f"{len(body.outputs)} outputs for {n_carried} loop-carried values")
    scan_protos = body.outputs[1 + n_carried:]
    dev = ctx.device
    n_out = ctx.num_outputs

    def run(xs):
        explicit, outer = _split_outer(ctx, xs)
        m, cond_in, carried = explicit[0], explicit[1], explicit[2:]
        trip = int(m.reshape(-1)[0].item()) if m is not None else None
        go = _to_bool(ctx, cond_in, "the Loop condition") if cond_in is not None else True
        scans: list[list] = [[] for _ in range(n_scan)]
        i = 0
        while go and (trip is None or i < trip):
            outs = run_body([torch.tensor(i, dtype=torch.int64, device=dev),
                             torch.tensor(go, dtype=torch.bool, device=dev), *carried], outer)
            # Loop-carried dependencies: body output k+1 becomes body input k+2 of the next
            # iteration, and after the last iteration it is the node's output k.
            carried = outs[1:1 + n_carried]
            for k in range(n_scan):
                scans[k].append(outs[1 + n_carried + k])
            # The body's cond output always steers the loop, as in onnxruntime. (The spec's
            # pseudo-code calls it "ignored" when the node has no cond input, which would
            # make a ("", "") Loop endless; models validated on onnxruntime rely on this.)
            go = _to_bool(ctx, outs[0], "the body's condition output")
            i += 1
        # Scan outputs: the per-iteration values, stacked on a new leading axis.
        stacked = [_stack(ctx, scans[k], 0, scan_protos[k], dev) for k in range(n_scan)]
        return (list(carried) + stacked)[:n_out]
    return run


# -- Scan --------------------------------------------------------------------------------


def _norm_axis(ctx: KernelContext, axis: int, rank: int, what: str) -> int:
    if not -rank <= axis < rank:
        raise run_error(ctx, f"{what} axis {axis} out of range for rank {rank}")
    return axis % rank


def _scan_loop(ctx, run_body, outer, states, scan_ins, in_axes, in_dirs, n_scan_out, length):
    """Run the body `length` times; returns final states and per-iteration scan outputs."""
    outs_per_iter: list[list] = [[] for _ in range(n_scan_out)]
    n_state = len(states)
    for t in range(length):
        slices = [x.select(ax, length - 1 - t if rev else t) if isinstance(x, torch.Tensor)
                  else np.take(x, length - 1 - t if rev else t, axis=ax)
                  for x, ax, rev in zip(scan_ins, in_axes, in_dirs)]
        outs = run_body([*states, *slices], outer)
        states = outs[:n_state]
        for k in range(n_scan_out):
            outs_per_iter[k].append(outs[n_state + k])
    return states, outs_per_iter


@register("Scan", since=9)
def scan(ctx):
    body, run_body = _body(ctx, "body")
    m = int(ctx.attr("num_scan_inputs", 0))
    n_state = ctx.num_inputs - m
    n_scan_out = len(body.outputs) - n_state
    if m <= 0 or n_state < 0 or n_scan_out < 0 or len(body.inputs) != ctx.num_inputs:
        raise GraphError(f"node {ctx.node.name!r} (Scan): body signature does not match "
                         f"num_scan_inputs={m} and {ctx.num_inputs} inputs")
    in_axes = list(ctx.attr("scan_input_axes", [0] * m))
    in_dirs = list(ctx.attr("scan_input_directions", [0] * m))
    out_axes = list(ctx.attr("scan_output_axes", [0] * n_scan_out))
    out_dirs = list(ctx.attr("scan_output_directions", [0] * n_scan_out))
    protos = body.outputs[n_state:]
    dev = ctx.device

    def run(xs):
        explicit, outer = _split_outer(ctx, xs)
        states, scan_ins = explicit[:n_state], explicit[n_state:]
        axes = [_norm_axis(ctx, a, x.ndim, "scan input") for a, x in zip(in_axes, scan_ins)]
        lengths = {x.shape[a] for x, a in zip(scan_ins, axes)}
        if len(lengths) != 1:
            raise run_error(ctx, f"scan inputs disagree on the sequence length: {sorted(lengths)}")
        states, per_iter = _scan_loop(ctx, run_body, outer, states, scan_ins, axes, in_dirs,
                                      n_scan_out, lengths.pop())
        stacked = []
        for k in range(n_scan_out):
            parts = per_iter[k][::-1] if out_dirs[k] else per_iter[k]
            stacked.append(_stack(ctx, parts, out_axes[k], protos[k], dev))
        return list(states) + stacked
    return run


@register("Scan", since=8, until=8)
def scan8(ctx):
    """Opset 8: an extra leading batch axis on every input and output, optional
    per-batch sequence_lens; the scan axis is axis 1 of the scan inputs."""
    body, run_body = _body(ctx, "body")
    m = int(ctx.attr("num_scan_inputs", 0))
    n_state = ctx.num_inputs - 1 - m
    n_scan_out = len(body.outputs) - n_state
    if m <= 0 or n_state < 0 or n_scan_out < 0:
        raise GraphError(f"node {ctx.node.name!r} (Scan): body signature does not match "
                         f"num_scan_inputs={m}")
    dirs = list(ctx.attr("directions", [0] * m))
    protos = body.outputs[n_state:]
    dev = ctx.device

    def run(xs):
        explicit, outer = _split_outer(ctx, xs)
        lens, states, scan_ins = explicit[0], explicit[1:1 + n_state], explicit[1 + n_state:]
        batch, max_len = scan_ins[0].shape[0], scan_ins[0].shape[1]
        seq_lens = [max_len] * batch if lens is None else [int(v) for v in lens.reshape(-1).tolist()]
        final_states: list[list] = [[] for _ in range(n_state)]
        outs: list[list] = [[] for _ in range(n_scan_out)]
        for b in range(batch):
            n = seq_lens[b]
            st, per_iter = _scan_loop(ctx, run_body, outer, [s[b] for s in states],
                                      [x[b, :n] for x in scan_ins], [0] * m, dirs, n_scan_out, n)
            for k in range(n_state):
                final_states[k].append(st[k])
            for k in range(n_scan_out):
                y = _stack(ctx, per_iter[k], 0, protos[k], dev)
                if n < max_len:  # pad short sequences with zeros up to the batch's length
                    pad = torch.zeros((max_len - n, *y.shape[1:]), dtype=y.dtype, device=y.device)
                    y = torch.cat([y, pad])
                outs[k].append(y)
        return [torch.stack(s) for s in final_states] + [torch.stack(o) for o in outs]
    return run


# -- SequenceMap -------------------------------------------------------------------------


@register("SequenceMap", since=17)
def sequence_map(ctx):
    _, run_body = _body(ctx, "body")
    n_out = ctx.num_outputs

    def run(xs):
        explicit, outer = _split_outer(ctx, xs)
        if not isinstance(explicit[0], list):
            raise run_error(ctx, "input 0 must be a sequence")
        n = len(explicit[0])
        for j, x in enumerate(explicit[1:], 1):
            if isinstance(x, list) and len(x) != n:
                raise run_error(ctx, f"sequence input {j} has length {len(x)}, input 0 has {n}")
        results: list[list] = [[] for _ in range(n_out)]
        for i in range(n):
            # Sequences are mapped element-wise; tensor inputs are passed whole each time.
            args = [x[i] if isinstance(x, list) else x for x in explicit]
            for k, y in enumerate(run_body(args, outer)[:n_out]):
                results[k].append(y)
        return results
    return run
