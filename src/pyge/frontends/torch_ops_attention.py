"""ATen -> ONNX: ``scaled_dot_product_attention`` as one ONNX ``Attention`` node (see torch_ops).

torch.export keeps ``aten.scaled_dot_product_attention`` as one node; left to the default
decompositions it becomes MatMul, Softmax and, for torch's fully-masked-row rule, a full-size
Equal/Not/ReduceMin/Where over the score tensor. Preserving it (every op in ``OPS`` is) and
emitting opset-23 ``Attention`` lets pyge's kernel call torch's fused CPU attention instead.

The two definitions agree, checked against torch eager in the tests:
- heads on axis -3, grouped-query attention (``enable_gqa``) repeats each K/V head for
  consecutive query heads in both; the default scale is 1/sqrt(Q's last axis) in both;
- ``is_causal`` is top-left (query i sees keys j <= i) in both when there is no past;
- a bool mask means "may attend" in both, a float mask is added in both, and a query row that
  may attend no key gives zeros in both (torch since 2.5);
- inputs of rank 2 or 3 get leading unit axes (torch broadcasts the mask from the right, as
  ONNX does, so it needs no change); a mask whose key axis is 1 is expanded to the key length,
  because ONNX pads a short key axis with -inf instead of broadcasting it.
``dropout_p > 0`` is not expressible (torch drops out even in eval mode) and is reported.
"""
from __future__ import annotations

from ..ir.graph import Value
from .aten_table import Unsupported, aten, op, rank

ATTENTION_OPSET = 23   # the first opset with Attention


def _to_4d(cx, x: Value, r: int) -> Value:
    """`x` with 4 - r leading unit axes (a no-op for rank 4)."""
    if r == 4:
        return x
    return cx.tmp("Unsqueeze", [x, cx.ints(range(4 - r))], x.dtype,
                  (1,) * (4 - r) + tuple(x.shape))


def _mask_over_keys(cx, mask: Value, k: Value) -> Value:
    """`mask` with its key axis broadcast to the key length, where it is 1 and keys are not."""
    s_len = k.shape[-2]
    if mask.shape is None or mask.shape[-1] != 1 or s_len == 1:
        return mask
    mr = len(mask.shape)
    ones = [1] * (mr - 1)
    if isinstance(s_len, int):
        target = cx.ints(ones + [s_len])
    else:  # ones for the other axes, the key length read from K at run time
        keys = cx.tmp("Shape", [k], "int64", (1,), start=-2, end=-1)
        target = cx.tmp("Concat", [cx.ints(ones), keys], "int64", (mr,), axis=0)
    shape = tuple(mask.shape[:-1]) + (s_len,)
    return cx.tmp("Expand", [mask, target], mask.dtype, shape)


def _attention(cx, q: Value, k: Value, v: Value, mask, dropout_p, is_causal, scale,
               enable_gqa: bool) -> Value:
    if dropout_p:
        raise Unsupported(f"dropout_p={dropout_p} (attention dropout applies even in eval mode)")
    r = rank(q)
    if r not in (2, 3, 4) or rank(k) != r or rank(v) != r:
        raise Unsupported(f"query, key and value of ranks {r}, {rank(k)}, {rank(v)}; "
                          "expected equal ranks 2 to 4")
    if mask is not None and rank(mask) > 4:
        raise Unsupported(f"attn_mask of rank {rank(mask)}")
    hq, hkv = (q.shape[-3], k.shape[-3]) if r > 2 else (1, 1)
    if isinstance(hq, int) and isinstance(hkv, int) and hq != hkv and not enable_gqa \
            and hkv != 1:
        raise Unsupported(f"{hq} query heads over {hkv} key heads without enable_gqa")
    cx.conv.g.opset_imports[""] = max(cx.conv.g.opset_imports.get("", 0), ATTENTION_OPSET)
    attrs = {"is_causal": int(bool(is_causal))}
    if scale is not None:
        attrs["scale"] = float(scale)
    inputs = [_to_4d(cx, x, r) for x in (q, k, v)]
    if mask is not None:
        inputs.append(_mask_over_keys(cx, mask, k))
    if r == 4:
        return cx.out("Attention", inputs, n=1, **attrs)
    out_shape = None if cx.shape is None else (1,) * (4 - r) + tuple(cx.shape)
    y = cx.tmp("Attention", inputs, cx.dtype, out_shape, **attrs)
    return cx.out("Squeeze", [y, cx.ints(range(4 - r))], n=1)


@op(aten.scaled_dot_product_attention.default)
def _sdpa(cx, a):
    return _attention(cx, a["query"], a["key"], a["value"], a["attn_mask"], a["dropout_p"],
                      a["is_causal"], a["scale"], bool(a["enable_gqa"]))


@op(aten._scaled_dot_product_flash_attention_for_cpu.default)
def _sdpa_flash_cpu(cx, a):  # (output, logsumexp): only the output exists here
    y = _attention(cx, a["query"], a["key"], a["value"], a["attn_mask"], a["dropout_p"],
                   a["is_causal"], a["scale"], False)
    return [y, None]


@op(aten._scaled_dot_product_attention_math.default)
def _sdpa_math(cx, a):  # (output, attention weights): only the output exists here
    if a["dropout_mask"] is not None:
        raise Unsupported("dropout_mask")
    y = _attention(cx, a["query"], a["key"], a["value"], a["attn_mask"], a["dropout_p"],
                   a["is_causal"], a["scale"], bool(a["enable_gqa"]))
    return [y, None]

