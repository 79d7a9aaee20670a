"""Miscellaneous tensor kernels: BitCast."""
from __future__ import annotations

import torch

from ._util import STRING, node_error, onnx_dtype, run_error
from .registry import register
from .runtime import torch_dtype


@register("BitCast", since=26)
def bitcast(ctx):
    to = ctx.attr("to")
    if to is None:
        raise node_error(ctx, "attribute 'to' is required")
    if to == STRING:
        raise node_error(ctx, "attribute to=8 (string): strings cannot be bit-cast")
    dtype = onnx_dtype(ctx, to)
    size = torch.empty((), dtype=dtype).element_size()
    in_dt = torch_dtype(ctx.input_dtype(0))
    if in_dt is not None and in_dt.itemsize != size:
        raise node_error(ctx, f"attribute to={to} ({dtype}, {8 * size} bits) and the input "
                              f"({in_dt}, {8 * in_dt.itemsize} bits) differ in bit width")

    def fn(xs):
        x = xs[0]
        if not isinstance(x, torch.Tensor):
            raise run_error(ctx, "strings cannot be bit-cast")
        if x.element_size() != size:
            raise run_error(ctx, f"input {x.dtype} and output {dtype} differ in bit width")
        # Same width: a reinterpreting view (torch and ONNX both little endian here).
        return [x.view(dtype)]
    return fn
