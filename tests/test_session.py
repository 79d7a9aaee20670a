"""pyge.Session: GE's session/graph option levels, graph ids, build and run."""
from __future__ import annotations

import numpy as np
import pytest

import pyge
from pyge.builtin_models import inception_block, random_inputs
from pyge.errors import InputError, OptionError
from pyge.session import SessionError

# (GE's clusters keep a connected one-engine graph on one stream; pyge's per-node rules split it)
PARALLEL = {"ge.streamMaxParallelNum": "4", "pyge.streamAllocation": "nodes"}


@pytest.fixture(scope="module")
def graph():
    return inception_block(channels=8, size=8)


@pytest.fixture(scope="module")
def feeds(graph):
    return random_inputs(graph, seed=5)


def test_session_options_apply_to_every_graph(graph):
    sess = pyge.Session(PARALLEL)
    sess.add_graph(1, graph)
    assert sess.build_graph(1).num_streams > 1
    assert sess.options == PARALLEL


def test_graph_options_override_session_options(graph):
    sess = pyge.Session(PARALLEL)
    sess.add_graph(1, graph, {"ge.enableSingleStream": "true"})
    sess.add_graph(2, graph)
    assert sess.build_graph(1).num_streams == 1
    assert sess.build_graph(2).num_streams > 1
    assert sess.graph_options(1) == {**PARALLEL, "ge.enableSingleStream": "true"}
    assert sess.graph_options(2) == PARALLEL


def test_graph_level_value_wins_key_by_key(graph):
    sess = pyge.Session({"ge.streamMaxParallelNum": "4", "pyge.memoryReuse": "false"})
    sess.add_graph(3, graph, {"ge.streamMaxParallelNum": "1"})
    assert sess.graph_options(3) == {"ge.streamMaxParallelNum": "1", "pyge.memoryReuse": "false"}
    assert sess.build_graph(3).num_streams == 1


def test_options_checked_when_given(graph):
    with pytest.raises(OptionError, match="ge.bogus"):
        pyge.Session({"ge.bogus": "1"})
    sess = pyge.Session()
    with pytest.raises(OptionError, match="ge.enableSingleStream"):
        sess.add_graph(1, graph, {"ge.enableSingleStream": "maybe"})
    assert sess.graph_ids == []          # a refused add leaves nothing behind
    with pytest.raises(OptionError):
        sess.add_graph(1, graph, ["not", "a", "dict"])


def test_graph_ids(graph):
    sess = pyge.Session()
    sess.add_graph(1, graph)
    with pytest.raises(SessionError, match="already"):
        sess.add_graph(1, graph)
    for call in (sess.build_graph, sess.remove_graph, sess.is_graph_need_rebuild):
        with pytest.raises(SessionError, match="graph id 9 is not in this session"):
            call(9)
    with pytest.raises(SessionError, match="not in this session"):
        sess.run_graph(9, [])
    for bad in (-1, "1", 1.0, True):
        with pytest.raises(SessionError, match="non-negative integer"):
            sess.add_graph(bad, graph)
    with pytest.raises(SessionError, match="pyge.Graph"):
        sess.add_graph(2, "model.onnx")
    sess.remove_graph(1)
    sess.add_graph(1, graph)             # the id is free again
    assert sess.graph_ids == [1]
    assert isinstance(SessionError("x"), pyge.PygeError)


def test_build_once_and_run(graph, feeds):
    sess = pyge.Session()
    sess.add_graph(7, graph)
    assert sess.is_graph_need_rebuild(7) and sess.compiled_model(7) is None
    m = sess.build_graph(7)
    assert sess.build_graph(7) is m and not sess.is_graph_need_rebuild(7)
    want = m.run(feeds)
    got = sess.run_graph(7, feeds)                       # dict in, dict out
    np.testing.assert_array_equal(got["logits"], want["logits"])
    (lst,) = sess.run_graph(7, [feeds["input"]])        # list in (GE), list out
    np.testing.assert_array_equal(lst, want["logits"])


def test_run_graph_builds_if_needed(graph, feeds):
    with pyge.Session(PARALLEL) as sess:
        sess.add_graph(1, graph)
        out = sess.run_graph(1, [feeds["input"]])
        assert not sess.is_graph_need_rebuild(1) and len(out) == 1
        single = pyge.compile(graph, options={"ge.enableSingleStream": "true"}).run(feeds)
        np.testing.assert_allclose(out[0], single["logits"], rtol=1e-5, atol=1e-6)


def test_run_graph_and_run_take_a_list_or_a_dict(graph, feeds):
    sess = pyge.Session()
    sess.add_graph(1, graph)
    want = sess.build_graph(1).run(feeds)["logits"]
    for inputs, lists in ((feeds, False), ([feeds["input"]], True), ((feeds["input"],), True)):
        out = sess.run_graph(1, inputs)
        assert isinstance(out, list) == lists
        np.testing.assert_array_equal(out[0] if lists else out["logits"], want)
    model = sess.compiled_model(1)
    for inputs in (feeds, [feeds["input"]], (feeds["input"],)):
        got = model.run(inputs)                       # CompiledModel.run: a dict either way
        assert list(got) == ["logits"]
        np.testing.assert_array_equal(got["logits"], want)
    assert sess.build_graph(1, feeds) is model and sess.build_graph(1, [feeds["input"]]) is model


def test_inputs_checked(graph, feeds):
    sess = pyge.Session()
    sess.add_graph(1, graph)
    with pytest.raises(InputError, match="takes 1 input"):
        sess.run_graph(1, [feeds["input"], feeds["input"]])
    with pytest.raises(InputError, match="shape"):
        sess.build_graph(1, [np.zeros((1, 8, 4, 4), np.float32)])
    with pytest.raises(InputError, match="list"):
        sess.run_graph(1, feeds["input"])


def test_graph_id_names_the_dumps(graph, tmp_path, monkeypatch):
    monkeypatch.setenv("DUMP_GE_GRAPH", "3")
    monkeypatch.setenv("DUMP_GRAPH_LEVEL", "3")
    monkeypatch.setenv("DUMP_GRAPH_PATH", str(tmp_path))
    sess = pyge.Session()
    sess.add_graph(42, graph)
    sess.build_graph(42)
    names = [p.name for p in tmp_path.iterdir()]
    assert names and all("_graph_42_" in n for n in names)


def test_list_inputs_and_outputs_of_a_small_graph():
    b = pyge.GraphBuilder("late")
    x = b.input("x", "float32", (2,))
    b.output(b.op("Abs", [x], name="Abs_1"), "y")
    g = b.build()
    sess = pyge.Session()
    sess.add_graph(1, g)
    (y,) = sess.run_graph(1, [np.array([-1, 2], np.float32)])
    np.testing.assert_array_equal(y, [1, 2])
    assert "Session" in repr(sess) and "1 built" in repr(sess)
