"""Linear models and support vector machines of the ``ai.onnx.ml`` domain:
LinearRegressor, LinearClassifier, SVMRegressor, SVMClassifier (shared helpers:
tensor_ml.py)."""
from __future__ import annotations

import numpy as np
import torch

from ._util import node_error, np_of, run_error
from .registry import register
from .tensor_ml import (ML, _apply_post, _as_2d, _Consts, _ftype, _labels, _pick_labels,
                        _post_transform, _s)


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
    consts = _Consts(w=coef.reshape(targets, -1).T, b=icpt)

    def fn(xs):
        x = _as_2d(xs[0])
        ft = _ftype(x)
        c = consts.on(x, ft)
        w, b = c["w"], c["b"]
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
    consts = _Consts(c=coef, s=sv) if n_sup > 0 else _Consts(c=coef)

    def fn(xs):
        x = _as_2d(xs[0])
        ft = _ftype(x)
        k = consts.on(x, ft)
        c, s = k["c"], k.get("s")
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
        arrays = dict(sv=sv, a=amat, rho=rho[:npair], pi=pi, pj=pj, pa=pa, pb=pb)
    else:
        has_proba = False
        if coef.size % k:
            raise node_error(ctx, f"attribute coefficients ({coef.size}) is not a multiple of "
                                  f"{k} classes")
        arrays = dict(w=coef.reshape(k, -1).T)
    consts = _Consts(**arrays)
    iu = np.triu_indices(k, 1)

    def fn(xs):
        x = _as_2d(xs[0])
        ft = _ftype(x)
        c = consts.on(x, ft)
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
