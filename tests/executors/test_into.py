"""Kernels writing into the memory plan's buffers (executors/into.py): which nodes do, and
that no result is corrupted where a buffer is reused, on one stream and on several."""
from __future__ import annotations

import random

import numpy as np
import onnx
import onnxruntime as ort
import pytest
from onnx import TensorProto, helper, numpy_helper

import pyge
from pyge.executors.cpu import CpuExecutor
from pyge.executors.sequential import SequentialExecutor
from pyge.frontends.onnx_proto import graph_to_model
from pyge.kernels.nn_matmul import PACKED_MIN_WEIGHT

from .helpers import random_feeds, random_graph, random_streams, replan


def _ort(model: onnx.ModelProto, feeds: dict) -> dict:
    sess = ort.InferenceSession(model.SerializeToString(), providers=["CPUExecutionProvider"])
    names = [o.name for o in sess.get_outputs()]
    return dict(zip(names, sess.run(None, feeds)))


def _close(got: dict, want: dict, tol: float = 1e-5) -> None:
    assert got.keys() == want.keys()
    for k in want:
        np.testing.assert_allclose(got[k], want[k], rtol=tol, atol=tol, err_msg=k)


def _chain_model(branches=4, depth=20, dim=64, rows=1, k=None, seed=0) -> onnx.ModelProto:
    """bench_small_ops' graph: branches x depth (MatMul + Tanh), summed."""
    k = k or dim
    rng = np.random.default_rng(seed)
    nodes, inits, ends = [], [], []
    for b in range(branches):
        prev, width = "x", k
        for i in range(depth):
            w = f"w{b}_{i}"
            inits.append(numpy_helper.from_array(
                (rng.standard_normal((width, dim)) / np.sqrt(width)).astype(np.float32), w))
            nodes.append(helper.make_node("MatMul", [prev, w], [f"m{b}_{i}"], name=f"MatMul_{b}_{i}"))
            nodes.append(helper.make_node("Tanh", [f"m{b}_{i}"], [f"t{b}_{i}"], name=f"Tanh_{b}_{i}"))
            prev, width = f"t{b}_{i}", dim
        ends.append(prev)
    nodes.append(helper.make_node("Sum", ends, ["y"], name="Sum"))
    graph = helper.make_graph(
        nodes, "chains", [helper.make_tensor_value_info("x", TensorProto.FLOAT, [rows, k])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, [rows, dim])], inits)
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])


def _written(ex) -> set[str]:
    """Names of the nodes whose results go into planned buffers."""
    into = ex.into()
    return {ex.plan.nodes[i].name for i, c in enumerate(into.calls) if c is not None}


@pytest.mark.parametrize("opts", [{}, {"ge.autoMultistreamParallelMode": "LoadBalance:4"}],
                         ids=["one-stream", "lb4"])
def test_bench_graph_writes_every_product_and_tanh_and_matches_onnxruntime(opts):
    mp = _chain_model()
    cm = pyge.compile(pyge.load_onnx(mp), "cpu", opts)
    ex = cm.executor
    assert len(_written(ex)) == 160                  # every MatMul and Tanh; Sum is an output
    rng = np.random.default_rng(1)
    kept = []
    for _ in range(3):                               # the caller keeps every run's result
        x = rng.standard_normal((1, 64)).astype(np.float32)
        y = cm.run({"x": x})["y"]
        _close({"y": y}, _ort(mp, {"x": x}))
        kept.append((y, y.copy()))
    for y, copy in kept:                             # ... and later runs never touch them
        np.testing.assert_array_equal(y, copy)


def test_random_dags_equal_the_run_without_planned_buffers_and_onnxruntime():
    for seed in range(12):
        rng = random.Random(seed)
        g = random_graph(rng, 10 + 4 * seed)
        single = pyge.compile(g, "cpu", {"ge.enableSingleStream": "true"})
        feeds = random_feeds(single, seed)
        plain = SequentialExecutor(single.graph, single.plan, "cpu", into=False)
        want = plain.run(feeds)
        _close(want, _ort(graph_to_model(single.graph), feeds))
        seq = SequentialExecutor(single.graph, single.plan, "cpu")
        assert _written(seq), seed
        multi = replan(single, random_streams(2 + seed % 3, seed))
        ex = CpuExecutor(multi.graph, multi.plan, "cpu", multi.options)
        try:
            for _ in range(2):
                _close(seq.run(feeds), want)
                _close(ex.run(feeds), want)
        finally:
            ex.close()


def _view_graph():
    """m = MatMul(x, w) is read by Reshape (a view in torch), whose value r lives on while
    a run of out= writes could take m's bytes; y reads r at the end."""
    b = pyge.GraphBuilder("views")
    x = b.input("x", "float32", (1, 16))
    rng = np.random.default_rng(0)
    w = b.initializer("w", (rng.standard_normal((16, 16)) / 4).astype(np.float32))
    m = b.op("MatMul", [x, w], name="M")
    r = b.op("Reshape", [m, b.constant(np.array([16, 1], np.int64))], name="R")
    h = x
    for i in range(6):
        h = b.op("Tanh", [b.op("MatMul", [h, w], name=f"M{i}")], name=f"T{i}")
    back = b.op("Reshape", [r, b.constant(np.array([1, 16], np.int64))], name="Back")
    b.output(b.op("Add", [back, h], name="Y"), "y")
    return b.build()


def test_a_value_read_through_a_view_keeps_its_own_memory():
    cm = pyge.compile(_view_graph(), "cpu", {"ge.enableSingleStream": "true"})
    ex = SequentialExecutor(cm.graph, cm.plan, "cpu")
    written = _written(ex)
    assert "M" not in written and {"M0", "T0", "T5"} <= written
    x = np.random.default_rng(2).standard_normal((1, 16)).astype(np.float32)
    want = _ort(graph_to_model(cm.graph), {"x": x})
    _close(ex.run({"x": x}), want)
    _close(ex.run({"x": x}), want)


def test_the_view_rule_is_what_keeps_the_result_right(monkeypatch):
    """Were Reshape taken for fresh, M would write into its planned bytes and a later out=
    write would overwrite the Reshape view of them: the rule is needed, and this graph shows it."""
    cm = pyge.compile(_view_graph(), "cpu", {"ge.enableSingleStream": "true"})
    x = np.random.default_rng(2).standard_normal((1, 16)).astype(np.float32)
    want = _ort(graph_to_model(cm.graph), {"x": x})
    ex = SequentialExecutor(cm.graph, cm.plan, "cpu")
    for k, n in zip(ex.kernels, cm.plan.nodes):
        if n.op_type == "Reshape":
            monkeypatch.setattr(k, "fresh", True, raising=False)   # a lie: it returns a view
    ex.kernels = list(ex.kernels)                    # (rebuilds the programs)
    assert "M" in _written(ex)
    m = next(v for v in cm.plan.values if v.name == "M_out")
    shared = [v.name for v in cm.plan.values if v.buffer == m.buffer and v is not m]
    assert shared, "the memory plan gives M's bytes to no later value"
    with pytest.raises(AssertionError):
        _close(ex.run({"x": x}), want)


def test_inputs_constants_and_outputs_are_never_written():
    b = pyge.GraphBuilder("owned")
    x = b.input("x", "float32", (2, 8))
    w = b.initializer("w", np.full((8, 8), 0.1, np.float32))
    m = b.op("MatMul", [x, w], name="M")                      # a planned value
    t = b.op("Tanh", [m], name="T")
    b.output(b.op("Identity", [t], name="I"), "i")            # an output viewing t
    b.output(b.op("Add", [m, x], name="A"), "a")              # an output written by Add
    cm = pyge.compile(b.build(), "cpu", {"ge.enableSingleStream": "true"})
    ex = cm.executor
    assert _written(ex) == {"M"}                     # T is read by Identity; A is an output
    x1 = np.ones((2, 8), np.float32)
    feed = x1.copy()
    r1 = cm.run({"x": feed})
    np.testing.assert_array_equal(feed, x1)
    r2 = cm.run({"x": 2 * x1})
    np.testing.assert_allclose(r1["i"], np.tanh(x1 @ np.full((8, 8), 0.1)), rtol=1e-6)
    np.testing.assert_allclose(r2["a"], 2 * x1 @ np.full((8, 8), 0.1) + 2 * x1, rtol=1e-6)
    np.testing.assert_array_equal(cm.graph.initializers["w"].const, np.full((8, 8), 0.1, np.float32))


@pytest.mark.parametrize("rows", [1, 2, 3, 64])
@pytest.mark.parametrize("k,n", [(64, 64), (384, 384), (512, 768)])
def test_gemm_boundary_packed_or_mm_out_by_rows(rows, k, n):
    """torch.mm out= only where the packed product does not run for the planned rows."""
    mp = _chain_model(branches=1, depth=1, dim=n, rows=rows, k=k)
    cm = pyge.compile(pyge.load_onnx(mp), "cpu", {})
    first = cm.plan.nodes[[p.name for p in cm.plan.nodes].index("MatMul_0_0")]
    bucket = 0 if rows <= 1 else 1 if rows < 64 else 2
    packed = k * n >= PACKED_MIN_WEIGHT[bucket]
    assert ("MatMul_0_0" in _written(cm.executor)) is (not packed), first
    x = np.random.default_rng(rows).standard_normal((rows, k)).astype(np.float32)
    _close(cm.run({"x": x}), _ort(mp, {"x": x}), tol=1e-4)


def test_types_the_plan_cannot_prove_are_left_to_the_kernel():
    b = pyge.GraphBuilder("types")
    xi = b.input("xi", "int32", (4,))
    xf = b.input("xf", "float32", (4, 1))
    yf = b.input("yf", "float32", (1, 4))
    xd = b.input("xd", "float64", (4,))
    ii = b.op("Add", [xi, xi], name="IntAdd")                         # int: no out=
    ii = b.op("Mul", [ii, xi], name="IntMul")
    mixed = b.op("Add", [b.op("Cast", [ii], name="C", to=1), xf], name="Broadcast")  # [4,4]
    dd = b.op("Mul", [xd, xd], name="Double")                         # float64: out=
    b.output(b.op("Add", [b.op("Tanh", [mixed], name="T"), yf], name="Y"), "y")
    b.output(b.op("Abs", [dd], name="D"), "d")
    cm = pyge.compile(b.build(), "cpu", {"ge.enableSingleStream": "true"})
    assert _written(cm.executor) == {"Broadcast", "T", "Double"}
    rng = np.random.default_rng(0)
    feeds = {"xi": np.arange(4, dtype=np.int32), "xf": rng.standard_normal((4, 1)).astype(np.float32),
             "yf": rng.standard_normal((1, 4)).astype(np.float32), "xd": rng.standard_normal(4)}
    got = cm.run(feeds)
    assert got["d"].dtype == np.float64
    _close(got, _ort(graph_to_model(cm.graph), feeds))


@pytest.mark.filterwarnings("ignore:An output with one or more elements was resized")
def test_a_result_larger_than_planned_fails_on_its_node():
    """The views are storages of exactly the planned bytes: a plan whose size for M is too
    small (a shape-inference fault) makes M fail, naming it, instead of writing past it."""
    mp = _chain_model(branches=1, depth=2, dim=16)
    cm = pyge.compile(pyge.load_onnx(mp), "cpu", {})
    plan = cm.plan
    by_name = {v.name: v for v in plan.values}
    by_name["w0_0"].shape = (16, 8)                  # what the plan says, not what the
    by_name["m0_0"].shape = (1, 8)                   # weight is
    by_name["m0_0"].nbytes = 32
    ex = SequentialExecutor(cm.graph, plan, "cpu")
    assert "MatMul_0_0" in _written(ex)
    with pytest.raises(pyge.ExecutionError, match="MatMul_0_0"):
        ex.run({"x": np.ones((1, 16), np.float32)})


def test_hooks_see_every_node_and_profiles_run():
    mp = _chain_model(branches=2, depth=3, dim=8)
    cm = pyge.compile(pyge.load_onnx(mp), "cpu", {})
    seen = []

    class Hooks:
        def before(self, ni, s):
            seen.append(ni)

        def after(self, ni, s):
            pass
    x = np.ones((1, 8), np.float32)
    got = cm.executor.run({"x": x}, hooks=Hooks())
    assert sorted(seen) == list(range(len(cm.plan.nodes)))
    _close(got, _ort(mp, {"x": x}))
    assert cm.profile({"x": x}, runs=2) is not None


def test_concurrent_runs_of_one_executor_each_get_their_own_results():
    """The planned buffers belong to one run at a time: SequentialExecutor serialises."""
    import threading
    mp = _chain_model(branches=2, depth=10, dim=16)
    cm = pyge.compile(pyge.load_onnx(mp), "cpu", {})
    ex = cm.executor
    assert isinstance(ex, SequentialExecutor) and _written(ex)
    rng = np.random.default_rng(3)
    xs = [rng.standard_normal((1, 16)).astype(np.float32) for _ in range(4)]
    want = [_ort(mp, {"x": x})["y"] for x in xs]
    bad = []

    def work(i):
        for _ in range(50):
            if not np.allclose(ex.run({"x": xs[i]})["y"], want[i], rtol=1e-5, atol=1e-5):
                bad.append(i)
    ts = [threading.Thread(target=work, args=(i,)) for i in range(4)]
    for t in ts:
        t.start()
    for t in ts:
        t.join(60)
    assert not bad


def test_broadcast_is_numpys():
    from pyge.kernels.elementwise import broadcast
    rng = random.Random(0)
    for _ in range(2000):
        shapes = [tuple(rng.choice([0, 1, 2, 3]) for _ in range(rng.randrange(0, 4)))
                  for _ in range(rng.randrange(1, 4))]
        try:
            want = tuple(np.broadcast_shapes(*shapes))
        except ValueError:
            want = None
        assert broadcast(shapes) == want, shapes


@pytest.mark.parametrize("wrong_plan", [False, True], ids=["plan", "A-shares-with-N"])
def test_a_value_read_late_on_another_stream_is_not_overwritten(wrong_plan):
    """A (written into its buffer on stream 0) is read on stream 1 only after a slow kernel
    there, while stream 0 goes on writing into buffers: none may take A's bytes early. With
    a wrong plan (stream 0's N values put in A's bytes, unordered with B) the test fails."""
    import time
    b = pyge.GraphBuilder("late_reader")
    x = b.input("x", "float32", (4, 8))
    a = b.op("Tanh", [x], name="A")
    d = b.op("Abs", [x], name="Slow")
    late = b.op("Mul", [a, d], name="B")
    h = x
    for i in range(8):
        h = b.op("Sigmoid", [b.op("Neg", [h], name=f"N{i}")], name=f"S{i}")
    b.output(b.op("Add", [late, h], name="Y"), "y")
    g = b.build()
    streams = {n.name: 0 for n in g.nodes}
    streams.update({"Slow": 1, "B": 1})
    single = pyge.compile(g, "cpu", {"ge.enableSingleStream": "true"})
    multi = replan(single, streams)
    a_buffer = next(v.buffer for v in multi.plan.values if v.name == "A_out")
    if wrong_plan:
        for v in multi.plan.values:
            if v.name.startswith("N") and v.buffer >= 0:
                v.buffer = a_buffer
    ex = CpuExecutor(multi.graph, multi.plan, "cpu", multi.options)

    def slow(xs):
        time.sleep(0.01)
        return [xs[0].abs()]
    ex.kernels = [slow if n.name == "Slow" else k for n, k in zip(multi.plan.nodes, ex.kernels)]
    assert {"A", "N0", "S7"} <= _written(ex)
    rng = np.random.default_rng(4)
    try:
        for _ in range(5):
            feeds = {"x": rng.standard_normal((4, 8)).astype(np.float32)}
            got, want = ex.run(feeds), _ort(graph_to_model(single.graph), feeds)
            if wrong_plan:
                assert not np.allclose(got["y"], want["y"], atol=1e-5)
            else:
                _close(got, want)
    finally:
        ex.close()


def _gemm_model(rows, k, n, ta, tb, alpha, beta, bias):
    """Gemm -> Relu -> Gemm (k x n then n x n); the first Gemm's value is planned."""
    rng = np.random.default_rng(k + n + rows)
    w1 = (rng.standard_normal((n, k) if tb else (k, n)) / np.sqrt(k)).astype(np.float32)
    w2 = (rng.standard_normal((n, n)) / np.sqrt(n)).astype(np.float32)
    inits = [numpy_helper.from_array(w1, "w1"), numpy_helper.from_array(w2, "w2")]
    ins = ["x", "w1"]
    if bias is not None:
        inits.append(numpy_helper.from_array(rng.standard_normal(bias).astype(np.float32), "c"))
        ins.append("c")
    attrs = {"transA": ta, "transB": tb, "alpha": alpha, "beta": beta}
    nodes = [helper.make_node("Gemm", ins, ["g"], name="G", **attrs),
             helper.make_node("Relu", ["g"], ["r"], name="R"),
             helper.make_node("Gemm", ["r", "w2"], ["y"], name="G2")]
    xshape = [k, rows] if ta else [rows, k]
    graph = helper.make_graph(nodes, "gemm", [helper.make_tensor_value_info("x", TensorProto.FLOAT, xshape)],
                              [helper.make_tensor_value_info("y", TensorProto.FLOAT, [rows, n])], inits)
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 13)]), xshape


GEMM_CASES = [  # rows, k, n, transA, transB, alpha, beta, bias shape, written?
    (1, 16, 8, 0, 1, 1.0, 1.0, (8,), True),
    (3, 16, 8, 1, 0, 0.5, 2.0, (3, 8), True),
    (3, 16, 8, 0, 0, 1.0, 1.0, (3, 1), True),
    (2, 16, 8, 0, 1, 1.0, 1.0, (), True),
    (2, 16, 8, 0, 1, 1.0, 1.0, None, True),
    (2, 16, 8, 0, 1, 2.0, 1.0, None, False),         # alpha without C: left to the kernel
    (1, 384, 384, 0, 1, 1.0, 1.0, (384,), True),     # one row: torch's product
    (2, 384, 384, 0, 1, 1.0, 1.0, (384,), False),    # 2-63 rows: packed
    (2, 384, 384, 0, 1, 1.0, 1.0, (2, 384), True),   # a bias oneDNN cannot take: addmm
]


@pytest.mark.parametrize("rows,k,n,ta,tb,alpha,beta,bias,written", GEMM_CASES)
def test_gemm_writes_into_its_buffer_where_torch_runs_and_matches_onnxruntime(
        rows, k, n, ta, tb, alpha, beta, bias, written):
    mp, xshape = _gemm_model(rows, k, n, ta, tb, alpha, beta, bias)
    cm = pyge.compile(pyge.load_onnx(mp), "cpu", {})
    assert ("G" in _written(cm.executor)) is written
    x = np.random.default_rng(rows).standard_normal(xshape).astype(np.float32)
    for _ in range(2):
        _close(cm.run({"x": x}), _ort(mp, {"x": x}), tol=1e-4)
