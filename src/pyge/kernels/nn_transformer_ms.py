"""onnxruntime's transformer contrib operators (domain ``com.microsoft``), the ops that
``onnxruntime.transformers.optimizer.optimize_model`` writes into BERT / GPT-2 / T5-style
models. Semantics follow onnxruntime's CPU kernels (the oracle; there are no onnx node
cases for contrib ops):

- Gelu / BiasGelu (erf form), FastGelu (tanh form, optional bias), QuickGelu
  (``x * sigmoid(alpha * x)``);
- SkipLayerNormalization / SkipSimplifiedLayerNormalization (``input + skip (+ bias)``
  then LayerNorm / RMSNorm over the last axis; optional outputs mean, inv_std_var and the
  sum), SimplifiedLayerNormalization (RMSNorm; the optimizer writes it in the default
  domain, onnxruntime registers it there at version 1), LayerNormalization (alias);
- BiasAdd (``X + bias + skip``), FusedMatMul (``alpha * op(A) @ op(B)`` with transA/B and
  the batch transposes transBatchA/B);
- EmbedLayerNormalization (word + position (+ segment) embeddings, LayerNorm, mask index).

The attention operators (Attention, MultiHeadAttention, RotaryEmbedding,
GroupQueryAttention) are in nn_attention_ms.py, which shares this module's helpers.
"""
from __future__ import annotations

import torch
import torch.nn.functional as F

from ._util import node_error, run_error
from .registry import register

_MS = "com.microsoft"
_HALF = (torch.float16, torch.bfloat16)


def _out_used(ctx, i):
    outs = ctx.node.outputs
    return i < len(outs) and not outs[i].name.endswith(f"__unused{i}")


def _opt(xs, i):
    return xs[i] if len(xs) > i else None


def _check_range(ctx, idx, n, what):
    """Indices outside [0, n) are an error; checked on the CPU only (reading a CUDA value
    back would sync and block CUDA graph capture; torch's device-side assert catches them
    there)."""
    if idx.device.type == "cpu" and idx.numel() and bool(((idx < 0) | (idx >= n)).any()):
        raise run_error(ctx, f"{what} out of range [0, {n})")


def _int_attr(ctx, name, default, allowed=None):
    v = int(ctx.attr(name, default))
    if allowed is not None and v not in allowed:
        raise node_error(ctx, f"attribute {name!r} is {v}; expected one of {sorted(allowed)}")
    return v


# ---------------------------------------------------------------------------------------
# activations


@register("Gelu", domain=_MS)
def ms_gelu(ctx):
    return lambda xs: [F.gelu(xs[0])]


@register("BiasGelu", domain=_MS)
def bias_gelu(ctx):
    return lambda xs: [F.gelu(xs[0] + xs[1])]


@register("FastGelu", domain=_MS)
def fast_gelu(ctx):
    def fn(xs):
        x = xs[0] if _opt(xs, 1) is None else xs[0] + xs[1]
        return [F.gelu(x, approximate="tanh")]
    return fn


@register("QuickGelu", domain=_MS)
def quick_gelu(ctx):
    alpha = float(ctx.attr("alpha", 1.702))
    return lambda xs: [xs[0] * torch.sigmoid(xs[0] * alpha)]


# ---------------------------------------------------------------------------------------
# normalizations


def _norm_last(x, eps, simplified, gamma, beta):
    """LayerNorm / RMSNorm over the last axis, statistics in float32 for half inputs.
    Returns (y, mean or None, inv_std_var), the statistics keeping a trailing 1 axis."""
    xf = x.float() if x.dtype in _HALF else x
    if simplified:
        mean = None
        inv = torch.rsqrt(xf.pow(2).mean(-1, keepdim=True) + eps)
        y = xf * inv
    else:
        mean = xf.mean(-1, keepdim=True)
        inv = torch.rsqrt(xf.var(-1, unbiased=False, keepdim=True) + eps)
        y = (xf - mean) * inv
    y = y.to(x.dtype) * gamma
    if beta is not None:
        y = y + beta
    return y, mean, inv


def _skip_ln(ctx, simplified):
    eps = float(ctx.attr("epsilon", 1e-12))
    bias_at = 3 if simplified else 4
    want_stats = _out_used(ctx, 1) or _out_used(ctx, 2)
    n_out = ctx.num_outputs

    def fn(xs):
        x, skip, gamma = xs[0], xs[1], xs[2]
        beta = None if simplified else _opt(xs, 3)
        bias = _opt(xs, bias_at)
        if x.ndim not in (2, 3):
            raise run_error(ctx, f"input has rank {x.ndim}; expected 2 or 3")
        s = x + skip
        if bias is not None:
            s = s + bias
        hidden = x.shape[-1]
        if gamma.numel() != hidden or (beta is not None and beta.numel() != hidden):
            raise run_error(ctx, f"gamma / beta must have the hidden size {hidden}")
        if n_out == 1 and not simplified and not want_stats:
            return [F.layer_norm(s, (hidden,), gamma.reshape(hidden),
                                 None if beta is None else beta.reshape(hidden), eps)]
        y, mean, inv = _norm_last(s, eps, simplified, gamma, beta)
        out = [y]
        if n_out > 1:
            # onnxruntime writes zeros as the mean of the simplified (RMS) form
            out.append(torch.zeros_like(inv, dtype=torch.float32) if mean is None
                       else mean.float())
        if n_out > 2:
            out.append(inv.float())
        if n_out > 3:
            out.append(s)
        return out
    return fn


@register("SkipLayerNormalization", domain=_MS)
def skip_layer_norm(ctx):
    return _skip_ln(ctx, simplified=False)


@register("SkipSimplifiedLayerNormalization", domain=_MS)
def skip_simplified_layer_norm(ctx):
    return _skip_ln(ctx, simplified=True)


def _simplified_ln(ctx):
    axis = int(ctx.attr("axis", -1))
    eps = float(ctx.attr("epsilon", 1e-5))
    n_out = ctx.num_outputs

    def fn(xs):
        x, scale = xs[0], xs[1]
        ax = axis + x.ndim if axis < 0 else axis
        if not 0 <= ax < x.ndim:
            raise run_error(ctx, f"axis {axis} is out of range for rank {x.ndim}")
        dims = tuple(range(ax, x.ndim))
        xf = x.float() if x.dtype in _HALF else x
        inv = torch.rsqrt(xf.pow(2).mean(dims, keepdim=True) + eps)
        y = (xf * inv).to(x.dtype) * scale
        return [y, inv.float()][:n_out]
    return fn


# onnxruntime registers SimplifiedLayerNormalization in the default domain (version 1),
# which is where its optimizer writes it; accept the com.microsoft spelling too.
register("SimplifiedLayerNormalization")(_simplified_ln)
register("SimplifiedLayerNormalization", domain=_MS)(_simplified_ln)


@register("LayerNormalization", domain=_MS)
def ms_layer_norm(ctx):
    from .nn import layer_norm
    return layer_norm(ctx)


@register("BiasAdd", domain=_MS)
def bias_add(ctx):
    return lambda xs: [xs[0] + xs[1] + xs[2]]


# ---------------------------------------------------------------------------------------
# FusedMatMul


@register("FusedMatMul", domain=_MS)
def fused_matmul(ctx):
    alpha = float(ctx.attr("alpha", 1.0))
    ta, tb = bool(ctx.attr("transA", 0)), bool(ctx.attr("transB", 0))
    tba, tbb = bool(ctx.attr("transBatchA", 0)), bool(ctx.attr("transBatchB", 0))

    def prep(x, trans, trans_batch, is_a):
        if x.ndim == 1:
            return x, True
        if trans_batch and x.ndim > 2:
            # [d0, d1, ..., dn-2, dn-1] -> [d1, ..., dn-2, d0, dn-1]
            x = x.permute(*range(1, x.ndim - 1), 0, x.ndim - 1)
        if trans:
            x = x.transpose(-1, -2)
        return x, False

    def fn(xs):
        a, va = prep(xs[0], ta, tba, True)
        b, vb = prep(xs[1], tb, tbb, False)
        y = torch.matmul(a, b)
        return [y * alpha if alpha != 1.0 else y]
    return fn


# ---------------------------------------------------------------------------------------
# EmbedLayerNormalization


@register("EmbedLayerNormalization", domain=_MS)
def embed_layer_norm(ctx):
    eps = float(ctx.attr("epsilon", 1e-12))
    mit = _int_attr(ctx, "mask_index_type", 1, (0, 1))
    n_out = ctx.num_outputs

    def fn(xs):
        ids, seg_ids, word, pos_emb = xs[0], _opt(xs, 1), xs[2], xs[3]
        seg_emb, gamma, beta = _opt(xs, 4), xs[5], xs[6]
        mask, pos_ids = _opt(xs, 7), _opt(xs, 8)
        if ids.ndim != 2:
            raise run_error(ctx, f"input_ids has rank {ids.ndim}; expected 2 (batch, sequence)")
        b, s = ids.shape
        ids = ids.long()
        _check_range(ctx, ids, word.shape[0], "input_ids")
        e = F.embedding(ids, word)
        if pos_ids is None:
            pos = torch.arange(s, device=ids.device).expand(b, s)
        else:
            pos = pos_ids.long().expand(b, s)
        _check_range(ctx, pos, pos_emb.shape[0], "position ids")
        e = e + F.embedding(pos, pos_emb)
        if seg_ids is not None and seg_emb is not None:
            sid = seg_ids.long()
            _check_range(ctx, sid, seg_emb.shape[0], "segment_ids")
            e = e + F.embedding(sid, seg_emb)
        hidden = e.shape[-1]
        y = F.layer_norm(e, (hidden,), gamma, beta, eps)
        out = [y]
        if n_out > 1:
            if mask is None or mit == 0:
                out.append(torch.zeros(b, dtype=torch.int32, device=ids.device))
            else:
                out.append((mask != 0).sum(-1).to(torch.int32))
        if n_out > 2:
            out.append(e)
        return out
    return fn
