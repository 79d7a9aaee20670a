"""Recurrent layers: LSTM, GRU and RNN (ONNX default domain, every opset of their schema
history: 1, 3 (GRU), 7, 14 (layout), 22 (bfloat16)).

Two paths compute the same thing:
- a fast path on torch's fused recurrent kernels (``torch._VF.lstm`` / ``gru`` /
  ``rnn_tanh`` / ``rnn_relu``; cuDNN on a GPU) where the node's configuration maps onto
  them exactly: default activations, no clip, no peepholes (or constant all-zero ones), no
  input_forget, GRU with linear_before_reset=1, and no sequence_lens (or all lengths equal
  to the sequence length). The ONNX gate blocks are reordered to torch's (LSTM iofc -> ifgo,
  GRU zrh -> rzn); with constant W/R/B that happens once, in the factory. A "reverse" layer
  runs forward on the time-flipped input.
- a per-step loop in torch for everything else (any activation with its alpha/beta, clip,
  peepholes, input_forget, linear_before_reset=0, variable lengths).

Variable lengths (sequence_lens) follow onnxruntime: a batch entry of length L runs steps
0..L-1 (a reverse direction runs L-1 down to 0), Y is zero past L, Y_h / Y_c are the state
after the last step run, and zero for L = 0. The lengths are masks on the device (no host
sync); lengths that are all the full sequence length (constant, or run-time ones on the
host) take the fast path.

Activation alpha/beta lists are consumed in order by the activations that take them (as
onnxruntime does); a missing value takes the default of the ONNX operator of that name
(LeakyRelu 0.01, ThresholdedRelu 1.0, HardSigmoid 0.2/0.5, Elu 1.0, Affine 1.0/0.0,
ScaledTanh 1.0/1.0; onnxruntime uses 0 for ThresholdedRelu, Affine and ScaledTanh).
ThresholdedRelu keeps x > alpha, as the operator and onnxruntime do (the RNN docs write >=).
Softplus is torch's overflow-free one (onnxruntime's gives inf past x ~ 88).
float16 / bfloat16 inputs are computed in float32 and rounded once at the end.
"""
from __future__ import annotations

import torch
import torch.nn.functional as F

from ._util import compute_dtype, const_tensor, node_error, run_error
from .registry import register

_DIRECTIONS = ("forward", "reverse", "bidirectional")

# name (lower case) -> (takes alpha, takes beta, default alpha, default beta, fn(x, a, b))
_ACTS = {
    "relu": (False, False, 0.0, 0.0, lambda x, a, b: torch.relu(x)),
    "tanh": (False, False, 0.0, 0.0, lambda x, a, b: torch.tanh(x)),
    "sigmoid": (False, False, 0.0, 0.0, lambda x, a, b: torch.sigmoid(x)),
    "affine": (True, True, 1.0, 0.0, lambda x, a, b: x * a + b),
    "leakyrelu": (True, False, 0.01, 0.0, lambda x, a, b: F.leaky_relu(x, a)),
    "thresholdedrelu": (True, False, 1.0, 0.0, lambda x, a, b: torch.where(x > a, x, 0.0)),
    "scaledtanh": (True, True, 1.0, 1.0, lambda x, a, b: torch.tanh(x * b) * a),
    "hardsigmoid": (True, True, 0.2, 0.5, lambda x, a, b: (x * a + b).clamp_(0.0, 1.0)),
    "elu": (True, False, 1.0, 0.0, lambda x, a, b: F.elu(x, a)),
    "softsign": (False, False, 0.0, 0.0, lambda x, a, b: x / (1 + x.abs())),
    "softplus": (False, False, 0.0, 0.0, lambda x, a, b: F.softplus(x)),
}

# Per op: number of gates, activations per direction, default activations, and for each
# of torch's gate blocks the ONNX gate block it takes.
_OPS = {
    "LSTM": (4, 3, ("sigmoid", "tanh", "tanh"), (0, 2, 3, 1)),  # iofc -> ifgo
    "GRU": (3, 2, ("sigmoid", "tanh"), (1, 0, 2)),              # zrh -> rzn
    "RNN": (1, 1, ("tanh",), (0,)),
}


def _parse_acts(ctx, n_per_dir: int, n_dirs: int, defaults: tuple) -> list[list]:
    """activations / activation_alpha / activation_beta -> per direction, a list of
    (name, fn(x) ) pairs."""
    names = ctx.attr("activations")
    names = list(defaults) * n_dirs if names is None else [str(n) for n in names]
    if len(names) == n_per_dir and n_dirs == 2:
        names = names * 2  # one list given for both directions
    if len(names) != n_per_dir * n_dirs:
        raise node_error(ctx, f"attribute 'activations' has {len(names)} entries; "
                              f"expected {n_per_dir * n_dirs} ({n_per_dir} per direction)")
    alphas = [float(v) for v in (ctx.attr("activation_alpha") or [])]
    betas = [float(v) for v in (ctx.attr("activation_beta") or [])]
    out = []
    for name in names:
        spec = _ACTS.get(name.lower())
        if spec is None:
            raise node_error(ctx, f"attribute 'activations': unsupported activation {name!r} "
                                  f"(supported: {', '.join(sorted(_ACTS))}, any case)")
        takes_a, takes_b, a, b, fn = spec
        if takes_a and alphas:
            a = alphas.pop(0)
        if takes_b and betas:
            b = betas.pop(0)
        out.append((name.lower(), (lambda f, a_, b_: lambda x: f(x, a_, b_))(fn, a, b)))
    return [out[d * n_per_dir:(d + 1) * n_per_dir] for d in range(n_dirs)]


def _reorder(w, perm, hidden):
    """Gate blocks of w (dim 0 = gates * hidden) in the order perm."""
    if perm == tuple(range(len(perm))):
        return w
    return torch.cat([w[g * hidden:(g + 1) * hidden] for g in perm])


def _static_dim(ctx, i, axis):
    ins = ctx.node.inputs
    shape = ins[i].shape if i < len(ins) and ins[i] is not None else None
    if shape is None or len(shape) <= axis:
        return None
    d = shape[axis]
    return d if isinstance(d, int) else None


def _factory(op):
    _, n_acts, default_acts, perm = _OPS[op]

    def factory(ctx):
        direction = ctx.attr("direction", "forward")
        if direction not in _DIRECTIONS:
            raise node_error(ctx, f"attribute 'direction' is {direction!r}; "
                                  f"expected one of {', '.join(_DIRECTIONS)}")
        n_dirs = 2 if direction == "bidirectional" else 1
        reverse = [direction == "reverse", True][:n_dirs]
        layout = ctx.attr("layout", 0)
        if layout not in (0, 1):
            raise node_error(ctx, f"attribute 'layout' is {layout}; expected 0 or 1")
        acts = _parse_acts(ctx, n_acts, n_dirs, default_acts)
        clip = ctx.attr("clip")
        clip = None if clip is None else float(clip)
        if clip is not None and not clip > 0:
            raise node_error(ctx, f"attribute 'clip' is {clip}; expected a positive threshold")
        input_forget = bool(ctx.attr("input_forget", 0)) if op == "LSTM" else False
        lbr = int(ctx.attr("linear_before_reset", 0)) if op == "GRU" else 0
        hidden_attr = ctx.attr("hidden_size")
        for i, nm in ((1, "W"), (2, "R")):
            nd = _static_dim(ctx, i, 0)
            if nd is not None and nd != n_dirs:
                raise node_error(ctx, f"input {nm} has {nd} directions; direction={direction!r} "
                                      f"needs {n_dirs}")
        hs = _static_dim(ctx, 2, 2)
        if hidden_attr is not None and hs is not None and hs != hidden_attr:
            raise node_error(ctx, f"attribute 'hidden_size' is {hidden_attr} but R has hidden "
                                  f"size {hs}")
        n_out = ctx.num_outputs

        has_p = op == "LSTM" and ctx.has_input(7)
        p_const = ctx.const_input(7) if has_p else None
        zero_p = p_const is not None and not p_const.any()
        fast = (clip is None and not input_forget and (not has_p or zero_p)
                and (op != "GRU" or lbr == 1)
                and all(tuple(n for n, _ in a) == default_acts for a in acts))
        rnn_fn = None
        if op == "RNN":
            names = {a[0][0] for a in acts}
            if not fast and clip is None and len(names) == 1 and names <= {"tanh", "relu"}:
                fast = True
            if fast:
                rnn_fn = torch._VF.rnn_relu if names == {"relu"} else torch._VF.rnn_tanh
        if has_p and zero_p:
            has_p = False
        vf = {"LSTM": torch._VF.lstm, "GRU": torch._VF.gru}.get(op, rnn_fn)

        # Constant weights: reorder them for torch once.
        const_params = None
        if fast and all(ctx.const_input(i) is not None or (i == 3 and not ctx.has_input(3))
                        for i in (1, 2, 3)):
            w, r = (torch.as_tensor(const_tensor(ctx.const_input(i), "cpu")) for i in (1, 2))
            b = ctx.const_input(3)
            b = None if b is None else const_tensor(b, "cpu")
            cdt = compute_dtype(w.dtype)
            const_params = _flat_params(
                op, _torch_params(w.to(cdt), r.to(cdt), None if b is None else b.to(cdt),
                                  perm, r.shape[-1]),
                w.shape[-1], r.shape[-1], n_dirs, rnn_fn is torch._VF.rnn_relu, ctx.device, cdt)

        const_lens = ctx.const_input(4)
        const_lens = None if const_lens is None else [int(n) for n in const_lens.reshape(-1)]

        def fn(xs):
            x, w, r = xs[0], xs[1], xs[2]
            b = xs[3] if len(xs) > 3 else None
            lens = xs[4] if len(xs) > 4 else None
            h0 = xs[5] if len(xs) > 5 else None
            c0 = xs[6] if len(xs) > 6 and op == "LSTM" else None
            p = xs[7] if len(xs) > 7 and has_p else None
            if w.shape[0] != n_dirs or r.shape[0] != n_dirs:
                raise run_error(ctx, f"W and R have {w.shape[0]} and {r.shape[0]} directions; "
                                     f"direction={direction!r} needs {n_dirs}")
            hidden = r.shape[-1]
            if hidden_attr is not None and hidden_attr != hidden:
                raise run_error(ctx, f"attribute 'hidden_size' is {hidden_attr} but R has "
                                     f"hidden size {hidden}")
            if layout == 1:
                x = x.transpose(0, 1)
                h0 = None if h0 is None else h0.transpose(0, 1)
                c0 = None if c0 is None else c0.transpose(0, 1)
            out_dt = x.dtype
            cdt = compute_dtype(out_dt)
            seq, batch = x.shape[0], x.shape[1]
            x = x.to(cdt)
            h0 = (torch.zeros(n_dirs, batch, hidden, dtype=cdt, device=x.device) if h0 is None
                  else h0.to(cdt))
            if op == "LSTM":
                c0 = (torch.zeros_like(h0) if c0 is None else c0.to(cdt))
            if lens is not None and fast and (
                    (const_lens is not None and all(n == seq for n in const_lens))
                    or (lens.device.type == "cpu" and bool((lens == seq).all()))):
                lens = None  # all full length: the fused kernel applies
            if seq == 0:
                y = x.new_zeros(0, n_dirs, batch, hidden)
                res = [y, h0, c0]
            elif fast and lens is None:
                params = const_params if const_params is not None else _torch_params(
                    w.to(cdt), r.to(cdt), None if b is None else b.to(cdt), perm, hidden)
                res = _run_fused(vf, op, x, h0, c0, params, n_dirs, reverse, hidden)
            else:
                res = _run_loop(op, x, w.to(cdt), r.to(cdt), None if b is None else b.to(cdt),
                                lens, h0, c0, None if p is None else p.to(cdt), acts, reverse,
                                clip, input_forget, lbr, hidden)
            y, yh, yc = res
            if layout == 1:
                y = y.permute(2, 0, 1, 3)
                yh = yh.transpose(0, 1)
                yc = None if yc is None else yc.transpose(0, 1)
            outs = [y, yh, yc][:n_out]
            return [o.to(out_dt) if o.dtype != out_dt else o for o in outs]
        return fn
    return factory


def _torch_params(w, r, b, perm, hidden):
    """ONNX W [D, G*H, I], R [D, G*H, H], B [D, 2*G*H] -> torch's flat parameter list."""
    params = []
    for d in range(w.shape[0]):
        params += [w[d], r[d]] + (list(b[d].chunk(2)) if b is not None else [])
    return [_reorder(t, perm, hidden).contiguous() for t in params]


def _flat_params(op, params, input_size, hidden, n_dirs, relu, device, dtype):
    """Constant torch parameters as an nn.LSTM/GRU/RNN on `device` holds them: moving the
    module there flattens them into one buffer (cuDNN then uses them as they are, instead of
    compacting a copy on every call)."""
    kw = {"nonlinearity": "relu" if relu else "tanh"} if op == "RNN" else {}
    mod = getattr(torch.nn, op)(input_size, hidden, bias=len(params) == 4 * n_dirs,
                                bidirectional=n_dirs == 2, **kw)
    with torch.no_grad():
        for dst, src in zip(mod._flat_weights, params):
            dst.copy_(src)
    mod.requires_grad_(False)
    mod.to(device=device, dtype=dtype)
    return [t.detach() for t in mod._flat_weights]


def _run_fused(vf, op, x, h0, c0, params, n_dirs, reverse, hidden):
    has_b = len(params) == 4 * n_dirs
    bidir = n_dirs == 2
    if reverse[0] and not bidir:
        x = x.flip(0)
    hx = (h0.contiguous(), c0.contiguous()) if op == "LSTM" else h0.contiguous()
    res = vf(x, hx, params, has_b, 1, 0.0, False, bidir, False)
    out, yh = res[0], res[1]
    yc = res[2] if op == "LSTM" else None
    if reverse[0] and not bidir:
        out = out.flip(0)
    seq, batch = x.shape[0], x.shape[1]
    y = out.view(seq, batch, n_dirs, hidden).permute(0, 2, 1, 3)
    return y, yh, yc


def _advance(out, t, h_new, h, mask, zero):
    """Step t's output and the next state: within each entry's length (mask[t]) the new
    state, past it a zero output and the state kept."""
    if mask is None:
        out[t] = h_new
        return h_new
    m = mask[t]
    out[t] = torch.where(m, h_new, zero)
    return torch.where(m, h_new, h)


def _clamp(t, clip):
    return t if clip is None else t.clamp(-clip, clip)


def _run_loop(op, x, w, r, b, lens, h0, c0, p, acts, reverse, clip, input_forget, lbr, hidden):
    seq = x.shape[0]
    mask = zero = None
    if lens is not None:
        lens = lens.to(device=x.device, dtype=torch.int64)
        steps = torch.arange(seq, device=x.device)
        mask = (steps[:, None] < lens[None, :]).unsqueeze(-1)  # [T, B, 1]
        zero = x.new_zeros(())
    ys, hs, cs = [], [], []
    for d, rev in enumerate(reverse):
        fns = [f for _, f in acts[d]]
        wd, rd = w[d], r[d]
        if b is not None:
            wb, rb = b[d].chunk(2)
        else:
            wb = rb = None
        xw = torch.matmul(x, wd.t())  # every step's input projection at once: [T, B, G*H]
        if wb is not None:
            xw = xw + wb
        h = h0[d]
        c = c0[d] if c0 is not None else None
        out = [None] * seq
        order = range(seq - 1, -1, -1) if rev else range(seq)
        if op == "LSTM":
            f_, g_, h_ = fns
            pi, po, pf = (p[d].chunk(3) if p is not None else (None, None, None))
            for t in order:
                gates = xw[t] + torch.matmul(h, rd.t())
                if rb is not None:
                    gates = gates + rb
                i, o, f, cc = gates.chunk(4, -1)
                if pi is not None:
                    i = i + pi * c
                    f = f + pf * c
                i = f_(_clamp(i, clip))
                f = 1 - i if input_forget else f_(_clamp(f, clip))
                c_new = f * c + i * g_(_clamp(cc, clip))
                if po is not None:
                    o = o + po * c_new
                h_new = f_(_clamp(o, clip)) * h_(c_new)
                h = _advance(out, t, h_new, h, mask, zero)
                c = c_new if mask is None else torch.where(mask[t], c_new, c)
        elif op == "GRU":
            f_, g_ = fns
            xzr, xh = xw[..., :2 * hidden], xw[..., 2 * hidden:]
            rzr, rh = rd[:2 * hidden], rd[2 * hidden:]
            rbzr, rbh = (rb[:2 * hidden], rb[2 * hidden:]) if rb is not None else (None, None)
            for t in order:
                if lbr:
                    hr = torch.matmul(h, rd.t())
                    if rb is not None:
                        hr = hr + rb
                    zr, hh = hr[..., :2 * hidden], hr[..., 2 * hidden:]
                    zr = xzr[t] + zr
                else:
                    zr = xzr[t] + torch.matmul(h, rzr.t())
                    if rbzr is not None:
                        zr = zr + rbzr
                z, rg = zr.chunk(2, -1)
                z = f_(_clamp(z, clip))
                rg = f_(_clamp(rg, clip))
                if lbr:
                    cand = xh[t] + rg * hh
                else:
                    cand = xh[t] + torch.matmul(rg * h, rh.t())
                    if rbh is not None:
                        cand = cand + rbh
                cand = g_(_clamp(cand, clip))
                h_new = (1 - z) * cand + z * h
                h = _advance(out, t, h_new, h, mask, zero)
        else:
            f_ = fns[0]
            for t in order:
                pre = xw[t] + torch.matmul(h, rd.t())
                if rb is not None:
                    pre = pre + rb
                h_new = f_(_clamp(pre, clip))
                h = _advance(out, t, h_new, h, mask, zero)
        if mask is not None:  # a batch entry of length 0 ends in a zero state
            some = (lens > 0).unsqueeze(-1)
            h = torch.where(some, h, zero)
            c = None if c is None else torch.where(some, c, zero)
        ys.append(torch.stack(out))
        hs.append(h)
        cs.append(c)
    y = torch.stack(ys, 1)
    yh = torch.stack(hs)
    yc = torch.stack(cs) if op == "LSTM" else None
    return y, yh, yc


register("LSTM", since=1)(_factory("LSTM"))
register("GRU", since=1)(_factory("GRU"))
register("RNN", since=1)(_factory("RNN"))
