"""Property tests (issue 20): random truncations and bit flips of a .onnx file give only
ModelLoadError when it is loaded, never another exception, a crash or a hang; a file that
still loads compiles and runs, or fails with a pyge error."""
from __future__ import annotations

import numpy as np
import onnx
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from onnx import TensorProto as T
from onnx import helper as h
from onnx import numpy_helper

import pyge
from pyge.errors import ModelLoadError, PygeError

from test_fuzz_pgm import _flip, time_limit

SETTINGS = settings(max_examples=200, deadline=None,
                    suppress_health_check=[HealthCheck.function_scoped_fixture])


def _model() -> onnx.ModelProto:
    """Conv, Relu, a Reshape by a constant shape, MatMul with a weight, an If with two
    branches reading the outer scope, attributes of several types, and value_info."""
    rng = np.random.default_rng(0)
    w = numpy_helper.from_array(rng.standard_normal((4, 2, 3, 3)).astype(np.float32), "w")
    m = numpy_helper.from_array(rng.standard_normal((64, 5)).astype(np.float32), "m")
    shape = numpy_helper.from_array(np.array([1, 64], np.int64), "shape")
    then_g = h.make_graph([h.make_node("Neg", ["f"], ["t"], name="neg")], "then", [],
                          [h.make_tensor_value_info("t", T.FLOAT, [1, 5])])
    else_g = h.make_graph([h.make_node("Abs", ["f"], ["e"], name="abs")], "else", [],
                          [h.make_tensor_value_info("e", T.FLOAT, [1, 5])])
    nodes = [
        h.make_node("Conv", ["x", "w"], ["c"], name="conv", pads=[1, 1, 1, 1], strides=[1, 1]),
        h.make_node("Relu", ["c"], ["r"], name="relu"),
        h.make_node("Reshape", ["r", "shape"], ["flat"], name="reshape"),
        h.make_node("MatMul", ["flat", "m"], ["f"], name="matmul"),
        h.make_node("ReduceSum", ["f"], ["s"], name="sum", keepdims=0),
        h.make_node("Greater", ["s", "zero"], ["cond"], name="gt"),
        h.make_node("If", ["cond"], ["y"], name="if", then_branch=then_g, else_branch=else_g),
        h.make_node("Softmax", ["f"], ["p"], name="softmax", axis=-1),
    ]
    g = h.make_graph(nodes, "fuzz", [h.make_tensor_value_info("x", T.FLOAT, [1, 2, 4, 4])],
                     [h.make_tensor_value_info("y", T.FLOAT, [1, 5]),
                      h.make_tensor_value_info("p", T.FLOAT, [1, 5])],
                     [w, m, shape, numpy_helper.from_array(np.array(0, np.float32), "zero")],
                     value_info=[h.make_tensor_value_info("flat", T.FLOAT, [1, 64])])
    return h.make_model(g, opset_imports=[h.make_opsetid("", 17)])


@pytest.fixture(scope="module")
def source():
    mp = _model()
    onnx.checker.check_model(mp, full_check=True)
    x = np.random.default_rng(1).standard_normal((1, 2, 4, 4)).astype(np.float32)
    want = pyge.compile(pyge.load_onnx(mp)).run({"x": x})
    return mp.SerializeToString(), {"x": x}, want


def _try(tmp_path, data: bytes, feeds) -> None:
    """Load (only ModelLoadError may escape as an error), then compile and run (only pyge
    errors): anything else fails the test."""
    p = tmp_path / "fuzz.onnx"
    p.write_bytes(data)
    with time_limit():
        try:
            graph = pyge.load_onnx(str(p))
        except ModelLoadError:
            return
        try:
            model = pyge.compile(graph)
            model.verify()
            model.run(feeds)
        except PygeError:
            pass


def test_the_source_model_runs(source, tmp_path):
    data, feeds, want = source
    assert set(want) == {"y", "p"}
    _try(tmp_path, data, feeds)


@SETTINGS
@given(data=st.data())
def test_truncated_onnx_loads_or_is_a_model_load_error(source, tmp_path, data):
    full, feeds, _ = source
    _try(tmp_path, full[:data.draw(st.integers(0, len(full) - 1))], feeds)


@SETTINGS
@given(data=st.data())
def test_flipped_onnx_bits_load_or_are_a_model_load_error(source, tmp_path, data):
    full, feeds, _ = source
    bits = data.draw(st.sets(st.integers(0, 8 * len(full) - 1), min_size=1, max_size=4))
    _try(tmp_path, _flip(full, bits), feeds)


def test_empty_and_garbage_files_are_model_load_errors(tmp_path):
    for data in (b"", b"\x00", b"\xff" * 64, b"not a model"):
        p = tmp_path / "bad.onnx"
        p.write_bytes(data)
        with pytest.raises(ModelLoadError):
            pyge.load_onnx(str(p))


# -- what the fuzzing found: each a ModelLoadError now ------------------------------------

def test_a_name_that_is_not_utf8_is_a_model_load_error(source, tmp_path):
    """protobuf returns such a proto2 string as bytes; compiling tripped over it (TypeError)."""
    data = source[0].replace(b"\x1a\x04conv", b"\x1a\x04c\xefnv", 1)
    p = tmp_path / "name.onnx"
    p.write_bytes(data)
    with pytest.raises(ModelLoadError, match=r"NodeProto.name .*not valid UTF-8: b'c\\xefnv'"):
        pyge.load_onnx(str(p))
    with pytest.raises(ModelLoadError, match="not valid UTF-8"):
        pyge.load_onnx(data)


def test_an_input_name_that_is_not_utf8_is_a_model_load_error(source):
    data = source[0].replace(b"\n\x01x\n\x01w", b"\n\x01\xff\n\x01w", 1)
    with pytest.raises(ModelLoadError, match=r"NodeProto.input in node 'conv' is not valid UTF-8"):
        pyge.load_onnx(data)


def test_an_attribute_of_undefined_type_is_a_model_load_error():
    mp = _model()
    mp.graph.node[0].attribute[0].type = onnx.AttributeProto.UNDEFINED
    with pytest.raises(ModelLoadError, match=r"node 'conv' \(Conv\): attribute 'pads' has unsupported type 0"):
        pyge.load_onnx(mp)
