"""A crafted .pgm is not trusted: its plan must be its graph's plan (issue 20 item 8).

Each case below rewrites one thing in a saved file's plan, recomputes the checksum (anyone
can), and expects ModelFileError naming the node or value. The first is the issue's: a plan
node reading `x` where its graph node reads the previous node's output loaded, passed
verify() and computed something other than its graph.
"""
from __future__ import annotations

import hashlib
import json
import struct

import numpy as np
import pytest

import pyge
from pyge.errors import ModelFileError
from pyge.model import load_model
from pyge.modelfile import FORMAT_VERSION, MAGIC

PARALLEL = {"ge.streamMaxParallelNum": "4", "pyge.streamAllocation": "nodes"}


def _split(data: bytes):
    (head_len,) = struct.unpack_from("<Q", data, 12)
    head = json.loads(data[20:20 + head_len])
    (body_len,) = struct.unpack_from("<Q", data, 20 + head_len)
    return head, data[28 + head_len:28 + head_len + body_len]


def _pack(head: dict, body: bytes) -> bytes:
    h = json.dumps(head).encode()
    data = MAGIC + struct.pack("<IQ", FORMAT_VERSION, len(h)) + h + struct.pack("<Q", len(body)) + body
    return data + hashlib.sha256(data).digest()


def _graph():
    """x -> A=Abs -> S=Sub(A, x) -> C=Clip(S, min absent, max) -> y; B=Neg(x) on its own
    stream, control edge B -> C; an If reading x from its branches."""
    b = pyge.GraphBuilder("trust")
    x = b.input("x", "float32", (2, 3))
    c = b.input("c", "bool", ())
    a = b.op("Abs", [x], name="A")
    s = b.op("Sub", [a, x], name="S")
    y = b.op("Clip", [s, None, b.initializer("hi", np.float32(1.5))], name="C")
    neg = b.op("Neg", [x], name="B")
    b.control_edge("B", "C")
    then_b = pyge.GraphBuilder("then")
    then_b.output(then_b.op("Relu", [x], name="then_relu"))
    else_b = pyge.GraphBuilder("else")
    else_b.output(else_b.op("Neg", [x], name="else_neg"))
    z = b.op("If", [c], name="If_1", then_branch=then_b.build(), else_branch=else_b.build())
    for v in (y, neg, z):
        b.output(v)
    return b.build()


@pytest.fixture(scope="module")
def saved(tmp_path_factory):
    model = pyge.compile(_graph(), options=PARALLEL)
    path = tmp_path_factory.mktemp("trust") / "trust.pgm"
    model.save(path)
    return model, path


def _node(plan, name):
    return next(n for n in plan["nodes"] if n["name"] == name)


def _value(plan, name):
    return next(v for v in plan["values"] if v["name"] == name)


def _vi(plan, name):
    return _value(plan, name)["index"]


def reads_x_not_a(p):
    _node(p, "S")["inputs"][0] = _vi(p, "x")


def swapped_inputs(p):
    n = _node(p, "S")
    n["inputs"] = n["inputs"][::-1]


def absent_input_filled(p):
    _node(p, "C")["inputs"][1] = _vi(p, "x")


def input_dropped(p):
    _node(p, "C")["inputs"].pop()


def implicit_read_dropped(p):
    _node(p, "If_1")["inputs"].pop()


def output_renamed(p):
    a, s = _value(p, "A_out"), _value(p, "S_out")
    _node(p, "A")["outputs"] = [s["index"]]
    _node(p, "S")["outputs"] = [a["index"]]
    a["producer"], s["producer"] = s["producer"], a["producer"]


def kind_changed(p):
    _value(p, "A_out")["kind"] = "sequence"


def dtype_changed(p):
    _value(p, "A_out")["dtype"] = "float64"


def shape_changed(p):
    _value(p, "A_out")["shape"] = [3, 2]


def producer_changed(p):
    _value(p, "A_out")["producer"] = _node(p, "B")["index"]


def const_flag(p):
    _value(p, "A_out")["is_const"] = True


def input_flag(p):
    _value(p, "S_out")["is_input"] = True


def size_shrunk(p):
    _value(p, "S_out")["nbytes"] = 4


def op_changed(p):
    _node(p, "A")["op_type"] = "Neg"


def engine_changed(p):
    _node(p, "A")["engine"] = "independent"


def control_edge_dropped(p):
    _node(p, "C")["control_preds"] = []


def event_renamed(p):
    p["events"][0]["src"] = "nowhere"


def extra_value(p):
    p["values"].append(dict(p["values"][-1], index=len(p["values"]), name="ghost"))


def duplicate_value_name(p):
    _value(p, "S_out")["name"] = "A_out"


def options_not_strings(p):
    p["options"] = {"pyge.maxEventNum": 3}


MUTATIONS = [reads_x_not_a, swapped_inputs, absent_input_filled, input_dropped, implicit_read_dropped,
             output_renamed, kind_changed, dtype_changed, shape_changed, producer_changed, const_flag,
             input_flag, size_shrunk, op_changed, engine_changed, control_edge_dropped, event_renamed,
             extra_value, duplicate_value_name, options_not_strings]
NAMED = {reads_x_not_a: "node 'S'", swapped_inputs: "node 'S'", absent_input_filled: "node 'C'",
         input_dropped: "node 'C'", implicit_read_dropped: "node 'If_1'", kind_changed: "value 'A_out'",
         dtype_changed: "value 'A_out'", shape_changed: "value 'A_out'", producer_changed: "value 'A_out'",
         const_flag: "value 'A_out'", input_flag: "value 'S_out'", size_shrunk: "value 'S_out'",
         op_changed: "node 'A'", engine_changed: "node 'A'", control_edge_dropped: "node 'C'",
         event_renamed: "nowhere", extra_value: "'ghost'"}


def test_the_file_loads_as_saved(saved):
    model, path = saved
    loaded = load_model(path)
    assert loaded.plan == model.plan and model.num_streams > 1 and model.events
    feeds = {"x": np.random.default_rng(0).standard_normal((2, 3)).astype(np.float32), "c": np.array(True)}
    want, got = model.run(feeds), loaded.run(feeds)
    for k in want:
        np.testing.assert_array_equal(got[k], want[k])


@pytest.mark.parametrize("mutate", MUTATIONS, ids=lambda f: f.__name__)
def test_a_plan_that_is_not_the_graphs_is_refused(saved, tmp_path, mutate):
    _, path = saved
    head, body = _split(path.read_bytes())
    mutate(head["plan"])
    p = tmp_path / "crafted.pgm"
    p.write_bytes(_pack(head, body))
    with pytest.raises(ModelFileError) as info:
        load_model(p)
    msg = str(info.value)
    assert "\n" not in msg
    if mutate in NAMED:
        assert NAMED[mutate] in msg, msg


def test_a_compiled_graph_out_of_order_saves_and_loads(tmp_path):
    """The compiled graph's node order need not be topological (the plan's is): node_info is
    matched to nodes in the file's order before the loader sorts the graph."""
    model = pyge.compile(_graph(), options=PARALLEL)
    model.graph.set_node_order(model.graph.nodes[::-1])
    model.save(tmp_path / "rev.pgm")
    loaded = load_model(tmp_path / "rev.pgm")
    assert loaded.plan == model.plan
    assert {n.name: n.stream_id for n in loaded.graph.nodes} == {n.name: n.stream_id for n in model.graph.nodes}
