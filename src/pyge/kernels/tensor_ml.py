"""Classic machine-learning kernels of the ``ai.onnx.ml`` domain (what sklearn-onnx emits):
the element-wise preprocessing (Scaler, Normalizer, Binarizer, Imputer,
ArrayFeatureExtractor), and the helpers the other ml modules share (post transforms,
labels). The encoders are in tensor_ml_encoders.py, linear models and SVMs in
tensor_ml_linear.py, tree ensembles in tensor_ml_trees.py.

Numeric work runs on torch on the input's device; string keys and labels are looked up on
the host (string tensors are numpy object arrays, see registry.py).

Not registered: ZipMap, DictVectorizer, CastMap, FeatureVectorizer's map inputs. pyge's IR
carries tensors, sequences of tensors and optionals only (ir/graph.py value kinds), not maps
or sequences of maps, so a model using them is refused at compile time as unsupported.
"""
from __future__ import annotations

import math

import numpy as np
import torch

from ._util import node_error, np_of, run_error
from .registry import register

ML = "ai.onnx.ml"
_POST = ("NONE", "SOFTMAX", "LOGISTIC", "SOFTMAX_ZERO", "PROBIT")


def _s(v):
    return v.decode() if isinstance(v, bytes) else v


def _post_transform(ctx, allowed=_POST) -> str:
    pt = _s(ctx.attr("post_transform", "NONE")) or "NONE"
    if pt not in allowed:
        raise node_error(ctx, f"attribute post_transform={pt!r} is not one of "
                              f"{', '.join(allowed)}")
    return pt


def _softmax_zero(s: torch.Tensor) -> torch.Tensor:
    """Softmax over the last axis where exact zeros stay (near) zero: exp(v - max) for
    |v| > 1e-7, v * exp(-max) otherwise; a row summing to 0 becomes 0.5 (onnxruntime)."""
    m = s.max(dim=-1, keepdim=True).values
    e = torch.where(s.abs() > 1e-7, torch.exp(s - m), s * torch.exp(-m))
    tot = e.sum(dim=-1, keepdim=True)
    return torch.where(tot == 0, torch.full_like(e, 0.5), e / torch.where(tot == 0, 1, tot))


def _apply_post(s: torch.Tensor, pt: str) -> torch.Tensor:
    if pt == "NONE":
        return s
    if pt == "LOGISTIC":
        return torch.sigmoid(s)
    if pt == "SOFTMAX":
        return torch.softmax(s, dim=-1)
    if pt == "SOFTMAX_ZERO":
        return _softmax_zero(s)
    return math.sqrt(2.0) * torch.erfinv(2 * s - 1)   # PROBIT: the normal quantile


def _as_2d(x: torch.Tensor) -> torch.Tensor:
    if x.dim() == 0:
        return x.reshape(1, 1)
    if x.dim() == 1:
        return x.reshape(1, -1)
    return x.reshape(x.shape[0], -1)


def _ftype(x: torch.Tensor):
    return torch.float64 if x.dtype == torch.float64 else torch.float32


class _Consts:
    """A node's constant numpy arrays as tensors on the input's device, in its float type,
    converted once per (device, type): `_Consts(w=..., b=...).on(x, ft)["w"]`."""
    __slots__ = ("arrays", "made")

    def __init__(self, **arrays):
        self.arrays = arrays
        self.made: dict = {}

    def on(self, x: torch.Tensor, ft) -> dict:
        key = (x.device, ft)
        c = self.made.get(key)
        if c is None:
            c = self.made[key] = {n: torch.from_numpy(np.ascontiguousarray(v)).to(x.device, ft)
                                  for n, v in self.arrays.items()}
        return c


def _labels(ctx, ints_attr: str, strs_attr: str):
    """(labels as int64 tensor or object array, is_string)."""
    li, ls = ctx.attr(ints_attr), ctx.attr(strs_attr)
    if ls is not None and len(ls):
        return np.array([_s(v) for v in ls], dtype=object), True
    return torch.tensor([int(v) for v in (li or [])], dtype=torch.int64), False


def _pick_labels(labels, is_str: bool, idx: torch.Tensor):
    if is_str:
        return labels[np_of(idx)]
    return labels.to(idx.device)[idx]


# ---------------------------------------------------------------------------------------
# Element-wise preprocessing


@register("Scaler", since=1, domain=ML)
def scaler(ctx):
    off = np.asarray(ctx.attr("offset", []) or [0.0], np.float32)
    sc = np.asarray(ctx.attr("scale", []) or [1.0], np.float32)
    o, s = torch.from_numpy(off), torch.from_numpy(sc)
    cache: dict = {}

    def fn(xs):
        x = xs[0]
        if x.device not in cache:
            cache[x.device] = (o.to(x.device), s.to(x.device))
        oo, ss = cache[x.device]
        n = x.shape[-1] if x.dim() else 1
        for name, v in (("offset", oo), ("scale", ss)):
            if v.numel() not in (1, n):
                raise run_error(ctx, f"attribute {name} has {v.numel()} values, the input "
                                     f"{n} features")
        return [(x.to(torch.float32) - oo) * ss]
    return fn


@register("Normalizer", since=1, domain=ML)
def normalizer(ctx):
    norm = _s(ctx.attr("norm", "MAX"))
    if norm not in ("MAX", "L1", "L2"):
        raise node_error(ctx, f"attribute norm={norm!r} is not one of MAX, L1, L2")

    def fn(xs):
        x = xs[0]
        x2 = _as_2d(x).to(torch.float32) if x.dim() < 2 else x.to(torch.float32)
        if norm == "MAX":   # the spec and onnxruntime: the row's maximum, not |x|'s
            d = x2.max(dim=-1, keepdim=True).values
        elif norm == "L1":
            d = x2.abs().sum(dim=-1, keepdim=True)
        else:
            d = x2.square().sum(dim=-1, keepdim=True).sqrt()
        y = torch.where(d == 0, x2, x2 / torch.where(d == 0, 1, d))
        return [y.reshape(x.shape) if x.dim() < 2 else y]
    return fn


@register("Binarizer", since=1, domain=ML)
def binarizer(ctx):
    th = float(ctx.attr("threshold", 0.0))

    def fn(xs):
        x = xs[0]
        return [(x > th).to(x.dtype)]
    return fn


@register("Imputer", since=1, domain=ML)
def imputer(ctx):
    vf, vi = ctx.attr("imputed_value_floats"), ctx.attr("imputed_value_int64s")
    if vf is not None and len(vf):
        vals, rep = np.asarray(vf, np.float32), float(ctx.attr("replaced_value_float", 0.0))
    elif vi is not None and len(vi):
        vals, rep = np.asarray(vi, np.int64), int(ctx.attr("replaced_value_int64", 0))
    else:
        raise node_error(ctx, "one of the attributes imputed_value_floats, "
                              "imputed_value_int64s is required")
    v0 = torch.from_numpy(vals)
    nan = isinstance(rep, float) and math.isnan(rep)

    def fn(xs):
        x = xs[0]
        n = x.shape[-1] if x.dim() else 1
        if v0.numel() not in (1, n):
            raise run_error(ctx, f"{v0.numel()} imputed values for {n} features")
        hit = torch.isnan(x) if nan else x == rep
        return [torch.where(hit, v0.to(x.device, x.dtype), x)]
    return fn


@register("ArrayFeatureExtractor", since=1, domain=ML)
def array_feature_extractor(ctx):
    def fn(xs):
        x, ind = xs
        idx = ind.reshape(-1).to(torch.int64) if isinstance(ind, torch.Tensor) else \
            torch.from_numpy(np.asarray(ind, np.int64).reshape(-1))
        n = x.shape[-1]
        if idx.numel() and (int(idx.min()) < 0 or int(idx.max()) >= n):
            raise run_error(ctx, f"indices {idx.tolist()} out of range for the last axis "
                                 f"of size {n}")
        if isinstance(x, np.ndarray):
            y = x[..., np_of(idx)]
        else:
            y = x.index_select(x.dim() - 1, idx.to(x.device))
        if x.ndim == 1:
            y = y.reshape(1, -1)
        return [y]
    return fn
