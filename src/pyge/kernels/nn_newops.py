"""Recent ONNX operators: DeformConv, TensorScatter, SwiGLU, CausalConvWithState,
LinearAttention.

All run on torch ops on the input's device (no host round trip, nothing reads a device value
on the host), so they work on CUDA tensors and inside CUDA graph captures. Half-precision
inputs are computed in float32 and rounded once at the end, as the onnx reference does for
the recurrent ops.
"""
from __future__ import annotations

import itertools
import math

import numpy as np
import torch
import torch.nn.functional as F

from ._util import node_error, norm_axis, run_error
from .registry import register

_HALF = (torch.float16, torch.bfloat16)


def _compute_dtype(dt):
    return torch.float32 if dt in _HALF else dt


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


# ---------------------------------------------------------------------------------------
# TensorScatter (opset 24)


@register("TensorScatter", since=24)
def tensor_scatter(ctx):
    """KV-cache update: present = past with update written at write_indices[b] (+ i) along
    `axis`, per batch row; mode "circular" wraps the positions modulo the cache length.

    Written as a gather from the cache's side, so that no write index is read on the host:
    cache position m of batch row b takes update[..., (m - w[b]) (mod M), ...] where that
    source position lies in [0, sequence_length), and keeps past otherwise.

    "linear" mode with a write past the cache's end (or a negative write index) is an error
    (as in onnxruntime and the onnx reference) on the CPU, where checking costs nothing; on
    CUDA the values are not read back (that would sync every decode step), and the writes
    that fall outside the cache are dropped."""
    mode = ctx.attr("mode", "linear")
    if isinstance(mode, bytes):
        mode = mode.decode()
    if mode not in ("linear", "circular"):
        raise node_error(ctx, f"mode={mode!r} is not one of 'linear', 'circular'")
    circular = mode == "circular"
    axis_attr = int(ctx.attr("axis", -2))
    shape = ctx.node.inputs[0].shape if ctx.node.inputs else None
    if shape is not None:
        rank = len(shape)
        if not -rank <= axis_attr < rank:
            raise node_error(ctx, f"axis={axis_attr} is out of range for rank {rank}")
        if axis_attr % rank == 0:
            raise node_error(ctx, f"axis={axis_attr} is the batch axis; the sequence axis "
                                  "must come after it")

    def check(past, upd):
        if past.ndim != upd.ndim:
            raise run_error(ctx, f"past_cache {tuple(past.shape)} and update "
                                 f"{tuple(upd.shape)} differ in rank")
        ax = norm_axis(axis_attr, past.ndim)
        if ax == 0:
            raise run_error(ctx, f"axis={axis_attr} is the batch axis")
        for i, (a, b) in enumerate(zip(past.shape, upd.shape)):
            if (i != ax and a != b) or (i == ax and b > a):
                raise run_error(ctx, f"update {tuple(upd.shape)} does not fit past_cache "
                                     f"{tuple(past.shape)} along axis {i}")
        return ax

    def fn(xs):
        past, upd = xs[0], xs[1]
        wi = xs[2] if len(xs) > 2 else None
        if isinstance(past, np.ndarray):  # strings: on the host
            return [_tensor_scatter_np(ctx, past, np.asarray(upd), wi, check(past, upd), circular)]
        ax = check(past, upd)
        nb, m_len, s_len = past.shape[0], past.shape[ax], upd.shape[ax]
        if s_len == 0 or past.numel() == 0:
            return [past.clone()]
        m = torch.arange(m_len, device=past.device)
        if wi is None:
            src = m.expand(nb, m_len)
        else:
            if tuple(wi.shape) != (nb,):
                raise run_error(ctx, f"write_indices has shape {tuple(wi.shape)}, expected "
                                     f"({nb},)")
            wi = wi.to(past.device, torch.int64)
            if not circular and wi.device.type == "cpu" and nb and (
                    int(wi.min()) < 0 or int(wi.max()) > m_len - s_len):
                raise run_error(ctx, f"write_indices {wi.tolist()} + sequence length {s_len} "
                                     f"go outside the cache's {m_len} positions (mode linear)")
            src = m[None, :] - wi[:, None]
        if circular:
            src = torch.remainder(src, m_len)
        keep = (src < 0) | (src >= s_len)
        view = [nb] + [1] * (past.ndim - 1)
        view[ax] = m_len
        idx = src.clamp(0, s_len - 1).reshape(view)
        out_shape = list(upd.shape)
        out_shape[ax] = m_len
        gathered = torch.gather(upd, ax, idx.expand(out_shape))
        return [torch.where(keep.reshape(view), past, gathered)]
    return fn


def _tensor_scatter_np(ctx, past, upd, wi, ax, circular):
    out = past.copy()
    m_len, s_len = past.shape[ax], upd.shape[ax]
    w = [0] * past.shape[0] if wi is None else [int(v) for v in np.asarray(
        wi.cpu() if isinstance(wi, torch.Tensor) else wi).reshape(-1)]
    lead = (slice(None),) * (ax - 1)
    for b in range(past.shape[0]):
        for i in range(s_len):
            j = (w[b] + i) % m_len if circular else w[b] + i
            if not 0 <= j < m_len:
                raise run_error(ctx, f"write index {j} is outside the cache's {m_len} "
                                     "positions (mode linear)")
            out[(b, *lead, j)] = upd[(b, *lead, i)]
    return out


# ---------------------------------------------------------------------------------------
# SwiGLU (opset 28)


@register("SwiGLU", since=28)
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
        cdt = _compute_dtype(x.dtype)
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
