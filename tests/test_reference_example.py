"""The reference example: Abs_1 and Relu_1 share a stream until the pass SplitAbs moves Abs_1."""
from __future__ import annotations

import runpy
from pathlib import Path

import numpy as np
import pytest

import pyge
from pyge.examples import PASS_NAME, reference_graph, reference_inputs, split_abs
from pyge.passes.custom import registered_passes

SHAPE = (64, 64)
EXAMPLE = Path(__file__).resolve().parents[1] / "examples" / "custom_stream_pass" / "run.py"


pytestmark = pytest.mark.usefixtures("no_custom_passes")


def test_default_rules_put_both_operators_on_one_stream():
    m = pyge.compile(reference_graph(SHAPE))
    assert m.num_streams == 1
    assert m.stream_of("Abs_1") == m.stream_of("Relu_1") == 0
    assert m.events == []


def test_split_abs_gives_abs_1_its_own_stream_and_the_same_numbers():
    g = reference_graph(SHAPE)
    pyge.register_custom_pass(PASS_NAME).custom_allocate_stream_pass_fn(split_abs)
    m = pyge.compile(g)
    assert m.num_streams == 2
    assert m.stream_of("Abs_1") != m.stream_of("Relu_1")
    assert m.custom_streams == [m.stream_of("Abs_1")]
    assert [(e.src, e.dst) for e in m.events] == [("Abs_1", "Add_1")]
    single = pyge.compile(g, options={"ge.enableSingleStream": "true"})
    feeds = reference_inputs(SHAPE)
    out, ref = m.run(feeds)["output"], single.run(feeds)["output"]
    np.testing.assert_array_equal(out, ref)
    x = feeds["input"]
    np.testing.assert_array_equal(out, np.maximum(x, 0) + np.abs(x))


def test_more_streams_per_engine_do_not_split_one_cluster():
    """As in GE: Relu_1, Abs_1 and Add_1 form one engine cluster (Add_1 joins both of its
    parents), and a cluster gets one stream, whatever ge.streamMaxParallelNum says."""
    m = pyge.compile(reference_graph(SHAPE), options={"ge.streamMaxParallelNum": "2"})
    assert m.num_streams == 1 and m.custom_streams == []


def test_per_node_rules_with_more_streams_do_separate_them():
    m = pyge.compile(reference_graph(SHAPE), options={"ge.streamMaxParallelNum": "2",
                                                     "pyge.streamAllocation": "nodes"})
    assert m.num_streams == 2 and m.stream_of("Abs_1") != m.stream_of("Relu_1")


def test_example_script_runs(capsys):
    ns = runpy.run_path(str(EXAMPLE), run_name="example")
    assert ns["main"]() == 0
    out = capsys.readouterr().out
    assert "with custom pass SplitAbs: 2 stream(s)" in out
    assert "outputs identical to the single-stream run: True" in out
    assert registered_passes() == []   # the example registers its pass only for its compilation
