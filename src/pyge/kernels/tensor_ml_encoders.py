"""Encoders of the ``ai.onnx.ml`` domain: LabelEncoder, OneHotEncoder, CategoryMapper.
Anything with string keys or values is looked up on the host (string tensors are numpy
object arrays); numeric keys to numeric values run on the input's device. Shared helpers:
tensor_ml.py.
"""
from __future__ import annotations

import math

import numpy as np
import torch

from ._util import node_error, np_of, run_error
from .registry import register
from .tensor_ml import ML, _s


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
