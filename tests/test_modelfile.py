"""Offline models (.pgm): round trip, and every kind of bad file gives ModelFileError."""
from __future__ import annotations

import hashlib
import json
import struct

import numpy as np
import onnx
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from onnx import TensorProto, helper

import pyge
from pyge.builtin_models import inception_block, random_inputs
from pyge.errors import ModelFileError
from pyge.model import load_model
from pyge.modelfile import FORMAT_VERSION, MAGIC, is_model_file

# (GE's clusters keep a connected one-engine graph on one stream; pyge's per-node rules split it)
PARALLEL = {"ge.streamMaxParallelNum": "4", "pyge.streamAllocation": "nodes"}


@pytest.fixture(scope="module")
def branchy():
    return pyge.compile(inception_block(channels=8, size=8), options=PARALLEL)


@pytest.fixture(scope="module")
def saved(branchy, tmp_path_factory):
    path = tmp_path_factory.mktemp("pgm") / "branchy.pgm"
    branchy.save(path)
    return path


def _split(data: bytes):
    """(header dict, graph bytes) of a valid file, for crafting variants."""
    (head_len,) = struct.unpack_from("<Q", data, 12)
    head = json.loads(data[20:20 + head_len])
    (body_len,) = struct.unpack_from("<Q", data, 20 + head_len)
    body = data[28 + head_len:28 + head_len + body_len]
    return head, body


def _pack(head: dict, body: bytes, version: int = FORMAT_VERSION) -> bytes:
    """A file with a valid checksum around whatever header and graph it is given."""
    h = json.dumps(head).encode()
    data = MAGIC + struct.pack("<IQ", version, len(h)) + h + struct.pack("<Q", len(body)) + body
    return data + hashlib.sha256(data).digest()


# ---------------------------------------------------------------------------------------
# round trip


def test_round_trip_same_plan_and_outputs(branchy, saved):
    loaded = load_model(saved)
    assert loaded.plan == branchy.plan
    assert loaded.plan.format() == branchy.plan.format()
    assert loaded.num_streams == branchy.num_streams > 1
    assert [str(e) for e in loaded.events] == [str(e) for e in branchy.events]
    assert loaded.streams == branchy.streams
    assert loaded.options.as_dict() == branchy.options.as_dict()
    assert loaded.device == "cpu"
    feeds = random_inputs(branchy.graph, seed=3)
    want, got = branchy.run(feeds), loaded.run(feeds)
    assert want.keys() == got.keys()
    for k in want:
        np.testing.assert_array_equal(got[k], want[k])
    loaded.verify()


def test_round_trip_matches_onnxruntime(saved):
    ort = pytest.importorskip("onnxruntime")
    from pyge.frontends.onnx_proto import graph_to_model
    graph = inception_block(channels=8, size=8)
    feeds = random_inputs(graph, seed=1)
    sess = ort.InferenceSession(graph_to_model(graph).SerializeToString(), providers=["CPUExecutionProvider"])
    (want,) = sess.run(None, feeds)
    np.testing.assert_allclose(load_model(saved).run(feeds)["logits"], want, rtol=1e-4, atol=1e-5)


def test_save_is_deterministic_and_atomic(branchy, tmp_path):
    a, b = tmp_path / "a.pgm", tmp_path / "b.pgm"
    branchy.save(a)
    branchy.save(b)
    assert a.read_bytes() == b.read_bytes()
    assert is_model_file(a) and not is_model_file(tmp_path / "missing.pgm")
    assert sorted(p.name for p in tmp_path.iterdir()) == ["a.pgm", "b.pgm"]  # no temp files left


def test_saved_file_mode_follows_the_umask(branchy, tmp_path):
    """Like any file the user writes (onnx.save, np.save), not mkstemp's private 0o600."""
    import os
    old = os.umask(0o022)
    try:
        branchy.save(tmp_path / "a.pgm")
        os.umask(0o077)
        branchy.save(tmp_path / "b.pgm")
    finally:
        os.umask(old)
    assert (tmp_path / "a.pgm").stat().st_mode & 0o777 == 0o644
    assert (tmp_path / "b.pgm").stat().st_mode & 0o777 == 0o600


def test_graph_section_is_onnx_with_stream_ids(saved):
    head, body = _split(saved.read_bytes())
    mp = onnx.ModelProto()
    mp.ParseFromString(body)
    streams = {n.name: next(a.i for a in n.attribute if a.name == "_stream_id") for n in mp.graph.node}
    plan = head["plan"]
    assert streams == {n["name"]: n["stream"] for n in plan["nodes"]}
    assert len(mp.graph.initializer) > 0           # weights travel in the file
    assert head["pyge_version"] == pyge.__version__


def _if_model() -> onnx.ModelProto:
    """y = If(cond, then: x + 1 via Abs branch, else: x * 2), plus an independent Neg."""
    x = helper.make_tensor_value_info("x", TensorProto.FLOAT, [4])
    c = helper.make_tensor_value_info("cond", TensorProto.BOOL, [])
    out_t = helper.make_tensor_value_info("t", TensorProto.FLOAT, [4])
    out_e = helper.make_tensor_value_info("e", TensorProto.FLOAT, [4])
    then_g = helper.make_graph([helper.make_node("Abs", ["x"], ["t"], name="then_abs")], "then", [], [out_t])
    else_g = helper.make_graph([helper.make_node("Add", ["x", "x"], ["e"], name="else_add")], "else", [], [out_e])
    nodes = [helper.make_node("If", ["cond"], ["y"], name="If_1", then_branch=then_g, else_branch=else_g),
             helper.make_node("Neg", ["x"], ["z"], name="Neg_1")]
    g = helper.make_graph(nodes, "ifmodel", [x, c], [helper.make_tensor_value_info("y", TensorProto.FLOAT, [4]),
                                                     helper.make_tensor_value_info("z", TensorProto.FLOAT, [4])])
    return helper.make_model(g, opset_imports=[helper.make_opsetid("", 17)])


def test_round_trip_with_subgraphs(tmp_path):
    model = pyge.compile(pyge.load_onnx(_if_model()), options=PARALLEL)
    model.save(tmp_path / "if.pgm")
    loaded = load_model(tmp_path / "if.pgm")
    assert loaded.plan == model.plan
    sub = [(n.name, n.stream_id, n.engine) for g in model.graph.all_graphs()[1:] for n in g.nodes]
    got = [(n.name, n.stream_id, n.engine) for g in loaded.graph.all_graphs()[1:] for n in g.nodes]
    assert sorted(got) == sorted(sub)
    x = np.array([-1, 2, -3, 4], np.float32)
    for cond in (True, False):
        feeds = {"x": x, "cond": np.array(cond)}
        want, res = model.run(feeds), loaded.run(feeds)
        for k in want:
            np.testing.assert_array_equal(res[k], want[k])


def test_load_with_device_override(saved):
    assert load_model(saved, device="cpu").device == "cpu"
    with pytest.raises(ModelFileError, match="device"):
        load_model(saved, device="tpu")


# ---------------------------------------------------------------------------------------
# bad files


def test_missing_and_folder(tmp_path):
    with pytest.raises(ModelFileError, match="not found"):
        load_model(tmp_path / "nope.pgm")
    with pytest.raises(ModelFileError, match="folder"):
        load_model(tmp_path)


def test_not_a_model(tmp_path):
    p = tmp_path / "x.pgm"
    p.write_bytes(_if_model().SerializeToString())
    with pytest.raises(ModelFileError, match="not a pyge offline model"):
        load_model(p)
    p.write_bytes(b"")
    with pytest.raises(ModelFileError, match="not a pyge offline model"):
        load_model(p)


@pytest.mark.parametrize("keep", [4, 10, 20, 200, -33, -1])
def test_truncated(saved, tmp_path, keep):
    data = saved.read_bytes()
    p = tmp_path / "cut.pgm"
    p.write_bytes(data[:keep])
    with pytest.raises(ModelFileError, match="truncated|bad magic"):
        load_model(p)


def test_trailing_bytes(saved, tmp_path):
    p = tmp_path / "long.pgm"
    p.write_bytes(saved.read_bytes() + b"\0")
    with pytest.raises(ModelFileError, match="unexpected bytes"):
        load_model(p)


@pytest.mark.parametrize("where", [0.3, 0.6, 0.99])
def test_corrupt_byte_fails_checksum(saved, tmp_path, where):
    data = bytearray(saved.read_bytes())
    i = 40 + int((len(data) - 80) * where)
    data[i] ^= 0x55
    p = tmp_path / "bad.pgm"
    p.write_bytes(bytes(data))
    with pytest.raises(ModelFileError, match="checksum"):
        load_model(p)


@pytest.mark.parametrize("byte", range(8, 28))
def test_one_flipped_header_bit_is_corruption(saved, tmp_path, byte):
    """Issue 20 item 11: a flipped bit in the version (bytes 8..11: version 1 -> 257 for bit
    8), the header length (12..19) or the first header bytes is corruption, found by the
    checksum before anything the corrupt bytes say is believed."""
    data = saved.read_bytes()
    p = tmp_path / "flip.pgm"
    for bit in range(8):
        bad = bytearray(data)
        bad[byte] ^= 1 << bit
        p.write_bytes(bytes(bad))
        with pytest.raises(ModelFileError, match="corrupt") as info:
            load_model(p)
        assert "version" not in str(info.value) and "upgrade" not in str(info.value)


def test_flipped_magic_bit_is_not_a_model(saved, tmp_path):
    bad = bytearray(saved.read_bytes())
    bad[3] ^= 0x10
    p = tmp_path / "magic.pgm"
    p.write_bytes(bytes(bad))
    with pytest.raises(ModelFileError, match="not a pyge offline model"):
        load_model(p)


def test_newer_version(saved, tmp_path):
    head, body = _split(saved.read_bytes())
    p = tmp_path / "new.pgm"
    p.write_bytes(_pack(head, body, version=FORMAT_VERSION + 1))
    with pytest.raises(ModelFileError, match=f"format version {FORMAT_VERSION + 1}.*up to {FORMAT_VERSION}"):
        load_model(p)


def _mutations():
    def node_input(h): h["plan"]["nodes"][0]["inputs"][0] = 10_000
    def step_arg(h): h["plan"]["streams"][0][0][1] = 10_000
    def step_kind(h): h["plan"]["streams"][0][0][0] = 7
    def producer_text(h): h["plan"]["values"][-1]["producer"] = "zero"
    def stream_bool(h): h["plan"]["nodes"][0]["stream"] = True
    def missing_field(h): del h["plan"]["nodes"][0]["outputs"]
    def index_shift(h): h["plan"]["nodes"][0]["index"] = 1
    def event_stream(h): h["plan"]["events"][0]["dst_stream"] = 99
    def wrong_stream(h): h["plan"]["nodes"][0]["stream"] = (h["plan"]["nodes"][0]["stream"] + 1) % 4
    def node_info(h): h["node_info"] = h["node_info"][:0]
    def control(h): h["node_info"][0][0][2] = [12345]
    def options(h): h["options"] = {"ge.bogus": "1"}
    def plan_list(h): h["plan"] = []
    def dropped_launch(h): h["plan"]["streams"][0] = h["plan"]["streams"][0][1:]
    def renamed(h): h["plan"]["nodes"][0]["name"] = "elsewhere"
    return [node_input, step_arg, step_kind, producer_text, stream_bool, missing_field, index_shift,
            event_stream, wrong_stream, node_info, control, options, plan_list, dropped_launch, renamed]


@pytest.mark.parametrize("mutate", _mutations(), ids=lambda f: f.__name__)
def test_crafted_header_with_valid_checksum(saved, tmp_path, mutate):
    head, body = _split(saved.read_bytes())
    mutate(head)
    p = tmp_path / "crafted.pgm"
    p.write_bytes(_pack(head, body))
    with pytest.raises(ModelFileError):
        load_model(p)


def test_external_data_is_refused(saved, tmp_path):
    head, body = _split(saved.read_bytes())
    mp = onnx.ModelProto()
    mp.ParseFromString(body)
    t = mp.graph.initializer[0]
    t.ClearField("raw_data")
    t.data_location = TensorProto.EXTERNAL
    e = t.external_data.add()
    e.key, e.value = "location", "../../etc/passwd"
    p = tmp_path / "ext.pgm"
    p.write_bytes(_pack(head, mp.SerializeToString()))
    with pytest.raises(ModelFileError, match="external data"):
        load_model(p)


def test_garbage_graph_section(saved, tmp_path):
    head, _ = _split(saved.read_bytes())
    p = tmp_path / "g.pgm"
    p.write_bytes(_pack(head, b"\xff\xff\xff\xff not protobuf"))
    with pytest.raises(ModelFileError):
        load_model(p)


def _int_paths(obj, path=()):
    """Paths to every integer leaf of the plan JSON."""
    if isinstance(obj, dict):
        for k, v in obj.items():
            yield from _int_paths(v, path + (k,))
    elif isinstance(obj, list):
        for i, v in enumerate(obj):
            yield from _int_paths(v, path + (i,))
    elif isinstance(obj, int) and not isinstance(obj, bool):
        yield path


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(data=st.data())
def test_any_integer_changed_loads_or_fails_cleanly(saved, tmp_path, data):
    """Property: change any integer in the plan to anything; the loader either accepts the
    file or raises ModelFileError, never IndexError/KeyError/TypeError."""
    head, body = _split(saved.read_bytes())
    paths = list(_int_paths(head["plan"]))
    path = data.draw(st.sampled_from(paths))
    value = data.draw(st.one_of(st.integers(-3, 40), st.integers(), st.none(), st.text(max_size=3),
                                st.lists(st.integers(0, 3), max_size=2)))
    target = head["plan"]
    for k in path[:-1]:
        target = target[k]
    target[path[-1]] = value
    p = tmp_path / "fuzz.pgm"
    p.write_bytes(_pack(head, body))
    try:
        load_model(p)
    except ModelFileError:
        pass
