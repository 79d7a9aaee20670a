"""Fuse MatMul -> [scale] -> [Add mask] -> Softmax -> MatMul into one ONNX Attention node.

    S = MatMul(Q', Kt)             Q' = Q or Q * c1 (Mul / Div by a constant scalar)
                                   Kt = Transpose(K0, perm), optionally * c2, either order
    S' = S [* c3 | / c3]           a constant scalar
    S'' = S' + mask                either operand order
    P = Softmax(S'', last axis)    optionally P' = Where(IsNaN(P), 0, P)
    Y = MatMul(P, V)
 -> Y = Attention(Q, K, V[, mask], scale = c1 * c2 * c3)

Exporters write scaled dot-product attention this way (torch's TorchScript exporter scales Q
and K^T by sqrt(scale) each); run as written, the score tensor (batch x heads x L x L) is
written and read four times. The Attention kernel calls torch's fused attention instead.

The rewrite fires only where both sides compute the same thing:
- Q, K^T, V and the scores have one float dtype and rank 4 (batch, heads, seq, head) or 3
  (batch, seq, head: Attention with one head); batch axes are equal (MatMul would broadcast
  them, Attention does not), K and V have the same heads and Q's heads are a multiple of them
  by 1 or all (1 key head broadcast is Attention's grouped-query repeat);
- the key transpose is any permutation: K = K0 permuted by `perm` with its last two entries
  swapped; the Transpose node is kept with that permutation, or dropped when it is the
  identity;
- every scale is a constant scalar that keeps the shape of what it scales, and their product
  is positive and finite (Attention scales Q and K by its square root);
- the mask keeps the scores' shape when added, its key axis is the full key length
  (Attention pads a short key axis with -inf rather than broadcasting it), and with 3-D
  inputs a 3-D mask has batch 1 (Attention's masks line up with (batch, 1 head, L, S));
- Softmax is over the last axis (opset < 13: axis = rank - 1, where the 2-D coercion of those
  opsets is the same thing);
- every intermediate value has exactly one use and is not a graph output.
A query row whose mask is -inf for every key gives zeros from Attention (as torch's
scaled_dot_product_attention does). The unfused graph gives NaN there, unless it guards the
probabilities with Where(IsNaN(P), 0, P), as torch's exporter does for bool masks: that guard
is fused too, and then the two agree on every finite input.

The fused node keeps the first MatMul's name and produces the last MatMul's output value (same
name); it lists every replaced node in GE's attribute `_datadump_original_op_names`. Below
opset 23 (which has no Attention) it is the same kernel in domain "pyge". Off with
`ge.exec.enableFusion=false`.
"""
from __future__ import annotations

import math

import numpy as np

from ...ir.graph import Graph, Node, Value
from ._match import FLOATS, ORIGINAL_NAMES, fusion_sites, mark_fused, note_fused, single_consumer

ATTENTION_OPSET = 23


def _shape(v: Value | None) -> tuple | None:
    """The shape when its rank and every dim (int, or a symbolic name) are known."""
    if v is None or v.shape is None or any(d is None for d in v.shape):
        return None
    return tuple(v.shape)


def _scalar_factor(node: Node, x: Value) -> float | None:
    """The factor f with node(x) == x * f, for Mul(x, c), Mul(c, x) or Div(x, c) by a finite
    non-zero constant scalar of x's dtype that does not change x's shape; else None."""
    if node.domain or node.op_type not in ("Mul", "Div") or len(node.inputs) != 2:
        return None
    a, b = node.inputs
    c = b if a is x else a if (b is x and node.op_type == "Mul") else None
    if c is None or c is x or c.const is None or c.dtype != x.dtype or np.size(c.const) != 1:
        return None
    if _shape(node.outputs[0]) != _shape(x):
        return None
    f = float(np.asarray(c.const, dtype=np.float64).reshape(()))
    if not math.isfinite(f) or f == 0.0:
        return None
    return f if node.op_type == "Mul" else 1.0 / f


def _scaled_source(v: Value, graph: Graph) -> tuple[Value, float, Node | None]:
    """(x, f, mul) where v = mul(x) = x * f and mul has v as its only use; else (v, 1, None)."""
    p = v.producer
    if p is not None and p.graph is graph and single_consumer(v, graph) is not None:
        for x in p.inputs:
            f = _scalar_factor(p, x) if x is not None else None
            if f is not None:
                return x, f, p
    return v, 1.0, None


def _key_side(kt: Value, graph: Graph):
    """Walk K^T back through one Transpose and at most one scalar Mul/Div, in either order:
    (K0, perm, transpose node, factor, mul node or None), or None without a Transpose."""
    v, factor, mul, tr = kt, 1.0, None, None
    for _ in range(2):
        p = v.producer
        if p is None or p.graph is not graph or single_consumer(v, graph) is None:
            break
        if tr is None and p.op_type == "Transpose" and not p.domain and len(p.inputs) == 1:
            tr, v = p, p.inputs[0]
            continue
        if mul is None:
            x, f, m = _scaled_source(v, graph)
            if m is not None:
                factor, mul, v = f, m, x
                continue
        break
    if tr is None or _shape(v) is None:
        return None
    r = len(_shape(v))
    perm = tr.attrs.get("perm")
    perm = list(range(r))[::-1] if perm is None else [int(p) for p in perm]
    if sorted(perm) != list(range(r)):
        return None
    return v, perm, tr, factor, mul


def _heads_ok(qs: tuple, ks: tuple, vs: tuple, r: int) -> bool:
    if r == 3:
        return qs[0] == ks[0] == vs[0]
    if not (qs[0] == ks[0] == vs[0]) or ks[1] != vs[1]:
        return False
    return ks[1] == qs[1] or ks[1] == 1


def _mask_ok(mask: Value, s: Value, scores: tuple, r: int) -> bool:
    """`mask` added to the scores `s` broadcasts into their shape (the sum has it too), covers
    the whole key axis, and lines up with Attention's (batch, heads, L, S) from the right: with
    3-D inputs (one head) a 3-D mask must have batch 1."""
    ms = _shape(mask)
    if ms is None or len(ms) > r or mask.dtype != s.dtype or _shape(s) != scores:
        return False
    if ms[-1] != scores[-1] or (r == 3 and len(ms) == 3 and ms[0] != 1):
        return False
    return all(m == 1 or m == d for m, d in zip(reversed(ms), reversed(scores)))


def _softmax_last(sm: Node, r: int, opset: int) -> bool:
    ax = sm.attrs.get("axis", -1 if opset >= 13 else 1)
    return int(ax) in (-1, r - 1)


def _nan_guard(probs: Value, graph: Graph) -> tuple[Value, list[Node]] | None:
    """(P, [IsNaN, Where]) for probs = Where(IsNaN(P), 0, P), where nothing else reads P or
    IsNaN(P): the zero rows that torch's exporter adds for fully masked rows, which Attention
    gives by itself."""
    w = probs.producer
    if w is None or w.op_type != "Where" or w.domain or w.graph is not graph or len(w.inputs) != 3:
        return None
    cond, zero, p = w.inputs
    isnan = cond.producer if cond is not None else None
    if p is None or isnan is None or isnan.op_type != "IsNaN" or isnan.domain \
            or isnan.inputs[0] is not p or single_consumer(cond, graph) is not w:
        return None
    if zero is None or zero.const is None or np.size(zero.const) != 1 or zero.dtype != p.dtype \
            or np.asarray(zero.const).reshape(-1)[0] != 0 or _shape(probs) != _shape(p):
        return None
    if p in graph.outputs or sorted(i for _, i in p.uses) != [0, 2] \
            or {id(n) for n, _ in p.uses} != {id(isnan), id(w)}:
        return None
    return p, [isnan, w]


def _plan(mm2: Node, graph: Graph):
    """The parts of an attention pattern ending at MatMul `mm2`, or None."""
    if mm2.op_type != "MatMul" or mm2.domain or len(mm2.inputs) != 2:
        return None
    probs, v = mm2.inputs
    if probs is None or probs.producer is None \
            or probs.producer.op_type not in ("Softmax", "Where"):
        return None              # no Softmax, guarded or not, feeds it: the usual MatMul
    if single_consumer(probs, graph) is not mm2:
        return None
    guard = _nan_guard(probs, graph)
    if guard is not None:
        probs, guard = guard
    sm = probs.producer
    if sm is None or sm.op_type != "Softmax" or sm.domain or sm.graph is not graph:
        return None
    x = sm.inputs[0]
    scores = _shape(x)
    if scores is None or len(scores) not in (3, 4) or x.dtype not in FLOATS:
        return None
    r = len(scores)
    if not _softmax_last(sm, r, graph.opset_imports.get("", 17)):
        return None
    add, mask, post = None, None, []
    p = x.producer
    if p is not None and p.op_type == "Add" and not p.domain and p.graph is graph \
            and single_consumer(x, graph) is sm and len(p.inputs) == 2:
        for i in (0, 1):
            s, m = p.inputs[i], p.inputs[1 - i]
            if s is not None and m is not None and s is not m and _leads_to_matmul(s, graph) \
                    and _mask_ok(m, s, scores, r):
                add, mask, x = p, m, s
                break
        if add is None:
            return None
    elif single_consumer(x, graph) is not sm:
        return None
    s, c3, post_mul = _scaled_source(x, graph)
    if post_mul is not None:
        post.append(post_mul)
    mm1 = s.producer
    if mm1 is None or mm1.op_type != "MatMul" or mm1.domain or mm1.graph is not graph \
            or len(mm1.inputs) != 2 or single_consumer(s, graph) is None:
        return None
    q, c1, q_mul = _scaled_source(mm1.inputs[0], graph)
    key = _key_side(mm1.inputs[1], graph)
    if key is None:
        return None
    k0, perm, tr, c2, k_mul = key
    p = _check(mm1, q, q_mul, k0, perm, tr, k_mul, post, add, mask, sm, mm2, v, c1 * c2 * c3, r)
    if p is not None:
        p["guard"] = guard or []
    return p


def _leads_to_matmul(s: Value, graph: Graph) -> bool:
    x, _, _ = _scaled_source(s, graph)
    p = x.producer
    return p is not None and p.op_type == "MatMul" and not p.domain and p.graph is graph


def _check(mm1, q, q_mul, k0, perm, tr, k_mul, post, add, mask, sm, mm2, v, scale, r):
    qs, k0s, vs = _shape(q), _shape(k0), _shape(v)
    if qs is None or k0s is None or vs is None or not len(qs) == len(k0s) == len(vs) == r:
        return None
    if len({q.dtype, k0.dtype, v.dtype, mm2.outputs[0].dtype}) != 1 or q.dtype not in FLOATS:
        return None
    kperm = perm[:-2] + [perm[-1], perm[-2]]
    ks = tuple(k0s[i] for i in kperm)
    if ks[-1] != qs[-1] or ks[-2] != vs[-2] or not _heads_ok(qs, ks, vs, r):
        return None
    if not (scale > 0.0 and math.isfinite(scale)):
        return None
    return dict(mm1=mm1, q=q, q_mul=q_mul, k0=k0, kperm=kperm, kshape=ks, tr=tr, k_mul=k_mul,
                post=post, add=add, mask=mask, sm=sm, mm2=mm2, v=v, scale=scale, rank=r)


def _key_input(p: dict, graph: Graph) -> Value:
    """K for Attention, once nothing reads K^T: K0 itself, or the Transpose rewired to K0 with
    the swapped permutation; the key side's scale node leaves the graph."""
    tr, mul = p["tr"], p["k_mul"]
    if mul is not None and tr.outputs[0] in mul.inputs:
        graph.remove_node(mul)               # K^T = Mul(Transpose(K0)): the Mul goes first
        mul = None
    if p["kperm"] == list(range(p["rank"])):
        graph.remove_node(tr)
        k = p["k0"]
    else:
        tr.set_inputs([p["k0"]])
        tr.attrs["perm"] = p["kperm"]
        k = tr.outputs[0]
        k.shape = p["kshape"]
    if mul is not None:
        graph.remove_node(mul)               # K^T = Transpose(Mul(K0))
    return k


def _fuse(p: dict, graph: Graph, domain: str) -> str:
    mm1 = p["mm1"]
    isnan, where = p["guard"] or (None, None)
    chain = p["post"] + [n for n in (p["add"], p["sm"], where, p["mm2"]) if n is not None]
    others = [p["q_mul"], p["tr"], p["k_mul"]] + p["post"] + [p["add"], p["sm"], isnan, where,
                                                             p["mm2"]]
    names = [mm1.name] + [n.name for n in others if n is not None]
    for n in chain:
        graph.absorb(mm1, n)
        if n is where:                       # IsNaN read the probabilities; nothing reads it
            graph.remove_node(isnan)
    mm1.set_inputs([])                       # nothing reads Q' and K^T any more
    if p["q_mul"] is not None:
        graph.remove_node(p["q_mul"])
    k = _key_input(p, graph)
    mm1.set_inputs([p["q"], k, p["v"]] + ([p["mask"]] if p["mask"] is not None else []))
    mm1.op_type, mm1.domain = "Attention", domain
    kept = {ORIGINAL_NAMES: mm1.attrs[ORIGINAL_NAMES]} if ORIGINAL_NAMES in mm1.attrs else {}
    mm1.attrs = {"scale": float(p["scale"]), **kept}   # a MatMul fused before keeps its names
    if p["rank"] == 3:
        mm1.attrs.update(q_num_heads=1, kv_num_heads=1)
    return mark_fused(mm1, names)


def fuse_attention(graph: Graph) -> int:
    """Fuse every exact attention pattern of the root graph; returns how many."""
    domain = "" if graph.opset_imports.get("", 17) >= ATTENTION_OPSET else "pyge"
    fused = [_fuse(p, graph, domain) for _, p in fusion_sites(graph, _plan, frozenset({"MatMul"}))]
    note_fused(graph, fused, domain or None)
    if fused:
        graph.sort()     # V and the mask may come after the first MatMul in node order
    return len(fused)
