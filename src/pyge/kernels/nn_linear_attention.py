"""The recurrent-state operators of linear-attention models (opset 27): LinearAttention
(linear / gated / delta / gated_delta update rules, with GQA) and CausalConvWithState (the
short depthwise causal convolution before it). Each takes the state the previous call left
and returns the next one, as a KV cache does for softmax attention.

Torch ops on the input's device (no host round trip, nothing reads a device value on the
host), so they work on CUDA tensors and inside CUDA graph captures. Half-precision inputs
are computed in float32 and rounded once at the end, as the onnx reference does.
"""
from __future__ import annotations

import math

import torch
import torch.nn.functional as F

from ._util import compute_dtype, node_error, run_error
from .registry import register


# ---------------------------------------------------------------------------------------
# CausalConvWithState (opset 27)


@register("CausalConvWithState", since=27)
def causal_conv_with_state(ctx):
    """Depthwise causal 1-D convolution over [past_state (or zeros), input], with an
    optional fused SiLU; present_state holds the last k-1 positions of that sequence."""
    act = ctx.attr("activation", "none")
    if isinstance(act, bytes):
        act = act.decode()
    if act not in ("none", "silu", "swish"):
        raise node_error(ctx, f"activation={act!r} is not one of 'none', 'silu', 'swish'")
    silu = act != "none"

    def fn(xs):
        x, w = xs[0], xs[1]
        bias = xs[2] if len(xs) > 2 else None
        past = xs[3] if len(xs) > 3 else None
        if x.ndim != 3 or w.ndim != 3:
            raise run_error(ctx, f"input {tuple(x.shape)} and weight {tuple(w.shape)} must "
                                 "be rank 3: (batch, channels, length), (channels, 1, k)")
        nb, c, _ = x.shape
        k = w.shape[2]
        if w.shape[0] != c or w.shape[1] != 1 or k < 1:
            raise run_error(ctx, f"weight {tuple(w.shape)} must be ({c}, 1, k) for {c} channels")
        if past is None:
            past = x.new_zeros((nb, c, k - 1))
        elif tuple(past.shape) != (nb, c, k - 1):
            raise run_error(ctx, f"past_state {tuple(past.shape)} must be {(nb, c, k - 1)}")
        if bias is not None and tuple(bias.shape) != (c,):
            raise run_error(ctx, f"bias {tuple(bias.shape)} must be ({c},)")
        padded = torch.cat([past, x], 2)
        cdt = compute_dtype(x.dtype)
        y = F.conv1d(padded.to(cdt), w.to(cdt), None if bias is None else bias.to(cdt),
                     groups=c)
        if silu:
            y = F.silu(y)
        present = padded[:, :, padded.shape[2] - (k - 1):] if k > 1 else padded[:, :, :0]
        return [y.to(x.dtype), present.contiguous()]
    return fn


# ---------------------------------------------------------------------------------------
# LinearAttention (opset 27)

_RULES = ("linear", "gated", "delta", "gated_delta")


@register("LinearAttention", since=27)
def linear_attention(ctx):
    """Recurrent linear attention (linear / gated / delta / gated_delta rules) with GQA.

    Computed in float32 (as the onnx reference does). The "linear" rule runs in closed form
    (a causal q.k^T-weighted sum of v, plus q.S0); the other rules run the recurrence one
    token at a time, batched over batch and heads (decode steps have T=1)."""
    rule = ctx.attr("update_rule", "gated_delta")
    if isinstance(rule, bytes):
        rule = rule.decode()
    if rule not in _RULES:
        raise node_error(ctx, f"update_rule={rule!r} is not one of {', '.join(map(repr, _RULES))}")
    hq, hkv = ctx.attr("q_num_heads"), ctx.attr("kv_num_heads")
    if hq is None or hkv is None:
        raise node_error(ctx, "the q_num_heads and kv_num_heads attributes are required")
    hq, hkv = int(hq), int(hkv)
    if hq <= 0 or hkv <= 0 or hq % hkv:
        raise node_error(ctx, f"q_num_heads={hq} must be a positive multiple of "
                              f"kv_num_heads={hkv}")
    gating = rule in ("gated", "gated_delta")
    delta = rule in ("delta", "gated_delta")
    for i, name, needed in ((4, "decay", gating), (5, "beta", delta)):
        if needed and not ctx.has_input(i):
            raise node_error(ctx, f"update_rule={rule!r} needs the {name} input")
        if not needed and ctx.has_input(i):
            raise node_error(ctx, f"update_rule={rule!r} takes no {name} input")
    scale_attr = float(ctx.attr("scale", 0.0) or 0.0)
    grp = hq // hkv

    def heads(x, h, name):
        """(B, T, H*D) -> (B, H, T, D) float32."""
        if x.ndim != 3 or x.shape[2] % h:
            raise run_error(ctx, f"{name} {tuple(x.shape)} must be (B, T, {h}*D)")
        b, t, hd = x.shape
        return x.reshape(b, t, h, hd // h).transpose(1, 2).float()

    def fn(xs):
        q, k, v = xs[0], xs[1], xs[2]
        past = xs[3] if len(xs) > 3 else None
        decay = xs[4] if len(xs) > 4 else None
        beta = xs[5] if len(xs) > 5 else None
        q4, k4, v4 = heads(q, hq, "query"), heads(k, hkv, "key"), heads(v, hkv, "value")
        b, _, t, dk = q4.shape
        dv = v4.shape[3]
        if k4.shape[:3] != (b, hkv, t) or v4.shape[:3] != (b, hkv, t) or k4.shape[3] != dk:
            raise run_error(ctx, f"query {tuple(q.shape)}, key {tuple(k.shape)}, value "
                                 f"{tuple(v.shape)} do not fit q_num_heads={hq}, "
                                 f"kv_num_heads={hkv}")
        if past is not None:
            if tuple(past.shape) != (b, hkv, dk, dv):
                raise run_error(ctx, f"past_state {tuple(past.shape)} must be "
                                     f"{(b, hkv, dk, dv)}")
            state = past.float()
            state_dtype = past.dtype
        else:
            state = q4.new_zeros((b, hkv, dk, dv))
            state_dtype = q.dtype
        scale = scale_attr if scale_attr != 0.0 else 1.0 / math.sqrt(dk)
        g4 = be4 = None
        if gating:
            if decay.ndim != 3 or decay.shape[:2] != (b, t) or decay.shape[2] not in (
                    hkv, hkv * dk):
                raise run_error(ctx, f"decay {tuple(decay.shape)} must be ({b}, {t}, {hkv}) "
                                     f"or ({b}, {t}, {hkv * dk})")
            # (B, T, H*(1|dk)) -> (B, H, T, 1|dk)
            g4 = torch.exp(decay.reshape(b, t, hkv, decay.shape[2] // hkv).transpose(1, 2)
                           .float())
        if delta:
            if beta.ndim != 3 or beta.shape[:2] != (b, t) or beta.shape[2] not in (hkv, 1):
                raise run_error(ctx, f"beta {tuple(beta.shape)} must be ({b}, {t}, {hkv}) or "
                                     f"({b}, {t}, 1)")
            be4 = beta.transpose(1, 2).float().unsqueeze(-1)  # (B, H|1, T, 1)
        qg = q4.reshape(b, hkv, grp, t, dk)  # query heads h*grp..h*grp+grp-1 read KV head h
        if rule == "linear":
            # o_t = scale * q_t.(S0 + sum_{s<=t} k_s v_s^T)
            att = torch.einsum("bhgtd,bhsd->bhgts", qg, k4).tril()
            out = torch.einsum("bhgts,bhsv->bhgtv", att, v4) + \
                torch.einsum("bhgtd,bhdv->bhgtv", qg, state)
            out = out * scale
            state = state + torch.einsum("bhsd,bhsv->bhdv", k4, v4)
        else:
            outs = []
            for i in range(t):
                kt, vt = k4[:, :, i], v4[:, :, i]
                if gating:
                    state = state * g4[:, :, i].unsqueeze(-1)
                if delta:
                    retrieved = torch.einsum("bhdv,bhd->bhv", state, kt)
                    vt = be4[:, :, i] * (vt - retrieved)
                state = state + kt.unsqueeze(-1) * vt.unsqueeze(-2)
                outs.append(torch.einsum("bhgd,bhdv->bhgv", qg[:, :, :, i], state))
            out = (torch.stack(outs, 3) if outs else q4.new_zeros((b, hkv, grp, 0, dv))
                   ) * scale  # (B, Hkv, G, T, dv)
        out = out.reshape(b, hq, t, dv).transpose(1, 2).reshape(b, t, hq * dv)
        return [out.to(q.dtype), state.to(state_dtype)]
    return fn
