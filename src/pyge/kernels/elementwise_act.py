"""Activation kernels (elementwise, with attributes parsed once in the factory), and SwiGLU
(a gated activation of two inputs). Every one returns a new tensor: each factory's kernels
are marked fresh (executors/into.py); Relu also writes into a planned buffer."""
from __future__ import annotations

import torch
import torch.nn.functional as F

from ._util import node_error, run_error, unary
from .elementwise import float_into, fresh
from .registry import register


def _relu_into(x, out):
    # torch.relu has no out= variant; ATen computes relu as clamp_min(x, 0) (NaN and -0.0
    # come out alike)
    return torch.clamp_min(x, 0, out=out)


def register_fresh(name: str, since: int = 1, into=None):
    """register(name, since) for a factory whose kernels are fresh (elementwise.fresh)."""
    return lambda factory: register(name, since=since)(fresh(factory, into))


register_fresh("Relu", into=float_into(_relu_into))(unary(torch.relu))
register_fresh("Softsign")(unary(F.softsign))
register_fresh("Mish", since=18)(unary(F.mish))
register_fresh("HardSwish", since=14)(unary(F.hardswish))


@register_fresh("Softplus")
def softplus(ctx):
    # log(1 + exp(x)) computed stably: max(x, 0) + log1p(exp(-|x|)); F.softplus switches
    # to the identity above a threshold, which is close but not the formula.
    return lambda xs: [torch.clamp_min(xs[0], 0) + torch.log1p(torch.exp(-torch.abs(xs[0])))]


@register_fresh("LeakyRelu")
def leaky_relu(ctx):
    alpha = ctx.attr("alpha", 0.01)
    return lambda xs: [F.leaky_relu(xs[0], alpha)]


@register_fresh("Elu")
def elu(ctx):
    alpha = ctx.attr("alpha", 1.0)
    return lambda xs: [F.elu(xs[0], alpha)]


@register_fresh("Celu", since=12)
def celu(ctx):
    alpha = ctx.attr("alpha", 1.0)
    return lambda xs: [F.celu(xs[0], alpha)]


@register_fresh("Selu")
def selu(ctx):
    alpha = ctx.attr("alpha", 1.67326319217681884765625)
    gamma = ctx.attr("gamma", 1.05070102214813232421875)
    return lambda xs: [F.elu(xs[0], alpha) * gamma]


@register_fresh("ThresholdedRelu", since=10)
def thresholded_relu(ctx):
    alpha = ctx.attr("alpha", 1.0)
    return lambda xs: [torch.where(xs[0] > alpha, xs[0], 0.0)]


@register_fresh("HardSigmoid")
def hard_sigmoid(ctx):
    alpha, beta = ctx.attr("alpha", 0.2), ctx.attr("beta", 0.5)
    return lambda xs: [torch.clamp(xs[0] * alpha + beta, 0.0, 1.0)]


@register_fresh("Gelu", since=20)
def gelu(ctx):
    approx = ctx.attr("approximate", "none")
    if approx not in ("none", "tanh"):
        raise node_error(ctx, f"approximate={approx!r} is not one of 'none', 'tanh'")
    return lambda xs: [F.gelu(xs[0], approximate=approx)]


@register_fresh("PRelu")
def prelu(ctx):
    legacy = ctx.opset < 7

    def fn(xs):
        x, slope = xs
        if legacy and slope.dim() == 1 and x.dim() > 2 and slope.shape[0] == x.shape[1] > 1:
            # Opset < 7: a 1-D slope is per channel (axis 1), not numpy-broadcast.
            slope = slope.reshape((-1,) + (1,) * (x.dim() - 2))
        return [torch.where(x >= 0, x, x * slope)]
    return fn


@register_fresh("Shrink", since=9)
def shrink(ctx):
    lambd, bias = ctx.attr("lambd", 0.5), ctx.attr("bias", 0.0)

    def fn(xs):
        x = xs[0]
        zero = torch.zeros((), dtype=x.dtype, device=x.device)
        # Computed in the input's type (integer inputs stay integers).
        lo = (x + bias).to(x.dtype) if bias else x
        hi = (x - bias).to(x.dtype) if bias else x
        return [torch.where(x < -lambd, lo, torch.where(x > lambd, hi, zero))]
    return fn


# ---------------------------------------------------------------------------------------
# SwiGLU (opset 28)


@register_fresh("SwiGLU", since=28)
def swiglu(ctx):
    """Y = Swish_alpha(A) * B = A * sigmoid(alpha * A) * B (equal shapes, no broadcasting)."""
    alpha = float(ctx.attr("alpha", 1.0))

    def fn(xs):
        a, b = xs
        if a.shape != b.shape:
            raise run_error(ctx, f"A {tuple(a.shape)} and B {tuple(b.shape)} must have the "
                                 "same shape (SwiGLU does not broadcast)")
        gate = F.silu(a) if alpha == 1.0 else a * torch.sigmoid(a * alpha)
        return [gate * b]
    return fn


@register_fresh("Swish", since=24)
def swish(ctx):
    alpha = ctx.attr("alpha", 1.0)
    if alpha == 1.0:
        return lambda xs: [F.silu(xs[0])]
    return lambda xs: [xs[0] * torch.sigmoid(xs[0] * alpha)]
