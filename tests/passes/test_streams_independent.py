"""Rule 2: independent engines (copies, collectives) get streams of their own."""
from __future__ import annotations

import pytest

import pyge
from pyge.ir.clone import clone_graph
from pyge.passes.graph.engines import INDEPENDENT, assign_engines, register_engine, reset_engines
from pyge.passes.streams import allocate_streams


@pytest.fixture(autouse=True)
def _clean_table():
    yield
    reset_engines()


def _alloc(g, **options):
    g = clone_graph(g)
    assign_engines(g)
    allocate_streams(g, options)
    return {n.name: n.stream_id for n in g.nodes}


def _graph(copy_attrs: list[dict], op="MemcpyToHost"):
    """x -> relu -> one copy per entry of copy_attrs; relu -> neg."""
    b = pyge.GraphBuilder("copies")
    x = b.input("x", "float32", (4,))
    r = b.op("Relu", [x], name="relu")
    for i, attrs in enumerate(copy_attrs):
        b.graph.outputs.append(b.op(op, [r], name=f"copy{i}", **attrs))
    b.graph.outputs.append(b.op("Neg", [r], name="neg"))
    return b.build()


def test_copies_get_their_own_stream_even_with_one_stream_per_engine():
    s = _alloc(_graph([{}, {}]))
    assert s["copy0"] == s["copy1"]
    assert s["copy0"] != s["relu"] == s["neg"]


def test_one_stream_per_label_of_an_independent_engine():
    s = _alloc(_graph([{"_stream_label": "a"}, {"_stream_label": "b"}, {"_stream_label": "a"}]))
    assert s["copy0"] == s["copy2"] != s["copy1"]
    assert s["relu"] not in (s["copy0"], s["copy1"])


def test_independent_stream_is_not_continued():
    b = pyge.GraphBuilder("after_copy")
    x = b.input("x", "float32", (4,))
    c = b.op("MemcpyFromHost", [x], name="h2d")
    r = b.op("Relu", [c], name="relu")
    b.graph.outputs.append(b.op("Neg", [r], name="neg"))
    s = _alloc(b.build())
    assert s["h2d"] != s["relu"] == s["neg"]


def test_each_independent_engine_has_its_own_streams():
    register_engine("AllToAll", "hccl", kind=INDEPENDENT)
    b = pyge.GraphBuilder("two")
    x = b.input("x", "float32", (4,))
    b.graph.outputs.append(b.op("MemcpyToHost", [x], name="copy"))
    b.graph.outputs.append(b.op("AllToAll", [x], name="a2a"))
    b.graph.outputs.append(b.op("Relu", [x], name="relu"))
    s = _alloc(b.build())
    assert len({s["copy"], s["a2a"], s["relu"]}) == 3


def test_single_stream_mode_puts_copies_on_stream_zero():
    s = _alloc(_graph([{}, {}]), **{"ge.enableSingleStream": "true"})
    assert set(s.values()) == {0}
