"""INTERFACE.md contract: the Python API (acceptance checks call these names as written)."""
from __future__ import annotations

import json
import os
import re
import stat
import sys
import textwrap

import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper

import pyge
from pyge import GRAPH_SUCCESS, register_custom_pass
from pyge.cli import main as cli_main
from pyge.passes.custom.plugins import reset_plugins


from .common import *  # noqa: F401,F403 - shared helpers and constants
from .common import DUMP_RE, SHAPE, one_line, onnx_model, ref_graph, split_abs, split_model, x_in  # noqa: F401


# -- Python API --------------------------------------------------------------------------------

def test_frontends_accept_what_the_contract_names(tmp_path):
    import torch
    path = tmp_path / "model.onnx"
    onnx.save(onnx_model(), path)
    for src in (str(path), path, onnx_model()):
        g = pyge.load_onnx(src)
        assert isinstance(g, pyge.Graph) and [n.name for n in g.nodes] == ["Relu_1", "Abs_1", "Add_1"]

    class M(torch.nn.Module):
        def forward(self, x):
            return torch.relu(x) + torch.abs(x)
    g = pyge.from_torch(M(), (torch.ones(*SHAPE),))
    out = pyge.compile(g).run({g.inputs[0].name: x_in()})
    np.testing.assert_allclose(next(iter(out.values())), np.maximum(x_in(), 0) + np.abs(x_in()), rtol=1e-6)
    b = pyge.GraphBuilder("name")
    v = b.input("input", "float32", SHAPE)
    b.op("Neg", [v], name="Neg_1", outputs=["output"])
    b.graph.outputs.append(b.graph.value("output"))
    assert pyge.compile(b.build()).run({"input": x_in()})["output"].tolist() == (-x_in()).tolist()


def test_the_front_door_as_written(tmp_path, monkeypatch):
    """INTERFACE.md's lines: compile("model.onnx"), run(feeds), run(feeds, output_names=[...]),
    model(feeds), get_inputs() / get_outputs()."""
    monkeypatch.chdir(tmp_path)
    onnx.save(onnx_model(), "model.onnx")
    model = pyge.compile("model.onnx")
    feeds = {"input": x_in()}
    outputs = model.run(feeds)
    assert list(outputs) == ["output"]
    np.testing.assert_array_equal(model(feeds)["output"], outputs["output"])
    np.testing.assert_array_equal(model.run(feeds, output_names=["output"])["output"], outputs["output"])
    (i,), (o,) = model.get_inputs(), model.get_outputs()
    assert (i.name, i.shape, i.type) == ("input", list(SHAPE), "tensor(float)")
    assert (o.name, o.shape, o.type) == ("output", list(SHAPE), "tensor(float)")
    model.save("model.pgm")
    assert pyge.compile("model.pgm").streams == model.streams


def _typed_model() -> onnx.ModelProto:
    """Inputs and outputs of many kinds: symbolic, unknown and unranked dims, several dtypes,
    a sequence and an optional."""
    vi = helper.make_tensor_value_info
    seq = helper.make_sequence_type_proto(helper.make_tensor_type_proto(TensorProto.FLOAT, ["N", 3, None]))
    opt = helper.make_optional_type_proto(helper.make_tensor_type_proto(TensorProto.INT64, []))
    ins = [vi("x", TensorProto.FLOAT, ["N", 3, None]), vi("i", TensorProto.INT64, []),
           vi("b", TensorProto.BOOL, None), vi("h", TensorProto.FLOAT16, [2]),
           vi("s", TensorProto.STRING, [1]), vi("d", TensorProto.DOUBLE, [1, 2])]
    outs = [vi("y", TensorProto.FLOAT, ["N", 3, None]), vi("j", TensorProto.INT64, []),
            vi("nb", TensorProto.BOOL, None), vi("hh", TensorProto.FLOAT16, [2]),
            vi("ss", TensorProto.STRING, [1]), vi("dd", TensorProto.DOUBLE, [1, 2]),
            helper.make_value_info("q", seq), helper.make_value_info("o", opt)]
    nodes = [helper.make_node("Relu", ["x"], ["y"]), helper.make_node("Identity", ["i"], ["j"]),
             helper.make_node("Not", ["b"], ["nb"]), helper.make_node("Neg", ["h"], ["hh"]),
             helper.make_node("Identity", ["s"], ["ss"]), helper.make_node("Neg", ["d"], ["dd"]),
             helper.make_node("SequenceConstruct", ["x"], ["q"]), helper.make_node("Optional", ["i"], ["o"])]
    return helper.make_model(helper.make_graph(nodes, "types", ins, outs),
                             opset_imports=[helper.make_opsetid("", 18)])


def test_inputs_and_outputs_are_described_as_onnxruntime_does():
    ort = pytest.importorskip("onnxruntime")
    proto = _typed_model()
    ref = ort.InferenceSession(proto.SerializeToString(), providers=["CPUExecutionProvider"])
    model = pyge.compile(pyge.load_onnx(proto))
    for want, got in ((ref.get_inputs(), model.get_inputs()), (ref.get_outputs(), model.get_outputs())):
        assert [(a.name, a.shape, a.type) for a in got] == [(a.name, a.shape, a.type) for a in want]
    assert repr(model.get_inputs()[0]) == "NodeArg(name='x', type='tensor(float)', shape=['N', 3, None])"


def test_compile_for_cuda_without_a_gpu_fails_at_compile_time():
    import torch
    if torch.cuda.is_available():
        pytest.skip("a GPU is present")
    with pytest.raises(pyge.OptionError, match="CUDA is not available") as err:
        pyge.compile(ref_graph(), device="cuda")
    one_line(err)


def test_compiled_model_properties():
    model = split_model(device="cpu", options={"ge.enableSingleStream": "false"})
    out = model.run({"input": x_in()})
    assert set(out) == {"output"} and isinstance(out["output"], np.ndarray)
    np.testing.assert_array_equal(out["output"], np.maximum(x_in(), 0) + np.abs(x_in()))
    assert model.stream_of("Abs_1") == 1 and model.stream_of("Relu_1") == 0
    assert model.num_streams == 2
    assert model.streams == [["Relu_1", "Add_1"], ["Abs_1"]]
    (e,) = model.events
    assert (e.event_id, e.src, e.dst, e.src_stream, e.dst_stream) == (0, "Abs_1", "Add_1", 1, 0)
    model.verify()
    assert 0 < model.memory.peak_bytes <= model.memory.no_reuse_bytes
    single = pyge.compile(ref_graph(), options={"ge.enableSingleStream": "true"})
    np.testing.assert_array_equal(single.run({"input": x_in()})["output"], out["output"])
    with pytest.raises(KeyError, match="Abs_9"):
        model.stream_of("Abs_9")


def test_verify_raises_on_an_unordered_dependency():
    from pyge.plan.plan import WAIT
    model = split_model()
    model.verify()
    model.plan.streams[0] = [st for st in model.plan.streams[0] if st.kind != WAIT]   # drop the Recv
    with pytest.raises(pyge.VerificationError, match="Abs_1.*Add_1"):
        model.verify()


@pytest.mark.parametrize("split", [False, True])
def test_outputs_share_no_memory_with_feeds_weights_or_each_other(split):
    b = pyge.GraphBuilder("views")
    x, w = b.input("x", "float32", (3,)), b.initializer("w", np.arange(3, dtype=np.float32))
    b.op("Identity", [w], name="Id_w", outputs=["y"])
    b.op("Add", [x, w], name="Add_1", outputs=["z"])
    b.op("Identity", [x], name="Id_x", outputs=["u"])
    b.op("Reshape", [x, b.constant(np.array([3], np.int64))], name="Reshape_1", outputs=["v"])
    b.graph.outputs += [b.graph.value(n) for n in "yzuv"]
    if split:   # every node on its own stream: the threaded executor
        register_custom_pass("Each").custom_allocate_stream_pass_fn(
            lambda g, c: [c.set_stream_id(n, c.allocate_next_stream_id()) for n in g.get_direct_nodes()] and 0)
    opts = {"ge.streamMaxParallelNum": "2"}
    model = pyge.compile(b.build(), options=opts)
    assert opts == {"ge.streamMaxParallelNum": "2"} and (model.num_streams > 1 or not split)
    feed = np.zeros(3, np.float32)
    for arr in model.run({"x": feed}).values():
        arr[:] = 100                           # the caller owns what run() returns
    assert feed.tolist() == [0, 0, 0]
    assert {k: v.tolist() for k, v in model.run({"x": feed}).items()} == {
        "y": [0, 1, 2], "z": [0, 1, 2], "u": [0, 0, 0], "v": [0, 0, 0]}


def test_save_load_and_profile(tmp_path):
    model = split_model()
    model.save(str(tmp_path / "model.pgm"))
    model2 = pyge.load_model(str(tmp_path / "model.pgm"))
    assert model2.streams == model.streams and model2.stream_of("Abs_1") == 1
    assert [(e.src, e.dst, e.event_id) for e in model2.events] == [(e.src, e.dst, e.event_id) for e in model.events]
    np.testing.assert_array_equal(model2.run({"input": x_in()})["output"], model.run({"input": x_in()})["output"])
    prof = model.profile({"input": x_in()}, runs=3)
    prof.save_trace(str(tmp_path / "trace.json"))
    trace = json.loads((tmp_path / "trace.json").read_text())
    ops = [ev for ev in (trace["traceEvents"] if isinstance(trace, dict) else trace) if ev.get("ph") == "X"]
    assert len(ops) == 3 * 3
    assert all(ev["tid"] == model.stream_of(ev["name"]) for ev in ops)
    assert sorted({ev["name"] for ev in ops}) == ["Abs_1", "Add_1", "Relu_1"]
    prof.plot(str(tmp_path / "timeline.png"))
    assert (tmp_path / "timeline.png").read_bytes()[:4] == b"\x89PNG"
    assert "stream 1" in str(prof.summary())


def test_session():
    sess = pyge.Session({"ge.enableSingleStream": "false"})
    sess.add_graph(1, ref_graph())
    sess.build_graph(1)
    out = sess.run_graph(1, {"input": x_in()})
    np.testing.assert_array_equal(out["output"], np.maximum(x_in(), 0) + np.abs(x_in()))
    with pytest.raises(pyge.PygeError, match="graph id 2"):
        sess.run_graph(2, {"input": x_in()})
    with pytest.raises(pyge.OptionError, match="ge.bogus"):
        pyge.Session({"ge.bogus": "1"})


def test_compilation_keeps_node_names():
    model = pyge.compile(pyge.load_onnx(onnx_model()))
    assert sorted(n for s in model.streams for n in s) == ["Abs_1", "Add_1", "Relu_1"]
