"""Detection / vision kernels: RoiAlign, MaxRoiPool, GridSample, AffineGrid, Col2Im,
CenterCropPad, MaxUnpool. All are torch ops on the input's device. (NonMaxSuppression,
which runs on the host, is in nn_nms.py.)
"""
from __future__ import annotations

import itertools
import math
import warnings

import numpy as np
import torch
import torch.nn.functional as F

from ._util import ints, node_error, norm_axis, run_error
from .registry import register


# ---------------------------------------------------------------------------------------
# RoiAlign


def _roi_coords(start, bin_size, grid, n_out, g_max, size):
    """Sample positions along one axis, as the reference computes them: for roi r, output
    cell p and sample i < grid[r], c = start + p * bin + (i + 0.5) * bin / grid.
    Returns (c clamped to [0, size - 1], inside, valid), each (rois, n_out, g_max): inside is
    False for samples the reference zeroes (c < -1 or c > size), valid False for samples
    past the roi's own grid."""
    dev, dt = start.device, start.dtype
    p = torch.arange(n_out, device=dev, dtype=dt).view(1, -1, 1)
    i = torch.arange(g_max, device=dev, dtype=dt).view(1, 1, -1)
    s, b, g = start.view(-1, 1, 1), bin_size.view(-1, 1, 1), grid.view(-1, 1, 1)
    c = s + p * b + (i + 0.5) * b / g.to(dt)
    inside = (c >= -1.0) & (c <= size)
    valid = (torch.arange(g_max, device=dev).view(1, 1, -1) < g).expand(c.shape)
    return c.clamp(0, size - 1), inside, valid


def _roi_axis(c, inside, size):
    """Clamped positions -> (low, high, w_low, w_high), zero weights outside."""
    low = c.floor().long().clamp_max(size - 1)
    high = (low + 1).clamp_max(size - 1)
    w_high = c - low.to(c.dtype)
    w_low = 1.0 - w_high
    z = torch.zeros_like(w_low)
    return low, high, torch.where(inside, w_low, z), torch.where(inside, w_high, z)


# torch warns once per process that sparse CSR support is "in beta"; _roi_avg relies only
# on its product with a dense matrix, which the tests check.
warnings.filterwarnings("ignore", message="Sparse CSR tensor support is in beta")
_CSR_DEVICES = ("cpu",)     # elsewhere COO (tests switch the CPU to it too)


def _roi_avg(x, bidx, cy, iny, vy, cx, inx, vx, count, oh, ow):
    """The average of each bin's bilinear samples as one sparse matrix product: row (roi,
    p, q) of the matrix holds, for every sample of that bin, its four corner pixels with
    the bilinear weights over the roi's sample count (0 for samples past the roi's own
    grid and for those the reference drops), and it multiplies the input laid out as
    (pixel, channel) rows. Rois are taken in chunks of at most about 4M entries; samples
    are gathered once each, where grid_sample over NCHW planes went channel by channel."""
    B, C, H, W = x.shape
    n, gh, gw = cy.shape[0], cy.shape[2], cx.shape[2]
    dt = x.dtype
    yl, yh, wyl, wyh = _roi_axis(cy, iny, H)                          # (n, oh, gh)
    xl, xh, wxl, wxh = _roi_axis(cx, inx, W)                          # (n, ow, gw)
    wy = torch.stack([wyl, wyh], -1) * vy.to(dt).unsqueeze(-1)        # (n, oh, gh, 2)
    wx = torch.stack([wxl, wxh], -1) * (vx.to(dt) / count.view(n, 1, 1)).unsqueeze(-1)
    ry = torch.stack([yl, yh], -1) * W + (bidx.view(n, 1, 1, 1) * (H * W))
    rx = torch.stack([xl, xh], -1)
    flat = x.permute(0, 2, 3, 1).reshape(B * H * W, C)
    out = torch.empty((n, oh, ow, C), device=x.device, dtype=dt)
    per_roi = oh * ow * gh * gw * 4
    chunk = max(1, (1 << 22) // per_roi)
    for lo in range(0, n, chunk):
        hi = min(lo + chunk, n)
        k = hi - lo
        cols = (ry[lo:hi].view(k, oh, 1, gh, 2, 1, 1)
                + rx[lo:hi].view(k, 1, ow, 1, 1, gw, 2)).reshape(k * oh * ow, -1)
        vals = (wy[lo:hi].view(k, oh, 1, gh, 2, 1, 1)
                * wx[lo:hi].view(k, 1, ow, 1, 1, gw, 2)).reshape(k * oh * ow, -1)
        shape = (k * oh * ow, B * H * W)
        if x.device.type in _CSR_DEVICES:
            # CSR with every row the same length (rows may repeat a column: the CPU
            # product adds them, as the tests against the reference check); no sort.
            crow = torch.arange(0, cols.numel() + 1, cols.shape[1], device=x.device)
            m = torch.sparse_csr_tensor(crow, cols.reshape(-1), vals.reshape(-1), shape,
                                        check_invariants=False)
        else:   # COO, coalesced by the product: no reliance on repeated columns adding up
            rows = torch.arange(shape[0], device=x.device).view(-1, 1).expand_as(cols)
            m = torch.sparse_coo_tensor(torch.stack([rows.reshape(-1), cols.reshape(-1)]),
                                        vals.reshape(-1), shape, check_invariants=False)
        out[lo:hi] = torch.sparse.mm(m, flat).view(k, oh, ow, C)
    return out.permute(0, 3, 1, 2)


@register("RoiAlign", since=10)
def roi_align(ctx):
    mode = ctx.attr("mode", "avg")
    mode = mode.decode() if isinstance(mode, bytes) else mode
    if mode not in ("avg", "max"):
        raise node_error(ctx, f"attribute 'mode' must be 'avg' or 'max', got {mode!r}")
    ctm = ctx.attr("coordinate_transformation_mode",
                   "half_pixel" if ctx.opset >= 16 else "output_half_pixel")
    ctm = ctm.decode() if isinstance(ctm, bytes) else ctm
    if ctm not in ("half_pixel", "output_half_pixel"):
        raise node_error(ctx, "attribute 'coordinate_transformation_mode' must be "
                              f"'half_pixel' or 'output_half_pixel', got {ctm!r}")
    half_pixel = ctm == "half_pixel"
    oh, ow = int(ctx.attr("output_height", 1)), int(ctx.attr("output_width", 1))
    ratio = int(ctx.attr("sampling_ratio", 0))
    scale = float(ctx.attr("spatial_scale", 1.0))
    if oh < 1 or ow < 1 or ratio < 0:
        raise node_error(ctx, f"output_height {oh} / output_width {ow} must be >= 1 and "
                              f"sampling_ratio {ratio} >= 0")
    offset = 0.5 if half_pixel else 0.0

    def fn(xs):
        x, rois, bidx = xs[0], xs[1], xs[2]
        if x.ndim != 4 or rois.ndim != 2 or rois.shape[1] != 4:
            raise run_error(ctx, f"X {tuple(x.shape)} must be 4-D and rois "
                                 f"{tuple(rois.shape)} [num_rois, 4]")
        dt = torch.float64 if x.dtype == torch.float64 else torch.float32
        B, C, H, W = x.shape
        n = rois.shape[0]
        r = rois.to(dt)
        sw, sh = r[:, 0] * scale - offset, r[:, 1] * scale - offset
        rw, rh = r[:, 2] * scale - offset - sw, r[:, 3] * scale - offset - sh
        if not half_pixel:
            rw, rh = rw.clamp_min(1.0), rh.clamp_min(1.0)
        bh, bw = rh / oh, rw / ow
        if ratio > 0:
            gh = gw = torch.full((n,), ratio, device=x.device, dtype=torch.int64)
            gh_max = gw_max = ratio
        else:
            gh, gw = torch.ceil(rh / oh).long(), torch.ceil(rw / ow).long()
            gh_max = max(int(gh.max()), 0) if n else 0
            gw_max = max(int(gw.max()), 0) if n else 0
        y = torch.zeros((n, C, oh, ow), device=x.device, dtype=dt)
        if n == 0 or gh_max == 0 or gw_max == 0:
            return [y.to(x.dtype)]
        count = (gh.clamp_min(0) * gw.clamp_min(0)).clamp_min(1).to(dt)
        cy, iny, vy = _roi_coords(sh, bh, gh, oh, gh_max, H)          # (n, oh, gh_max)
        cx, inx, vx = _roi_coords(sw, bw, gw, ow, gw_max, W)          # (n, ow, gw_max)
        if x.numel() == 0:
            return [y.to(x.dtype)]
        if mode == "avg":
            return [_roi_avg(x.to(dt), bidx.long(), cy, iny, vy, cx, inx, vx, count, oh,
                             ow).to(x.dtype).contiguous()]
        # max: the reference takes the max of the four *weighted* corners of each sample,
        # then the max over the samples (invalid samples: not counted; outside: 0).
        yl, yh, wyl, wyh = _roi_axis(cy, iny, H)
        xl, xh, wxl, wxh = _roi_axis(cx, inx, W)
        flat = x.to(dt).permute(0, 2, 3, 1).reshape(B * H * W, C)
        base = (bidx.long() * (H * W)).view(n, 1, 1, 1)
        xl4, xh4 = xl.unsqueeze(1), xh.unsqueeze(1)                   # (n, 1, ow, gw)
        wxl4, wxh4 = wxl.unsqueeze(1), wxh.unsqueeze(1)
        acc = None
        for iy in range(gh_max):
            rl = (yl[:, :, iy] * W).reshape(n, oh, 1, 1) + base
            rh_ = (yh[:, :, iy] * W).reshape(n, oh, 1, 1) + base
            a, b = wyl[:, :, iy].reshape(n, oh, 1, 1), wyh[:, :, iy].reshape(n, oh, 1, 1)
            terms = ((a * wxl4, rl + xl4), (a * wxh4, rl + xh4),
                     (b * wxl4, rh_ + xl4), (b * wxh4, rh_ + xh4))
            vals = [wt.unsqueeze(-1) * flat[i] for wt, i in terms]    # (n, oh, ow, gw, C)
            ok = (vy[:, :, iy].reshape(n, oh, 1, 1) & vx.unsqueeze(1)).unsqueeze(-1)
            v = torch.maximum(torch.maximum(vals[0], vals[1]),
                              torch.maximum(vals[2], vals[3]))
            v = torch.where(ok, v, torch.full_like(v, -math.inf)).amax(3)
            acc = v if acc is None else torch.maximum(acc, v)
        acc = torch.where(acc == -math.inf, torch.zeros_like(acc), acc)
        return [acc.permute(0, 3, 1, 2).to(x.dtype).contiguous()]
    return fn


# ---------------------------------------------------------------------------------------
# GridSample


def _reflect(v, lo: float, hi: float):
    """The reference's _gs_reflect, elementwise: fold v into [lo, hi] by the near border."""
    rng = hi - lo
    if rng <= 0:
        return torch.full_like(v, lo)
    below, above = v < lo, v > hi
    dx = torch.where(below, lo - v, v - hi)
    n = torch.floor(dx / rng)
    r = dx - n * rng
    even = torch.remainder(n, 2) == 0
    fb = torch.where(even, lo + r, hi - r)
    fa = torch.where(even, hi - r, lo + r)
    return torch.where(below, fb, torch.where(above, fa, v))


def _cubic_coeffs(t):
    """Keys' cubic convolution weights (alpha -0.75) of the taps at -1, 0, 1, 2 from t."""
    a = -0.75
    t1, t2, t3 = t + 1, 1 - t, 2 - t
    return [((a * t1 - 5 * a) * t1 + 8 * a) * t1 - 4 * a,
            ((a + 2) * t - (a + 3)) * t * t + 1,
            ((a + 2) * t2 - (a + 3)) * t2 * t2 + 1,
            ((a * t3 - 5 * a) * t3 + 8 * a) * t3 - 4 * a]


def _grid_taps(v, d: int, mode: str, pad: str, align: bool):
    """One spatial axis of GridSample, as the reference does it: unnormalized coordinates
    v -> list of (index, weight, in_range) taps."""
    lo, hi = (0.0, d - 1.0) if align else (-0.5, d - 0.5)
    if mode == "nearest":
        v = torch.round(v)                              # half to even, as np.rint
    out = (v < lo) | (v > hi)
    if pad == "border":
        v = torch.where(out, v.clamp(0, d - 1), v)
    elif pad == "reflection":
        v = torch.where(out, _reflect(v, lo, hi), v)
    if mode == "nearest":
        base = v.trunc().long()
        offs, ws = [0], [None]
    else:
        f = torch.floor(v)
        t = v - f
        base = f.long()
        if mode == "linear":
            offs, ws = [0, 1], [1 - t, t]
        else:
            offs, ws = [-1, 0, 1, 2], _cubic_coeffs(t)
    taps = []
    for o, w in zip(offs, ws):
        i = base + o
        if pad == "zeros":
            ok = (i >= 0) & (i < d)
            i = i.clamp(0, d - 1)
        else:
            ok = None
            if pad == "border":
                i = i.clamp(0, d - 1)
            else:
                i = _reflect(i.to(v.dtype), lo, hi).trunc().long().clamp(0, d - 1)
        taps.append((i, w, ok))
    return taps


@register("GridSample", since=16)
def grid_sample(ctx):
    mode = ctx.attr("mode", "bilinear" if ctx.opset < 20 else "linear")
    mode = mode.decode() if isinstance(mode, bytes) else mode
    mode = {"bilinear": "linear", "bicubic": "cubic"}.get(mode, mode)
    if mode not in ("linear", "nearest", "cubic"):
        raise node_error(ctx, f"attribute 'mode' {mode!r} is not one of "
                              "linear/bilinear, nearest, cubic/bicubic")
    pad = ctx.attr("padding_mode", "zeros")
    pad = pad.decode() if isinstance(pad, bytes) else pad
    if pad not in ("zeros", "border", "reflection"):
        raise node_error(ctx, f"attribute 'padding_mode' {pad!r} is not one of "
                              "zeros, border, reflection")
    align = bool(ctx.attr("align_corners", 0))

    def fn(xs):
        x, grid = xs[0], xs[1]
        D = x.ndim - 2
        if D < 1 or grid.ndim != x.ndim or grid.shape[-1] != D or grid.shape[0] != x.shape[0]:
            raise run_error(ctx, f"grid {tuple(grid.shape)} must be [N, *out, {D}] for X "
                                 f"{tuple(x.shape)}")
        N, C, dims = x.shape[0], x.shape[1], list(x.shape[2:])
        out_sp = list(grid.shape[1:-1])
        if mode == "linear" and D in (2, 3) and x.is_floating_point():
            return [F.grid_sample(x, grid.to(x.dtype), mode="bilinear", padding_mode=pad,
                                  align_corners=align)]
        dt = torch.float64 if torch.float64 in (x.dtype, grid.dtype) else torch.float32
        if x.numel() == 0 or math.prod(out_sp) == 0:
            return [torch.zeros([N, C] + out_sp, dtype=x.dtype, device=x.device)]
        g = grid.to(dt).reshape(N, -1, D)
        axes = []
        for i, d in enumerate(dims):
            n_ = g[..., D - 1 - i]                      # the grid lists x (last axis) first
            v = (n_ + 1) / 2.0 * (d - 1) if align else ((n_ + 1) * d - 1) / 2.0
            axes.append(_grid_taps(v, d, mode, pad, align))
        strides = [math.prod(dims[i + 1:]) for i in range(D)]
        xf = x.reshape(N, C, -1).to(dt)
        P = g.shape[1]
        acc = None
        for combo in itertools.product(*axes):
            idx, w, ok = None, None, None
            for (i, wi, oki), st in zip(combo, strides):
                idx = i * st if idx is None else idx + i * st
                if wi is not None:
                    w = wi if w is None else w * wi
                if oki is not None:
                    ok = oki if ok is None else ok & oki
            v = torch.gather(xf, 2, idx.unsqueeze(1).expand(N, C, P))
            if ok is not None:
                v = torch.where(ok.unsqueeze(1), v, torch.zeros((), dtype=dt, device=v.device))
            if w is not None:
                v = v * w.unsqueeze(1)
            acc = v if acc is None else acc + v
        return [acc.reshape([N, C] + out_sp).to(x.dtype)]
    return fn


# ---------------------------------------------------------------------------------------
# AffineGrid, CenterCropPad


@register("AffineGrid", since=20)
def affine_grid(ctx):
    align = bool(ctx.attr("align_corners", 0))
    size_c = ctx.const_input(1)
    size_c = ints(size_c) if size_c is not None else None

    def fn(xs):
        theta = xs[0]
        size = size_c if size_c is not None else ints(xs[1])
        nd = len(size) - 2
        if nd not in (2, 3) or tuple(theta.shape) != (size[0], nd, nd + 1):
            raise run_error(ctx, f"theta {tuple(theta.shape)} and size {size}: expected "
                                 "theta [N, 2, 3] with size [N, C, H, W] or theta [N, 3, 4] "
                                 "with size [N, C, D, H, W]")
        t = theta if theta.dtype in (torch.float32, torch.float64) else theta.float()
        return [F.affine_grid(t, size, align_corners=align).to(theta.dtype)]
    return fn


@register("CenterCropPad", since=18)
def center_crop_pad(ctx):
    axes_attr = ctx.attr("axes")
    shape_c = ctx.const_input(1)
    shape_c = ints(shape_c) if shape_c is not None else None

    def fn(xs):
        x = xs[0]
        shape = shape_c if shape_c is not None else ints(xs[1])
        try:
            axes = [norm_axis(a, x.ndim) for a in axes_attr] if axes_attr is not None \
                else list(range(x.ndim))
        except ValueError as e:
            raise run_error(ctx, f"attribute 'axes': {e}") from None
        if len(axes) != len(shape):
            raise run_error(ctx, f"shape {shape} must have one entry per axis {axes}")
        out_shape = list(x.shape)
        src = [slice(None)] * x.ndim
        dst = [slice(None)] * x.ndim
        for a, s in zip(axes, shape):
            d = x.shape[a]
            out_shape[a] = s
            if s < d:
                src[a] = slice((d - s) // 2, (d - s) // 2 + s)
            elif s > d:
                dst[a] = slice((s - d) // 2, (s - d) // 2 + d)
        if out_shape == list(x.shape):
            return [x]
        y = torch.zeros(out_shape, dtype=x.dtype, device=x.device)
        y[tuple(dst)] = x[tuple(src)]
        return [y]
    return fn


# ---------------------------------------------------------------------------------------
# Col2Im, MaxUnpool, MaxRoiPool


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


@register("MaxUnpool", since=9)
def max_unpool(ctx):
    k = list(ctx.attr("kernel_shape") or [])
    if not k:
        raise node_error(ctx, "attribute 'kernel_shape' is required")
    n = len(k)
    st = list(ctx.attr("strides") or [1] * n)
    pads = list(ctx.attr("pads") or [0] * (2 * n))
    if len(st) != n or len(pads) != 2 * n:
        raise node_error(ctx, f"strides {st} / pads {pads} do not match kernel_shape {k}")

    def fn(xs):
        x, ind = xs[0], xs[1]
        out_shape = ints(xs[2]) if len(xs) > 2 and xs[2] is not None else None
        if x.ndim != n + 2:
            raise run_error(ctx, f"X {tuple(x.shape)} must have {n} spatial axes")
        inferred = list(x.shape[:2]) + [(x.shape[2 + d] - 1) * st[d] - (pads[d] + pads[n + d])
                                        + k[d] for d in range(n)]
        # The indices address the tensor MaxPool ran on, flattened: output_shape when
        # given (the spec, onnxruntime and torch's max_unpool; the onnx reference scatters
        # into the inferred shape and pads that instead), else the inferred shape.
        shape = inferred
        if out_shape is not None:
            if len(out_shape) != len(inferred):
                raise run_error(ctx, f"output_shape {out_shape} must have rank {x.ndim}")
            shape = out_shape
        total = math.prod(shape)
        flat = ind.reshape(-1).long()
        if flat.numel() and bool(((flat < 0) | (flat >= total)).any()):
            raise run_error(ctx, f"indices must lie in [0, {total}) for output shape {shape}")
        y = torch.zeros(total, dtype=x.dtype, device=x.device)
        y.index_put_((flat,), x.reshape(-1))
        y = y.reshape(shape)
        return [y]
    return fn


def _round_half_away(v: float) -> int:
    return int(math.floor(v + 0.5)) if v >= 0 else int(math.ceil(v - 0.5))


@register("MaxRoiPool", since=1)
def max_roi_pool(ctx):
    ps = list(ctx.attr("pooled_shape") or [])
    if len(ps) != 2 or min(ps) < 1:
        raise node_error(ctx, f"attribute 'pooled_shape' must be 2 positive ints, got {ps}")
    ph_, pw_ = ps
    scale = float(ctx.attr("spatial_scale", 1.0))

    def bins(start, size, n_out, limit):
        b = size / n_out
        lo = [min(max(math.floor(i * b) + start, 0), limit) for i in range(n_out)]
        hi = [min(max(math.ceil((i + 1) * b) + start, 0), limit) for i in range(n_out)]
        return lo, hi

    def fn(xs):
        x, rois = xs[0], xs[1]
        if x.ndim != 4 or rois.ndim != 2 or rois.shape[1] != 5:
            raise run_error(ctx, f"X {tuple(x.shape)} must be 4-D and rois "
                                 f"{tuple(rois.shape)} [num_rois, 5]")
        _, C, H, W = x.shape
        r = rois.detach().double().cpu().tolist()
        y = torch.zeros((len(r), C, ph_, pw_), dtype=x.dtype, device=x.device)
        neg = torch.tensor(-math.inf, dtype=x.dtype, device=x.device)
        for i, (b, x1, y1, x2, y2) in enumerate(r):
            sw, sh = _round_half_away(x1 * scale), _round_half_away(y1 * scale)
            ew, eh = _round_half_away(x2 * scale), _round_half_away(y2 * scale)
            hl, hh = bins(sh, max(eh - sh + 1, 1), ph_, H)
            wl, wh = bins(sw, max(ew - sw + 1, 1), pw_, W)
            h0, h1, w0, w1 = min(hl), max(hh), min(wl), max(wh)
            if h1 <= h0 or w1 <= w0:
                continue
            crop = x[int(b), :, h0:h1, w0:w1]
            hr = torch.arange(h0, h1, device=x.device)
            wr = torch.arange(w0, w1, device=x.device)
            mh = (hr >= torch.tensor(hl, device=x.device).view(-1, 1)) \
                & (hr < torch.tensor(hh, device=x.device).view(-1, 1))        # (ph, h)
            mw = (wr >= torch.tensor(wl, device=x.device).view(-1, 1)) \
                & (wr < torch.tensor(wh, device=x.device).view(-1, 1))        # (pw, w)
            rows = torch.where(mh.view(1, ph_, -1, 1), crop.unsqueeze(1), neg).amax(2)
            v = torch.where(mw.view(1, 1, pw_, -1), rows.unsqueeze(2), neg).amax(-1)
            empty = (~mh.any(1)).view(-1, 1) | (~mw.any(1)).view(1, -1)
            y[i] = torch.where(empty, torch.zeros((), dtype=x.dtype, device=x.device), v)
        return [y]
    return fn
