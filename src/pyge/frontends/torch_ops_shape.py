"""ATen -> ONNX: shape, indexing, copy and creation ops, and SymInt arithmetic (see torch_ops)."""
from __future__ import annotations

import operator

import numpy as np

from ..ir.graph import Value
from .onnx_proto import dtype_to_onnx
from .aten_table import Unsupported, aten, axis, op, rank

INT64_MAX = 2**63 - 1


def shape_input(cx, items) -> Value:
    """An int64 1-D shape tensor from ints and (with dynamic shapes) 0-d SymInt Values."""
    if all(isinstance(i, int) for i in items):
        return cx.ints(items)
    parts = []
    for i in items:
        if isinstance(i, Value):
            parts.append(cx.tmp("Unsqueeze", [cx.cast(i, "int64"), cx.ints([0])], "int64", (1,)))
        else:
            parts.append(cx.ints([i]))
    return cx.tmp("Concat", parts, "int64", (len(items),), axis=0)


# ---------------------------------------------------------------------------------------
# views


@op(aten.view.default, aten._unsafe_view.default, aten.reshape.default)
def _reshape(cx, a):
    x, shape = a["self"], cx.static_shape()
    if shape is not None:
        if x.shape == shape:
            return x
        # The meta shape has no -1; ONNX reads a 0 as "copy the input dim" unless allowzero.
        return cx.out("Reshape", [x, cx.ints(shape)], allowzero=int(0 in shape))
    return cx.out("Reshape", [x, shape_input(cx, a["size"] if "size" in a else a["shape"])])


@op(aten.permute.default)
def _permute(cx, a):
    x = a["self"]
    return cx.out("Transpose", [x], perm=[axis(d, rank(x)) for d in a["dims"]])


@op(aten.transpose.int)
def _transpose(cx, a):
    x = a["self"]
    perm = list(range(rank(x)))
    d0, d1 = axis(a["dim0"], len(perm)), axis(a["dim1"], len(perm))
    perm[d0], perm[d1] = perm[d1], perm[d0]
    return x if d0 == d1 else cx.out("Transpose", [x], perm=perm)


@op(aten.t.default)
def _t(cx, a):
    x = a["self"]
    return x if rank(x) < 2 else cx.out("Transpose", [x], perm=[1, 0])


@op(aten.expand.default)
def _expand(cx, a):
    x, shape = a["self"], cx.static_shape()
    if shape is not None:
        return x if x.shape == shape else cx.out("Expand", [x, cx.ints(shape)])
    # torch's -1 keeps a dim; ONNX Expand broadcasts both ways, so a 1 keeps it too.
    sizes = [1 if (isinstance(s, int) and s == -1) else s for s in a["size"]]
    return cx.out("Expand", [x, shape_input(cx, sizes)])


@op(aten.unsqueeze.default)
def _unsqueeze(cx, a):
    x = a["self"]
    return cx.out("Unsqueeze", [x, cx.ints([axis(a["dim"], rank(x) + 1)])])


@op(aten.squeeze.dim, aten.squeeze.dims, aten.squeeze.default)
def _squeeze(cx, a):
    # ATen skips a named dim whose size is not 1; ONNX Squeeze fails on it: keep only the 1s.
    x = a["self"]
    dims = a.get("dim")
    dims = range(rank(x)) if dims is None else (dims if isinstance(dims, (list, tuple)) else [dims])
    axes = [axis(d, rank(x)) for d in dims]
    axes = [d for d in axes if x.shape[d] == 1]
    return x if not axes else cx.out("Squeeze", [x, cx.ints(axes)])


@op(aten.alias.default, aten.clone.default, aten.detach.default, aten.lift_fresh_copy.default,
    aten.contiguous.default)
def _alias(cx, a):
    return a["self"]  # no data change: the FX node maps to its input, no node is emitted


@op(aten.dropout.default, aten.native_dropout.default)
def _dropout(cx, a):
    if a["train"]:
        raise Unsupported("dropout in training mode")
    # native_dropout returns (output, mask); the mask is not available
    return a["input"] if cx.fx.target is aten.dropout.default else [a["input"], None]


@op(aten._to_copy.default, aten.to.dtype)
def _to_copy(cx, a):
    x = a["self"]
    if x.dtype == cx.dtype:
        return x
    return cx.out("Cast", [x], to=dtype_to_onnx(cx.dtype))


# ---------------------------------------------------------------------------------------
# slicing, indexing, joining


@op(aten.slice.Tensor)
def _slice(cx, a):
    x = a["self"]
    d = axis(a["dim"], rank(x))
    start = 0 if a["start"] is None else a["start"]
    end = INT64_MAX if a["end"] is None else a["end"]
    step = a["step"]
    size = x.shape[d]
    if start == 0 and step == 1 and isinstance(end, int) and isinstance(size, int) and end >= size:
        return x  # x[:, :] style full slices are common in exported graphs
    ends = [min(end, INT64_MAX)] if isinstance(end, int) else [end]
    return cx.out("Slice", [x, shape_input(cx, [start]), shape_input(cx, ends), cx.ints([d]),
                            cx.ints([step])])


@op(aten.flip.default)
def _flip(cx, a):
    # A reversed Slice: start at the last element, run past the first (ends clamp to -1).
    x = a["self"]
    axes = [axis(d, rank(x)) for d in a["dims"]]
    n = len(axes)
    return cx.out("Slice", [x, cx.ints([-1] * n), cx.ints([-INT64_MAX] * n), cx.ints(axes),
                            cx.ints([-1] * n)])


@op(aten.select.int)
def _select(cx, a):
    # A 0-d index makes Gather drop the axis, as select does.
    x = a["self"]
    idx = a["index"]
    idx = cx.const(np.asarray(idx, dtype=np.int64), "index") if isinstance(idx, int) else idx
    return cx.out("Gather", [x, idx], axis=axis(a["dim"], rank(x)))


@op(aten.index_select.default)
def _index_select(cx, a):
    x = a["self"]
    return cx.out("Gather", [x, a["index"]], axis=axis(a["dim"], rank(x)))


@op(aten.embedding.default)
def _embedding(cx, a):
    return cx.out("Gather", [a["weight"], a["indices"]], axis=0)


@op(aten.index.Tensor)
def _index(cx, a):
    x, idx = a["self"], a["indices"]
    used = [i for i, t in enumerate(idx) if t is not None]
    if any(idx[i].dtype == "bool" for i in used):
        raise Unsupported("boolean mask index (data-dependent shape)")
    if len(used) == 1:
        return cx.out("Gather", [x, idx[used[0]]], axis=used[0])
    return _index_nd(cx, x, [idx[i] for i in used], used)


def _index_nd(cx, x: Value, tensors: list, dims: list[int]) -> Value:
    # x[i, j] / x[:, i, j] (logits[arange(B), lengths]): the index tensors broadcast to one
    # shape, stacked on a last axis they are GatherND's indices. Adjacent index dims only,
    # where torch puts the result's index dims in their place; separated ones put them first.
    k, m, r = dims[0], len(dims), rank(x)
    if dims != list(range(k, k + m)):
        raise Unsupported("index tensors on non-adjacent dims")
    tensors = [cx.cast(t, "int64") for t in tensors]
    nb = len(cx.shape) - (r - m)  # the broadcast index rank, its dims in the output:
    bs = tuple(cx.shape[k:k + nb])
    if all(isinstance(d, int) for d in bs):
        bshape = cx.ints(bs)
    else:  # dynamic: the shape of a zero tensor that broadcasts every index
        zero = None
        for t in tensors:
            z = cx.tmp("Mul", [t, cx.scalar(0, "int64")], "int64", t.shape)
            zero = z if zero is None else cx.tmp("Add", [zero, z], "int64", bs)
        bshape = cx.tmp("Shape", [zero], "int64", (nb,))
    parts = [cx.tmp("Unsqueeze", [cx.tmp("Expand", [t, bshape], "int64", bs),
                                  cx.ints([-1])], "int64", bs + (1,)) for t in tensors]
    ind = cx.tmp("Concat", parts, "int64", bs + (m,), axis=-1)
    if k == 0:
        return cx.out("GatherND", [x, ind])
    front = list(range(k, k + m)) + list(range(k)) + list(range(k + m, r))
    xt = cx.tmp("Transpose", [x], x.dtype, tuple(x.shape[i] for i in front), perm=front)
    g = cx.tmp("GatherND", [xt, ind], x.dtype, bs + tuple(x.shape[i] for i in front[m:]))
    perm = list(range(nb, nb + k)) + list(range(nb)) + list(range(nb + k, nb + r - m))
    return cx.out("Transpose", [g], perm=perm)


@op(aten.cat.default)
def _cat(cx, a):
    tensors = a["tensors"]
    r = len(cx.shape)
    # torch.cat accepts 1-D empty tensors next to any rank (legacy); ONNX Concat does not.
    tensors = [t for t in tensors if not (t.shape == (0,) and r != 1)]
    return cx.out("Concat", [cx.cast(t, cx.dtype) for t in tensors], axis=axis(a["dim"], r))


@op(aten.stack.default)
def _stack(cx, a):
    r = len(cx.shape)
    d = axis(a["dim"], r)
    parts = []
    for t in a["tensors"]:
        shape = None if t.shape is None else t.shape[:d] + (1,) + t.shape[d:]
        parts.append(cx.tmp("Unsqueeze", [cx.cast(t, cx.dtype), cx.ints([d])], cx.dtype, shape))
    return cx.out("Concat", parts, axis=d)


def _split(cx, x: Value, sizes: list, d: int):
    # Opset >= 18 Split takes the sizes as an input (num_outputs is the alternative).
    return cx.out("Split", [x, cx.ints(sizes)], n=len(sizes), axis=d)


@op(aten.split.Tensor, aten.split_with_sizes.default)
def _split_op(cx, a):
    x = a["self"]
    d = axis(a["dim"], rank(x))
    sizes = [int(m.shape[d]) for m in cx.val]  # the meta outputs give the exact pieces
    out = _split(cx, x, sizes, d)
    return out if isinstance(out, list) else [out]


@op(aten.unbind.int)
def _unbind(cx, a):
    x = a["self"]
    d = axis(a["dim"], rank(x))
    n = len(cx.val)
    keep = x.shape[:d] + (1,) + x.shape[d + 1:]
    pieces = cx.conv.add_node("Split", cx.name, [x, cx.ints([1] * n)],
                              [f"{cx.name}_split{i}" for i in range(n)], {"axis": d})
    outs = []
    for i, p in enumerate(pieces):
        p.dtype, p.shape = x.dtype, keep
        outs.append(cx.tmp("Squeeze", [p, cx.ints([d])], x.dtype, cx.shape[:0] + tuple(
            s for j, s in enumerate(keep) if j != d)))
    return outs


@op(aten.constant_pad_nd.default)
def _pad(cx, a):
    x, pad = a["self"], list(a["pad"])
    r = rank(x)
    # ATen lists (begin, end) pairs from the LAST axis backwards; ONNX wants every axis'
    # begin, then every axis' end, first axis first.
    begins, ends = [0] * r, [0] * r
    for i in range(len(pad) // 2):
        begins[r - 1 - i], ends[r - 1 - i] = pad[2 * i], pad[2 * i + 1]
    value = cx.scalar(a["value"], x.dtype)
    return cx.out("Pad", [x, cx.ints(begins + ends), value], mode="constant")


@op(aten.repeat.default)
def _repeat(cx, a):
    x, reps = a["self"], list(a["repeats"])
    if len(reps) > rank(x):  # repeat may add leading axes; Tile needs equal ranks
        shape = (1,) * (len(reps) - rank(x)) + tuple(x.shape)
        x = cx.tmp("Unsqueeze", [x, cx.ints(range(len(reps) - rank(x)))], x.dtype, shape)
    return cx.out("Tile", [x, shape_input(cx, reps)])  # SymInt repeats with dynamic shapes


# ---------------------------------------------------------------------------------------
# creation from another tensor's shape (the inputs are not constants, so no folding)


@op(aten.full_like.default, aten.zeros_like.default, aten.ones_like.default,
    aten.empty_like.default)
def _like(cx, a):
    shape = cx.static_shape()
    fill = {"zeros_like": 0, "ones_like": 1, "empty_like": 0}.get(
        cx.fx.target.__name__.split(".")[0], a.get("fill_value"))
    if shape is None:  # dynamic shapes: broadcast the fill value to the input's runtime shape
        x = a["self"]
        return cx.out("Expand", [cx.scalar(fill, cx.dtype),
                                 cx.tmp("Shape", [x], "int64", (rank(x),))])
    return cx.conv.add_const(cx.name, np.full(shape, fill, dtype=cx.dtype))


# Creation ops whose arguments are all Python numbers are folded into initializers by the
# converter; these emitters only see sizes that are SymInts (dynamic shapes).


@op(aten.full.default)
def _full(cx, a):
    return cx.out("Expand", [cx.scalar(a["fill_value"], cx.dtype), shape_input(cx, a["size"])])


@op(aten.arange.start_step)
def _arange(cx, a):
    dt = cx.dtype
    return cx.out("Range", [cx.as_value(a[k], dt) for k in ("start", "end", "step")])


# ---------------------------------------------------------------------------------------
# SymInts (dynamic shapes): 0-d int64 tensors computed from Shape


@op(aten.sym_size.int)
def _sym_size(cx, a):
    x = a["self"]
    shp = cx.tmp("Shape", [x], "int64", (rank(x),))
    return cx.out("Gather", [shp, cx.const(np.asarray(axis(a["dim"], rank(x)), np.int64), "dim")],
                  axis=0)


def _sym_binary(onnx_op: str):
    def emit(cx, a):
        x, y = (cx.as_value(a[k], "int64") for k in ("arg0", "arg1"))
        return cx.out(onnx_op, [x, y])
    return emit


# Sizes are non-negative, so ONNX's truncating integer Div equals Python's floor division.
for _fn, _onnx in [(operator.add, "Add"), (operator.sub, "Sub"), (operator.mul, "Mul"),
                   (operator.floordiv, "Div")]:
    op(_fn)(_sym_binary(_onnx))


# ---------------------------------------------------------------------------------------
# element-wise indexing along one axis, sorting, running sums


@op(aten.gather.default)
def _gather(cx, a):
    x = a["self"]
    return cx.out("GatherElements", [x, a["index"]], axis=axis(a["dim"], rank(x)))


_SCATTER_REDUCE = {"sum": "add", "prod": "mul", "amax": "max", "amin": "min"}


@op(aten.scatter.src, aten.scatter.value, aten.scatter_add.default, aten.scatter_reduce.two)
def _scatter(cx, a):
    x, idx = a["self"], a["index"]
    src = a.get("src")
    if src is None:  # scatter.value: one number written at every index
        src = cx.tmp("Expand", [cx.scalar(a["value"], x.dtype),
                                cx.tmp("Shape", [idx], "int64", (rank(idx),))], x.dtype, idx.shape)
    name = cx.fx.target.__name__
    reduction = "add" if name.startswith("scatter_add") else "none"
    if name.startswith("scatter_reduce"):
        if a["reduce"] not in _SCATTER_REDUCE or not a["include_self"]:
            raise Unsupported(f"reduce={a['reduce']!r}, include_self={a['include_self']}")
        reduction = _SCATTER_REDUCE[a["reduce"]]
    return cx.out("ScatterElements", [x, idx, cx.cast(src, x.dtype)],
                  axis=axis(a["dim"], rank(x)), reduction=reduction)


@op(aten.topk.default)
def _topk(cx, a):
    # (values, indices); torch's unsorted order is unspecified, so sorted order is as good.
    x = a["self"]
    return cx.out("TopK", [x, cx.ints([a["k"]])], axis=axis(a["dim"], rank(x)),
                  largest=int(bool(a["largest"])), sorted=1)


@op(aten.sort.default, aten.sort.stable)
def _sort(cx, a):
    # A TopK of every element; among equal values it keeps the lower index first (stable).
    x = a["self"]
    d = axis(a["dim"], rank(x))
    n = x.shape[d]
    if isinstance(n, int):
        k = cx.ints([n])
    else:
        shp = cx.tmp("Shape", [x], "int64", (rank(x),))
        k = cx.tmp("Slice", [shp, cx.ints([d]), cx.ints([d + 1])], "int64", (1,))
    return cx.out("TopK", [x, k], axis=d, largest=int(bool(a["descending"])), sorted=1)


@op(aten.cumsum.default)
def _cumsum(cx, a):
    x = a["self"]  # the FX node's dtype: int64 for bool/int inputs, or dtype=
    return cx.out("CumSum", [cx.cast(x, cx.dtype),
                             cx.const(np.asarray(axis(a["dim"], rank(x)), np.int64), "axis")])
