"""Focused kernel tests for tricky ONNX semantics, checked against references no one here
wrote: onnx's ReferenceEvaluator, onnxruntime and numpy (node_checks.py: the one-node
harness and its tolerances). Convolution and pooling geometry: test_ops_nn.py; the onnx
package's own node test cases: test_onnx_node_cases.py.
"""
from __future__ import annotations

import numpy as np
import onnx
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from onnx import TensorProto, helper, numpy_helper

from pyge.frontends import load_onnx

from .node_checks import ATOL, RTOL, _feeds, _model, _pyge, check

RNG = np.random.default_rng(0)


def f32(*shape):
    return RNG.standard_normal(shape).astype(np.float32)

# ---------------------------------------------------------------------------------------
# opset-dependent semantics


@pytest.mark.parametrize("op", ["Softmax", "LogSoftmax", "Hardmax"])
@pytest.mark.parametrize("opset,axis", [(11, 1), (11, None), (11, -1), (13, 1), (13, None)])
def test_softmax_family_opsets(op, opset, axis):
    # opset < 13: the input is coerced to 2-D at `axis`; >= 13: one axis. (onnxruntime:
    # the ReferenceEvaluator implements only the opset-13 semantics.)
    attrs = {} if axis is None else {"axis": axis}
    check(op, {"x": f32(2, 3, 4, 5)}, attrs, opset, ref="ort")


@pytest.mark.parametrize("op", ["Softmax", "LogSoftmax", "Hardmax"])
@pytest.mark.parametrize("opset,shape", [(11, (0, 1, 4)), (11, (3, 0, 2)), (13, (3, 0, 0)),
                                         (13, (2, 0))])
def test_softmax_family_empty_inputs(op, opset, shape):
    # An empty input gives an empty output (the opset-11 2-D coercion and Hardmax's argmax
    # raised on zero-size dimensions).
    x = np.zeros(shape, np.float32)
    got = _pyge(_model(op, {"x": x}, {}, opset), {"x": x})[0]
    assert got.shape == shape and got.dtype == np.float32


@pytest.mark.parametrize("const", [True, False])
@pytest.mark.parametrize("opset,attrs,split", [
    (11, {"axis": 1, "split": [2, 4]}, None),
    (11, {"axis": 1}, None),
    (13, {"axis": 1}, np.array([1, 5], np.int64)),
    (13, {"axis": -1}, None),
    (18, {"axis": 1, "num_outputs": 2}, None),
])
def test_split_opsets(opset, attrs, split, const):
    n_out = 2
    x = f32(3, 6, 4) if attrs.get("axis") != -1 else f32(3, 4, 6)
    inputs = {"x": x, "split": split} if split is not None else {"x": x}
    check("Split", inputs, attrs, opset, n_out, consts=("split",) if const else ())


def test_split_uneven_num_outputs():
    m = _model("Split", {"x": f32(7, 2)}, {"axis": 0, "num_outputs": 3}, 18, 3)
    got = _pyge(m, {"x": np.arange(14, dtype=np.float32).reshape(7, 2)})
    assert [g.shape[0] for g in got] == [3, 3, 1]  # ceil(7/3) = 3, the last one smaller


@pytest.mark.parametrize("const", [True, False])
@pytest.mark.parametrize("op,opset,axes,keep", [
    ("ReduceSum", 11, [1], 1), ("ReduceSum", 13, [1, -1], 0), ("ReduceSum", 13, None, 1),
    ("ReduceMean", 13, [0, 2], 1), ("ReduceMean", 18, [-2], 0), ("ReduceMax", 18, [1], 1),
    ("ReduceMin", 11, [2], 0), ("ReduceProd", 18, [0], 1), ("ReduceL2", 18, [1, 2], 0),
    ("ReduceL1", 13, [1], 1), ("ReduceLogSumExp", 18, [2], 1), ("ReduceSumSquare", 18, None, 0),
])
def test_reduce_axes_attr_and_input(op, opset, axes, keep, const):
    as_input = opset >= (13 if op == "ReduceSum" else 18)
    attrs = {"keepdims": keep}
    inputs = {"x": f32(3, 4, 5)}
    if axes is not None:
        if as_input:
            inputs["axes"] = np.array(axes, np.int64)
        else:
            attrs["axes"] = axes
    check(op, inputs, attrs, opset, consts=("axes",) if const else ())


def test_reduce_noop_with_empty_axes():
    x = f32(2, 3)
    m = _model("ReduceSum", {"x": x, "axes": np.array([], np.int64)},
               {"noop_with_empty_axes": 1}, 13, consts=("axes",))
    np.testing.assert_array_equal(_pyge(m, {"x": x})[0], x)


@pytest.mark.parametrize("op,fn", [
    ("ReduceL1", np.abs), ("ReduceL2", np.abs), ("ReduceSumSquare", np.square),
    ("ReduceLogSum", np.log), ("ReduceLogSumExp", lambda x: x), ("ReduceMean", lambda x: x),
])
def test_reduce_over_no_axis_keeps_elementwise_steps(op, fn):
    # Reducing over an empty set of axes (noop_with_empty_axes=1, or a 0-d input) skips
    # only the reduction: ReduceL1 is still Abs, ReduceSumSquare still Square...
    x = np.abs(f32(2, 3)) * np.array([1, -1, 1], np.float32) + 0.5
    m = _model(op, {"x": x}, {"noop_with_empty_axes": 1}, 18)
    with np.errstate(invalid="ignore"):
        np.testing.assert_allclose(_pyge(m, {"x": x})[0], fn(x), rtol=1e-6)
        x0 = np.array(-2.5, np.float32)
        got = _pyge(_model(op, {"x": x0}, {"keepdims": 0}, 13), {"x": x0})[0]
        assert got.shape == ()
        np.testing.assert_allclose(got, fn(x0), rtol=1e-6)


def test_reduce_integer_results_keep_the_type():
    x = np.array([[3, 3, -2], [-3, -3, -9], [1, 2, 3]], np.int32)
    for op, exp in [("ReduceProd", [-18, -81, 6]), ("ReduceLogSumExp", [3, -2, 3]),
                    ("ReduceLogSum", [2, 2, 1])]:
        xx = np.abs(x) if op == "ReduceLogSum" else x
        got = _pyge(_model(op, {"x": xx, "a": np.array([1], np.int64)}, {"keepdims": 0}, 18,
                           consts=("a",)), {"x": xx})[0]
        assert got.dtype == np.int32, (op, got.dtype)
        np.testing.assert_array_equal(got, exp)


@pytest.mark.parametrize("opset", [11, 13])
def test_squeeze_unsqueeze_opsets(opset):
    x = f32(1, 3, 1, 4)
    if opset < 13:
        check("Squeeze", {"x": x}, {"axes": [0, -2]}, opset)
        check("Unsqueeze", {"x": f32(3, 4)}, {"axes": [0, -1, 2]}, opset)
    else:
        check("Squeeze", {"x": x, "a": np.array([2], np.int64)}, None, opset, consts=("a",))
        check("Squeeze", {"x": x}, None, opset)
        check("Unsqueeze", {"x": f32(3, 4), "a": np.array([-1, 0], np.int64)}, None, opset)


@pytest.mark.parametrize("opset,attrs,bounds", [
    (6, {"min": -0.5, "max": 0.5}, {}), (6, {"max": 0.1}, {}),
    (11, {}, {"lo": np.float32(-0.2)}), (13, {}, {"lo": None, "hi": np.float32(0.3)}),
    (13, {}, {"lo": np.float32(1.0), "hi": np.float32(-1.0)}),  # min > max: all become max
])
def test_clip_forms(opset, attrs, bounds):
    check("Clip", {"x": f32(4, 5), **bounds}, attrs, opset, consts=tuple(bounds))


def test_clip6_default_bounds_are_the_float_range():
    # Clip-6's min/max default to -/+3.4028234663852886e38: infinities are clipped to them.
    x = np.array([-np.inf, -1.0, 2.0, np.inf], np.float32)
    big = np.finfo(np.float32).max
    got = _pyge(_model("Clip", {"x": x}, {"max": 1.0}, 6), {"x": x})[0]
    np.testing.assert_array_equal(got, [-big, -1.0, 1.0, 1.0])
    got = _pyge(_model("Clip", {"x": x}, {}, 6), {"x": x})[0]
    np.testing.assert_array_equal(got, [-big, -1.0, 2.0, big])


def test_clip_int():
    x = np.arange(-5, 6, dtype=np.int32)
    check("Clip", {"x": x, "lo": np.int32(-2), "hi": np.int32(3)}, None, 13)


def test_legacy_broadcast_add_with_axis():
    # Opset < 7: B is aligned with A starting at `axis`, not at the trailing axes.
    a, b = f32(2, 3, 4, 5), f32(3, 4)
    m = _model("Add", {"a": a, "b": b}, {"broadcast": 1, "axis": 1}, 6)
    got = _pyge(m, {"a": a, "b": b})[0]
    np.testing.assert_allclose(got, a + b[None, :, :, None], rtol=RTOL, atol=ATOL)


# ---------------------------------------------------------------------------------------
# Slice / Pad


@pytest.mark.parametrize("const", [True, False])
@pytest.mark.parametrize("starts,ends,axes,steps", [
    ([1, 0], [3, 10], [0, 1], [1, 2]), ([-1], [-100], [1], [-1]),
    ([4, 2], [0, 0], [2, 1], [-2, -1]),
    ([0], [2**62], [-1], [3]), ([10], [-1], [0], [-3]),
])
def test_slice_input_form(starts, ends, axes, steps, const):
    i64 = lambda v: np.array(v, np.int64)  # noqa: E731
    inputs = {"x": f32(5, 6, 7), "s": i64(starts), "e": i64(ends), "a": i64(axes), "p": i64(steps)}
    check("Slice", inputs, None, 13, consts=("s", "e", "a", "p") if const else ())


def test_slice_attr_form():
    check("Slice", {"x": f32(5, 6)}, {"starts": [1, -3], "ends": [100, -1], "axes": [0, 1]}, 9)


@settings(max_examples=40, deadline=None)
@given(st.lists(st.tuples(st.integers(-9, 9), st.integers(-9, 9),
                          st.sampled_from([-3, -2, -1, 1, 2, 3])), min_size=1, max_size=3))
def test_slice_matches_numpy(spec):
    x = np.arange(7 * 8 * 9, dtype=np.float32).reshape(7, 8, 9)
    starts, ends, steps = (np.array([s[i] for s in spec], np.int64) for i in range(3))
    axes = np.arange(len(spec), dtype=np.int64)
    m = _model("Slice", {"x": x, "s": starts, "e": ends, "a": axes, "p": steps}, None, 13,
               consts=("s", "e", "a", "p"))
    got = _pyge(m, {"x": x})[0]
    exp = x[tuple(_onnx_slice(s, e, p, d) for (s, e, p), d in zip(spec, x.shape))]
    np.testing.assert_array_equal(got, exp)


def _onnx_slice(start, end, step, dim):
    """The spec's clamping as a numpy slice. It is numpy's, except that for negative steps a
    start below -dim is clamped to 0 (numpy: an empty range)."""
    if step > 0:
        return slice(start, end, step)
    s = min(max(start + dim if start < 0 else start, 0), dim - 1)
    e = min(max(end + dim if end < 0 else end, -1), dim - 1)
    return slice(s, None if e < 0 else e, step)


@pytest.mark.parametrize("const", [True, False])
def test_slice_negative_step_start_below_minus_dim(const):
    # starts < -dim are clamped to 0 for negative steps: element 0 is taken (numpy's and
    # Python's slices give nothing there); onnxruntime agrees.
    x = np.arange(4, dtype=np.float32)
    for start, end, step, exp in [(-5, -6, -3, [0.0]), (-9, -2**63, -1, [0.0]), (-9, 2, -1, []),
                                  (-3, -2**31, -2, [1.0])]:
        i64 = lambda v: np.array([v], np.int64)  # noqa: E731
        inputs = {"x": x, "s": i64(start), "e": i64(end), "a": i64(0), "p": i64(step)}
        consts = ("s", "e", "a", "p") if const else ()
        got = _pyge(_model("Slice", inputs, None, 13, consts=consts), _feeds(inputs, consts))[0]
        np.testing.assert_array_equal(got, np.array(exp, np.float32))


@pytest.mark.parametrize("mode", ["constant", "reflect", "edge"])
def test_pad_attr_form(mode):
    check("Pad", {"x": f32(2, 3, 4, 5)}, {"mode": mode, "pads": [0, 0, 1, 2, 0, 0, 2, 1],
                                          "value": 1.5}, 2)


@pytest.mark.parametrize("const", [True, False])
@pytest.mark.parametrize("mode", ["constant", "reflect", "edge", "wrap"])
def test_pad_input_form(mode, const):
    pads = np.array([1, 0, 2, 0, 3, 1], np.int64)
    inputs = {"x": f32(3, 4, 5), "p": pads, "v": np.float32(-2.0) if mode == "constant" else None}
    check("Pad", inputs, {"mode": mode}, 19, consts=("p", "v") if const else ())


def test_pad_negative_crops():
    pads = np.array([1, -1, 2, 0, -2, 1], np.int64)
    inputs = {"x": f32(3, 4, 5), "p": pads, "v": np.float32(3.0)}
    check("Pad", inputs, {"mode": "constant"}, 13, consts=("p", "v"), ref="ort")


def test_pad_axes_input():
    inputs = {"x": f32(3, 4, 5), "p": np.array([1, 2, 0, 3], np.int64), "v": None,
              "a": np.array([-1, 0], np.int64)}
    check("Pad", inputs, {"mode": "reflect"}, 18, consts=("p", "a"))


# ---------------------------------------------------------------------------------------
# arithmetic and broadcasting


def test_integer_division_truncates():
    a = np.array([7, -7, 7, -7, 0, 5], np.int32)
    b = np.array([2, 2, -2, -2, 3, -5], np.int32)
    m = _model("Div", {"a": a, "b": b})
    np.testing.assert_array_equal(_pyge(m, {"a": a, "b": b})[0], np.array([3, -3, -3, 3, 0, -1]))
    check("Div", {"a": a.astype(np.int64), "b": b.astype(np.int64)})


@pytest.mark.parametrize("fmod,dtype", [(0, np.int32), (0, np.int64), (1, np.int32), (1, np.int64),
                                        (1, np.float32)])  # fmod=0 is for integers only
def test_mod_signs(fmod, dtype):
    a = np.array([5, -5, 5, -5, 7, -8], dtype)
    b = np.array([3, 3, -3, -3, 2, 3], dtype)
    check("Mod", {"a": a, "b": b}, {"fmod": fmod}, 13)


@pytest.mark.parametrize("dtype", [np.float32, np.float16, np.float64])
def test_sign_keeps_nan(dtype):
    # torch.sign(NaN) is 0; ONNX's Sign (numpy's sign, onnxruntime) returns NaN.
    x = np.array([np.nan, -np.inf, -2.5, -0.0, 0.0, 3.0, np.inf], dtype)
    check("Sign", {"x": x}, None, 13)
    check("Sign", {"x": np.array([-3, 0, 4], np.int32)}, None, 13)


@pytest.mark.parametrize("op", ["Add", "Sub", "Mul", "Div", "Pow", "Max", "Min", "Equal", "Less",
                                "Greater", "Sum", "Mean"])
def test_broadcasting(op):
    a, b = np.abs(f32(3, 1, 5)) + 0.5, np.abs(f32(4, 1)) + 0.5
    # onnxruntime for Mean: the ReferenceEvaluator's Mean cannot broadcast.
    check(op, {"a": a, "b": b}, ref="ort" if op == "Mean" else "onnx")


@pytest.mark.parametrize("op", ["Max", "Min", "Sum", "Mean"])
def test_variadic_three_inputs(op):
    check(op, {"a": f32(2, 1, 3), "b": f32(4, 1), "c": f32(3)}, ref="ort")


def test_where_broadcast_and_pow_mixed_types():
    check("Where", {"c": RNG.random((3, 1)) > 0.5, "a": f32(1, 4), "b": f32(3, 4)})
    check("Pow", {"x": f32(3, 4), "y": np.array(2, np.int64)}, None, 15)
    check("Pow", {"x": np.array([1, 2, 3], np.int32),
                  "y": np.array([2.0, 0.5, 1.0], np.float32)}, None, 15)


def test_cast_strings_round_trip():
    x = np.array([1.5, -2.0, np.inf, -np.inf, 0.1], np.float32)
    m = _model("Cast", {"x": x}, {"to": TensorProto.STRING}, 13)
    s = _pyge(m, {"x": x})[0]
    assert s.dtype == object
    back = _model("Cast", {"s": s}, {"to": TensorProto.FLOAT}, 13)
    np.testing.assert_array_equal(_pyge(back, {"s": s})[0], x)
    ints = np.array(["-3", "17", "0"], dtype=object)
    check("Cast", {"s": ints}, {"to": TensorProto.INT64}, 13)


@pytest.mark.parametrize("to", [TensorProto.INT32, TensorProto.UINT8, TensorProto.BOOL,
                                TensorProto.FLOAT16, TensorProto.DOUBLE, TensorProto.INT64])
def test_cast_numeric(to):
    x = np.array([[0.0, 1.7, -2.9], [3.5, 250.0, 1.0]], np.float32)
    check("Cast", {"x": x}, {"to": to}, 13)


# ---------------------------------------------------------------------------------------
# indexing


@pytest.mark.parametrize("const", [True, False])
@pytest.mark.parametrize("indices", [np.array([[0, -1], [2, -3]], np.int64), np.array(-2, np.int64),
                                     np.array(1, np.int32)])
def test_gather(indices, const):
    check("Gather", {"x": f32(3, 4, 5), "i": indices}, {"axis": 1}, 13,
          consts=("i",) if const else ())


@pytest.mark.parametrize("b,x_shape,i_shape", [(1, (0, 3, 2), (0, 1, 1)),
                                           (2, (2, 0, 4), (2, 0, 3, 1)), (0, (3, 2), (0, 2))])
def test_gather_nd_empty(b, x_shape, i_shape):
    # Zero batch entries or zero index tuples: an empty result of the right shape (the
    # batch reshape used -1, which torch cannot infer for 0 elements).
    x, i = np.zeros(x_shape, np.float32), np.zeros(i_shape, np.int64)
    check("GatherND", {"x": x, "i": i}, {"batch_dims": b}, 13, ref="ort")


@pytest.mark.parametrize("largest", [0, 1])
def test_topk_ties_keep_lower_index(largest):
    x = np.array([[3, 1, 3, 2, 1, 3], [0, 0, 0, 0, 0, 0]], np.float32)
    check("TopK", {"x": x, "k": np.array([4], np.int64)}, {"largest": largest}, 11, n_out=2,
          consts=("k",))


def test_gemm_variants():
    check("Gemm", {"a": f32(4, 3), "b": f32(5, 4), "c": f32(5)},
          {"transA": 1, "transB": 1, "alpha": 0.5, "beta": 2.0}, 13)
    check("Gemm", {"a": f32(3, 4), "b": f32(4, 5), "c": f32(3, 1)}, None, 13)
    check("Gemm", {"a": f32(3, 4), "b": f32(4, 5)}, {"alpha": 3.0}, 13)


@pytest.mark.parametrize("dtype", [np.int32, np.int64])
def test_gemm_integer_keeps_type(dtype):
    # Gemm on integers returns T even with float alpha/beta (the reference truncates the
    # float product, as numpy's astype does); the result was promoted to float32.
    a, b = RNG.integers(-5, 6, (3, 4)).astype(dtype), RNG.integers(-5, 6, (4, 2)).astype(dtype)
    c = RNG.integers(-5, 6, (2,)).astype(dtype)
    check("Gemm", {"a": a, "b": b, "c": c}, {"alpha": 1.5, "beta": -0.5}, 13)
    check("Gemm", {"a": a, "b": b}, {"alpha": -2.5}, 13)
    check("Gemm", {"a": a, "b": b, "c": c}, {"alpha": 2.0}, 13)


def test_batch_norm_training_mode():
    inputs = {"x": f32(2, 3, 4), "s": f32(3), "b": f32(3), "m": f32(3), "v": np.abs(f32(3)) + 0.5}
    check("BatchNormalization", inputs, {"training_mode": 1, "momentum": 0.8}, 15, n_out=3)


@pytest.mark.parametrize("shape", [(2, 3, 1), (1, 3, 1, 1, 1), (2, 3, 4)])
def test_instance_norm_single_spatial_element(shape):
    # A plane of one element normalises to 0 (the result is the bias); torch's
    # instance_norm raised "Expected more than 1 spatial element".
    check("InstanceNormalization", {"x": f32(*shape), "s": f32(3), "b": f32(3)},
          {"epsilon": 0.1}, 6, ref="ort")


@pytest.mark.parametrize("dtype", [np.float64, np.float16, np.float32])
def test_layer_norm_statistics_have_the_stash_type(dtype):
    # Mean and InvStdDev are of type U = stash_type (float32 by default), whatever X's type.
    x = f32(3, 4, 5).astype(dtype)
    inputs = {"x": x, "s": f32(5).astype(dtype), "b": f32(5).astype(dtype)}
    check("LayerNormalization", inputs, {"axis": -1}, 17, n_out=3, ref="ort",
          atol=1e-2 if dtype == np.float16 else 1e-6)


@pytest.mark.parametrize("opset", [6, 9, 15])
def test_batch_norm_inference(opset):
    # Checked against the spec's formula in numpy (onnxruntime has no opset-6 kernel, and
    # the ReferenceEvaluator of onnx 1.23 is off for opset 9).
    inputs = {"x": f32(2, 3, 4, 5), "s": f32(3), "b": f32(3), "m": f32(3),
              "v": np.abs(f32(3)) + 0.5}
    attrs = {"epsilon": 1e-3} if opset >= 7 else {"epsilon": 1e-3, "is_test": 1}
    m = _model("BatchNormalization", inputs, attrs, opset)
    got = _pyge(m, _feeds(inputs, ()))[0]
    c = (1, 3, 1, 1)
    exp = (inputs["x"] - inputs["m"].reshape(c)) / np.sqrt(inputs["v"].reshape(c) + 1e-3) \
        * inputs["s"].reshape(c) + inputs["b"].reshape(c)
    np.testing.assert_allclose(got, exp, rtol=RTOL, atol=1e-6)


def test_dropout_inference_returns_mask():
    x = f32(3, 4)
    m = _model("Dropout", {"x": x, "r": np.float32(0.3)}, None, 13, n_out=2, consts=("r",))
    y, mask = _pyge(m, {"x": x})
    np.testing.assert_array_equal(y, x)
    assert mask.dtype == np.bool_ and mask.all()


def test_upsample_opset9_nearest():
    check("Upsample", {"x": f32(1, 2, 3, 4), "s": np.array([1, 1, 2, 3], np.float32)},
          {"mode": "nearest"}, 9, consts=("s",), ref="ort")


def test_scalar_constants_stay_0d():
    # Constant's value (and the numpy fallback of uint16/32/64 ops) went through
    # np.ascontiguousarray, which turns a 0-d array into shape (1,).
    import pyge
    c = lambda n, v: helper.make_node(  # noqa: E731
        "Constant", [], [n], value=numpy_helper.from_array(np.array(v, np.float32)))
    nodes = [c("a", 2.0), c("b", 3.0), helper.make_node("Mul", ["a", "b"], ["y0"]),
             helper.make_node("Add", ["x", "a"], ["y1"]), helper.make_node("Identity", ["a"], ["y2"])]
    g = helper.make_graph(nodes, "t", [helper.make_tensor_value_info("x", TensorProto.FLOAT, [])],
                          [onnx.ValueInfoProto(name=f"y{i}") for i in range(3)])
    m = helper.make_model(g, opset_imports=[helper.make_opsetid("", 13)])
    m.ir_version = 8
    x = np.array(1.0, np.float32)
    for got in (_pyge(m, {"x": x}), list(pyge.compile(load_onnx(m)).run({"x": x}).values())):
        assert [a.shape for a in got] == [(), (), ()]
    for dtype in (np.uint16, np.uint32, np.uint64):
        a, b = np.array(22, dtype), np.array(3, dtype)
        got = _pyge(_model("BitShift", {"a": a, "b": b}, {"direction": "LEFT"}, 13),
                    {"a": a, "b": b})[0]
        assert got.shape == () and got == 176


def test_constant_of_shape_and_range():
    m = _model("ConstantOfShape", {"s": np.array([2, 3], np.int64)},
               {"value": numpy_helper.from_array(np.array([7], np.int32))}, 13)
    got = _pyge(m, {"s": np.array([2, 3], np.int64)})[0]
    assert got.dtype == np.int32 and got.shape == (2, 3) and (got == 7).all()
    check("Range", {"a": np.float32(1.0), "b": np.float32(2.05), "c": np.float32(0.1)}, None, 13)
    check("Range", {"a": np.int64(10), "b": np.int64(-3), "c": np.int64(-4)}, None, 13)
