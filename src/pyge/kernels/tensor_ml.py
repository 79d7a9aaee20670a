"""Classic machine-learning kernels of the ``ai.onnx.ml`` domain (what sklearn-onnx emits):
linear models, scalers, encoders, tree ensembles, SVMs.

Numeric work runs on torch on the input's device (tree walks are vectorised: all samples
and all trees advance one level per step); string keys and labels are looked up on the host
(string tensors are numpy object arrays, see registry.py).

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
# Linear models


@register("LinearRegressor", since=1, domain=ML)
def linear_regressor(ctx):
    targets = int(ctx.attr("targets", 1))
    coef = np.asarray(ctx.attr("coefficients", []), np.float64)
    if targets < 1 or coef.size % targets:
        raise node_error(ctx, f"attribute coefficients ({coef.size} values) is not a multiple "
                              f"of targets={targets}")
    icpt = np.asarray(ctx.attr("intercepts", []) or [0.0] * targets, np.float64)
    if icpt.size != targets:
        raise node_error(ctx, f"attribute intercepts has {icpt.size} values, targets={targets}")
    pt = _post_transform(ctx, ("NONE", "PROBIT"))
    w64 = torch.from_numpy(coef.reshape(targets, -1).T.copy())
    b64 = torch.from_numpy(icpt)
    cache: dict = {}

    def fn(xs):
        x = _as_2d(xs[0])
        ft = _ftype(x)
        key = (x.device, ft)
        if key not in cache:
            cache[key] = (w64.to(x.device, ft), b64.to(x.device, ft))
        w, b = cache[key]
        if x.shape[1] != w.shape[0]:
            raise run_error(ctx, f"input has {x.shape[1]} features, coefficients "
                                 f"{w.shape[0]} per target")
        y = x.to(ft) @ w + b
        if pt == "PROBIT":
            y = _apply_post(y, pt)
        return [y.to(torch.float32)]
    return fn


@register("LinearClassifier", since=1, domain=ML)
def linear_classifier(ctx):
    labels, is_str = _labels(ctx, "classlabels_ints", "classlabels_strings")
    n_cls = len(labels)
    coef = np.asarray(ctx.attr("coefficients", []), np.float64)
    if n_cls == 0:
        raise node_error(ctx, "one of the attributes classlabels_ints, classlabels_strings "
                              "is required")
    pt = _post_transform(ctx)
    icpt_attr = ctx.attr("intercepts")
    icpt = np.asarray(icpt_attr, np.float64) if icpt_attr is not None and len(icpt_attr) else None
    cache: dict = {}

    def fn(xs):
        x = _as_2d(xs[0])
        ft = _ftype(x)
        key = (x.device, ft, x.shape[1])
        if key not in cache:
            if x.shape[1] == 0 or coef.size % x.shape[1]:
                raise run_error(ctx, f"coefficients ({coef.size} values) is not a multiple of "
                                     f"the input's {x.shape[1]} features")
            w = torch.from_numpy(coef.reshape(-1, x.shape[1]).T.copy()).to(x.device, ft)
            b = None if icpt is None else torch.from_numpy(icpt).to(x.device, ft)
            cache[key] = (w, b)
        w, b = cache[key]
        s = x.to(ft) @ w
        if b is not None:
            s = s + b
        if s.shape[1] == 1 and n_cls <= 2:
            # One set of weights for two classes (onnxruntime): the label is the positive
            # class where the raw score is > 0; the scores get the complementary column.
            raw = s[:, 0]
            idx = (raw > 0).to(torch.int64)
            if n_cls == 2:
                lab = _pick_labels(labels, is_str, idx)
            else:
                lab = idx if not is_str else np.where(np_of(idx) > 0, "1", "0").astype(object)
            if n_cls == 2:
                # [1 - p, p] with p the transformed score (LOGISTIC, PROBIT) or the raw one
                # (a softmax over one score is meaningless): what onnxruntime writes.
                p = _apply_post(raw, pt) if pt in ("LOGISTIC", "PROBIT") else raw
                s = torch.stack([1 - p, p], 1)
            else:
                s = _apply_post(s, pt)
            return [lab, s.to(torch.float32)]
        s = _apply_post(s, pt)
        idx = s.argmax(dim=1)
        if s.shape[1] != n_cls:
            raise run_error(ctx, f"{s.shape[1]} scores per row for {n_cls} class labels")
        return [_pick_labels(labels, is_str, idx), s.to(torch.float32)]
    return fn


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
# Tree ensembles: TreeEnsembleRegressor / TreeEnsembleClassifier (ml opset 1, 3) and
# TreeEnsemble (ml opset 5) compile to one flat forest walked for all samples and all trees
# at once, one tree level per step (the depth is known at compile time).

LEQ, LT, GTE, GT, EQ, NEQ, MEMBER, LEAF = range(8)
_MODE_NAMES = {"BRANCH_LEQ": LEQ, "BRANCH_LT": LT, "BRANCH_GTE": GTE, "BRANCH_GT": GT,
               "BRANCH_EQ": EQ, "BRANCH_NEQ": NEQ, "LEAF": LEAF}
_AGG = ("SUM", "AVERAGE", "MIN", "MAX")
_CMP = {LEQ: torch.le, LT: torch.lt, GTE: torch.ge, GT: torch.gt, EQ: torch.eq, NEQ: torch.ne}


class _Forest:
    """Global node arrays (leaves loop to themselves) + per-node leaf weight tables."""

    def __init__(self, ctx, feat, thr, mode, tc, fc, mvt, roots, contrib, n_targets,
                 members=None, double=False):
        self.ctx = ctx
        g = len(feat)
        self.n_trees, self.k = len(roots), n_targets
        self.double = double
        leaf = mode == LEAF
        idx = np.arange(g)
        tc, fc = np.where(leaf, idx, tc), np.where(leaf, idx, fc)
        if g and (tc.min() < 0 or fc.min() < 0 or tc.max() >= g or fc.max() >= g):
            raise node_error(ctx, "a child node id names no node of its tree")
        # depth: the longest root-to-leaf path (a cycle is an error)
        depth = 0
        level = np.unique(np.asarray(roots, np.int64))
        seen_steps = 0
        while level.size:
            level = level[~leaf[level]]
            if not level.size:
                break
            depth += 1
            seen_steps += 1
            if seen_steps > g:
                raise node_error(ctx, "the trees' child links form a cycle")
            level = np.unique(np.concatenate([tc[level], fc[level]]))
        self.depth = depth
        self.modes_used = sorted(set(mode[~leaf].tolist()))
        w = np.zeros((g, n_targets), np.float64)
        wmin = np.full((g, n_targets), np.inf)
        wmax = np.full((g, n_targets), -np.inf)
        has = np.zeros((g, n_targets), bool)
        for node, t, val in contrib:
            if not 0 <= t < n_targets:
                raise node_error(ctx, f"target/class id {t} is out of range [0, {n_targets})")
            w[node, t] += val
            wmin[node, t] = min(wmin[node, t], val)
            wmax[node, t] = max(wmax[node, t], val)
            has[node, t] = True
        self.np = dict(feat=np.where(leaf, 0, feat).astype(np.int64), thr=thr.astype(np.float64),
                       mode=mode.astype(np.int64), tc=tc.astype(np.int64),
                       fc=fc.astype(np.int64), mvt=mvt.astype(bool),
                       roots=np.asarray(roots, np.int64), w=w, wmin=wmin, wmax=wmax, has=has)
        self.n_features = int(self.np["feat"].max()) + 1 if g else 0
        self.members = None
        if members is not None and any(members):
            width = max(len(m) for m in members)
            mat = np.full((g, max(width, 1)), np.nan)
            for i, m in enumerate(members):
                mat[i, :len(m)] = sorted(m)
            self.np["members"] = mat
            self.members = True
        self._cache: dict = {}

    def _on(self, device, ft):
        key = (device, ft)
        if key not in self._cache:
            t = {}
            for k, v in self.np.items():
                tv = torch.from_numpy(np.ascontiguousarray(v))
                if v.dtype == np.float64:
                    tv = tv.to(ft)
                t[k] = tv.to(device)
            self._cache[key] = t
        return self._cache[key]

    def scores(self, x: torch.Tensor, agg: str) -> torch.Tensor:
        """Aggregated leaf values [N, n_targets] (no base values, no post transform), in the
        comparison dtype (float64 for double inputs or double thresholds, else float32)."""
        x = _as_2d(x)
        ft = torch.float64 if (x.dtype == torch.float64 or self.double) else torch.float32
        if x.shape[1] < self.n_features:
            raise run_error(self.ctx, f"the trees read feature {self.n_features - 1}, the input "
                                      f"has {x.shape[1]} features")
        a = self._on(x.device, ft)
        xf = x.to(ft)
        n = xf.shape[0]
        idx = a["roots"].unsqueeze(0).expand(n, -1).contiguous()
        for _ in range(self.depth):
            v = xf.gather(1, a["feat"][idx])
            th = a["thr"][idx]
            if len(self.modes_used) == 1 and self.modes_used[0] != MEMBER:
                cond = _CMP[self.modes_used[0]](v, th)   # (leaves loop to themselves)
            else:
                m = a["mode"][idx]
                cond = torch.where(m == LEQ, v <= th, torch.where(m == LT, v < th, torch.where(
                    m == GTE, v >= th, torch.where(m == GT, v > th, torch.where(
                        m == EQ, v == th, v != th)))))
            if self.members is not None:
                inset = (v.unsqueeze(-1) == a["members"][idx]).any(-1)
                cond = torch.where(m == MEMBER, inset, cond)
            cond = cond | (a["mvt"][idx] & torch.isnan(v))
            idx = torch.where(cond, a["tc"][idx], a["fc"][idx])
        t = max(self.n_trees, 1)
        if agg in ("SUM", "AVERAGE"):
            if self.k == 1:
                s = a["w"][idx, 0].sum(1, keepdim=True)
            else:
                s = torch.zeros(n, self.k, dtype=ft, device=x.device)
                step = max(1, (1 << 24) // max(n * self.k, 1))
                for j in range(0, idx.shape[1], step):
                    s = s + a["w"][idx[:, j:j + step]].sum(1)
            return s / t if agg == "AVERAGE" else s
        has = a["has"][idx]                                # [N, T, K]
        if agg == "MIN":
            s = torch.where(has, a["wmin"][idx], torch.inf).amin(1)
        else:
            s = torch.where(has, a["wmax"][idx], -torch.inf).amax(1)
        return torch.where(has.any(1), s, torch.zeros((), dtype=ft, device=x.device))


def _attr_floats(ctx, name):
    """A float list attribute or its *_as_tensor (double) twin -> (np.float64 array, double?)."""
    t = ctx.attr(name + "_as_tensor")
    if t is not None:
        return np.asarray(t, np.float64).reshape(-1), np.asarray(t).dtype == np.float64
    v = ctx.attr(name)
    return (np.asarray(v if v is not None else [], np.float32).astype(np.float64), False)


def _forest_v1(ctx, prefix: str, n_targets: int) -> _Forest:
    """TreeEnsembleRegressor / Classifier attributes (ml opset 1, 3) -> _Forest."""
    tids = [int(v) for v in ctx.attr("nodes_treeids", [])]
    nids = [int(v) for v in ctx.attr("nodes_nodeids", [])]
    n = len(tids)
    if n == 0 or len(nids) != n:
        raise node_error(ctx, "attributes nodes_treeids and nodes_nodeids are required, of "
                              "equal length")
    modes = [_s(m) for m in ctx.attr("nodes_modes", [])]
    bad = sorted({m for m in modes if m not in _MODE_NAMES})
    if bad:
        raise node_error(ctx, f"attribute nodes_modes has unsupported value(s) {bad}")
    feat = [int(v) for v in ctx.attr("nodes_featureids", [])]
    thr, double = _attr_floats(ctx, "nodes_values")
    tn = [int(v) for v in ctx.attr("nodes_truenodeids", [])]
    fn_ = [int(v) for v in ctx.attr("nodes_falsenodeids", [])]
    mvt = [int(v) for v in ctx.attr("nodes_missing_value_tracks_true", []) or [0] * n]
    for name, lst in (("nodes_modes", modes), ("nodes_featureids", feat),
                      ("nodes_values", thr), ("nodes_truenodeids", tn),
                      ("nodes_falsenodeids", fn_), ("nodes_missing_value_tracks_true", mvt)):
        if len(lst) != n:
            raise node_error(ctx, f"attribute {name} has {len(lst)} values, nodes_nodeids {n}")
    gid = {(t, i): k for k, (t, i) in enumerate(zip(tids, nids))}
    if len(gid) != n:
        raise node_error(ctx, "nodes_treeids/nodes_nodeids repeat a (tree, node) pair")
    mode = np.array([_MODE_NAMES[m] for m in modes], np.int64)
    leaf = mode == LEAF
    tc = np.array([k if leaf[k] else gid.get((tids[k], tn[k]), -1) for k in range(n)])
    fc = np.array([k if leaf[k] else gid.get((tids[k], fn_[k]), -1) for k in range(n)])
    children = set(tc[~leaf].tolist()) | set(fc[~leaf].tolist())
    roots, seen = [], set()
    for k in range(n):   # per tree (first appearance order), its node nobody points to
        if tids[k] not in seen and k not in children:
            seen.add(tids[k])
            roots.append(k)
    ctid = [int(v) for v in ctx.attr(f"{prefix}_treeids", [])]
    cnid = [int(v) for v in ctx.attr(f"{prefix}_nodeids", [])]
    cid = [int(v) for v in ctx.attr(f"{prefix}_ids", [])]
    cw, dw = _attr_floats(ctx, f"{prefix}_weights")
    if not len(ctid) == len(cnid) == len(cid) == len(cw):
        raise node_error(ctx, f"attributes {prefix}_treeids/nodeids/ids/weights differ in "
                              "length")
    contrib = []
    for t, i, c, w in zip(ctid, cnid, cid, cw.tolist()):
        if (t, i) not in gid:
            raise node_error(ctx, f"{prefix} weight for (tree {t}, node {i}), not a node")
        contrib.append((gid[(t, i)], c, w))
    return _Forest(ctx, np.array(feat), thr, mode, tc, fc, np.array(mvt), roots, contrib,
                   n_targets, double=double or dw)


@register("TreeEnsembleRegressor", since=1, domain=ML)
def tree_ensemble_regressor(ctx):
    n_targets = int(ctx.attr("n_targets", 1))
    agg = _s(ctx.attr("aggregate_function", "SUM"))
    if agg not in _AGG:
        raise node_error(ctx, f"attribute aggregate_function={agg!r} is not one of "
                              f"{', '.join(_AGG)}")
    pt = _post_transform(ctx)
    forest = _forest_v1(ctx, "target", n_targets)
    base, _ = _attr_floats(ctx, "base_values")
    if base.size not in (0, n_targets):
        raise node_error(ctx, f"attribute base_values has {base.size} values, n_targets="
                              f"{n_targets}")
    base_t = torch.from_numpy(base) if base.size else None

    def fn(xs):
        s = forest.scores(xs[0], agg)
        if base_t is not None:
            s = s + base_t.to(s.device, s.dtype)
        return [_apply_post(s, pt).to(torch.float32)]
    return fn


@register("TreeEnsembleClassifier", since=1, domain=ML)
def tree_ensemble_classifier(ctx):
    labels, is_str = _labels(ctx, "classlabels_int64s", "classlabels_strings")
    k = len(labels)
    if k == 0:
        raise node_error(ctx, "one of the attributes classlabels_int64s, classlabels_strings "
                              "is required")
    pt = _post_transform(ctx)
    cids = {int(v) for v in ctx.attr("class_ids", [])}
    cw, _ = _attr_floats(ctx, "class_weights")
    forest = _forest_v1(ctx, "class", k)
    base, _ = _attr_floats(ctx, "base_values")
    if base.size not in (0, 1, k):
        raise node_error(ctx, f"attribute base_values has {base.size} values for {k} classes")
    binary = k <= 2 and len(cids) == 1
    cid = next(iter(cids)) if binary else 0
    if binary:
        b = float(base[cid] if base.size > cid else (base[0] if base.size else 0.0))
    else:
        b = None
    all_pos = bool((cw >= 0).all())
    base_t = torch.from_numpy(np.broadcast_to(base, (k,)).copy()) if base.size else None

    def fn(xs):
        s = forest.scores(xs[0], "SUM")
        if binary:
            # One class carries every weight (onnxruntime's binary case): its score p decides
            # (p > 0.5 with all weights >= 0, else p > 0), the scores are [1 - p, p] (all
            # weights >= 0), [logistic(-p), logistic(p)] (LOGISTIC) or [-p, p].
            p = s[:, cid] + b
            idx = (p > (0.5 if all_pos else 0.0)).to(torch.int64)
            if pt == "PROBIT":
                pp = _apply_post(p, pt)
                z = torch.stack([1 - pp, pp], 1)
            elif all_pos:
                z = torch.stack([1 - p, p], 1)
            elif pt == "LOGISTIC":
                z = torch.stack([torch.sigmoid(-p), torch.sigmoid(p)], 1)
            else:
                z = torch.stack([-p, p], 1)
            if k == 1:
                lab = idx if not is_str else np.where(np_of(idx) > 0, labels[0], "").astype(
                    object)
                return [lab, z.to(torch.float32)]
            return [_pick_labels(labels, is_str, idx), z.to(torch.float32)]
        if base_t is not None:
            s = s + base_t.to(s.device, s.dtype)
        z = _apply_post(s, pt)
        return [_pick_labels(labels, is_str, z.argmax(1)), z.to(torch.float32)]
    return fn


_AGG5 = {0: "AVERAGE", 1: "SUM", 2: "MIN", 3: "MAX"}


@register("TreeEnsemble", since=5, domain=ML)
def tree_ensemble(ctx):
    agg = _AGG5.get(int(ctx.attr("aggregate_function", 1)))
    if agg is None:
        raise node_error(ctx, f"attribute aggregate_function={ctx.attr('aggregate_function')} "
                              "is not one of 0 (AVERAGE), 1 (SUM), 2 (MIN), 3 (MAX)")
    pcode = int(ctx.attr("post_transform", 0))
    if not 0 <= pcode < len(_POST):
        raise node_error(ctx, f"attribute post_transform={pcode} is not one of 0..4")
    pt = _POST[pcode]
    n_targets = ctx.attr("n_targets")
    if n_targets is None:
        raise node_error(ctx, "attribute n_targets is required")
    n_targets = int(n_targets)
    splits = np.asarray(ctx.attr("nodes_splits"), np.float64).reshape(-1)
    double = np.asarray(ctx.attr("nodes_splits")).dtype == np.float64
    feat = np.asarray(ctx.attr("nodes_featureids", []), np.int64)
    modes = np.asarray(ctx.attr("nodes_modes"), np.int64).reshape(-1)
    tn = np.asarray(ctx.attr("nodes_truenodeids", []), np.int64)
    fn_ = np.asarray(ctx.attr("nodes_falsenodeids", []), np.int64)
    tl = np.asarray(ctx.attr("nodes_trueleafs", []), np.int64).astype(bool)
    fl = np.asarray(ctx.attr("nodes_falseleafs", []), np.int64).astype(bool)
    nn_ = len(feat)
    mvt = ctx.attr("nodes_missing_value_tracks_true")
    mvt = np.asarray(mvt if mvt is not None else [0] * nn_, np.int64).astype(bool)
    for name, arr in (("nodes_splits", splits), ("nodes_modes", modes),
                      ("nodes_truenodeids", tn), ("nodes_falsenodeids", fn_),
                      ("nodes_trueleafs", tl), ("nodes_falseleafs", fl),
                      ("nodes_missing_value_tracks_true", mvt)):
        if len(arr) != nn_:
            raise node_error(ctx, f"attribute {name} has {len(arr)} values, nodes_featureids "
                                  f"{nn_}")
    if ((modes < 0) | (modes > MEMBER)).any():
        raise node_error(ctx, f"attribute nodes_modes has values outside 0..6: "
                              f"{sorted(set(modes[(modes < 0) | (modes > MEMBER)].tolist()))}")
    tid = np.asarray(ctx.attr("leaf_targetids", []), np.int64)
    lw = np.asarray(ctx.attr("leaf_weights"), np.float64).reshape(-1)
    double = double or np.asarray(ctx.attr("leaf_weights")).dtype == np.float64
    nl = len(tid)
    if len(lw) != nl:
        raise node_error(ctx, f"attribute leaf_weights has {len(lw)} values, leaf_targetids "
                              f"{nl}")
    members: list[set] = [set() for _ in range(nn_)]
    if (modes == MEMBER).any():
        mv = ctx.attr("membership_values")
        if mv is None:
            raise node_error(ctx, "BRANCH_MEMBER nodes (mode 6) need membership_values")
        mv = np.asarray(mv, np.float64).reshape(-1)
        groups, cur = [], []
        for v in mv.tolist():
            if math.isnan(v):
                groups.append(cur)
                cur = []
            else:
                cur.append(v)
        it = iter(groups)
        try:
            for i in np.nonzero(modes == MEMBER)[0].tolist():
                members[i] = set(next(it))
        except StopIteration:
            raise node_error(ctx, "membership_values has fewer NaN-separated sets than "
                                  "BRANCH_MEMBER nodes") from None
    # global ids: nodes 0..nn-1, leaves nn..nn+nl-1
    tc = np.where(tl, nn_ + tn, tn)
    fc = np.where(fl, nn_ + fn_, fn_)
    roots = []
    for r in [int(v) for v in ctx.attr("tree_roots", [])]:
        degenerate = tl[r] and fl[r] and tn[r] == fn_[r]
        roots.append(nn_ + tn[r] if degenerate else r)
    g_mode = np.concatenate([modes, np.full(nl, LEAF)])
    contrib = [(nn_ + i, int(t), float(w)) for i, (t, w) in enumerate(zip(tid, lw))]
    forest = _Forest(ctx, np.concatenate([feat, np.zeros(nl, np.int64)]),
                     np.concatenate([splits, np.zeros(nl)]), g_mode,
                     np.concatenate([tc, np.zeros(nl, np.int64)]),
                     np.concatenate([fc, np.zeros(nl, np.int64)]),
                     np.concatenate([mvt, np.zeros(nl, bool)]), roots, contrib, n_targets,
                     members=members + [set()] * nl, double=double)

    def fn(xs):
        x = xs[0]
        s = forest.scores(x, agg)
        return [_apply_post(s, pt).to(x.dtype if x.dtype.is_floating_point else torch.float32)]
    return fn


# ---------------------------------------------------------------------------------------
# Support vector machines


_KERNELS = ("LINEAR", "POLY", "RBF", "SIGMOID")


class _SvmKernel:
    def __init__(self, ctx):
        self.kind = _s(ctx.attr("kernel_type", "LINEAR")) or "LINEAR"
        if self.kind not in _KERNELS:
            raise node_error(ctx, f"attribute kernel_type={self.kind!r} is not one of "
                                  f"{', '.join(_KERNELS)}")
        kp = [float(v) for v in (ctx.attr("kernel_params") or [])]
        self.gamma, self.coef0, self.degree = (kp + [0.0, 0.0, 0.0])[:3] if kp else (0.0, 0.0,
                                                                                      0.0)
        self.degree = int(self.degree)

    def __call__(self, x: torch.Tensor, sv: torch.Tensor, kind: str | None = None):
        """[N, F] x [V, F] -> [N, V]."""
        k = kind or self.kind
        if k == "RBF":
            d = (x.square().sum(1, keepdim=True) - 2 * x @ sv.T + sv.square().sum(1)).clamp_(
                min=0)
            return torch.exp(-self.gamma * d)
        dot = x @ sv.T
        if k == "LINEAR":
            return dot
        s = dot * self.gamma + self.coef0
        return s ** self.degree if k == "POLY" else torch.tanh(s)


def _svm_float(ctx, name):
    return np.asarray(ctx.attr(name) or [], np.float64)


@register("SVMRegressor", since=1, domain=ML)
def svm_regressor(ctx):
    kern = _SvmKernel(ctx)
    n_sup = int(ctx.attr("n_supports", 0))
    one_class = int(ctx.attr("one_class", 0))
    pt = _post_transform(ctx, ("NONE", "PROBIT"))
    coef, rho = _svm_float(ctx, "coefficients"), _svm_float(ctx, "rho")
    sv = _svm_float(ctx, "support_vectors")
    if rho.size < 1:
        raise node_error(ctx, "attribute rho is required")
    if n_sup > 0:
        if coef.size != n_sup or sv.size % n_sup:
            raise node_error(ctx, f"n_supports={n_sup}: coefficients has {coef.size} values, "
                                  f"support_vectors {sv.size}")
        sv = sv.reshape(n_sup, -1)
    cache: dict = {}

    def fn(xs):
        x = _as_2d(xs[0])
        ft = _ftype(x)
        key = (x.device, ft)
        if key not in cache:
            cache[key] = (torch.from_numpy(coef).to(x.device, ft),
                          torch.from_numpy(sv).to(x.device, ft) if n_sup > 0 else None)
        c, s = cache[key]
        xf = x.to(ft)
        if n_sup > 0:
            if xf.shape[1] != s.shape[1]:
                raise run_error(ctx, f"input has {xf.shape[1]} features, the support vectors "
                                     f"{s.shape[1]}")
            y = kern(xf, s) @ c + float(rho[0])
        else:   # linear: coefficients are the weights
            if xf.shape[1] != c.numel():
                raise run_error(ctx, f"input has {xf.shape[1]} features, coefficients "
                                     f"{c.numel()}")
            y = xf @ c + float(rho[0])
        y = y.unsqueeze(1)
        if one_class:
            y = torch.where(y > 0, 1.0, -1.0).to(ft)
        if pt == "PROBIT":
            y = _apply_post(y, pt)
        return [y.to(torch.float32)]
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


def _multiclass_probability(r: torch.Tensor, k: int) -> torch.Tensor:
    """libsvm's pairwise coupling (Wu, Lin, Weng 2004, method 2), batched: r [N, k, k] with
    r[i, j] = P(class i | i or j) -> [N, k]; each sample stops when its error < 0.005 / k."""
    n = r.shape[0]
    eye = torch.eye(k, dtype=torch.bool, device=r.device)
    r2 = r.square()
    q = -(r.transpose(1, 2) * r)                      # q[t, j] = -r[j, t] r[t, j]
    diag = (r2.sum(1) - r2.diagonal(dim1=1, dim2=2))  # sum_{j != t} r[j, t]^2
    q = torch.where(eye, torch.diag_embed(diag), q)
    p = torch.full((n, k), 1.0 / k, dtype=r.dtype, device=r.device)
    eps = 0.005 / k
    qtt = diag
    for _ in range(max(100, k)):
        qp = (q @ p.unsqueeze(-1)).squeeze(-1)
        pqp = (p * qp).sum(1)
        active = (qp - pqp.unsqueeze(1)).abs().amax(1) >= eps
        if not bool(active.any()):
            break
        a = active.to(r.dtype)
        for t in range(k):
            diff = (-qp[:, t] + pqp) / qtt[:, t] * a
            p = p.clone()
            p[:, t] = p[:, t] + diff
            pqp = (pqp + diff * (diff * qtt[:, t] + 2 * qp[:, t])) / (1 + diff) ** 2
            p = p / (1 + diff).unsqueeze(1)
            qp = (qp + diff.unsqueeze(1) * q[:, t, :]) / (1 + diff).unsqueeze(1)
    return p


@register("SVMClassifier", since=1, domain=ML)
def svm_classifier(ctx):
    """libsvm's one-vs-one SVC (vectors_per_class given: pairwise decision values, votes,
    optional Platt probabilities coupled pairwise) or liblinear (no support vectors: one
    score per class), the onnx reference's / onnxruntime's label and score rules."""
    kern = _SvmKernel(ctx)
    labels, is_str = _labels(ctx, "classlabels_ints", "classlabels_strings")
    k = max(len(labels), 1)
    pt = _post_transform(ctx)
    coef, rho = _svm_float(ctx, "coefficients"), _svm_float(ctx, "rho")
    pa, pb = _svm_float(ctx, "prob_a"), _svm_float(ctx, "prob_b")
    vpc = [int(v) for v in (ctx.attr("vectors_per_class") or [])]
    nv = sum(vpc)
    all_pos = bool(coef.size and coef.min() >= 0)
    if rho.size < 1:
        raise node_error(ctx, "attribute rho is required")
    if nv > 0:
        if len(vpc) != k:
            raise node_error(ctx, f"attribute vectors_per_class has {len(vpc)} values for "
                                  f"{k} classes")
        npair = k * (k - 1) // 2
        sv = _svm_float(ctx, "support_vectors")
        if sv.size % nv or coef.size != (k - 1) * nv or rho.size < npair:
            raise node_error(ctx, f"{nv} support vectors, {k} classes: support_vectors "
                                  f"({sv.size}), coefficients ({coef.size}, need {(k - 1) * nv})"
                                  f" or rho ({rho.size}, need {npair}) do not fit")
        sv = sv.reshape(nv, -1)
        cf = coef.reshape(k - 1, nv)
        start = np.concatenate([[0], np.cumsum(vpc)[:-1]]).astype(int)
        amat = np.zeros((nv, npair))
        pi = np.zeros((npair, k))
        pj = np.zeros((npair, k))
        e = 0
        for i in range(k):
            for j in range(i + 1, k):
                si, sj = start[i], start[j]
                amat[si:si + vpc[i], e] = cf[j - 1, si:si + vpc[i]]
                amat[sj:sj + vpc[j], e] = cf[i, sj:sj + vpc[j]]
                pi[e, i] = pj[e, j] = 1
                e += 1
        has_proba = pa.size > 0
        if has_proba and (pa.size != npair or pb.size != npair):
            raise node_error(ctx, f"attributes prob_a/prob_b need {npair} values each")
        consts = dict(sv=sv, a=amat, rho=rho[:npair], pi=pi, pj=pj, pa=pa, pb=pb)
    else:
        has_proba = False
        if coef.size % k:
            raise node_error(ctx, f"attribute coefficients ({coef.size}) is not a multiple of "
                                  f"{k} classes")
        consts = dict(w=coef.reshape(k, -1).T.copy())
    cache: dict = {}
    iu = np.triu_indices(k, 1)

    def fn(xs):
        x = _as_2d(xs[0])
        ft = _ftype(x)
        key = (x.device, ft)
        if key not in cache:
            cache[key] = {n: torch.from_numpy(np.ascontiguousarray(v)).to(x.device, ft)
                          for n, v in consts.items()}
        c = cache[key]
        xf = x.to(ft)
        n = xf.shape[0]
        votes = None
        if nv > 0:
            if xf.shape[1] != c["sv"].shape[1]:
                raise run_error(ctx, f"input has {xf.shape[1]} features, the support vectors "
                                     f"{c['sv'].shape[1]}")
            res = kern(xf, c["sv"]) @ c["a"] + c["rho"]            # [N, pairs]
            pos = (res > 0).to(ft)
            votes = pos @ c["pi"] + (1 - pos) @ c["pj"]
            if has_proba:
                v1 = 1 - torch.sigmoid(res * c["pa"] + c["pb"])
                v1 = v1.clamp(1e-7, 1 - 1e-7)
                r = torch.zeros(n, k, k, dtype=ft, device=x.device)
                r[:, iu[0], iu[1]] = v1
                r[:, iu[1], iu[0]] = 1 - v1
                scores = _multiclass_probability(r, k)
            else:
                scores = res
        else:
            if xf.shape[1] != c["w"].shape[0]:
                raise run_error(ctx, f"input has {xf.shape[1]} features, coefficients "
                                     f"{c['w'].shape[0]} per class")
            scores = xf @ c["w"] + float(rho[0])
        src = votes if votes is not None else scores
        best = src.argmax(1)
        maxw = src.gather(1, best.unsqueeze(1)).squeeze(1)
        add2 = False
        if rho.size == 1:
            if len(labels) == 2:
                add2 = True
                if not has_proba and all_pos:
                    best = torch.where(maxw >= 0.5, 1, best)
            elif len(labels) < 2:
                best = (maxw > 0).to(torch.int64)
        if scores.shape[1] >= 2:
            z = _apply_post(scores, pt)
        elif pt == "PROBIT":
            z = _apply_post(scores, pt)
        elif add2:
            s = scores[:, 0]
            z = torch.stack([-s, s], 1)
            z = torch.sigmoid(z) if pt == "LOGISTIC" else _apply_post(z, pt)
        else:
            z = scores
        if len(labels) < 2:
            lab = best if not is_str else labels[np_of(best).clip(0, len(labels) - 1)]
        else:
            lab = _pick_labels(labels, is_str, best)
        return [lab, z.to(torch.float32)]
    return fn
