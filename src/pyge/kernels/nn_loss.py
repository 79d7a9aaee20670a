"""Losses: NegativeLogLikelihoodLoss, SoftmaxCrossEntropyLoss (opset 12+).

Both take scores / log-probabilities of shape (N, C) or (N, C, d1, ..., dk) and targets of
shape (N) or (N, d1, ..., dk). With weights w and ignore_index i, the element loss is
``-x[n, t, d] * w[t]`` (0 where t == i), and reduction ``mean`` divides the sum by the sum
of the weights actually applied (by the count of non-ignored elements without w): the ONNX
definition, which is torch's nll_loss too. A mean over nothing (every target ignored) is
0 / 0 = nan, as in the reference. Computed by gather in the input's type, on its device.
"""
from __future__ import annotations

import torch

from ._util import node_error, run_error
from .registry import register

_REDUCTIONS = ("none", "sum", "mean")


def _parse(ctx):
    red = ctx.attr("reduction", "mean")
    if isinstance(red, bytes):
        red = red.decode()
    if red not in _REDUCTIONS:
        raise node_error(ctx, f"attribute reduction={red!r} is not one of none, sum, mean")
    ignore = ctx.attr("ignore_index")
    return red, None if ignore is None else int(ignore)


def _nll(ctx, logp, target, weight, red, ignore):
    if logp.ndim < 2 or target.shape != logp.shape[:1] + logp.shape[2:]:
        raise run_error(ctx, f"target shape {tuple(target.shape)} does not fit input shape "
                             f"{tuple(logp.shape)} (expected (N, d1, ..., dk) for (N, C, d1, ..., dk))")
    t = target.long()
    mask = None
    if ignore is not None:
        mask = t != ignore
        t = torch.where(mask, t, 0)
    if t.numel() and bool(((t < 0) | (t >= logp.shape[1])).any()):  # (one host sync)
        raise run_error(ctx, f"target values must lie in [0, {logp.shape[1]}) or equal "
                             f"ignore_index={ignore}")
    loss = -torch.gather(logp, 1, t.unsqueeze(1)).squeeze(1)
    w = None
    if weight is not None:
        w = weight.to(logp.dtype)[t]
        if mask is not None:
            w = w * mask
    elif mask is not None:
        w = mask.to(logp.dtype)
    if w is not None:
        loss = loss * w
    if red == "none":
        return loss
    if red == "sum":
        return loss.sum()
    if w is not None:
        return loss.sum() / w.sum()
    return loss.mean()


@register("NegativeLogLikelihoodLoss", since=12)
def negative_log_likelihood_loss(ctx):
    red, ignore = _parse(ctx)

    def fn(xs):
        weight = xs[2] if len(xs) > 2 else None
        return [_nll(ctx, xs[0], xs[1], weight, red, ignore)]
    return fn


@register("SoftmaxCrossEntropyLoss", since=12)
def softmax_cross_entropy_loss(ctx):
    red, ignore = _parse(ctx)
    want_log_prob = ctx.num_outputs > 1 and ctx.node.outputs[1] is not None

    def fn(xs):
        x = xs[0]
        if x.ndim < 2:
            raise run_error(ctx, f"scores must be (N, C) or (N, C, d1, ..., dk); got shape "
                                 f"{tuple(x.shape)}")
        logp = torch.log_softmax(x, 1)
        weight = xs[2] if len(xs) > 2 else None
        loss = _nll(ctx, logp, xs[1], weight, red, ignore)
        return [loss, logp] if want_log_prob else [loss]
    return fn
