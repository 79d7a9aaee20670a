"""Signal processing: HannWindow, HammingWindow, BlackmanWindow, DFT, STFT, MelWeightMatrix.

Complex values are float tensors with a trailing dimension of 2 (real, imaginary), as ONNX
has them; a trailing dimension of 1 is a real signal. The transforms run on torch.fft in
float32 or float64 (float16/bfloat16 inputs are transformed in float32 and rounded back:
torch's CPU FFT has no half-precision kernel) and return the input's type.

The windows and MelWeightMatrix are computed in float64 and cast to output_datatype; with
constant inputs (the usual case) they are built once, at compile time.
"""
from __future__ import annotations

import math

import numpy as np
import torch

from ._util import held, int_input, node_error, norm_axis, onnx_dtype, run_error, scalar
from .registry import register

# ---------------------------------------------------------------------------------------
# Windows


# The reference's order of operations, step for step: integer output types truncate the
# float64 values, and a value like 1 - 1e-16 must truncate as it does there.
def _hann(n, denom):
    return torch.sin(n * math.pi / denom) ** 2


def _hamming(n, denom):
    alpha = 25.0 / 46.0
    return alpha - torch.cos(n * math.pi * 2 / denom) * (1 - alpha)


def _blackman(n, denom):
    y = torch.cos(n * (math.pi * 2) / denom) * -0.5
    y += torch.cos(n * (math.pi * 4) / denom) * 0.08
    return y + 0.42


def _window(formula):
    def factory(ctx):
        code = ctx.attr("output_datatype", 1)
        dtype = onnx_dtype(ctx, code)
        if dtype is None or dtype in (torch.complex64, torch.complex128):
            raise node_error(ctx, f"attribute output_datatype={code} is not a real numeric type")
        periodic = bool(ctx.attr("periodic", 1))
        dev = ctx.device

        def make(size):
            if size < 0:
                raise run_error(ctx, f"size {size} is negative")
            n = torch.arange(size, dtype=torch.float64, device=dev)
            denom = size if periodic else size - 1
            if denom <= 0:  # a symmetric window of one point: 0/0 in the formula; 1 (torch, scipy)
                return torch.ones(size, dtype=dtype, device=dev)
            return formula(n, denom).to(dtype)

        c = ctx.const_input(0)
        if c is not None:
            val = held(make(int(np.asarray(c).reshape(-1)[0])))
            return lambda xs: [val]
        return lambda xs: [make(int(scalar(xs[0])))]
    return factory


register("HannWindow", since=17)(_window(_hann))
register("HammingWindow", since=17)(_window(_hamming))
register("BlackmanWindow", since=17)(_window(_blackman))

# ---------------------------------------------------------------------------------------
# DFT / STFT


def _work_dtype(dt):
    return torch.float64 if dt == torch.float64 else torch.float32


def _as_signal(ctx, x):
    """[..., 1] real or [..., 2] complex -> (a real or complex tensor without that dim, is_complex)."""
    if x.ndim == 0 or x.shape[-1] not in (1, 2):
        raise run_error(ctx, f"the last dimension must be 1 (real) or 2 (complex); input shape is "
                             f"{tuple(x.shape)}")
    x = x.to(_work_dtype(x.dtype))
    if x.shape[-1] == 1:
        return x[..., 0], False
    return torch.view_as_complex(x.contiguous()), True


def _as_onnx(y, dtype):
    """A torch result (real or complex) -> ONNX layout [..., 1] / [..., 2] in `dtype`."""
    y = torch.view_as_real(y.resolve_conj()) if y.is_complex() else y.unsqueeze(-1)
    return y.to(dtype)


@register("DFT", since=17)
def dft(ctx):
    inverse = bool(ctx.attr("inverse", 0))
    onesided = bool(ctx.attr("onesided", 0))
    if ctx.opset >= 20:
        axis_v, axis_dyn = int_input(ctx, 2)
        axis_c = axis_v[0] if axis_v else -2
    else:
        axis_c, axis_dyn = ctx.attr("axis", 1), False
    len_v, len_dyn = int_input(ctx, 1)
    len_c = len_v[0] if len_v else None

    def fn(xs):
        x = xs[0]
        r = x.ndim
        axis = int(scalar(xs[2])) if axis_dyn else axis_c
        if not (-r <= axis <= -2 or 0 <= axis <= r - 2):
            raise run_error(ctx, f"axis {axis} is out of range for an input of rank {r} (the last "
                                 f"dimension holds real/imaginary parts)")
        axis = norm_axis(axis, r)
        n = int(scalar(xs[1])) if len_dyn else len_c
        if n is None:
            n = 2 * (x.shape[axis] - 1) if inverse and onesided else x.shape[axis]
        if n < 1:
            raise run_error(ctx, f"dft_length {n} must be positive")
        sig, is_cplx = _as_signal(ctx, x)
        if inverse:
            if onesided:  # IRFFT: one-sided spectrum -> real signal of n points
                y = torch.fft.irfft(sig, n=n, dim=axis)
            else:
                y = torch.fft.ifft(sig, n=n, dim=axis)
        elif onesided and not is_cplx:
            y = torch.fft.rfft(sig, n=n, dim=axis)
        else:
            y = torch.fft.fft(sig, n=n, dim=axis)
            if onesided:  # (complex input: the spec allows real only; keep the first half)
                y = y.narrow(axis, 0, n // 2 + 1)
        return [_as_onnx(y, x.dtype)]
    return fn


@register("STFT", since=17)
def stft(ctx):
    onesided = bool(ctx.attr("onesided", 1))
    step_v, step_dyn = int_input(ctx, 1)
    flen_v, flen_dyn = int_input(ctx, 3)
    has_window = ctx.has_input(2)

    def fn(xs):
        x = xs[0]
        if x.ndim != 3:
            raise run_error(ctx, f"signal must be [batch, length, 1 or 2]; got shape {tuple(x.shape)}")
        step = int(scalar(xs[1])) if step_dyn else step_v[0]
        window = xs[2] if has_window and len(xs) > 2 else None
        flen = int(scalar(xs[3])) if flen_dyn else (flen_v[0] if flen_v else None)
        if window is not None:
            if window.ndim != 1:
                raise run_error(ctx, f"window must be 1-D; got shape {tuple(window.shape)}")
            if flen is None:
                flen = window.shape[0]
            elif flen != window.shape[0]:
                raise run_error(ctx, f"frame_length {flen} differs from the window's length "
                                     f"{window.shape[0]}")
        if flen is None:
            flen = x.shape[1]
        if step < 1 or flen < 1 or flen > x.shape[1]:
            raise run_error(ctx, f"frame_step {step} / frame_length {flen} do not fit a signal "
                                 f"of length {x.shape[1]}")
        sig, is_cplx = _as_signal(ctx, x)
        frames = sig.unfold(1, flen, step)           # [batch, frames, frame_length]
        if window is not None:
            frames = frames * window.to(_work_dtype(x.dtype))
        if onesided and not is_cplx:
            y = torch.fft.rfft(frames, dim=-1)
        else:
            y = torch.fft.fft(frames, dim=-1)
            if onesided:
                y = y[..., :flen // 2 + 1]
        return [_as_onnx(y, x.dtype)]
    return fn


# ---------------------------------------------------------------------------------------
# MelWeightMatrix


def _mel_matrix(num_mel_bins, dft_length, sample_rate, lower_hz, upper_hz):
    """The triangular filterbank [dft_length // 2 + 1, num_mel_bins] (float64, numpy), as the
    ONNX reference and onnxruntime build it: band edges spaced evenly on the mel scale, rounded
    down to spectrogram bins, each triangle peaking at 1."""
    n_spec = dft_length // 2 + 1
    low_mel = 2595 * np.log10(1 + lower_hz / 700)
    high_mel = 2595 * np.log10(1 + upper_hz / 700)
    edges = np.arange(num_mel_bins + 2)
    step = (high_mel - low_mel) / (num_mel_bins + 2)
    hz = 700 * np.expm1((edges * step + low_mel) / 2595 * np.log(10))
    bins = (((dft_length + 1) * hz) // sample_rate).astype(np.int64)
    out = np.zeros((n_spec, num_mel_bins))
    for i in range(num_mel_bins):
        lo, c, hi = bins[i], bins[i + 1], bins[i + 2]
        if max(lo, c, hi) >= n_spec or min(lo, c, hi) < 0:
            raise ValueError(f"band {i} (bins {lo}..{hi}) falls outside the {n_spec} "
                             f"spectrogram bins: upper_edge_hertz above sample_rate / 2?")
        if c == lo:
            out[c, i] = 1
        else:
            j = np.arange(lo, c + 1)
            out[j, i] = (j - lo) / (c - lo)
        if hi > c:
            j = np.arange(c, hi)
            out[j, i] = (hi - j) / (hi - c)
    return out


@register("MelWeightMatrix", since=17)
def mel_weight_matrix(ctx):
    code = ctx.attr("output_datatype", 1)
    dtype = onnx_dtype(ctx, code)
    if dtype is None or dtype in (torch.complex64, torch.complex128):
        raise node_error(ctx, f"attribute output_datatype={code} is not a real numeric type")
    dev = ctx.device

    def make(vals):
        n_mel, n_dft, rate = (int(v) for v in vals[:3])
        lo, hi = float(vals[3]), float(vals[4])
        if n_mel < 1 or n_dft < 1 or rate < 1 or not 0 <= lo < hi:
            raise run_error(ctx, f"bad arguments num_mel_bins={n_mel}, dft_length={n_dft}, "
                                 f"sample_rate={rate}, lower/upper_edge_hertz={lo}/{hi}")
        try:
            m = _mel_matrix(n_mel, n_dft, rate, lo, hi)
        except ValueError as err:
            raise run_error(ctx, str(err)) from None
        return torch.from_numpy(m).to(device=dev, dtype=dtype)

    consts = [ctx.const_input(i) for i in range(5)]
    if all(c is not None for c in consts):
        val = held(make([np.asarray(c).reshape(-1)[0].item() for c in consts]))
        return lambda xs: [val]
    return lambda xs: [make([scalar(v) for v in xs[:5]])]
