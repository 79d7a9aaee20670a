"""Attention (opsets 23, 24, 25) and RotaryEmbedding (opset 23; see its factory).

Attention follows the schema text and the function body the onnx reference mirrors:

- 3-D Q/K/V are split into heads with ``q_num_heads`` / ``kv_num_heads`` (and Y is merged
  back); 4-D inputs carry the heads on axis 1. Grouped-query attention repeats each K/V
  head for ``q_heads / kv_heads`` consecutive query heads (``[h0, h0, h1, h1, ...]``).
- ``past_key`` / ``past_value`` are concatenated before K/V on the sequence axis (the
  results are ``present_key`` / ``present_value``).
- The scale (``1/sqrt(head_size)`` by default) is applied as ``sqrt(scale)`` on Q and on K,
  ``sqrt(scale)`` rounded to Q's element type (the function body's ``Cast(.., T1)``).
- The additive bias composes: a bool ``attn_mask`` (True = attend; False -> -inf), a float
  (or integer) ``attn_mask`` added as is, a last axis shorter than the total sequence padded
  with -inf, ``is_causal`` (bottom-right: query i attends key j iff ``j <= i + offset``,
  offset = past length, or ``nonpad_kv_seqlen[b] - q_len`` for an external cache),
  the opset-25 sliding window, and the ``nonpad_kv_seqlen`` padding mask.
- ``softcap`` (``c * tanh(x / c)``, c > 0) applies before the bias; ``softmax_precision``
  casts the biased scores before the softmax; a query row whose bias is -inf everywhere
  gives a zero row (Y and mode-3 ``qk_matmul_output``), never NaN.
- ``qk_matmul_output_mode``: 0 raw scaled QK (the spec; the onnx reference returns the
  softcapped scores there when softcap is set), 1 after softcap, 2 after the bias, 3 the
  softmax probabilities, always in Q's element type.

Half-precision inputs (float16 / bfloat16) are computed in float32 and rounded once at the
end on the CPU. With no softcap, no ``qk_matmul_output`` and no softmax precision other than
the compute type, the kernel calls ``F.scaled_dot_product_attention`` (``enable_gqa`` for
grouped heads); on CUDA that fast path keeps half-precision inputs in their own type (the
fused kernels accumulate in float32). Otherwise it runs matmul / softmax / matmul itself
(grouped heads by broadcasting, without copying K and V).
"""
from __future__ import annotations

import functools
import math

import torch
import torch.nn.functional as F

from ._util import node_error, run_error
from .registry import register

_HALF = (torch.float16, torch.bfloat16)
_SOFTMAX_PRECISIONS = {1: torch.float32, 10: torch.float16, 11: torch.float64, 16: torch.bfloat16}
# enable_gqa arrived in torch 2.5 (a builtin: no signature to inspect)
_SDPA_GQA = tuple(int(p) for p in torch.__version__.split(".")[:2]) >= (2, 5)
_NEG_INF = float("-inf")


def _static_rank(ctx, i):
    ins = ctx.node.inputs
    if i < len(ins) and ins[i] is not None and ins[i].shape is not None:
        return len(ins[i].shape)
    return None


def _output_used(ctx, i):
    """Output i is named in the model (an empty name gives an unused placeholder)."""
    outs = ctx.node.outputs
    return i < len(outs) and not outs[i].name.endswith(f"__unused{i}")


def _split_heads(x, heads, what, ctx):
    b, s, hidden = x.shape
    if hidden % heads:
        raise run_error(ctx, f"{what} hidden size {hidden} is not a multiple of {heads} heads")
    return x.reshape(b, s, heads, hidden // heads).transpose(1, 2)


@functools.lru_cache(maxsize=64)
def _rounded_sqrt(scale: float, dtype: torch.dtype) -> float:
    """sqrt(scale) rounded to `dtype` (made once per pair, not a CPU tensor per call)."""
    return float(torch.tensor(math.sqrt(scale), dtype=dtype))


@register("Attention", since=23)
def attention(ctx):
    opset = ctx.opset
    is_causal = bool(ctx.attr("is_causal", 0))
    scale_attr = ctx.attr("scale")
    softcap = float(ctx.attr("softcap", 0.0) or 0.0)
    mode = int(ctx.attr("qk_matmul_output_mode", 0))
    sp_code = ctx.attr("softmax_precision")
    q_heads_attr, kv_heads_attr = ctx.attr("q_num_heads"), ctx.attr("kv_num_heads")
    left = int(ctx.attr("left_window_size", -1)) if opset >= 25 else -1
    right = int(ctx.attr("right_window_size", -1)) if opset >= 25 else -1

    if mode not in (0, 1, 2, 3):
        raise node_error(ctx, f"attribute 'qk_matmul_output_mode' is {mode}; expected 0, 1, 2 or 3")
    if sp_code is not None and int(sp_code) not in _SOFTMAX_PRECISIONS:
        raise node_error(ctx, f"attribute 'softmax_precision' is {sp_code}; expected 1 (FLOAT), "
                              f"10 (FLOAT16), 11 (DOUBLE) or 16 (BFLOAT16)")
    sp_dtype = None if sp_code is None else _SOFTMAX_PRECISIONS[int(sp_code)]
    for name, w in (("left_window_size", left), ("right_window_size", right)):
        if w < -1:
            raise node_error(ctx, f"attribute {name!r} is {w}; expected -1 (unbounded) or >= 0")
    has_past = ctx.has_input(4) or ctx.has_input(5)
    if has_past and not (ctx.has_input(4) and ctx.has_input(5)):
        raise node_error(ctx, "past_key and past_value must be given together")
    has_nonpad = ctx.has_input(6)
    if has_nonpad and has_past:
        raise node_error(ctx, "nonpad_kv_seqlen cannot be combined with past_key / past_value")
    rank = _static_rank(ctx, 0)
    if rank is not None and rank not in (3, 4):
        raise node_error(ctx, f"Q has rank {rank}; expected 3 or 4")
    heads_given = q_heads_attr is not None or kv_heads_attr is not None
    if rank == 3 and (q_heads_attr is None or kv_heads_attr is None):
        raise node_error(ctx, "3-D Q/K/V need the attributes q_num_heads and kv_num_heads")
    if rank == 4 and heads_given and opset >= 25:
        raise node_error(ctx, "q_num_heads / kv_num_heads must not be given with 4-D Q/K/V")
    if q_heads_attr is not None and kv_heads_attr is not None:
        qh, kvh = int(q_heads_attr), int(kv_heads_attr)
        if qh <= 0 or kvh <= 0 or qh % kvh:
            raise node_error(ctx, f"q_num_heads ({q_heads_attr}) must be a positive multiple of "
                                  f"kv_num_heads ({kv_heads_attr})")
    q_heads = None if q_heads_attr is None else int(q_heads_attr)
    kv_heads = None if kv_heads_attr is None else int(kv_heads_attr)

    need_qk = _output_used(ctx, 3)
    use_sdpa = softcap <= 0 and not need_qk
    window = left >= 0 or right >= 0

    def fn(xs):
        xs = list(xs) + [None] * (7 - len(xs))
        q, k, v, mask, past_k, past_v, nonpad = xs[:7]
        three_d = q.ndim == 3
        if three_d and (k.ndim != 3 or v.ndim != 3):
            raise run_error(ctx, f"Q, K and V must all be 3-D or all 4-D; got ranks "
                                 f"{q.ndim}, {k.ndim}, {v.ndim}")
        if three_d:
            if q_heads is None or kv_heads is None:
                raise run_error(ctx, "3-D Q/K/V need the attributes q_num_heads and kv_num_heads")
            q = _split_heads(q, q_heads, "Q", ctx)
            k = _split_heads(k, kv_heads, "K", ctx)
            v = _split_heads(v, kv_heads, "V", ctx)
        elif q.ndim != 4 or k.ndim != 4 or v.ndim != 4:
            raise run_error(ctx, f"Q, K and V must all be 3-D or all 4-D; got ranks "
                                 f"{q.ndim}, {k.ndim}, {v.ndim}")
        elif opset >= 25 and heads_given:
            raise run_error(ctx, "q_num_heads / kv_num_heads must not be given with 4-D Q/K/V")
        if past_k is not None:
            k = torch.cat([past_k, k], 2)
            v = torch.cat([past_v, v], 2)
        present_k, present_v = k, v
        b, hq, sq, d = q.shape
        hkv, t = k.shape[1], k.shape[2]
        if hkv != v.shape[1] or hq % hkv:
            raise run_error(ctx, f"{hq} query heads cannot be grouped over {hkv} key / "
                                 f"{v.shape[1]} value heads")
        rep = hq // hkv

        out_dtype = q.dtype
        cdt = torch.promote_types(q.dtype, v.dtype)
        fast = use_sdpa and (sp_dtype is None or sp_dtype == (
            cdt if q.is_cuda or cdt not in _HALF else torch.float32))
        if cdt in _HALF and not (fast and q.is_cuda):
            cdt = torch.float32
        scale = (1.0 / math.sqrt(d)) if scale_attr is None else float(scale_attr)
        # sqrt(scale) in Q's element type, applied to Q and to K (the function body's form).
        sf = _rounded_sqrt(scale, out_dtype)

        # offset 0 and nothing else: torch's top-left causal mask is the same, no mask built.
        plain_causal = is_causal and mask is None and nonpad is None and not window \
            and past_k is None
        # Structural constraints (causal, window, padding) as one bool "allowed" mask.
        allowed = None
        if (is_causal and not (fast and plain_causal)) or window or nonpad is not None:
            dev = q.device
            i_idx = torch.arange(sq, device=dev).reshape(sq, 1)
            j_idx = torch.arange(t, device=dev).reshape(1, t)
            if past_k is not None:
                pos = i_idx + past_k.shape[2]
            elif nonpad is not None:  # external cache: offset per batch, (b, 1, sq, 1)
                pos = i_idx + (nonpad.reshape(-1, 1, 1, 1).to(dev, torch.int64) - sq)
            else:
                pos = i_idx
            if is_causal:
                allowed = j_idx <= pos
            if left >= 0:
                a = pos - j_idx <= left
                allowed = a if allowed is None else allowed & a
            if right >= 0:
                a = j_idx - pos <= right
                allowed = a if allowed is None else allowed & a
            if nonpad is not None:
                a = j_idx < nonpad.reshape(-1, 1, 1, 1).to(dev, torch.int64)
                allowed = a if allowed is None else allowed & a

        # attn_mask: bool -> allowed; otherwise an additive bias in the compute type.
        bias = None
        if mask is not None:
            if mask.ndim > 4 or mask.shape[-1] > t:
                raise run_error(ctx, f"attn_mask of shape {tuple(mask.shape)} does not broadcast "
                                     f"to ({b}, {hq}, {sq}, {t})")
            pad = t - mask.shape[-1]
            if mask.dtype == torch.bool:
                if pad:
                    mask = F.pad(mask, (0, pad), value=False)
                allowed = mask if allowed is None else allowed & mask
            else:
                bias = mask.to(cdt)
                if pad:
                    bias = F.pad(bias, (0, pad), value=_NEG_INF)
        if allowed is not None:
            neg = torch.full((), _NEG_INF, dtype=cdt, device=q.device)
            if bias is not None:
                bias = torch.where(allowed, bias, neg)
            elif not fast:
                bias = torch.where(allowed, torch.zeros((), dtype=cdt, device=q.device), neg)
            else:
                bias = allowed  # scaled_dot_product_attention takes the bool form
        # Rows with no attendable key give zeros (decided on the bias, as the spec says); a
        # causal mask alone (offset >= 0) always keeps key 0.
        dead = None
        if bias is not None and not (is_causal and mask is None and nonpad is None and not window):
            dead = (~bias).all(-1, keepdim=True) if bias.dtype == torch.bool else \
                (bias == _NEG_INF).all(-1, keepdim=True)

        qc, kc, vc = q.to(cdt), k.to(cdt), v.to(cdt)
        qk_out = None
        if fast:
            kw = {}
            if rep > 1:
                if _SDPA_GQA:
                    kw["enable_gqa"] = True
                else:
                    kc = kc.repeat_interleave(rep, 1)
                    vc = vc.repeat_interleave(rep, 1)
            if plain_causal:
                y = F.scaled_dot_product_attention(qc, kc, vc, is_causal=True, scale=sf * sf, **kw)
            else:
                if bias is not None and bias.ndim < 4:  # right-aligned, as SDPA wants it
                    bias = bias.reshape((1,) * (4 - bias.ndim) + tuple(bias.shape))
                y = F.scaled_dot_product_attention(qc, kc, vc, attn_mask=bias, scale=sf * sf, **kw)
            if dead is not None:
                y = torch.where(dead, torch.zeros((), dtype=y.dtype, device=y.device), y)
        else:
            qs, ks = qc * sf, kc * sf
            if rep > 1:  # (b, hkv, rep, sq, d) @ (b, hkv, 1, d, t): no copy of K
                s = torch.matmul(qs.reshape(b, hkv, rep, sq, d),
                                 ks.unsqueeze(2).transpose(-1, -2)).reshape(b, hq, sq, t)
            else:
                s = torch.matmul(qs, ks.transpose(-1, -2))
            if need_qk and mode == 0:
                qk_out = s
            if softcap > 0:
                s = torch.tanh(s / softcap) * softcap
            if need_qk and mode == 1:
                qk_out = s
            if bias is not None:
                s = s + bias
            if need_qk and mode == 2:
                qk_out = s
            if sp_dtype is not None and sp_dtype != s.dtype:
                p = torch.softmax(s.to(sp_dtype), -1)
            else:
                p = torch.softmax(s, -1)
            if dead is not None:
                p = torch.where(dead, torch.zeros((), dtype=p.dtype, device=p.device), p)
            if need_qk and mode == 3:
                qk_out = p
            p = p.to(cdt)
            if rep > 1:
                y = torch.matmul(p.reshape(b, hkv, rep, sq, t),
                                 vc.unsqueeze(2)).reshape(b, hq, sq, vc.shape[-1])
            else:
                y = torch.matmul(p, vc)
        y = y.to(out_dtype)
        if three_d:
            y = y.transpose(1, 2).reshape(b, sq, -1)
        outs = [y, present_k, present_v]
        if need_qk:
            qk_out = qk_out.to(out_dtype)
            if qk_out.shape != (b, hq, sq, t):
                qk_out = qk_out.expand(b, hq, sq, t).contiguous()
            outs.append(qk_out)
        elif ctx.num_outputs > 3:
            outs.append(None)
        return outs[:ctx.num_outputs]
    return fn


# The same op, with opset-23 semantics, in graphs of an older opset: what
# passes/graph/fuse_attention.py makes of MatMul/Softmax/MatMul there.
register("Attention", domain="pyge")(attention)


@register("RotaryEmbedding", since=23)
def rotary_embedding(ctx):
    """x is (batch, heads, seq, head) or (batch, seq, heads * head) with num_heads; the
    caches are (max_pos, rot/2) gathered at position_ids (batch, seq), or (batch, seq, rot/2)
    without them. The first `rotary_embedding_dim` (0: all) channels of each head rotate, as
    two halves or, with `interleaved`, as (even, odd) pairs; the rest pass through."""
    interleaved = int(ctx.attr("interleaved", 0))
    rot_attr = int(ctx.attr("rotary_embedding_dim", 0))
    num_heads = ctx.attr("num_heads")
    if interleaved not in (0, 1):
        raise node_error(ctx, f"attribute 'interleaved' is {interleaved}; expected 0 or 1")
    if rot_attr < 0 or rot_attr % 2:
        raise node_error(ctx, f"attribute 'rotary_embedding_dim' is {rot_attr}; expected 0 "
                              f"(the whole head) or a positive even number")
    if num_heads is not None and int(num_heads) <= 0:
        raise node_error(ctx, f"attribute 'num_heads' is {num_heads}; expected a positive number")
    rank = _static_rank(ctx, 0)
    if rank is not None and rank not in (3, 4):
        raise node_error(ctx, f"input has rank {rank}; expected 3 or 4")
    if rank == 3 and num_heads is None:
        raise node_error(ctx, "a 3-D input needs the attribute num_heads")
    heads = None if num_heads is None else int(num_heads)

    def fn(xs):
        x, cos, sin = xs[0], xs[1], xs[2]
        pos = xs[3] if len(xs) > 3 else None
        shape = x.shape
        if x.ndim == 3:
            if heads is None:
                raise run_error(ctx, "a 3-D input needs the attribute num_heads")
            b, s, hidden = shape
            if hidden % heads:
                raise run_error(ctx, f"hidden size {hidden} is not a multiple of {heads} heads")
            x = x.reshape(b, s, heads, hidden // heads)  # (b, s, h, d): caches on (b, s, 1, r)
            head_axis = 2
        elif x.ndim == 4:
            head_axis = 1                               # (b, h, s, d): caches on (b, 1, s, r)
        else:
            raise run_error(ctx, f"input has rank {x.ndim}; expected 3 or 4")
        d = x.shape[-1]
        rot = rot_attr or d
        if rot > d or rot % 2:
            raise run_error(ctx, f"rotary dimension {rot} must be even and at most the head "
                                 f"size {d}")
        if pos is not None:
            cos, sin = cos[pos], sin[pos]
        if cos.shape[-1] != rot // 2 or sin.shape[-1] != rot // 2:
            raise run_error(ctx, f"cos_cache / sin_cache last axes ({cos.shape[-1]}, "
                                 f"{sin.shape[-1]}) must be rotary dimension / 2 = {rot // 2}")
        cdt = torch.float32 if x.dtype in _HALF else x.dtype
        cos, sin = cos.unsqueeze(head_axis).to(cdt), sin.unsqueeze(head_axis).to(cdt)
        xr = x[..., :rot].to(cdt)
        if interleaved:
            x1, x2 = xr[..., 0::2], xr[..., 1::2]
        else:
            x1, x2 = xr[..., :rot // 2], xr[..., rot // 2:]
        real = cos * x1 - sin * x2
        imag = sin * x1 + cos * x2
        if interleaved:
            out = torch.stack([real, imag], -1).flatten(-2)
        else:
            out = torch.cat([real, imag], -1)
        out = out.to(x.dtype)
        if rot < d:
            out = torch.cat([out, x[..., rot:]], -1)
        return [out.reshape(shape)]
    return fn
