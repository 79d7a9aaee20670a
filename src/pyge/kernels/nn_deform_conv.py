"""DeformConv (opset 19; 22 adds bfloat16): deformable convolution, v1 and v2 (with a
mask), any number of spatial dimensions.

Torch ops on the input's device (no host round trip, nothing reads a device value on the
host), so it works on CUDA tensors and inside CUDA graph captures.
"""
from __future__ import annotations

import itertools
import math

import torch

from ._util import node_error, run_error
from .registry import register


# ---------------------------------------------------------------------------------------
# DeformConv (opset 19, 22: bfloat16 added)


def _ints_attr(ctx, name, n_expected=None):
    v = ctx.attr(name)
    if v is None:
        return None
    v = [int(e) for e in v]
    if n_expected is not None and len(v) != n_expected:
        raise node_error(ctx, f"{name}={v} must have {n_expected} values")
    return v


@register("DeformConv", since=19)
def deform_conv(ctx):
    """Deformable convolution (v1; v2 with `mask`), any number of spatial dimensions.

    Each kernel tap of each output position samples the input at its regular position plus
    a learned offset, multilinearly (bilinear in 2-D) with zeros outside the input (the
    onnx reference's GridSample(align_corners=1, padding_mode=zeros)); the samples, times
    the mask, are an im2col matrix that one batched matmul multiplies with the weight."""
    group = int(ctx.attr("group", 1))
    offset_group = int(ctx.attr("offset_group", 1))
    if group < 1:
        raise node_error(ctx, f"group={group} must be >= 1")
    if offset_group < 1:
        raise node_error(ctx, f"offset_group={offset_group} must be >= 1")
    kernel_attr = _ints_attr(ctx, "kernel_shape")
    strides_attr = _ints_attr(ctx, "strides")
    dil_attr = _ints_attr(ctx, "dilations")
    pads_attr = _ints_attr(ctx, "pads")
    for name, v in (("strides", strides_attr), ("dilations", dil_attr)):
        if v is not None and any(e < 1 for e in v):
            raise node_error(ctx, f"{name}={v} must be positive")
    if pads_attr is not None and (len(pads_attr) % 2 or any(p < 0 for p in pads_attr)):
        raise node_error(ctx, f"pads={pads_attr} must be 2 non-negative values per spatial axis")
    if kernel_attr is not None:
        n = len(kernel_attr)
        for name, v, k in (("strides", strides_attr, 1), ("dilations", dil_attr, 1),
                           ("pads", pads_attr, 2)):
            if v is not None and len(v) != k * n:
                raise node_error(ctx, f"{name}={v} must have {k * n} values for "
                                      f"kernel_shape={kernel_attr}")
    plans: dict = {}

    def plan(x, w, off):
        """Static geometry for one (input shape, weight shape): base sampling positions."""
        key = (tuple(x.shape), tuple(w.shape), x.device, x.dtype)
        p = plans.get(key)
        if p is not None:
            return p
        n = x.ndim - 2
        if n < 1:
            raise run_error(ctx, f"X must have at least 3 dimensions, got shape {tuple(x.shape)}")
        if w.ndim != x.ndim:
            raise run_error(ctx, f"W has shape {tuple(w.shape)}, X {tuple(x.shape)}: the ranks "
                                 "must be equal")
        k = kernel_attr or list(w.shape[2:])
        if list(k) != list(w.shape[2:]):
            raise run_error(ctx, f"kernel_shape={k} does not match W's shape {tuple(w.shape)}")
        s = strides_attr or [1] * n
        d = dil_attr or [1] * n
        pads = pads_attr or [0] * (2 * n)
        if len(s) != n or len(d) != n or len(pads) != 2 * n:
            raise run_error(ctx, f"strides/dilations/pads do not fit {n} spatial axes")
        c = x.shape[1]
        if c != w.shape[1] * group or w.shape[0] % group:
            raise run_error(ctx, f"X has {c} channels and W shape {tuple(w.shape)}: with "
                                 f"group={group}, X's channels must be W.shape[1]*group and "
                                 "W.shape[0] a multiple of group")
        if c % offset_group:
            raise run_error(ctx, f"X's {c} channels are not divisible by "
                                 f"offset_group={offset_group}")
        ins = list(x.shape[2:])
        outs = [(ins[i] + pads[i] + pads[n + i] - (k[i] - 1) * d[i] - 1) // s[i] + 1
                for i in range(n)]
        if any(o <= 0 for o in outs):
            raise run_error(ctx, f"the output would be empty ({outs}) for input {ins}, "
                                 f"kernel {k}, strides {s}, dilations {d}, pads {pads}")
        kk = math.prod(k)
        cdt = torch.float64 if x.dtype == torch.float64 else torch.float32
        # base[i]: (K, *out) positions along spatial axis i without the offsets
        grids = torch.meshgrid(*[torch.arange(e, device=x.device) for e in k + outs],
                               indexing="ij")
        base = [(grids[n + i] * s[i] - pads[i] + grids[i] * d[i]).to(cdt).reshape(kk, *outs)
                for i in range(n)]
        strides_flat = [math.prod(ins[i + 1:]) for i in range(n)]
        p = plans[key] = (n, kk, outs, ins, base, strides_flat, cdt)
        return p

    def fn(xs):
        x, w, off = xs[0], xs[1], xs[2]
        b = xs[3] if len(xs) > 3 else None
        mask = xs[4] if len(xs) > 4 else None
        n, kk, outs, ins, base, sflat, cdt = plan(x, w, off)
        nb, c = x.shape[0], x.shape[1]
        og = offset_group
        exp_off = (nb, og * kk * n, *outs)
        if tuple(off.shape) != exp_off:
            raise run_error(ctx, f"offset has shape {tuple(off.shape)}, expected {exp_off}")
        if mask is not None and tuple(mask.shape) != (nb, og * kk, *outs):
            raise run_error(ctx, f"mask has shape {tuple(mask.shape)}, expected "
                                 f"{(nb, og * kk, *outs)}")
        no = math.prod(outs)
        # positions along each axis: (N, og, K*O)
        off = off.to(cdt).reshape(nb, og, kk, n, no)
        pos = [base[i].reshape(1, 1, kk, no) + off[:, :, :, i] for i in range(n)]
        lo = [torch.floor(p) for p in pos]
        frac = [p - f for p, f in zip(pos, lo)]
        lo = [f.to(torch.int64) for f in lo]
        cg = c // og
        xf = x.to(cdt).reshape(nb, og, cg, -1)
        cols = None
        for corner in itertools.product((0, 1), repeat=n):
            wt = None
            flat = None
            valid = None
            for i, ci in enumerate(corner):
                idx = lo[i] + ci
                wi = frac[i] if ci else 1 - frac[i]
                vi = (idx >= 0) & (idx < ins[i])
                wt = wi if wt is None else wt * wi
                valid = vi if valid is None else valid & vi
                term = idx.clamp(0, ins[i] - 1) * sflat[i]
                flat = term if flat is None else flat + term
            wt = wt * valid
            g = torch.gather(xf, 3, flat.reshape(nb, og, 1, kk * no).expand(nb, og, cg, kk * no))
            term = g * wt.reshape(nb, og, 1, kk * no)
            cols = term if cols is None else cols + term
        if mask is not None:
            cols = cols * mask.to(cdt).reshape(nb, og, 1, kk * no)
        # (N, C, K, O) -> (N, group, C/group * K, O); W: (group, OC/group, C/group * K)
        oc = w.shape[0]
        cols = cols.reshape(nb, group, (c // group) * kk, no)
        wm = w.to(cdt).reshape(group, oc // group, (c // group) * kk)
        y = torch.matmul(wm, cols).reshape(nb, oc, *outs)
        if b is not None:
            y = y + b.to(cdt).reshape(1, oc, *([1] * n))
        return [y.to(x.dtype)]
    return fn
