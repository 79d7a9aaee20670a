"""Conv and ConvTranspose (1-D to 3-D) on torch's native convolutions, and Col2Im.

torch pads symmetrically only; ONNX pads may differ at the two ends (explicitly or through
auto_pad SAME_*). The symmetric part goes to torch, the rest to one F.pad / crop.
"""
from __future__ import annotations

import math

import torch
import torch.nn.functional as F

from ._util import ints, node_error, run_error
from .onednn import MKLDNN as _MKLDNN
from .onednn import PACKED_CONV_OK as _PACKED_OK
from .onednn import Derived
from .registry import register

_CONV = {1: F.conv1d, 2: F.conv2d, 3: F.conv3d}
_CONVT = {1: F.conv_transpose1d, 2: F.conv_transpose2d, 3: F.conv_transpose3d}


def _same_split(total: int, upper: bool) -> tuple[int, int]:
    small, big = total // 2, total - total // 2
    return (small, big) if upper else (big, small)


class _ConvAttrs:
    __slots__ = ("k", "s", "d", "pads", "auto_pad", "group")

    def __init__(self, ctx):
        self.k = ctx.attr("kernel_shape")
        self.s = ctx.attr("strides")
        self.d = ctx.attr("dilations")
        self.pads = ctx.attr("pads")
        self.auto_pad = ctx.attr("auto_pad", "NOTSET") or "NOTSET"
        if self.auto_pad not in ("NOTSET", "SAME_UPPER", "SAME_LOWER", "VALID"):
            raise node_error(ctx, f"auto_pad={self.auto_pad!r} is not one of NOTSET, SAME_UPPER, "
                                  "SAME_LOWER, VALID")
        self.group = ctx.attr("group", 1)

    def resolve(self, n: int, w_shape):
        k = list(self.k) if self.k else list(w_shape[2:])
        s = list(self.s) if self.s else [1] * n
        d = list(self.d) if self.d else [1] * n
        return k, s, d


def _conv_plan(a: _ConvAttrs, x, w):
    n = x.ndim - 2
    if n not in _CONV:
        raise ValueError(f"{n}-D convolution is not supported (1-D to 3-D are)")
    k, s, d = a.resolve(n, w.shape)
    if a.auto_pad in ("SAME_UPPER", "SAME_LOWER"):
        pb, pe = [], []
        for i in range(n):
            size = x.shape[2 + i]
            total = max((-(-size // s[i]) - 1) * s[i] + (k[i] - 1) * d[i] + 1 - size, 0)
            b, e = _same_split(total, a.auto_pad == "SAME_UPPER")
            pb.append(b)
            pe.append(e)
    elif a.auto_pad == "VALID" or not a.pads:
        pb = pe = [0] * n
    else:
        pb, pe = list(a.pads[:n]), list(a.pads[n:])
    sym = [min(b, e) for b, e in zip(pb, pe)]
    extra = []
    for i in range(n - 1, -1, -1):  # F.pad order: last axis first
        extra += [pb[i] - sym[i], pe[i] - sym[i]]
    sub = None
    if k == [1] * n and not any(pb + pe) and s != [1] * n:
        # A strided 1x1 conv reads every s-th pixel: subsample first (a view), then a
        # stride-1 conv; oneDNN's strided 1x1 path is several times slower.
        sub = (slice(None), slice(None)) + tuple(slice(None, None, si) for si in s)
        s = [1] * n
    return _CONV[n], s, sym, d, (extra if any(extra) else None), sub


# Activations oneDNN can apply as a post-op: ONNX name -> (torch attr, scalars from params).
_POST_OPS = {
    "Relu": ("relu", lambda p: []),
    "Sigmoid": ("sigmoid", lambda p: []),
    "Tanh": ("tanh", lambda p: []),
    "LeakyRelu": ("leaky_relu", lambda p: [p[0] if p else 0.01]),
    "Clip": ("hardtanh", lambda p: [p[0], p[1]] if len(p) >= 2 else None),
}
_TORCH_ACTS = {
    "Relu": lambda p: torch.relu,
    "Sigmoid": lambda p: torch.sigmoid,
    "Tanh": lambda p: torch.tanh,
    "LeakyRelu": lambda p: (lambda y: F.leaky_relu(y, p[0] if p else 0.01)),
    "Clip": lambda p: (lambda y: torch.clamp(y, p[0], p[1])),
    "HardSigmoid": lambda p: (lambda y: torch.clamp(y * (p[0] if p else 0.2) + (p[1] if len(p) > 1
                                                                                  else 0.5), 0, 1)),
}


def _conv_factory(ctx, activation: str | None = None, params=()):
    """Conv, optionally followed by `+ Z` (a fourth input) and an activation (FusedConv)."""
    a = _ConvAttrs(ctx)
    cache: dict = {}
    packed = Derived() if _PACKED_OK and torch.device(ctx.device).type == "cpu" else None
    params = list(params)
    if activation is not None and activation not in _TORCH_ACTS:
        raise node_error(ctx, f"activation={activation!r} is not one of {sorted(_TORCH_ACTS)}")
    act = _TORCH_ACTS[activation](params) if activation else None
    # post: the oneDNN post-op (name, scalars) for the packed path; None = no packed path
    # (the activation then runs as a torch op after F.conv*).
    post = ("none", []) if activation is None else None
    if activation in _POST_OPS:
        scalars = _POST_OPS[activation][1](params)
        post = (_POST_OPS[activation][0], scalars) if scalars is not None else None

    def fn(xs):
        x, w = xs[0], xs[1]
        b = xs[2] if len(xs) > 2 else None
        z = xs[3] if len(xs) > 3 else None
        # Padding depends on the input size only with auto_pad SAME_*.
        key = tuple(x.shape[2:]) if a.auto_pad.startswith("SAME") else x.ndim
        p = cache.get(key)
        if p is None:
            p = cache[key] = _conv_plan(a, x, w)
        op, s, sym, d, extra, sub = p
        if extra is not None:
            x = F.pad(x, extra)
        elif sub is not None:
            x = x[sub]
        if packed is not None and post is not None and x.ndim == 4 and x.dtype == torch.float32 \
                and w.dtype == torch.float32 and not w.requires_grad:
            # Packed for the first input's shape; another batch size reuses it (oneDNN takes
            # it at the same speed), so serving mixed batches does not repack every call.
            shape = list(x.shape)
            wp = packed.get((w,), tuple(shape[1:]), lambda: _MKLDNN._reorder_convolution_weight(
                w, sym, s, d, a.group, shape))
            # The result is channels-last; ReLU/BN/Add/pooling keep that layout, so the
            # next convolution needs no activation reorder either.
            if z is None:
                return [_MKLDNN._convolution_pointwise(x, wp, b, sym, s, d, a.group, post[0],
                                                       post[1], "")]
            if z.dtype == torch.float32 and z.ndim == 4 and z.shape[1] == w.shape[0]:
                # conv + Z (+ ReLU) in one pass: oneDNN's add post-op (which accepts no
                # other activation after it).
                relu = post[0] == "relu"
                y = _MKLDNN._convolution_pointwise.binary(
                    x, z, wp, b, sym, s, d, a.group, "add", None, "relu" if relu else None, [], "")
                return [act(y) if act is not None and not relu else y]
        y = op(x, w, b, s, sym, d, a.group)
        if z is not None:
            y = y + z
        return [act(y) if act is not None else y]
    return fn


@register("Conv")
def conv(ctx):
    return _conv_factory(ctx)


@register("FusedConv", domain="com.microsoft")
def fused_conv(ctx):
    """onnxruntime's contrib op: activation(Conv(X, W, B) + Z), a target for fusion passes."""
    return _conv_factory(ctx, ctx.attr("activation"), ctx.attr("activation_params") or [])


@register("ConvTranspose")
def conv_transpose(ctx):
    a = _ConvAttrs(ctx)
    out_pad = ctx.attr("output_padding")
    out_shape = ctx.attr("output_shape")
    cache: dict = {}

    def plan(x, w):
        n = x.ndim - 2
        if n not in _CONVT:
            raise ValueError(f"{n}-D transposed convolution is not supported (1-D to 3-D are)")
        k, s, d = a.resolve(n, w.shape)
        op = list(out_pad) if out_pad else [0] * n
        pb, pe = [], []
        for i in range(n):
            size = x.shape[2 + i]
            full = s[i] * (size - 1) + op[i] + (k[i] - 1) * d[i] + 1
            if out_shape or a.auto_pad in ("SAME_UPPER", "SAME_LOWER"):
                # Pads follow from the wanted output size (output_shape, or in * stride).
                target = out_shape[len(out_shape) - n + i] if out_shape else size * s[i]
                b, e = _same_split(full - target, a.auto_pad == "SAME_UPPER")
            elif a.auto_pad == "VALID" or not a.pads:
                b = e = 0
            else:
                b, e = a.pads[i], a.pads[i + n]
            pb.append(b)
            pe.append(e)
        if pb == pe and all(0 <= o < max(si, di) for o, si, di in zip(op, s, d)) and min(pb) >= 0:
            return ("direct", _CONVT[n], s, pb, op, d)
        # General case: the full transposed conv, then one crop/pad to ONNX's window.
        fix = []
        for i in range(n - 1, -1, -1):
            fix += [-pb[i], op[i] - pe[i]]
        return ("fix", _CONVT[n], s, fix, None, d)

    def fn(xs):
        x, w = xs[0], xs[1]
        b = xs[2] if len(xs) > 2 else None
        key = tuple(x.shape[2:])
        p = cache.get(key)
        if p is None:
            p = cache[key] = plan(x, w)
        kind, op, s, pads, opad, d = p
        if kind == "direct":
            return [op(x, w, b, s, pads, opad, a.group, d)]
        y = F.pad(op(x, w, None, s, 0, 0, a.group, d), pads)
        if b is not None:
            y = y + b.reshape((1, -1) + (1,) * (y.ndim - 2))
        return [y]
    return fn


# ---------------------------------------------------------------------------------------
# Col2Im: the inverse of im2col, sliding blocks summed back into an image


@register("Col2Im", since=18)
def col2im(ctx):
    dil_a, pads_a, str_a = ctx.attr("dilations"), ctx.attr("pads"), ctx.attr("strides")
    img_c, blk_c = ctx.const_input(1), ctx.const_input(2)
    cache: dict = {}

    def plan(img, blk, dev):
        key = (tuple(img), tuple(blk), str(dev))
        if key in cache:
            return cache[key]
        n = len(img)
        dil = list(dil_a or [1] * n)
        pads = list(pads_a or [0] * (2 * n))
        st = list(str_a or [1] * n)
        if len(blk) != n or len(dil) != n or len(st) != n or len(pads) != 2 * n:
            raise run_error(ctx, f"image_shape {img}, block_shape {blk}, dilations {dil}, "
                                 f"strides {st} and pads {pads} disagree on the rank")
        nb = [(img[d] + pads[d] + pads[d + n] - (dil[d] * (blk[d] - 1) + 1)) // st[d] + 1
              for d in range(n)]
        # destination of block offset k, sliding position l along each axis
        idx = torch.zeros((1, 1), dtype=torch.int64)
        ok = torch.ones((1, 1), dtype=torch.bool)
        for d in range(n):
            k = torch.arange(blk[d]).view(-1, 1)
            p = torch.arange(nb[d]).view(1, -1) * st[d] + k * dil[d] - pads[d]  # (B_d, L_d)
            idx = (idx.unsqueeze(1).unsqueeze(3) * img[d] + p.view(1, blk[d], 1, nb[d])) \
                .reshape(idx.shape[0] * blk[d], idx.shape[1] * nb[d])
            ok = (ok.unsqueeze(1).unsqueeze(3) & ((p >= 0) & (p < img[d])).view(
                1, blk[d], 1, nb[d])).reshape(idx.shape)
        total = math.prod(img)
        idx = torch.where(ok, idx, torch.full_like(idx, total)).reshape(-1).to(dev)
        cache[key] = (idx, total, math.prod(blk), math.prod(nb))
        return cache[key]

    def fn(xs):
        x = xs[0]
        img = ints(img_c) if img_c is not None else ints(xs[1])
        blk = ints(blk_c) if blk_c is not None else ints(xs[2])
        idx, total, nblk, nloc = plan(img, blk, x.device)
        N, CB, L = x.shape
        if CB % nblk or L != nloc:
            raise run_error(ctx, f"input {tuple(x.shape)} does not hold blocks {blk} at "
                                 f"{nloc} positions of image {img}")
        C = CB // nblk
        y = torch.zeros((N, C, total + 1), dtype=x.dtype, device=x.device)
        y.index_add_(2, idx, x.reshape(N, C, nblk * L))
        return [y[..., :total].reshape([N, C] + img)]
    return fn
