"""A rough cost model for the automatic stream modes: FLOPs and bytes from static shapes.

time(node) = LAUNCH_S + max(flops / FLOP_RATE, bytes / BYTE_RATE)

Only the ratios matter (which branch is heavier, whether a node is worth an event), so the
rates are round numbers for one CPU socket. A measured cost wins: a node attribute
`_cost_us` (microseconds, e.g. written back from a profile) replaces the estimate.
Unknown dimensions count as 1 (a symbolic batch size) and unknown shapes as UNKNOWN_NUMEL.
"""
from __future__ import annotations

import math

from ...ir.graph import Node, Value
from ...plan.plan import itemsize

FLOP_RATE = 100e9        # FLOP/s
BYTE_RATE = 20e9         # bytes/s
LAUNCH_S = 5e-6          # fixed cost of launching any op
EVENT_S = 10e-6          # cost of a Send/Recv pair between streams (used by the schedulers)
UNKNOWN_NUMEL = 4096
MEASURED_ATTR = "_cost_us"

_ELEMENTWISE_FLOPS = {"Softmax": 5, "LogSoftmax": 5, "BatchNormalization": 4, "LayerNormalization": 8,
                      "InstanceNormalization": 8, "Sigmoid": 4, "Tanh": 4, "Erf": 4, "Gelu": 8,
                      "Exp": 4, "Log": 4, "Pow": 4, "Div": 2}


def numel(v: Value | None) -> int:
    if v is None:
        return 0
    if v.shape is None:
        return UNKNOWN_NUMEL
    shape = v.shape
    for d in shape:
        if not isinstance(d, int) or d < 0:
            return math.prod(d if isinstance(d, int) and d >= 0 else 1 for d in shape)
    return math.prod(shape)


def nbytes(v: Value | None) -> int:
    if v is None or v.kind != "tensor":
        return 0
    return numel(v) * (4 if v.dtype is None else itemsize(v.dtype))   # unknown: as float32


def _in(n: Node, i: int) -> Value | None:
    ins = n.inputs
    return ins[i] if i < len(ins) else None


def _shape(v: Value | None) -> tuple:
    return tuple(d if isinstance(d, int) and d >= 0 else 1 for d in (v.shape or ())) if v is not None else ()


def flops(n: Node) -> float:
    out = sum(numel(o) for o in n.outputs)
    op = n.op_type
    if op in ("Conv", "FusedConv", "ConvTranspose", "ConvInteger", "QLinearConv"):
        w = _shape(_in(n, 3 if op == "QLinearConv" else 1))
        per_out = math.prod(w[1:]) if len(w) > 1 else 1
        if op == "ConvTranspose":   # each input element scatters into kernel-size outputs
            return 2.0 * numel(_in(n, 0)) * (w[1] if len(w) > 1 else 1) * math.prod(w[2:])
        return 2.0 * out * per_out
    if op in ("MatMul", "Gemm", "MatMulInteger", "QLinearMatMul", "Einsum"):
        a = _shape(_in(n, 0))
        k = (a[0] if n.attrs.get("transA") else a[-1]) if a else 1
        return 2.0 * out * k
    if op in ("MaxPool", "AveragePool", "LpPool"):
        return float(out * math.prod(n.attrs.get("kernel_shape") or [1]))
    if op.startswith("Global") or op.startswith("Reduce"):
        return float(numel(_in(n, 0)))
    if op == "LRN":
        return float(out * int(n.attrs.get("size", 5)))
    return float(out * _ELEMENTWISE_FLOPS.get(op, 1))


def node_cost(n: Node) -> float:
    """Estimated (or measured) run time of one node, in seconds."""
    measured = n.attrs.get(MEASURED_ATTR)
    if isinstance(measured, (int, float)) and not isinstance(measured, bool) and measured >= 0:
        return float(measured) * 1e-6
    moved = sum(nbytes(v) for v in n.inputs) + sum(nbytes(o) for o in n.outputs)
    return LAUNCH_S + max(flops(n) / FLOP_RATE, moved / BYTE_RATE)
