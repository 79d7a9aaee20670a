"""onnxruntime's attention contrib operators (domain ``com.microsoft``): Attention (packed
QKV weight, mask_index as 1-D end (/start) positions or a 2-D / 3-D raw 0/1 mask,
unidirectional, past/present, attention_bias), MultiHeadAttention (separate or packed Q/K/V,
bias, key_padding_mask, past/present key and value), RotaryEmbedding and
GroupQueryAttention. Semantics follow onnxruntime's CPU kernels (the oracle; there are no
onnx node cases for contrib ops); the other transformer contrib ops are in
nn_transformer_ms.py.

Masks follow onnxruntime: a masked key gets ``mask_filter_value`` (-10000 by default) added
to its score (so a fully masked row is a plain softmax, never NaN); the causal mask
(``unidirectional``) removes the key outright.
"""
from __future__ import annotations

import math

import torch

from ._util import node_error, run_error
from .nn_transformer_ms import _HALF, _MS, _check_range, _int_attr, _opt, _out_used
from .registry import register

# ---------------------------------------------------------------------------------------
# attention


def _key_mask(ctx, mask, b, s, t, fill, dtype):
    """onnxruntime's mask_index / key_padding_mask as an additive (b, 1 or s, t) mask:
    1-D (b) end positions or (2b) end and start positions, 2-D (b, t) or 3-D (b, s, t) raw
    0/1 masks (0 = masked)."""
    dev = mask.device
    if mask.ndim == 1:
        j = torch.arange(t, device=dev)
        if mask.shape[0] == b:
            bad = j >= mask.long()[:, None]
        elif mask.shape[0] == 2 * b:
            m = mask.long()
            bad = (j >= m[:b, None]) | (j < m[b:, None])
        else:
            raise run_error(ctx, f"1-D mask_index has length {mask.shape[0]}; expected batch "
                                 f"{b} or 2 * batch")
        bad = bad[:, None, :]
    elif mask.ndim == 2:
        if tuple(mask.shape) != (b, t):
            raise run_error(ctx, f"2-D mask has shape {tuple(mask.shape)}; expected "
                                 f"(batch, total sequence) = {(b, t)}")
        bad = (mask <= 0)[:, None, :]
    elif mask.ndim == 3:
        if tuple(mask.shape) != (b, s, t):
            raise run_error(ctx, f"3-D mask has shape {tuple(mask.shape)}; expected {(b, s, t)}")
        bad = mask <= 0
    else:
        raise run_error(ctx, f"mask has rank {mask.ndim}; 1-D, 2-D and 3-D masks are "
                             f"supported (the 4-D Megatron form is not)")
    return torch.zeros(bad.shape, dtype=dtype, device=dev).masked_fill(bad, fill)


def _attend(q, k, v, scale, add, causal_past, attn_bias):
    """q (b, n, s, h), k / v (b, n, t, h*); add: additive (b, 1|s, t) or None; causal_past:
    None or the past length (query i sees keys j <= i + past)."""
    cdt = torch.float32 if q.dtype in _HALF else q.dtype
    scores = torch.matmul(q.to(cdt), k.to(cdt).transpose(-1, -2)) * scale
    if add is not None:
        scores = scores + add[:, None].to(cdt)
    if attn_bias is not None:
        scores = scores + attn_bias.to(cdt)
    if causal_past is not None:
        s, t = scores.shape[-2:]
        i = torch.arange(s, device=q.device)[:, None]
        j = torch.arange(t, device=q.device)[None, :]
        scores = scores.masked_fill(j > i + causal_past, float("-inf"))
    p = torch.softmax(scores, -1)
    return torch.matmul(p, v.to(cdt)).to(q.dtype)


def _heads(x, n):
    b, s, d = x.shape
    return x.reshape(b, s, n, d // n).transpose(1, 2)


def _merge(x):
    b, n, s, h = x.shape
    return x.transpose(1, 2).reshape(b, s, n * h)


@register("Attention", domain=_MS)
def ms_attention(ctx):
    heads = ctx.attr("num_heads")
    if heads is None or int(heads) <= 0:
        raise node_error(ctx, f"attribute 'num_heads' is {heads}; expected a positive number")
    heads = int(heads)
    causal = _int_attr(ctx, "unidirectional", 0, (0, 1))
    sizes = list(ctx.attr("qkv_hidden_sizes") or [])
    scale_attr = ctx.attr("scale")
    fill = float(ctx.attr("mask_filter_value", -10000.0))
    if int(ctx.attr("do_rotary", 0)):
        raise node_error(ctx, "attribute 'do_rotary'=1 is not supported")
    if int(ctx.attr("past_present_share_buffer", 0)):
        raise node_error(ctx, "attribute 'past_present_share_buffer'=1 is not supported")
    if sizes and (len(sizes) != 3 or sizes[0] != sizes[1] or any(x % heads for x in sizes)):
        raise node_error(ctx, f"attribute 'qkv_hidden_sizes' is {sizes}; expected 3 multiples "
                              f"of num_heads={heads}, the first two equal")
    want_present = _out_used(ctx, 1)

    def fn(xs):
        x, w = xs[0], xs[1]
        bias, mask, past = _opt(xs, 2), _opt(xs, 3), _opt(xs, 4)
        attn_bias = _opt(xs, 5)
        if x.ndim != 3:
            raise run_error(ctx, f"input has rank {x.ndim}; expected 3 (batch, seq, hidden)")
        b, s, _ = x.shape
        qh, kh, vh = sizes if sizes else [w.shape[1] // 3] * 3
        if w.ndim != 2 or w.shape[1] != qh + kh + vh or w.shape[0] != x.shape[2]:
            raise run_error(ctx, f"weights have shape {tuple(w.shape)}; expected "
                                 f"({x.shape[2]}, {qh + kh + vh})")
        qkv = torch.matmul(x, w)
        if bias is not None:
            qkv = qkv + bias
        q, k, v = torch.split(qkv, [qh, kh, vh], -1)
        q, k, v = _heads(q, heads), _heads(k, heads), _heads(v, heads)
        p_len = 0
        if past is not None:
            if past.ndim != 5 or past.shape[0] != 2:
                raise run_error(ctx, f"past has shape {tuple(past.shape)}; expected "
                                     f"(2, batch, heads, past_seq, head_size)")
            p_len = past.shape[3]
            k = torch.cat([past[0].to(k.dtype), k], 2)
            v = torch.cat([past[1].to(v.dtype), v], 2)
        t = k.shape[2]
        scale = float(scale_attr) if scale_attr else 1.0 / math.sqrt(qh // heads)
        cdt = torch.float32 if x.dtype in _HALF else x.dtype
        add = None if mask is None else _key_mask(ctx, mask, b, s, t, fill, cdt)
        y = _attend(q, k, v, scale, add, p_len if causal else None, attn_bias)
        out = [_merge(y)]
        if ctx.num_outputs > 1:
            out.append(torch.stack([k, v]) if want_present else None)
        return out
    return fn


@register("MultiHeadAttention", domain=_MS)
def multi_head_attention(ctx):
    heads = ctx.attr("num_heads")
    if heads is None or int(heads) <= 0:
        raise node_error(ctx, f"attribute 'num_heads' is {heads}; expected a positive number")
    heads = int(heads)
    causal = _int_attr(ctx, "unidirectional", 0, (0, 1))
    scale_attr = ctx.attr("scale")
    fill = float(ctx.attr("mask_filter_value", -10000.0))
    n_out = ctx.num_outputs

    def fn(xs):
        q, k, v = xs[0], _opt(xs, 1), _opt(xs, 2)
        bias, mask, attn_bias = _opt(xs, 3), _opt(xs, 4), _opt(xs, 5)
        past_k, past_v = _opt(xs, 6), _opt(xs, 7)
        if len(xs) > 8 and any(x is not None for x in xs[8:]):
            raise run_error(ctx, "past_sequence_length / cache_indirection inputs are not "
                                 "supported")
        if q.ndim == 5:  # packed QKV (b, s, n, 3, h)
            if k is not None or v is not None:
                raise run_error(ctx, "packed QKV query needs empty key and value")
            b, s, n, _, h = q.shape
            q, k, v = (q[:, :, :, i].reshape(b, s, n * h) for i in range(3))
        elif q.ndim != 3:
            raise run_error(ctx, f"query has rank {q.ndim}; expected 3 or 5 (packed QKV)")
        b, s, d = q.shape
        if bias is not None:
            dv = bias.shape[0] - 2 * d
            bq, bk, bv = torch.split(bias, [d, d, dv])
            q = q + bq
        if k is not None and k.ndim == 5:  # packed KV (b, l, n, 2, h)
            if v is not None:
                raise run_error(ctx, "packed KV key needs an empty value")
            bb, l_, n, _, h = k.shape
            k, v = k[:, :, :, 0].reshape(bb, l_, n * h), k[:, :, :, 1].reshape(bb, l_, n * h)
        if k is None or v is None:
            raise run_error(ctx, "key and value are required")
        qh = _heads(q, heads)
        if k.ndim == 3:
            if bias is not None:
                k, v = k + bk, v + bv
            kh, vh = _heads(k, heads), _heads(v, heads)
        elif k.ndim == 4:  # (b, n, l, h): already projected (no bias, no past)
            kh, vh = k, v
        else:
            raise run_error(ctx, f"key has rank {k.ndim}; expected 3, 4 or 5")
        p_len = 0
        if past_k is not None and past_v is not None and k.ndim == 3:
            p_len = past_k.shape[2]
            kh = torch.cat([past_k.to(kh.dtype), kh], 2)
            vh = torch.cat([past_v.to(vh.dtype), vh], 2)
        t = kh.shape[2]
        scale = float(scale_attr) if scale_attr else 1.0 / math.sqrt(d // heads)
        cdt = torch.float32 if q.dtype in _HALF else q.dtype
        add = None if mask is None else _key_mask(ctx, mask, b, s, t, fill, cdt)
        y = _attend(qh, kh, vh, scale, add, p_len if causal else None, attn_bias)
        out = [_merge(y)]
        if n_out > 1:
            out.append(kh)
        if n_out > 2:
            out.append(vh)
        if n_out > 3:
            out.append(None)
        return out
    return fn


@register("RotaryEmbedding", domain=_MS)
def ms_rotary_embedding(ctx):
    """input (b, s, hidden) with num_heads (or inferred from the caches) or (b, n, s, h);
    position_ids (b, s), or a 1-element offset (positions offset .. offset + s - 1);
    cos_cache / sin_cache (max_pos, rot / 2)."""
    interleaved = _int_attr(ctx, "interleaved", 0, (0, 1))
    rot_attr = int(ctx.attr("rotary_embedding_dim", 0))
    heads_attr = int(ctx.attr("num_heads", 0))
    # (the 'scale' attribute is not used by onnxruntime's CPU kernel either)
    if int(ctx.attr("is_packed_batching", 0)):
        raise node_error(ctx, "attribute 'is_packed_batching'=1 is not supported")
    if rot_attr < 0 or rot_attr % 2:
        raise node_error(ctx, f"attribute 'rotary_embedding_dim' is {rot_attr}; expected 0 or "
                              f"a positive even number")

    def fn(xs):
        x, pos, cos, sin = xs
        shape = x.shape
        if x.ndim == 3:
            b, s, hidden = shape
            if heads_attr:
                heads = heads_attr
            else:
                heads = hidden // (cos.shape[1] * 2)
            x = x.reshape(b, s, heads, hidden // heads)  # (b, s, n, h)
            head_axis = 2
        elif x.ndim == 4:
            b, s = x.shape[0], x.shape[2]
            head_axis = 1                               # (b, n, s, h)
        else:
            raise run_error(ctx, f"input has rank {x.ndim}; expected 3 or 4")
        d = x.shape[-1]
        rot = rot_attr or cos.shape[1] * 2
        if rot > d:
            raise run_error(ctx, f"rotary dimension {rot} is larger than the head size {d}")
        pos = pos.long()
        if pos.numel() == 1 and not (pos.ndim == 2 and b * s == 1):
            pos = pos.reshape(()) + torch.arange(s, device=x.device).expand(b, s)
        _check_range(ctx, pos, cos.shape[0], "position ids")
        c, sn = cos[pos], sin[pos]  # (b, s, rot / 2)
        if c.shape[-1] != rot // 2:
            raise run_error(ctx, f"cos_cache last axis {c.shape[-1]} must be rotary dimension "
                                 f"/ 2 = {rot // 2}")
        cdt = torch.float32 if x.dtype in _HALF else x.dtype
        c, sn = c.unsqueeze(head_axis).to(cdt), sn.unsqueeze(head_axis).to(cdt)
        xr = x[..., :rot].to(cdt)
        if interleaved:
            x1, x2 = xr[..., 0::2], xr[..., 1::2]
        else:
            x1, x2 = xr[..., :rot // 2], xr[..., rot // 2:]
        real = c * x1 - sn * x2
        imag = sn * x1 + c * x2
        out = torch.stack([real, imag], -1).flatten(-2) if interleaved \
            else torch.cat([real, imag], -1)
        out = out.to(x.dtype)
        if rot < d:
            out = torch.cat([out, x[..., rot:]], -1)
        return [out.reshape(shape)]
    return fn


def _rotate(x, pos, cos, sin, interleaved):
    """x (b, n, s, h); pos (b, s) int64; caches (max_pos, rot / 2): rotary on the first rot
    channels of each head."""
    rot = cos.shape[1] * 2
    c, sn = cos[pos].unsqueeze(1).to(x.dtype), sin[pos].unsqueeze(1).to(x.dtype)
    xr = x[..., :rot]
    if interleaved:
        x1, x2 = xr[..., 0::2], xr[..., 1::2]
    else:
        x1, x2 = xr[..., :rot // 2], xr[..., rot // 2:]
    real, imag = c * x1 - sn * x2, sn * x1 + c * x2
    out = torch.stack([real, imag], -1).flatten(-2) if interleaved else torch.cat([real, imag], -1)
    return torch.cat([out, x[..., rot:]], -1) if rot < x.shape[-1] else out


@register("GroupQueryAttention", domain=_MS)
def group_query_attention(ctx):
    """Causal grouped-query attention with onnxruntime's KV-cache convention: seqlens_k[b]
    is the batch's total length - 1; a first prompt (sequence length == total_sequence_length)
    has no past, otherwise the new keys go to positions seqlens_k[b] + 1 - S ... of the
    present buffer (max(past buffer, total_sequence_length) long), after the batch's past.
    Optional rotary (do_rotary with cos/sin caches), softcap, local_window_size."""
    heads = int(ctx.attr("num_heads", 0))
    kv_heads = int(ctx.attr("kv_num_heads", 0))
    if heads <= 0 or kv_heads <= 0 or heads % kv_heads:
        raise node_error(ctx, f"attributes num_heads={heads}, kv_num_heads={kv_heads}: expected "
                              f"positive numbers, num_heads a multiple of kv_num_heads")
    scale_attr = ctx.attr("scale")
    softcap = float(ctx.attr("softcap", 0.0))
    window = int(ctx.attr("local_window_size", -1))
    rotary = _int_attr(ctx, "do_rotary", 0, (0, 1))
    interleaved = _int_attr(ctx, "rotary_interleaved", 0, (0, 1))
    if int(ctx.attr("smooth_softmax", 0)):
        raise node_error(ctx, "attribute 'smooth_softmax'=1 is not supported")
    if ctx.num_inputs > 12 and ctx.has_input(12):
        raise node_error(ctx, "input 'head_sink' is not supported")
    if ctx.has_input(9) or ctx.has_input(10):
        raise node_error(ctx, "inputs 'position_ids' / 'attention_bias' are not supported")
    n_out = ctx.num_outputs

    def fn(xs):
        q, k, v = xs[0], _opt(xs, 1), _opt(xs, 2)
        past_k, past_v, seqlens, total = _opt(xs, 3), _opt(xs, 4), xs[5], xs[6]
        cos, sin = _opt(xs, 7), _opt(xs, 8)
        b, s, _ = q.shape
        if k is None:  # packed QKV (b, s, (n + 2 kv_n) * h)
            h = q.shape[2] // (heads + 2 * kv_heads)
            q, k, v = torch.split(q, [heads * h, kv_heads * h, kv_heads * h], -1)
        h = q.shape[2] // heads
        qh = q.reshape(b, s, heads, h).transpose(1, 2)
        kh = k.reshape(b, s, kv_heads, h).transpose(1, 2)
        vh = v.reshape(b, s, kv_heads, h).transpose(1, 2)
        total_len = int(total.reshape(-1)[0])
        seq = seqlens.long().reshape(b)
        first = s == total_len
        past_b = torch.zeros_like(seq) if first else seq + 1 - s  # (b,)
        total_b = seq + 1
        pos = past_b[:, None] + torch.arange(s, device=q.device)[None]  # (b, s)
        if rotary:
            if cos is None or sin is None:
                raise run_error(ctx, "do_rotary needs cos_cache and sin_cache")
            rpos = pos.clamp(0, cos.shape[0] - 1)
            qh = _rotate(qh, rpos, cos, sin, interleaved)
            kh = _rotate(kh, rpos, cos, sin, interleaved)
        p_buf = 0 if past_k is None else past_k.shape[2]
        t = max(p_buf, total_len)
        pk = torch.zeros(b, kv_heads, t, h, dtype=kh.dtype, device=q.device)
        pv = torch.zeros_like(pk)
        if p_buf and not first:
            # each batch's own past only; the rest of the buffer is zeros (as onnxruntime)
            keep = (torch.arange(p_buf, device=q.device)[None] < past_b[:, None])[:, None, :, None]
            pk[:, :, :p_buf] = torch.where(keep, past_k.to(pk.dtype), 0.0)
            pv[:, :, :p_buf] = torch.where(keep, past_v.to(pv.dtype), 0.0)
        idx = pos.clamp(0, t - 1)[:, None, :, None].expand(b, kv_heads, s, h)
        pk = pk.scatter(2, idx, kh)
        pv = pv.scatter(2, idx, vh)
        scale = float(scale_attr) if scale_attr else 1.0 / math.sqrt(h)
        cdt = torch.float32 if q.dtype in _HALF else q.dtype
        g = heads // kv_heads
        qg = qh.to(cdt).reshape(b, kv_heads, g, s, h)
        scores = torch.matmul(qg, pk.to(cdt)[:, :, None].transpose(-1, -2)) * scale
        if softcap > 0:
            scores = softcap * torch.tanh(scores / softcap)
        j = torch.arange(t, device=q.device)[None, None, :]      # (1, 1, t)
        qi = pos[:, :, None]                                      # (b, s, 1)
        bad = (j > qi) | (j >= total_b[:, None, None])
        if window > 0:
            bad = bad | (j <= qi - window)
        scores = scores.masked_fill(bad[:, None, None], float("-inf"))
        p = torch.softmax(scores, -1).nan_to_num(0.0)
        y = torch.matmul(p, pv.to(cdt)[:, :, None]).reshape(b, heads, s, h)
        out = [_merge(y).to(q.dtype)]
        if n_out > 1:
            out.append(pk)
        if n_out > 2:
            out.append(pv)
        return out
    return fn
