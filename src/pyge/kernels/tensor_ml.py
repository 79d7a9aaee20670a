"""Classic machine-learning kernels of the ``ai.onnx.ml`` domain (what sklearn-onnx emits):
the element-wise preprocessing (Scaler, Normalizer, Binarizer, Imputer,
ArrayFeatureExtractor) and the encoders (LabelEncoder, OneHotEncoder, CategoryMapper), plus
the helpers the other ml modules share (post transforms, labels). Linear models and SVMs are
in tensor_ml_linear.py, tree ensembles in tensor_ml_trees.py.

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


# ---------------------------------------------------------------------------------------
# Encoders


def _tensor_attr(v):
    return None if v is None else np.asarray(v).reshape(-1)


def _key_kind(arr: np.ndarray) -> str:
    return "s" if arr.dtype.kind in ("O", "U", "S") else ("f" if arr.dtype.kind == "f" else "i")


def _host_lookup(table: dict, default, x: np.ndarray, out_dtype):
    flat = x.reshape(-1)
    out = np.empty(flat.shape, dtype=out_dtype)
    for i, v in enumerate(flat.tolist()):
        out[i] = table.get(_s(v), default)
    return out.reshape(x.shape)


@register("LabelEncoder", since=1, domain=ML)
def label_encoder(ctx):
    """Opset 1 (classes_strings: string <-> its index), 2 (keys_*/values_* lists), 4 (also
    keys_tensor / values_tensor / default_tensor, any element type). Numeric keys -> numeric
    values run on the device (sorted keys + searchsorted); anything with strings on the host.
    A float NaN key maps NaN inputs (the spec)."""
    if ctx.opset < 2:
        classes = [_s(v) for v in ctx.attr("classes_strings", [])]
        d_int = int(ctx.attr("default_int64", -1))
        d_str = _s(ctx.attr("default_string", "_Unused"))
        to_idx = {c: i for i, c in enumerate(classes)}

        def fn1(xs):
            x = xs[0]
            if isinstance(x, np.ndarray):
                return [torch.from_numpy(_host_lookup(to_idx, d_int, x, np.int64)).to(ctx.device)]
            xi = np_of(x).astype(np.int64)
            out = np.array([classes[v] if 0 <= v < len(classes) else d_str
                            for v in xi.reshape(-1).tolist()], dtype=object)
            return [out.reshape(xi.shape)]
        return fn1

    keys = values = None
    for k in ("keys_tensor", "keys_strings", "keys_int64s", "keys_floats"):
        v = ctx.attr(k)
        if v is not None and (not isinstance(v, list) or len(v)):
            keys = np.asarray(v, dtype=object if k == "keys_strings" else
                              (np.int64 if k == "keys_int64s" else
                               (np.float32 if k == "keys_floats" else None))).reshape(-1)
            break
    vkind = None
    for k in ("values_tensor", "values_strings", "values_int64s", "values_floats"):
        v = ctx.attr(k)
        if v is not None and (not isinstance(v, list) or len(v)):
            vkind = k
            values = np.asarray(v, dtype=object if k == "values_strings" else
                                (np.int64 if k == "values_int64s" else
                                 (np.float32 if k == "values_floats" else None))).reshape(-1)
            break
    if keys is None or values is None:
        raise node_error(ctx, "attributes keys_* and values_* are required")
    if len(keys) != len(values):
        raise node_error(ctx, f"{len(keys)} keys but {len(values)} values")
    if vkind == "values_tensor":
        dt = ctx.attr("default_tensor")
        if dt is not None:
            default = np.asarray(dt).reshape(-1)[0]
        elif values.dtype.kind in ("O", "U", "S"):
            default = "_Unused"
        elif values.dtype.kind == "f":
            default = -0.0
        else:
            default = -1
    elif vkind == "values_strings":
        default = _s(ctx.attr("default_string", "_Unused"))
    elif vkind == "values_int64s":
        default = int(ctx.attr("default_int64", -1))
    else:
        default = float(ctx.attr("default_float", -0.0))
    if values.dtype.kind in ("U", "S"):
        values = values.astype(object)
    if keys.dtype.kind in ("U", "S"):
        keys = keys.astype(object)
    str_out = values.dtype == object
    kk = _key_kind(keys)

    if kk == "s" or str_out:
        if kk == "s":
            table = {_s(k): (_s(v) if str_out else v) for k, v in zip(keys.tolist(), values)}
            nan_val = None
        else:
            table = {}
            nan_val = None
            for k, v in zip(keys.tolist(), values.tolist()):
                if isinstance(k, float) and math.isnan(k):
                    nan_val = v
                else:
                    table[k] = v
        out_np = object if str_out else values.dtype

        def fn_host(xs):
            x = xs[0]
            xa = x if isinstance(x, np.ndarray) else np_of(x)
            out = _host_lookup(table, default, xa, out_np)
            if nan_val is not None and xa.dtype.kind == "f":
                out[np.isnan(xa)] = nan_val
            if str_out:
                return [out]
            return [torch.from_numpy(out).to(x.device if isinstance(x, torch.Tensor)
                                             else ctx.device)]
        return fn_host

    # numeric -> numeric, on the device
    order = np.argsort(keys, kind="stable")
    sk = keys[order]
    nan_mask = np.isnan(sk) if sk.dtype.kind == "f" else np.zeros(len(sk), bool)
    nan_val = values[order][nan_mask][0] if nan_mask.any() else None
    sk, sv = sk[~nan_mask], values[order][~nan_mask]
    t_keys, t_vals = torch.from_numpy(np.ascontiguousarray(sk)), torch.from_numpy(
        np.ascontiguousarray(sv))
    cache: dict = {}

    def fn(xs):
        x = xs[0]
        if x.device not in cache:
            kd = t_keys.to(x.device, x.dtype) if x.dtype.is_floating_point else t_keys.to(
                x.device)
            cache[x.device] = (kd, t_vals.to(x.device))
        k, v = cache[x.device]
        out_shape = x.shape
        xf = x.reshape(-1)
        if k.numel() == 0:
            y = torch.full(out_shape, default, dtype=v.dtype, device=x.device)
        else:
            xc = xf.to(k.dtype)
            pos = torch.searchsorted(k, xc).clamp_(max=k.numel() - 1)
            hit = k[pos] == xc
            y = torch.where(hit, v[pos], torch.tensor(default, dtype=v.dtype, device=x.device))
        if nan_val is not None and x.dtype.is_floating_point:
            y = torch.where(torch.isnan(xf), torch.tensor(nan_val, dtype=v.dtype,
                                                          device=x.device), y)
        return [y.reshape(out_shape)]
    return fn


@register("OneHotEncoder", since=1, domain=ML)
def one_hot_encoder(ctx):
    ci, cs = ctx.attr("cats_int64s"), ctx.attr("cats_strings")
    zeros = int(ctx.attr("zeros", 1))
    if ci is not None and len(ci):
        cats_i = torch.tensor([int(v) for v in ci], dtype=torch.int64)
        cats_s = None
        n = len(ci)
    elif cs is not None and len(cs):
        cats_s = {_s(v): i for i, v in enumerate(cs)}
        cats_i = None
        n = len(cs)
    else:
        raise node_error(ctx, "one of the attributes cats_int64s, cats_strings is required")

    def fn(xs):
        x = xs[0]
        if cats_s is not None:
            if not isinstance(x, np.ndarray):
                raise run_error(ctx, "cats_strings needs a string input")
            idx = torch.from_numpy(_host_lookup(cats_s, -1, x, np.int64))
            dev = ctx.device
        else:
            if isinstance(x, np.ndarray):
                raise run_error(ctx, "cats_int64s needs a numeric input")
            c = cats_i.to(x.device)
            eq = x.unsqueeze(-1) == (c.to(x.dtype) if x.dtype.is_floating_point else c)
            hitf = eq.any(-1)
            idx = torch.where(hitf, eq.to(torch.int8).argmax(-1), -1)
            dev = x.device
        hit = idx >= 0
        if not zeros and not bool(hit.all()):
            raise run_error(ctx, "an input value is not one of the categories (zeros=0)")
        y = torch.nn.functional.one_hot(idx.clamp(min=0), n).to(torch.float32)
        y = y * hit.unsqueeze(-1)
        return [y.to(dev)]
    return fn


# ---------------------------------------------------------------------------------------


@register("CategoryMapper", since=1, domain=ML)
def category_mapper(ctx):
    ci = [int(v) for v in (ctx.attr("cats_int64s") or [])]
    cs = [_s(v) for v in (ctx.attr("cats_strings") or [])]
    if len(ci) != len(cs) or not ci:
        raise node_error(ctx, f"attributes cats_int64s ({len(ci)}) and cats_strings "
                              f"({len(cs)}) must be non-empty and of equal length")
    d_int = int(ctx.attr("default_int64", -1))
    d_str = _s(ctx.attr("default_string", "_Unused"))
    s2i, i2s = dict(zip(cs, ci)), dict(zip(ci, cs))

    def fn(xs):
        x = xs[0]
        if isinstance(x, np.ndarray):
            return [torch.from_numpy(_host_lookup(s2i, d_int, x, np.int64)).to(ctx.device)]
        return [_host_lookup(i2s, d_str, np_of(x), object)]
    return fn
