"""MatMul and Gemm choose oneDNN's packed product or torch's by shape (nn_matmul.packed_wins):
the packed path only from PACKED_MIN_WEIGHT's weight sizes on, per call by the row count.
Both sides of each boundary are checked against onnxruntime, and the path taken is seen
through a spy on oneDNN's entry point."""
from __future__ import annotations

import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper

import pyge
from pyge.kernels import nn_matmul

ort = pytest.importorskip("onnxruntime")

GEMV_MIN, GEMM_MIN, MANY_MIN = nn_matmul.PACKED_MIN_WEIGHT


class _Spy:
    def __init__(self, real):
        self.real, self.calls = real, 0

    def _linear_pointwise(self, *a):
        self.calls += 1
        return self.real._linear_pointwise(*a)

    def __getattr__(self, name):
        return getattr(self.real, name)


@pytest.fixture
def spy(monkeypatch):
    if not nn_matmul.PACKED_LINEAR_OK:
        pytest.skip("this torch has no oneDNN linear (torch.ops.mkldnn._linear_pointwise)")
    s = _Spy(nn_matmul.MKLDNN)
    monkeypatch.setattr(nn_matmul, "MKLDNN", s)
    return s


def _model(op: str, k: int, n: int, rng, bias: bool, trans_b: int = 0) -> onnx.ModelProto:
    w = (rng.standard_normal((n, k) if trans_b else (k, n)) / np.sqrt(k)).astype(np.float32)
    inits = [onnx.numpy_helper.from_array(w, "w")]
    ins = ["a", "w"]
    if bias:
        inits.append(onnx.numpy_helper.from_array(rng.standard_normal(n).astype(np.float32), "c"))
        ins.append("c")
    attrs = {"transB": trans_b} if op == "Gemm" else {}
    node = helper.make_node(op, ins, ["y"], **attrs)
    graph = helper.make_graph([node], "gemm_choice",
                              [helper.make_tensor_value_info("a", TensorProto.FLOAT, ["rows", k])],
                              [helper.make_tensor_value_info("y", TensorProto.FLOAT, ["rows", n])],
                              inits)
    m = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 13)])
    m.ir_version = 8
    return m


def _near(target: int, rng) -> list[tuple[int, int]]:
    """(K, N) pairs just below and at or above `target` weight elements, of random shapes."""
    out = []
    for _ in range(2):
        k = int(rng.integers(256, 1025)) // 8 * 8
        n_at = -(-target // k)                      # smallest N with K*N >= target
        out += [(k, n_at - 1), (k, n_at)]
    return out


def _check(op: str, k: int, n: int, rows: int, spy, rng, bias=False, trans_b=0) -> bool:
    """Run pyge against onnxruntime; returns whether the packed path ran."""
    m = _model(op, k, n, rng, bias, trans_b)
    model = pyge.compile(pyge.load_onnx(m), "cpu")
    sess = ort.InferenceSession(m.SerializeToString(), providers=["CPUExecutionProvider"])
    a = rng.standard_normal((rows, k)).astype(np.float32)
    before = spy.calls
    got = model.run({"a": a})["y"]
    np.testing.assert_allclose(got, sess.run(None, {"a": a})[0], rtol=1e-4, atol=1e-4)
    return spy.calls > before


@pytest.mark.parametrize("op,bias,trans_b", [("MatMul", False, 0), ("Gemm", True, 0),
                                              ("Gemm", True, 1), ("Gemm", False, 1)])
@pytest.mark.parametrize("rows", [1, 2, 5, 63, 64, 70])
def test_both_sides_of_the_boundary_match_onnxruntime(op, bias, trans_b, rows, spy):
    rng = np.random.default_rng(rows * 7 + trans_b + 2 * bias)
    target = GEMV_MIN if rows == 1 else GEMM_MIN if rows < nn_matmul.MANY_ROWS else MANY_MIN
    for k, n in _near(target, rng):
        packed = _check(op, k, n, rows, spy, rng, bias, trans_b)
        assert packed == (k * n >= target), (op, rows, k, n)


def test_one_model_switches_path_with_the_row_count(spy):
    """A weight between the boundaries: one row takes torch's path, several the packed;
    another, only many rows the packed."""
    rng = np.random.default_rng(5)
    cases = [((512, 512), ((1, False), (3, True), (1, False), (8, True))),    # GEMM_MIN..GEMV_MIN
             ((256, 320), ((1, False), (8, False), (64, True), (2, False)))]  # MANY_MIN..GEMM_MIN
    for (k, n), runs in cases:
        _switches(k, n, runs, rng, spy)


def _switches(k: int, n: int, runs, rng, spy) -> None:
    m = _model("MatMul", k, n, rng, bias=False)
    model = pyge.compile(pyge.load_onnx(m), "cpu")
    sess = ort.InferenceSession(m.SerializeToString(), providers=["CPUExecutionProvider"])
    for rows, packed in runs:
        a = rng.standard_normal((rows, k)).astype(np.float32)
        before = spy.calls
        np.testing.assert_allclose(model.run({"a": a})["y"], sess.run(None, {"a": a})[0],
                                   rtol=1e-4, atol=1e-4)
        assert (spy.calls > before) == packed, rows


def test_small_weights_never_pack(spy):
    rng = np.random.default_rng(9)
    for rows in (1, 4, 64):
        assert not _check("MatMul", 64, 64, rows, spy, rng)
        assert not _check("Gemm", 128, 128, rows, spy, rng, bias=True, trans_b=1)


def test_the_table():
    assert nn_matmul.packed_wins(1, 1024, 1024) and not nn_matmul.packed_wins(1, 64, 64)
    assert not nn_matmul.packed_wins(1, 512, 512) and nn_matmul.packed_wins(2, 512, 512)
    assert nn_matmul.packed_wins(2, 384, 384) and not nn_matmul.packed_wins(2, 256, 256)
    assert nn_matmul.packed_wins(64, 256, 256) and not nn_matmul.packed_wins(63, 256, 256)
    assert MANY_MIN <= GEMM_MIN <= GEMV_MIN     # a weight packed for few rows is for more
