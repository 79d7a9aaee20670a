"""compile + run: feeds checked, errors specific, the user's graph untouched by compile."""
from __future__ import annotations

import numpy as np
import pytest

import pyge


def _graph():
    b = pyge.GraphBuilder("demo")
    x = b.input("input", "float32", (2, 3))
    a = b.op("Abs", [x], name="Abs_1")
    r = b.op("Relu", [x], name="Relu_1")
    b.output(b.op("Add", [a, r], name="Add_1"), "output")
    return b.build()


def test_run_returns_numpy_by_name():
    m = pyge.compile(_graph())
    x = np.array([[-1, 2, -3], [4, -5, 6]], np.float32)
    out = m.run({"input": x})
    np.testing.assert_array_equal(out["output"], np.abs(x) + np.maximum(x, 0))


@pytest.mark.parametrize("feeds, match", [
    ({}, "missing feed for input 'input'"),
    ({"input": np.zeros((2, 3), np.float32), "extra": 1}, "unexpected feed 'extra'"),
    ({"input": np.zeros((2, 4), np.float32)}, r"feed 'input' has shape \[2, 4\], expected \[2,3\]"),
    ({"input": np.zeros((2, 3), np.float64)}, "feed 'input' has dtype float64, expected float32"),
])
def test_bad_feeds(feeds, match):
    m = pyge.compile(_graph())
    with pytest.raises(pyge.InputError, match=match):
        m.run(feeds)


def test_compile_does_not_touch_the_users_graph():
    g = _graph()
    before = pyge.format_graph(g)
    pyge.compile(g)
    assert pyge.format_graph(g) == before
    assert all(n.stream_id == -1 for n in g.nodes)


@pytest.mark.parametrize("opts, match", [
    ({"ge.nope": "1"}, "unknown option 'ge.nope'"),
    ({"ge.enableSingleStream": "maybe"}, "ge.enableSingleStream.*accepted values: true, false"),
    ({"ge.autoMultistreamParallelMode": "LoadBalance:99"}, "ge.autoMultistreamParallelMode"),
    ({"ge.streamMaxParallelNum": "x:y"}, "ge.streamMaxParallelNum"),
])
def test_bad_options(opts, match):
    with pytest.raises(pyge.OptionError, match=match):
        pyge.compile(_graph(), options=opts)


def test_bad_device():
    with pytest.raises(pyge.OptionError, match="unknown device 'tpu'"):
        pyge.compile(_graph(), device="tpu")


def test_not_a_graph():
    with pytest.raises(pyge.GraphError, match="expects a pyge.Graph or a model path, got int"):
        pyge.compile(42)


def _onnx_model(nodes, inputs, outputs, inits=()):
    from onnx import helper
    g = helper.make_graph(nodes, "m", inputs, outputs, initializer=list(inits))
    return pyge.load_onnx(helper.make_model(g, opset_imports=[helper.make_opsetid("", 17)]))


def _write_into_outputs_then_rerun(model, feeds):
    """Writes into every returned array; the next run must give the first run's outputs."""
    first = model.run(feeds)
    want = {k: [np.array(e) for e in v] if isinstance(v, list) else np.array(v) for k, v in first.items()}
    for v in first.values():
        for a in (v if isinstance(v, list) else [v]):
            a[...] = -99
    again = model.run(feeds)
    for k, v in want.items():
        for a, b in zip(v if isinstance(v, list) else [v], again[k] if isinstance(v, list) else [again[k]]):
            np.testing.assert_array_equal(b, a, err_msg=k)


@pytest.mark.parametrize("single", ["true", "false"])
def test_sequence_output_elements_share_no_memory_with_feeds_or_weights(single):
    from onnx import TensorProto as TP, helper, numpy_helper
    seq = helper.make_sequence_type_proto(helper.make_tensor_type_proto(TP.FLOAT, [2, 3]))
    g = _onnx_model([helper.make_node("SequenceConstruct", ["x", "W"], ["s"], name="seq"),
                     helper.make_node("Add", ["x", "W"], ["z"], name="add")],
                    [helper.make_tensor_value_info("x", TP.FLOAT, [2, 3])],
                    [helper.make_value_info("s", seq), helper.make_tensor_value_info("z", TP.FLOAT, [2, 3])],
                    [numpy_helper.from_array(np.full((2, 3), 7, np.float32), "W")])
    m = pyge.compile(g, "cpu", {"ge.enableSingleStream": single, "ge.streamMaxParallelNum": "2",
                                "pyge.streamAllocation": "nodes"})
    x = np.ones((2, 3), np.float32)
    _write_into_outputs_then_rerun(m, {"x": x})
    assert (x == 1).all()                       # the caller's feed is untouched too


def _if_model(then_nodes, then_inits=()):
    from onnx import TensorProto as TP, helper
    then_g = helper.make_graph(then_nodes, "then", [], [helper.make_tensor_value_info("t", TP.FLOAT, [2, 3])],
                               initializer=list(then_inits))
    else_g = helper.make_graph([helper.make_node("Identity", ["x"], ["e"])], "else", [],
                               [helper.make_tensor_value_info("e", TP.FLOAT, [2, 3])])
    return _onnx_model([helper.make_node("If", ["c"], ["y"], name="if", then_branch=then_g, else_branch=else_g)],
                       [helper.make_tensor_value_info("x", TP.FLOAT, [2, 3]),
                        helper.make_tensor_value_info("c", TP.BOOL, [])],
                       [helper.make_tensor_value_info("y", TP.FLOAT, [2, 3])])


def test_outputs_kept_by_kernels_are_handed_over_as_copies():
    """A Constant node's value (not folded: fusion off, or inside an If branch), a static
    ConstantOfShape and an If branch's initializer are tensors the kernel returns on every
    run; the caller writing into that output changed every later run's result."""
    from onnx import TensorProto as TP, helper, numpy_helper
    feeds = {"x": np.ones((2, 3), np.float32)}
    const = numpy_helper.from_array(np.arange(6, dtype=np.float32).reshape(2, 3))
    g = _onnx_model([helper.make_node("Constant", [], ["k"], value=const),
                     helper.make_node("ConstantOfShape", ["shp"], ["f"],
                                      value=numpy_helper.from_array(np.array([2.0], np.float32))),
                     helper.make_node("Identity", ["k"], ["y"]), helper.make_node("Reshape", ["f", "shp"], ["r"]),
                     helper.make_node("Add", ["x", "k"], ["z"]), helper.make_node("Add", ["x", "f"], ["w"])],
                    [helper.make_tensor_value_info("x", TP.FLOAT, [2, 3])],
                    [helper.make_tensor_value_info(n, TP.FLOAT, [2, 3]) for n in "yrzw"],
                    [numpy_helper.from_array(np.array([2, 3], np.int64), "shp")])
    _write_into_outputs_then_rerun(pyge.compile(g, "cpu", {"ge.exec.enableFusion": "false"}), feeds)
    c = np.array(True)
    _write_into_outputs_then_rerun(pyge.compile(_if_model([helper.make_node("Constant", [], ["t"], value=const)])),
                                   {**feeds, "c": c})
    _write_into_outputs_then_rerun(pyge.compile(_if_model([helper.make_node("Identity", ["Wt"], ["t"])],
                                                          [numpy_helper.from_array(np.full((2, 3), 3, np.float32), "Wt")])),
                                   {**feeds, "c": c})


def test_string_outputs_are_handed_over_as_copies():
    """A string Constant (not folded) and a string initializer returned through Identity:
    numpy object arrays that every run returns; writing into one changed later runs."""
    from onnx import TensorProto as TP, helper, numpy_helper
    words = numpy_helper.from_array(np.array(["a", "b"], dtype=object), "words")
    g = _onnx_model([helper.make_node("Constant", [], ["k"], value_strings=["x", "y"]),
                     helper.make_node("Identity", ["k"], ["s"]), helper.make_node("Identity", ["words"], ["t"])],
                    [helper.make_tensor_value_info("x", TP.FLOAT, [1])],
                    [helper.make_tensor_value_info(n, TP.STRING, [2]) for n in "st"], [words])
    _write_into_outputs_then_rerun(pyge.compile(g, "cpu", {"ge.exec.enableFusion": "false"}),
                                   {"x": np.ones(1, np.float32)})


# -- the front door: paths, devices, output names, onnxruntime's habits ------------------------

def _proto():
    from onnx import TensorProto as TP, helper
    nodes = [helper.make_node("Abs", ["input"], ["a"], name="Abs_1"),
             helper.make_node("Relu", ["input"], ["r"], name="Relu_1"),
             helper.make_node("Add", ["a", "r"], ["output"], name="Add_1")]
    io = [helper.make_tensor_value_info(n, TP.FLOAT, [2, 3]) for n in ("input", "a", "output")]
    g = helper.make_graph(nodes, "front", io[:1], [io[2], io[1]])
    return helper.make_model(g, opset_imports=[helper.make_opsetid("", 17)])


X = np.array([[-1, 2, -3], [4, -5, 6]], np.float32)


@pytest.fixture
def onnx_file(tmp_path):
    import onnx
    path = tmp_path / "front.onnx"
    onnx.save(_proto(), str(path))
    return path


def test_compile_takes_an_onnx_path_as_str_or_path(onnx_file):
    want = pyge.compile(pyge.load_onnx(onnx_file)).run({"input": X})
    for path in (str(onnx_file), onnx_file):
        got = pyge.compile(path, options={"ge.enableSingleStream": "true"}).run({"input": X})
        np.testing.assert_array_equal(got["output"], want["output"])


def test_compile_loads_a_pgm_as_the_offline_model(onnx_file, tmp_path):
    m = pyge.compile(onnx_file, options={"ge.streamMaxParallelNum": "2"})
    m.save(tmp_path / "front.pgm")
    loaded = pyge.compile(str(tmp_path / "front.pgm"))
    assert loaded.streams == m.streams and loaded.device == "cpu"
    np.testing.assert_array_equal(loaded.run({"input": X})["output"], m.run({"input": X})["output"])
    again = pyge.compile(tmp_path / "front.pgm", options={"ge.streamMaxParallelNum": "2",   # as compiled
                                                          "pyge.intraOpThreads": "1"})      # run time
    assert again.options["pyge.intraOpThreads"] == 1 and again.streams == m.streams


@pytest.mark.parametrize("opts, match", [
    ({"ge.enableSingleStream": "true"},
     r"option ge.enableSingleStream='true' would change the plan of .*front.pgm, "
     r"which is compiled already \(with ge.enableSingleStream='false'\)"),
    ({"ge.streamMaxParallelNum": "3"}, "recompile the source model"),
    ({"ge.nope": "1"}, "unknown option 'ge.nope'"),
])
def test_options_that_would_change_a_pgm_plan_are_refused(onnx_file, tmp_path, opts, match):
    pyge.compile(onnx_file).save(tmp_path / "front.pgm")
    with pytest.raises(pyge.OptionError, match=match) as err:
        pyge.compile(tmp_path / "front.pgm", options=opts)
    assert "\n" not in str(err.value)


def test_a_wrong_suffix_or_a_missing_file_is_one_line_naming_the_path(tmp_path, onnx_file):
    (tmp_path / "model.txt").write_text("x")
    cases = [(tmp_path / "model.txt", r"model.txt is a '.txt' file; accepted: .onnx, .pgm"),
             (tmp_path / "model", "is a file without a suffix"),
             (tmp_path / "missing.onnx", "model file not found: .*missing.onnx"),
             (tmp_path / "missing.pgm", "model file not found: .*missing.pgm"),
             (tmp_path, "accepted: .onnx, .pgm")]
    (tmp_path / "dir.onnx").mkdir()
    cases.append((tmp_path / "dir.onnx", "model path is not a file: .*dir.onnx"))
    for path, match in cases:
        with pytest.raises(pyge.ModelLoadError, match=match) as err:
            pyge.compile(path)
        assert "\n" not in str(err.value) and str(path) in str(err.value)
    (tmp_path / "fake.pgm").write_bytes(b"not a model")
    with pytest.raises(pyge.ModelFileError, match="fake.pgm"):
        pyge.compile(tmp_path / "fake.pgm")


def _no_gpu(monkeypatch):
    import torch
    monkeypatch.setattr(torch.cuda, "is_available", lambda: False)


def test_cuda_without_a_usable_gpu_fails_at_compile_time(monkeypatch, onnx_file, tmp_path):
    _no_gpu(monkeypatch)
    g = _graph()
    for call in (lambda: pyge.compile(g, device="cuda"), lambda: pyge.compile(g, "cuda:0"),
                 lambda: pyge.compile(onnx_file, device="cuda")):
        with pytest.raises(pyge.OptionError, match=r"device 'cuda(:0)?': CUDA is not available") as err:
            call()
        assert "\n" not in str(err.value)
    sess = pyge.Session(device="cuda")
    sess.add_graph(1, g)
    with pytest.raises(pyge.OptionError, match="CUDA is not available"):
        sess.build_graph(1)
    pyge.compile(g).save(tmp_path / "m.pgm")            # an offline model moved to cuda
    with pytest.raises(pyge.OptionError, match="CUDA is not available"):
        pyge.compile(tmp_path / "m.pgm", device="cuda")


def test_a_fake_cuda_device_stands_in_at_compile_time(monkeypatch, tmp_path):
    import torch

    from pyge.executors import cuda as cuda_mod
    _no_gpu(monkeypatch)
    monkeypatch.setattr(cuda_mod, "_device", lambda device: torch.device("cpu"))
    m = pyge.compile(_graph(), device="cuda")
    assert m.device == "cuda"
    m.save(tmp_path / "m.pgm")
    assert pyge.compile(tmp_path / "m.pgm").device == "cuda"    # its own device by default
    assert pyge.compile(tmp_path / "m.pgm", device="cpu").device == "cpu"


def _two_outputs():
    b = pyge.GraphBuilder("two")
    x = b.input("x", "float32", (2, 3))
    a = b.op("Abs", [x], name="Abs_1")
    r = b.op("Relu", [x], name="Relu_1")
    b.output(a, "a")
    b.output(b.op("Neg", [r], name="Neg_1"), "n")
    b.output(b.op("Add", [a, r], name="Add_1"), "s")
    return b.build()


@pytest.fixture(params=["true", "false"], ids=["one-stream", "streams"])
def two(request):
    # (GE's clusters keep this one-engine graph on one stream; pyge's per-node rules split it)
    m = pyge.compile(_two_outputs(), options={"ge.enableSingleStream": request.param,
                                              "ge.streamMaxParallelNum": "3",
                                              "pyge.streamAllocation": "nodes"})
    assert (m.num_streams == 1) == (request.param == "true")
    return m


def test_output_names_gives_only_those_in_that_order(two):
    full = two.run({"x": X})
    got = two.run({"x": X}, output_names=["s", "a"])
    assert list(got) == ["s", "a"]
    for k in got:
        np.testing.assert_array_equal(got[k], full[k])
    assert list(two.run({"x": X}, ["n"])) == ["n"]              # positional, pyge's order


@pytest.mark.parametrize("names, match", [
    (["a", "nope"], r"unknown output 'nope' in output_names; the model's outputs are: a, n, s"),
    ("a", r"output_names must be a list of output names, got str; the model's outputs are: a, n, s"),
    ([], "output_names is empty"),
    (["a", "a"], "output 'a' is named twice"),
    ([1], "unknown output 1"),
])
def test_bad_output_names(two, names, match):
    with pytest.raises(pyge.InputError, match=match) as err:
        two.run({"x": X}, output_names=names)
    assert "\n" not in str(err.value)


def test_a_model_is_callable_and_takes_feeds_as_a_list(two):
    full = two.run({"x": X})
    for got in (two({"x": X}), two([X]), two.run((X,)), two([X], output_names=["a", "n", "s"])):
        assert list(got) == ["a", "n", "s"]
        for k in full:
            np.testing.assert_array_equal(got[k], full[k])
    with pytest.raises(pyge.InputError, match=r"takes 1 input\(s\) \(x\), got a list of 2"):
        two([X, X])
    with pytest.raises(pyge.InputError, match="a dict of input name -> array or a list in input order"):
        two(X)


def test_onnxruntime_positional_call_returns_onnxruntime_lists(two):
    full = two.run({"x": X})
    got = two.run(None, {"x": X})
    assert isinstance(got, list) and len(got) == 3
    for g, k in zip(got, ["a", "n", "s"]):
        np.testing.assert_array_equal(g, full[k])
    s, a = two.run(["s", "a"], {"x": X})
    np.testing.assert_array_equal(s, full["s"])
    np.testing.assert_array_equal(a, full["a"])
    (n,) = two(("n",), {"x": X})
    np.testing.assert_array_equal(n, full["n"])
    with pytest.raises(pyge.InputError, match=r"output_names is a dict; pyge's call is run\(feeds, output_na"):
        two.run({"x": X}, {"x": X})
    with pytest.raises(pyge.InputError, match="unknown output 'zz'"):
        two.run(["zz"], {"x": X})


def test_onnxruntime_call_gives_onnxruntime_results():
    ort = pytest.importorskip("onnxruntime")
    proto = _proto()
    ref = ort.InferenceSession(proto.SerializeToString(), providers=["CPUExecutionProvider"])
    m = pyge.compile(pyge.load_onnx(proto))
    for names in (None, ["a"], ["a", "output"]):
        for want, got in zip(ref.run(names, {"input": X}), m.run(names, {"input": X}), strict=True):
            np.testing.assert_allclose(got, want, rtol=1e-6)
