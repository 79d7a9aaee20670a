"""onnxruntime's quantized pools (domain com.microsoft): QLinearGlobalAveragePool (the exact
integer sum of each channel, requantized in float32) and QLinearAveragePool (float32 window
sums in onnxruntime's order). Shared helpers: tensor_quant_ms.py.
"""
from __future__ import annotations

import torch
import torch.nn.functional as F

from ._util import node_error, run_error
from .registry import register
from .tensor_quant import _8BIT, _QRANGE, _run_check
from .tensor_quant_ms import _F32, MS, _get, _sat, _sc, _types, _zp


# ---------------------------------------------------------------------------------------
# QLinearGlobalAveragePool


@register("QLinearGlobalAveragePool", domain=MS)
def qlinear_global_average_pool(ctx):
    # The exact integer sum of each channel, minus zero point * size, times
    # x_scale / (y_scale * size) in float32 (MLAS's requantization), round half to even.
    _types(ctx, [(0, "X"), (2, "x_zero_point"), (4, "y_zero_point")])
    last = bool(ctx.attr("channels_last", 0))

    def fn(xs):
        x, sx, zx, sy = xs[:4]
        zy = _get(xs, 4)
        _run_check(ctx, x, _8BIT, "X")
        if x.ndim < 3:
            raise run_error(ctx, f"X of rank {x.ndim} has no spatial axes (rank 3+ expected)")
        zx, zy = _zp(ctx, zx, "x_zero_point", x), _zp(ctx, zy, "y_zero_point", x)
        dims = tuple(range(1, x.ndim - 1)) if last else tuple(range(2, x.ndim))
        size = 1
        for d in dims:
            size *= x.shape[d]
        acc = x.to(torch.float64).sum(dim=dims, keepdim=True) - zx.to(torch.float64) * size
        scale = _sc(ctx, sx, "x_scale").to(_F32) / (_sc(ctx, sy, "y_scale").to(_F32) * float(size))
        return [_sat(ctx, acc.to(_F32) * scale, zy, x.dtype)]
    return fn


# ---------------------------------------------------------------------------------------
# QLinearAveragePool


@register("QLinearAveragePool", domain=MS)
def qlinear_average_pool(ctx):
    # onnxruntime dequantizes to float32 (x_scale * (q - zp)), sums each window in order
    # (rows, then columns...) over the positions inside the input, divides by the count
    # (the kernel size with count_include_pad), and quantizes round(v / y_scale + zp).
    # The same sums here: one shifted strided slice per kernel offset, in that order.
    _types(ctx, [(0, "X"), (2, "x_zero_point"), (4, "y_zero_point")])
    k = list(ctx.attr("kernel_shape") or [])
    if not k:
        raise node_error(ctx, "attribute 'kernel_shape' is required")
    n = len(k)
    strides = list(ctx.attr("strides") or [1] * n)
    pads = list(ctx.attr("pads") or [0] * (2 * n))
    auto_pad = ctx.attr("auto_pad", "NOTSET")
    if isinstance(auto_pad, bytes):
        auto_pad = auto_pad.decode()
    if auto_pad not in ("NOTSET", "VALID", "SAME_UPPER", "SAME_LOWER"):
        raise node_error(ctx, f"auto_pad={auto_pad!r} is not supported")
    dil = ctx.attr("dilations")
    if dil and any(d != 1 for d in dil):
        raise node_error(ctx, f"dilations={list(dil)} are not supported (onnxruntime has none)")
    ceil = bool(ctx.attr("ceil_mode", 0))
    include_pad = bool(ctx.attr("count_include_pad", 0))
    last = bool(ctx.attr("channels_last", 0))
    if len(strides) != n or len(pads) != 2 * n:
        raise node_error(ctx, f"strides {strides} / pads {pads} do not fit kernel_shape {k}")
    plans: dict = {}

    def plan(sizes):
        outs, heads, counts = [], [], []
        for i, size in enumerate(sizes):
            kk, s = k[i], strides[i]
            if auto_pad == "VALID":
                out, head, tail = (size - kk) // s + 1, 0, 0
            elif auto_pad.startswith("SAME"):
                out = -(-size // s)
                need = max(0, (out - 1) * s + kk - size)
                head = need // 2 if auto_pad == "SAME_UPPER" else (need + 1) // 2
            else:
                head, tail = pads[i], pads[i + n]
                span = size + head + tail - kk
                out = (-(-span // s) if ceil else span // s) + 1
            if out < 1:
                raise run_error(ctx, f"kernel_shape {k} does not fit the input {sizes}")
            st = torch.arange(out) * s - head
            cnt = torch.minimum(st + kk, torch.tensor(size)) - st.clamp(min=0)
            outs.append(out)
            heads.append(head)
            counts.append(cnt)
        tails = [(o - 1) * strides[i] + k[i] - heads[i] - sizes[i] for i, o in enumerate(outs)]
        if include_pad:
            count = torch.tensor(float(torch.tensor(k).prod()), dtype=_F32)
        else:
            count = counts[0].to(_F32)
            for c in counts[1:]:
                count = (count.reshape(count.shape + (1,)) * c.to(_F32))
        return outs, heads, tails, count

    def fn(xs):
        x, sx, zx, sy = xs[:4]
        zy = _get(xs, 4)
        _run_check(ctx, x, _8BIT, "X")
        if x.ndim != n + 2:
            raise run_error(ctx, f"X of rank {x.ndim} does not fit kernel_shape {k}")
        zx = _zp(ctx, zx, "x_zero_point", x)
        zy = _zp(ctx, zy, "y_zero_point", x)
        if last:
            x = x.movedim(-1, 1)
        sizes = tuple(x.shape[2:])
        p = plans.get(sizes)
        if p is None:
            p = plans[sizes] = plan(sizes)
        outs, heads, tails, count = p
        d = _sc(ctx, sx, "x_scale").to(_F32) * (x.to(torch.int32) - zx.to(torch.int32)).to(_F32)
        pad = []
        for i in range(n - 1, -1, -1):
            pad += [max(heads[i], 0), max(tails[i], 0)]
        d = F.pad(d, pad)
        for i in range(n):   # negative pads / tails: crop
            if heads[i] < 0 or tails[i] < 0:
                d = d.narrow(2 + i, max(-heads[i], 0), d.shape[2 + i] - max(-heads[i], 0)
                             - max(-tails[i], 0))
        acc = None
        for off in torch.cartesian_prod(*[torch.arange(kk) for kk in k]).reshape(-1, n).tolist():
            sl = [slice(None), slice(None)] + [
                slice(o, o + (outs[i] - 1) * strides[i] + 1, strides[i]) for i, o in enumerate(off)]
            v = d[tuple(sl)]
            acc = v.clone() if acc is None else acc.add_(v)
        y = acc / count.to(acc.device)
        y = torch.round(y / _sc(ctx, sy, "y_scale").to(_F32) + zy)
        lo, hi = _QRANGE[x.dtype]
        y = y.clamp_(lo, hi).to(x.dtype)
        return [y.movedim(1, -1) if last else y]
    return fn
