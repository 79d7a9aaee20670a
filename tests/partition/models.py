"""Small dynamic-shape models for the partition tests, built with onnx.helper (no downloads).

Each is an onnx ModelProto that onnxruntime runs too, so that a partitioned run can be checked
against onnxruntime and against the unpartitioned single-stream run of the same graph.
"""
from __future__ import annotations

import numpy as np
from onnx import TensorProto as T
from onnx import helper as h
from onnx import numpy_helper as nh

FLOAT = T.FLOAT


def _w(rng, name, shape):
    return nh.from_array(rng.standard_normal(shape).astype(np.float32) * 0.5, name)


def _model(nodes, name, inputs, outputs, inits):
    g = h.make_graph(nodes, name, inputs, outputs, inits)
    return h.make_model(g, opset_imports=[h.make_opsetid("", 17)])


def _backbone(prefix: str, x: str, w: str, out: str) -> list:
    """MatMul -> Relu -> Add -> Sigmoid: four known nodes, one static sub-model's worth."""
    return [h.make_node("MatMul", [x, w], [f"{prefix}_mm"], name=f"{prefix}_mm"),
            h.make_node("Relu", [f"{prefix}_mm"], [f"{prefix}_r"], name=f"{prefix}_relu"),
            h.make_node("Add", [f"{prefix}_r", f"{prefix}_r"], [f"{prefix}_a"], name=f"{prefix}_add"),
            h.make_node("Sigmoid", [f"{prefix}_a"], [out], name=f"{prefix}_sig")]


def detection(n: int = 32) -> object:
    """A static backbone (boxes and scores branches) with NonMaxSuppression behind it, and a
    static head after the NMS's data-dependent output (Cast/ReduceSum on the dynamic side)."""
    rng = np.random.default_rng(0)
    nodes = _backbone("box", "x", "wb", "boxes0") + _backbone("score", "x", "ws", "s1") + [
        h.make_node("Transpose", ["s1"], ["s2"], name="tr", perm=[1, 0]),
        h.make_node("Unsqueeze", ["s2", "ax"], ["scores"], name="unsq_s"),
        h.make_node("Unsqueeze", ["boxes0", "ax"], ["boxes"], name="unsq_b"),
        h.make_node("NonMaxSuppression", ["boxes", "scores", "mo", "iou", "st"], ["sel"], name="nms"),
        h.make_node("Cast", ["sel"], ["self"], name="cast", to=FLOAT),
        h.make_node("ReduceSum", ["self"], ["picked"], name="rsum", keepdims=0),
    ]
    inits = [_w(rng, "wb", (8, 4)), _w(rng, "ws", (8, 1)), nh.from_array(np.array([0], np.int64), "ax"),
             nh.from_array(np.array([10], np.int64), "mo"), nh.from_array(np.array([0.5], np.float32), "iou"),
             nh.from_array(np.array([0.3], np.float32), "st")]
    return _model(nodes, "det", [h.make_tensor_value_info("x", FLOAT, [n, 8])],
                  [h.make_tensor_value_info("picked", FLOAT, None),
                   h.make_tensor_value_info("boxes0", FLOAT, [n, 4])], inits)


def nonzero_middle(unique: bool = False) -> object:
    """A static part, then NonZero (or Unique) in the middle, then a static part on a fixed-size
    value computed beside it, joined with the dynamic value at the end."""
    rng = np.random.default_rng(1)
    mid = (h.make_node("Unique", ["pre"], ["u"], name="unique", sorted=1) if unique else
           h.make_node("NonZero", ["pre"], ["u"], name="nonzero"))
    nodes = _backbone("pre", "x", "w1", "pre0") + [
        h.make_node("Greater", ["pre0", "half"], ["pre_b"], name="gt"),
        h.make_node("Cast", ["pre_b"], ["pre"], name="cast_pre", to=FLOAT if unique else T.BOOL),
        mid,
        h.make_node("Cast", ["u"], ["uf"], name="cast_u", to=FLOAT),
        h.make_node("ReduceSum", ["uf"], ["usum"], name="usum", keepdims=1),
        *_backbone("post", "pre0", "w2", "post0"),
        h.make_node("Mul", ["post0", "usum"], ["y"], name="join"),
    ]
    inits = [_w(rng, "w1", (6, 6)), _w(rng, "w2", (6, 6)), nh.from_array(np.array(0.5, np.float32), "half")]
    return _model(nodes, "mid", [h.make_tensor_value_info("x", FLOAT, [5, 6])],
                  [h.make_tensor_value_info("y", FLOAT, None)], inits)


def symbolic_batch() -> object:
    """An input with a symbolic batch dim `N` feeding a chain, beside a static branch on a
    fixed-shape input."""
    rng = np.random.default_rng(2)
    nodes = _backbone("dyn", "x", "w1", "d0") + _backbone("st", "z", "w2", "s0") + [
        h.make_node("ReduceMean", ["d0"], ["dm"], name="dmean", axes=[0], keepdims=1),
        h.make_node("Add", ["dm", "s0"], ["y"], name="join"),
    ]
    inits = [_w(rng, "w1", (4, 3)), _w(rng, "w2", (3, 3))]
    return _model(nodes, "symb", [h.make_tensor_value_info("x", FLOAT, ["N", 4]),
                                  h.make_tensor_value_info("z", FLOAT, [2, 3])],
                  [h.make_tensor_value_info("y", FLOAT, [2, 3])], inits)


def control_flow() -> object:
    """A static backbone, a Loop whose trip count is computed at run time and whose scan
    output grows with it (its shape is data), then a static tail on the backbone's output."""
    rng = np.random.default_rng(3)
    body = h.make_graph(
        [h.make_node("Add", ["acc_in", "one"], ["acc_out"], name="body_add"),
         h.make_node("Identity", ["acc_out"], ["scan"], name="body_id"),
         h.make_node("Identity", ["cond_in"], ["cond_out"], name="body_cond")],
        "body", [h.make_tensor_value_info("i", T.INT64, []), h.make_tensor_value_info("cond_in", T.BOOL, []),
                 h.make_tensor_value_info("acc_in", FLOAT, [3])],
        [h.make_tensor_value_info("cond_out", T.BOOL, []), h.make_tensor_value_info("acc_out", FLOAT, [3]),
         h.make_tensor_value_info("scan", FLOAT, [3])],
        [nh.from_array(np.array(1.0, np.float32), "one")])
    nodes = _backbone("bb", "x", "w1", "b0") + [
        h.make_node("ReduceSum", ["x"], ["xs"], name="xsum", keepdims=0),
        h.make_node("Abs", ["xs"], ["xa"], name="xabs"),
        h.make_node("Cast", ["xa"], ["trip"], name="trip", to=T.INT64),
        h.make_node("Loop", ["trip", "true", "acc0"], ["acc", "scans"], name="loop", body=body),
        h.make_node("ReduceSum", ["scans"], ["ls"], name="lsum", keepdims=0),
        *_backbone("tail", "b0", "w2", "t0"),
        h.make_node("Mul", ["t0", "ls"], ["y"], name="join"),
    ]
    inits = [_w(rng, "w1", (3, 3)), _w(rng, "w2", (3, 3)), nh.from_array(np.array(True), "true"),
             nh.from_array(np.zeros(3, np.float32), "acc0")]
    return _model(nodes, "cf", [h.make_tensor_value_info("x", FLOAT, [2, 3])],
                  [h.make_tensor_value_info("y", FLOAT, None), h.make_tensor_value_info("acc", FLOAT, [3])], inits)


def static_chain() -> object:
    """No dynamic shape at all: compiles as one static model."""
    rng = np.random.default_rng(4)
    return _model(_backbone("a", "x", "w", "y"), "plain", [h.make_tensor_value_info("x", FLOAT, [2, 3])],
                  [h.make_tensor_value_info("y", FLOAT, [2, 3])], [_w(rng, "w", (3, 3))])


FEEDS = {
    "det": lambda rng: {"x": rng.standard_normal((32, 8)).astype(np.float32)},
    "mid": lambda rng: {"x": rng.standard_normal((5, 6)).astype(np.float32)},
    "symb": lambda rng: {"x": rng.standard_normal((7, 4)).astype(np.float32),
                         "z": rng.standard_normal((2, 3)).astype(np.float32)},
    "cf": lambda rng: {"x": rng.standard_normal((2, 3)).astype(np.float32) + 1.0},
    "plain": lambda rng: {"x": rng.standard_normal((2, 3)).astype(np.float32)},
}
