"""Tree ensembles of the ``ai.onnx.ml`` domain: TreeEnsembleRegressor and
TreeEnsembleClassifier (ml opsets 1, 3) and TreeEnsemble (ml opset 5). All samples and all
trees are walked at once, one tree level per step (shared helpers: tensor_ml.py)."""
from __future__ import annotations

import math

import numpy as np
import torch

from ._util import node_error, np_of, run_error
from .registry import register
from .tensor_ml import (ML, _POST, _apply_post, _as_2d, _labels, _pick_labels, _post_transform,
                        _s)


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
