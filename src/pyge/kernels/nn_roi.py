"""Region-of-interest pooling: RoiAlign (bilinear samples averaged or maxed per bin) and
MaxRoiPool (the max over each bin of integer-rounded boxes). Both are torch ops on the
input's device.
"""
from __future__ import annotations

import math
import warnings

import torch

from ._util import node_error, run_error
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
# MaxRoiPool


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
