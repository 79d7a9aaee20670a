"""Random generators: RandomNormal, RandomUniform, RandomNormalLike, RandomUniformLike,
Bernoulli, Multinomial.

Seeds, as onnxruntime has them (its kernels own one engine each, seeded once when the
session is built, and draw from it under a lock on every run):

- with a ``seed`` attribute, the node gets its own ``torch.Generator`` seeded from it once,
  when the model is compiled. Every run draws the next values of that generator, so two
  runs of one compiled model give different values, and compiling the model again (a new
  session) repeats the same sequence of values run after run. Each seeded node has its own
  generator: how many other random nodes run, and in which order (streams), does not
  change its values. The values are torch's, not onnxruntime's (no two implementations
  share a generator), so a seed reproduces pyge's results only;
- without a seed, the node draws from torch's global generator of its device: fresh values
  every run, and ``torch.manual_seed`` makes a whole process reproducible.

A float seed is used as the integer it holds (seed=3.0 -> 3); a fractional one by the bits
of the double, so 1.5 and 1.0 differ.

These ops are never constant-folded (passes/fold_constants._NEVER) and their plans are not
captured into CUDA graphs (kernels/host_ops.HOST_OPS): a replayed graph would repeat
the captured draw of a seeded generator.
"""
from __future__ import annotations

import struct
import threading

import torch

from ._util import FLOAT_TYPES, node_error, onnx_dtype, run_error
from .registry import register

_FLOAT_CODES = (1, 10, 11, 16)  # float, float16, double, bfloat16


def _seed_int(seed: float) -> int:
    s = float(seed)
    if s.is_integer():
        return int(s) & 0xFFFFFFFFFFFFFFFF
    return struct.unpack("<Q", struct.pack("<d", s))[0]


class _Gen:
    """The generator a node draws from: None (torch's global one) without a seed, else one
    torch.Generator per device, seeded from the attribute when first used."""

    def __init__(self, ctx):
        seed = ctx.attr("seed")
        self.seed = None if seed is None else _seed_int(seed)
        self._gens: dict = {}
        self._lock = threading.Lock()
        if self.seed is not None:  # made now, at compile time (the first draw will use it)
            self.get(torch.device(ctx.device))

    def get(self, device) -> torch.Generator | None:
        if self.seed is None:
            return None
        g = self._gens.get(device)
        if g is None:
            with self._lock:
                g = self._gens.get(device)
                if g is None:
                    g = torch.Generator(device=device)
                    g.manual_seed(self.seed)
                    self._gens[device] = g
        return g


def _float_dtype(ctx, code, what="dtype"):
    if code not in _FLOAT_CODES:
        raise node_error(ctx, f"attribute {what}={code} is not a float type "
                              f"(float, float16, double, bfloat16)")
    return onnx_dtype(ctx, code)


def _like_dtype(ctx):
    """The output dtype of a *Like op: the dtype attribute, else the input's (must be float)."""
    code = ctx.attr("dtype")
    if code is not None:
        return _float_dtype(ctx, code)
    in_dt = ctx.input_dtype(0)
    if in_dt is not None and in_dt not in ("float32", "float16", "float64", "bfloat16"):
        raise node_error(ctx, f"input is {in_dt} and no dtype attribute is given: the output "
                              f"must be a float type")
    return None  # the input's, at run time


def _shape_attr(ctx):
    shape = ctx.attr("shape")
    if shape is None:
        raise node_error(ctx, "attribute 'shape' is required")
    shape = [int(d) for d in shape]
    if any(d < 0 for d in shape):
        raise node_error(ctx, f"attribute shape={shape} has a negative dimension")
    return shape


def _normal(shape, mean, scale, dtype, device, g):
    out = torch.randn(shape, dtype=dtype, device=device, generator=g)
    if scale != 1.0:
        out.mul_(scale)
    if mean != 0.0:
        out.add_(mean)
    return out


def _uniform(shape, low, high, dtype, device, g):
    out = torch.rand(shape, dtype=dtype, device=device, generator=g)
    if (low, high) != (0.0, 1.0):
        out.mul_(high - low).add_(low)
    return out


def _check_out_dtype(ctx, x, dtype):
    dt = dtype or x.dtype
    if dt not in FLOAT_TYPES:
        raise run_error(ctx, f"input is {x.dtype} and no dtype attribute is given: the output "
                             f"must be a float type")
    return dt


@register("RandomNormal")
def random_normal(ctx):
    dtype = _float_dtype(ctx, ctx.attr("dtype", 1))
    shape = _shape_attr(ctx)
    mean, scale = float(ctx.attr("mean", 0.0)), float(ctx.attr("scale", 1.0))
    gen, dev = _Gen(ctx), torch.device(ctx.device)
    return lambda xs: [_normal(shape, mean, scale, dtype, dev, gen.get(dev))]


@register("RandomUniform")
def random_uniform(ctx):
    dtype = _float_dtype(ctx, ctx.attr("dtype", 1))
    shape = _shape_attr(ctx)
    low, high = float(ctx.attr("low", 0.0)), float(ctx.attr("high", 1.0))
    gen, dev = _Gen(ctx), torch.device(ctx.device)
    return lambda xs: [_uniform(shape, low, high, dtype, dev, gen.get(dev))]


@register("RandomNormalLike")
def random_normal_like(ctx):
    dtype = _like_dtype(ctx)
    mean, scale = float(ctx.attr("mean", 0.0)), float(ctx.attr("scale", 1.0))
    gen = _Gen(ctx)

    def fn(xs):
        x = xs[0]
        dt = _check_out_dtype(ctx, x, dtype)
        return [_normal(x.shape, mean, scale, dt, x.device, gen.get(x.device))]
    return fn


@register("RandomUniformLike")
def random_uniform_like(ctx):
    dtype = _like_dtype(ctx)
    low, high = float(ctx.attr("low", 0.0)), float(ctx.attr("high", 1.0))
    gen = _Gen(ctx)

    def fn(xs):
        x = xs[0]
        dt = _check_out_dtype(ctx, x, dtype)
        return [_uniform(x.shape, low, high, dt, x.device, gen.get(x.device))]
    return fn


@register("Bernoulli", since=15)
def bernoulli(ctx):
    code = ctx.attr("dtype")
    dtype = onnx_dtype(ctx, code) if code is not None else None
    if code is not None and dtype is None:
        raise node_error(ctx, f"attribute dtype={code} (string) is not supported")
    gen = _Gen(ctx)

    def fn(xs):
        p = xs[0]
        # (torch's CPU kernel checks the range itself; its CUDA kernel would assert.)
        if p.is_cuda and p.numel() and not bool(((p >= 0) & (p <= 1)).all()):
            raise run_error(ctx, "input probabilities must lie in [0, 1]")
        try:
            # Drawn in the input's float type (torch.bernoulli has no integer/bool output).
            y = torch.bernoulli(p, generator=gen.get(p.device))
        except RuntimeError as err:
            raise run_error(ctx, f"input probabilities must lie in [0, 1] ({err})") from None
        return [y if dtype is None or dtype == y.dtype else y.to(dtype)]
    return fn


@register("Multinomial", since=7)
def multinomial(ctx):
    code = ctx.attr("dtype", 6)
    if code not in (6, 7):
        raise node_error(ctx, f"attribute dtype={code} is not supported: int32 (6) or int64 (7)")
    dtype = onnx_dtype(ctx, code)
    n = int(ctx.attr("sample_size", 1))
    if n < 1:
        raise node_error(ctx, f"attribute sample_size={n} must be positive")
    gen = _Gen(ctx)

    def fn(xs):
        x = xs[0]
        if x.ndim != 2:
            raise run_error(ctx, f"input must be 2-D (batch_size, class_size), got shape "
                                 f"{tuple(x.shape)}")
        if x.shape[0] == 0:
            return [torch.zeros((0, n), dtype=dtype, device=x.device)]
        # The input holds unnormalised log-probabilities: sample from softmax(x), with
        # replacement (each of the n samples is an independent draw).
        probs = torch.softmax(x.to(torch.float64 if x.dtype == torch.float64 else torch.float32), 1)
        try:
            idx = torch.multinomial(probs, n, replacement=True, generator=gen.get(x.device))
        except RuntimeError as err:
            raise run_error(ctx, f"cannot sample from these log-probabilities: {err}") from None
        return [idx.to(dtype)]
    return fn
