"""Bad input to a partitioned model: one line naming the part and the node, nothing half-run,
nothing hung; the next good run works."""
from __future__ import annotations

import logging
import threading

import numpy as np
import onnxruntime as ort
import pytest
import torch
from onnx import TensorProto as T
from onnx import helper as h

import pyge
from pyge.kernels import register

from . import models
from .conftest import graph_of


def _two_batched_inputs(join: str):
    """x and x2 share the symbol N: their sum ("add", which needs one N) or the sum of their
    sums ("sums", which does not)."""
    if join == "add":
        nodes = [h.make_node("Add", ["x", "x2"], ["s"], name="add_n"),
                 h.make_node("ReduceSum", ["s"], ["y"], name="rsum", keepdims=0)]
    else:
        nodes = [h.make_node("ReduceSum", ["x"], ["a"], name="sum_x", keepdims=0),
                 h.make_node("ReduceSum", ["x2"], ["b"], name="sum_x2", keepdims=0),
                 h.make_node("Add", ["a", "b"], ["y"], name="add_n")]
    g = h.make_graph(nodes, "twob", [h.make_tensor_value_info("x", T.FLOAT, ["N", 3]),
                                     h.make_tensor_value_info("x2", T.FLOAT, ["N", 3])],
                     [h.make_tensor_value_info("y", T.FLOAT, [])])
    return h.make_model(g, opset_imports=[h.make_opsetid("", 17)])


def _in_time(fn, seconds=60):
    """fn() in a thread; fails if it does not return in time (nothing may hang)."""
    box = {}

    def target():
        try:
            box["out"] = fn()
        except BaseException as err:  # noqa: BLE001 - handed back to the test
            box["err"] = err
    t = threading.Thread(target=target, daemon=True)
    t.start()
    t.join(seconds)
    assert not t.is_alive(), "the run hung"
    if "err" in box:
        raise box["err"]
    return box.get("out")


def test_an_unresolved_symbol_warns_once_naming_it_the_node_and_the_part_and_runs_on(caplog):
    """onnxruntime runs feeds that give one dim_param two sizes; so does pyge (the documented
    fallback), with one warning per symbol."""
    proto = _two_batched_inputs("sums")
    model = pyge.compile(pyge.load_onnx(proto), "cpu")
    assert model.partitioned
    bad = {"x": np.ones((2, 3), np.float32), "x2": np.ones((5, 3), np.float32)}
    with caplog.at_level(logging.WARNING, logger="pyge"):
        for _ in range(2):
            got = _in_time(lambda: model.run(bad))["y"]
    assert float(got) == 21.0 == float(ort.InferenceSession(proto.SerializeToString()).run(None, bad)[0])
    [msg] = [r.getMessage() for r in caplog.records if "symbolic dim" in r.getMessage()]
    assert "\n" not in msg and "'N'" in msg and "'sum_x2'" in msg and "'twob'" in msg


def test_an_unresolved_symbol_a_kernel_needs_is_one_line_naming_the_node():
    model = pyge.compile(pyge.load_onnx(_two_batched_inputs("add")), "cpu")
    bad = {"x": np.ones((2, 3), np.float32), "x2": np.ones((5, 3), np.float32)}
    with pytest.raises(pyge.ExecutionError) as err:
        _in_time(lambda: model.run(bad))
    assert "add_n" in str(err.value).splitlines()[0]
    good = {"x": np.ones((5, 3), np.float32), "x2": np.ones((5, 3), np.float32)}
    assert float(model.run(good)["y"]) == 30.0


@pytest.mark.parametrize("streams", ["1", "3"])
def test_a_feed_contradicting_a_static_sub_model_names_it_and_its_reader(streams):
    model = pyge.compile(graph_of("symbolic_batch"), "cpu", {"ge.streamMaxParallelNum": streams,
                                                             "pyge.streamAllocation": "nodes"})
    feeds = models.FEEDS["symb"](np.random.default_rng(0))
    feeds["z"] = np.ones((3, 3), np.float32)
    with pytest.raises(pyge.InputError) as err:
        _in_time(lambda: model.run(feeds))
    msg = str(err.value)
    assert "\n" not in msg and "'symb_static_0'" in msg and "'st_mm'" in msg and "'z'" in msg
    ok = models.FEEDS["symb"](np.random.default_rng(0))
    assert model.run(ok)["y"].shape == (2, 3)


def test_a_value_of_the_wrong_shape_reaching_a_call_node_names_the_sub_model():
    model = pyge.compile(graph_of("detection"), "cpu")
    kernel = model.executor.calls["det_static_0"]
    with pytest.raises(pyge.InputError) as err:
        kernel([torch.ones(3, 8)])
    msg = str(err.value)
    assert "\n" not in msg and "'det_static_0'" in msg and "'box_mm'" in msg


def test_a_partitioned_model_cannot_be_replanned_as_one():
    from pyge.replan import replan
    model = pyge.compile(graph_of("detection"), "cpu")
    with pytest.raises(pyge.PlanError, match="'det'.*3 parts"):
        replan(model, {})


@register("PartBoom", domain="pyge.test")
def _boom(ctx):
    def fn(xs):
        raise RuntimeError("boom")
    return fn


def test_a_kernel_error_in_a_static_sub_model_names_the_node_and_the_sub_model():
    b = pyge.GraphBuilder("err")
    x = b.input("x", "float32", (3, 4))
    y = b.op("Neg", [b.op("PartBoom", [b.op("Relu", [b.op("Abs", [x], name="abs")], name="relu")],
                          name="boom", domain="pyge.test")], name="neg")
    b.graph.outputs.append(y)
    b.graph.outputs.append(b.op("NonZero", [x], name="nz"))
    model = pyge.compile(b.build(), "cpu")
    assert [p.kind for p in model.submodels] == ["dynamic", "static"]
    with pytest.raises(pyge.ExecutionError) as err:
        _in_time(lambda: model.run({"x": np.ones((3, 4), np.float32)}))
    msg = str(err.value).splitlines()[0]
    assert "'boom'" in msg or "boom" in msg
    assert "'err_static_0'" in msg


def test_a_model_that_is_only_a_dynamic_root_is_replanned_as_one_plan():
    from pyge.replan import replan
    model = pyge.compile(graph_of("detection"), "cpu", {"ge.exec.static_model_ops_lower_limit": "-1"})
    assert [p.kind for p in model.submodels] == ["dynamic"]
    two = replan(model, {"box_mm": 1, "score_mm": 0})
    assert two.num_streams == 2 and two.stream_of("box_mm") == 1
    feeds = models.FEEDS["det"](np.random.default_rng(0))
    np.testing.assert_allclose(two.run(feeds)["picked"], model.run(feeds)["picked"])
