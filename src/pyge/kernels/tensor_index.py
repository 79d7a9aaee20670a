"""Index-based kernels: Gather, GatherElements, GatherND, ScatterElements/Scatter,
ScatterND, OneHot, NonZero, TopK, Compress, ReverseSequence, and TensorScatter (the
KV-cache update)."""
from __future__ import annotations

import math

import numpy as np
import torch

from ._util import (const_tensor, int_input, ints, is_str, node_error, norm_axis, np_of, run_error,
                    scalar)
from .registry import register


def _wrap(idx, dim):
    """Negative indices count from the end of a dimension of size `dim` (tensor or int)."""
    idx = idx.long() if idx.dtype != torch.int64 else idx
    return torch.where(idx < 0, idx + dim, idx)


@register("Gather")
def gather(ctx):
    axis = ctx.attr("axis", 0)
    c = ctx.const_input(1)
    if c is not None and c.ndim == 0 and c.item() >= 0:
        k = int(c.item())
        # Fast path: a constant scalar index is a select (a view).
        return lambda xs: [xs[0][(slice(None),) * norm_axis(axis, xs[0].ndim) + (k,)]]
    const_idx = None
    if c is not None and (c >= 0).all():
        const_idx = const_tensor(c.astype(np.int64).reshape(-1), ctx.device)
        idx_shape = tuple(c.shape)

    def fn(xs):
        x, idx = xs
        ax = norm_axis(axis, x.ndim)
        if is_str(x):
            return [np.take(x, np_of(idx), axis=ax)]
        if const_idx is not None:
            flat, shape = const_idx, idx_shape
        else:
            dim = x.shape[ax]
            idx = idx.long() if idx.dtype != torch.int64 else idx
            flat, shape = torch.where(idx < 0, idx + dim, idx).reshape(-1), tuple(idx.shape)
            if flat.device.type != "cpu" and flat.numel() and \
                    not bool(((flat >= 0) & (flat < dim)).all()):
                # (the CPU kernel raises by itself; a device kernel would assert instead)
                raise run_error(ctx, f"Gather index out of range for axis {ax} of size {dim}")
        out = x.index_select(ax, flat)
        return [out.reshape(tuple(x.shape[:ax]) + shape + tuple(x.shape[ax + 1:]))]
    return fn


@register("GatherElements", since=11)
def gather_elements(ctx):
    axis = ctx.attr("axis", 0)

    def fn(xs):
        x, idx = xs
        ax = norm_axis(axis, x.ndim)
        return [torch.gather(x, ax, _wrap(idx, x.shape[ax]))]
    return fn


def _small_ints(cache: dict, values: tuple, device) -> torch.Tensor:
    """A small int64 tensor of `values` on `device`, made once per distinct value: creating
    it from Python data copies from pageable host memory, which a CUDA graph capture forbids
    (the first run, eager, fills the cache)."""
    key = (values, str(device))
    t = cache.get(key)
    if t is None:
        t = cache[key] = torch.tensor(values, dtype=torch.int64, device=device)
    return t


@register("GatherND", since=11)
def gather_nd(ctx):
    b = ctx.attr("batch_dims", 0)
    cache: dict = {}

    def fn(xs):
        x, idx = xs
        k = idx.shape[-1]
        bshape, ishape = tuple(x.shape[:b]), tuple(idx.shape[b:-1])
        nb = math.prod(bshape)
        data = x.reshape((nb,) + tuple(x.shape[b:]))
        dims = _small_ints(cache, tuple(x.shape[b:b + k]), x.device)
        ix = _wrap(idx.reshape(nb, math.prod(ishape), k), dims)  # (no -1: nb may be 0)
        # Index (batch, i0, ..., ik-1) at once with advanced indexing.
        bidx = torch.arange(nb, device=x.device).reshape(nb, 1).expand(nb, ix.shape[1])
        out = data[(bidx,) + tuple(ix[..., j] for j in range(k))]
        return [out.reshape(bshape + ishape + tuple(x.shape[b + k:]))]
    return fn


_REDUCE = {"add": "sum", "mul": "prod", "max": "amax", "min": "amin"}


def _reduction(ctx):
    r = ctx.attr("reduction", "none")
    if r != "none" and r not in _REDUCE:
        raise node_error(ctx, f"reduction={r!r} is not one of none, add, mul, max, min")
    return r


def _scatter_elements_factory(ctx):
    axis = ctx.attr("axis", 0)
    red = _reduction(ctx)

    def fn(xs):
        x, idx, upd = xs
        ax = norm_axis(axis, x.ndim)
        ix = _wrap(idx, x.shape[ax])
        if red == "none":
            return [x.scatter(ax, ix, upd)]
        return [x.scatter_reduce(ax, ix, upd, _REDUCE[red], include_self=True)]
    return fn


register("ScatterElements", since=11)(_scatter_elements_factory)
register("Scatter", since=9, until=10)(_scatter_elements_factory)


@register("ScatterND", since=11)
def scatter_nd(ctx):
    red = _reduction(ctx)
    cache: dict = {}

    def fn(xs):
        x, idx, upd = xs
        k = idx.shape[-1]
        lead, rest = tuple(x.shape[:k]), tuple(x.shape[k:])
        # Linearise the first k dimensions, then scatter rows of the flattened view.
        dims = _small_ints(cache, lead, x.device)
        ix = _wrap(idx.reshape(-1, k), dims)
        strides = _small_ints(cache, tuple(math.prod(lead[j + 1:]) for j in range(k)), x.device)
        lin = (ix * strides).sum(-1)
        flat = x.reshape((math.prod(lead),) + rest).clone()
        u = upd.reshape((lin.shape[0],) + rest)
        if red == "none":
            flat.index_copy_(0, lin, u)
        elif red == "add":
            flat.index_add_(0, lin, u)
        else:
            flat.index_reduce_(0, lin, u, {"mul": "prod", "max": "amax", "min": "amin"}[red])
        return [flat.reshape(x.shape)]
    return fn


@register("OneHot", since=9)
def one_hot(ctx):
    axis = ctx.attr("axis", -1)

    def fn(xs):
        idx, depth, values = xs
        d = int(scalar(depth))
        ax = norm_axis(axis, idx.ndim + 1)
        ix = idx.long() if idx.is_floating_point() or idx.dtype != torch.int64 else idx
        ix = torch.where(ix < 0, ix + d, ix)
        shape = [1] * (idx.ndim + 1)
        shape[ax] = d
        hot = ix.unsqueeze(ax) == torch.arange(d, device=idx.device).reshape(shape)
        return [torch.where(hot, values[1], values[0])]
    return fn


@register("NonZero", since=9)
def nonzero(ctx):
    return lambda xs: [torch.nonzero(xs[0]).T]


@register("TopK")
def top_k(ctx):
    axis = ctx.attr("axis", -1)
    largest = bool(ctx.attr("largest", 1))
    k, dyn = int_input(ctx, 1, "k", 9)

    def fn(xs):
        x = xs[0]
        kk = ints(xs[1])[0] if dyn else k[0]
        ax = norm_axis(axis, x.ndim)
        if kk == 1:
            fn_ = torch.max if largest else torch.min  # first index among ties, as ONNX
            v, i = fn_(x, ax, keepdim=True)
            return [v, i]
        # A stable sort keeps the lower index first among equal values (ONNX's rule;
        # torch.topk does not promise it).
        v, i = torch.sort(x, dim=ax, descending=largest, stable=True)
        return [v.narrow(ax, 0, kk), i.narrow(ax, 0, kk)]
    return fn


@register("Compress", since=9)
def compress(ctx):
    axis = ctx.attr("axis")

    def fn(xs):
        x, cond = xs
        sel = torch.nonzero(cond.reshape(-1)).reshape(-1)
        if axis is None:
            flat = x.reshape(-1)
            return [flat.index_select(0, sel[sel < flat.shape[0]])]
        ax = norm_axis(axis, x.ndim)
        return [x.index_select(ax, sel[sel < x.shape[ax]])]
    return fn


@register("ReverseSequence", since=10)
def reverse_sequence(ctx):
    batch_axis, time_axis = ctx.attr("batch_axis", 1), ctx.attr("time_axis", 0)

    def fn(xs):
        x, lens = xs
        t_len, b_len = x.shape[time_axis], x.shape[batch_axis]
        t = torch.arange(t_len, device=x.device).reshape(t_len, 1)
        n = lens.reshape(1, b_len).long()
        # Position t of batch b reads len_b - 1 - t inside the sequence, t after it.
        src = torch.where(t < n, n - 1 - t, t)  # (time, batch)
        if time_axis > batch_axis:
            src = src.T
        shape = [1] * x.ndim
        shape[time_axis], shape[batch_axis] = t_len, b_len
        return [torch.gather(x, time_axis, src.reshape(shape).expand(x.shape))]
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
