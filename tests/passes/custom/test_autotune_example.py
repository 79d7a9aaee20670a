"""GE's multi-stream autotune sample, ported (examples/multi_stream_autotune): the plugin pass
turns $GE_AUTO_MULTISTREAM_PARALLEL_MODE into the graph attribute that overrides the option,
loaded from custom_fusion_passes as GE loads its library; the driver compiles every candidate,
checks its numbers against the default's and recommends one."""
from __future__ import annotations

import runpy
from pathlib import Path

import numpy as np
import pytest

import pyge
from pyge.passes.custom.plugins import ensure_plugins_loaded

from _plugin_files import names, write_plugin

EXAMPLE = Path(__file__).resolve().parents[3] / "examples" / "multi_stream_autotune"
PLUGIN = EXAMPLE / "opp" / "vendors" / "ge_ms_autotune" / "custom_fusion_passes" / "ge_ms_autotune_pass.py"
ENV = "GE_AUTO_MULTISTREAM_PARALLEL_MODE"


@pytest.fixture
def example():
    return runpy.run_path(str(EXAMPLE / "run.py"), run_name="autotune_example")


@pytest.fixture
def opp(tmp_path):
    """The example's plugin in an opp folder of safe modes (whatever the checkout's umask)."""
    root = tmp_path / "opp"
    write_plugin(root, "ge_ms_autotune", PLUGIN.name, PLUGIN.read_text())
    return root


def test_the_plugin_sets_the_mode_from_the_variable_and_overrides_the_option(opp, example, monkeypatch):
    monkeypatch.setenv("PYGE_OPP_PATH", str(opp))
    monkeypatch.setenv(ENV, "LoadBalance:2")
    assert ensure_plugins_loaded().passes == ["GeMsAutotunePass"] == names()
    (reg,) = pyge.passes.custom.registered_passes()
    assert reg.get_stage() is pyge.CustomPassStage.BEFORE_INFER_SHAPE
    graph = example["four_branches"](64)
    m = pyge.compile(graph, options={"ge.autoMultistreamParallelMode": "LoadBalance:4"})
    assert m.options["ge.autoMultistreamParallelMode"] == ("LoadBalance", 2)
    assert m.num_streams == 2
    assert "ge.autoMultistreamParallelMode" not in graph.attrs     # the caller's graph is untouched
    monkeypatch.delenv(ENV)                                         # unset: the pass changes nothing
    m = pyge.compile(graph, options={"ge.autoMultistreamParallelMode": "LoadBalance:4"})
    assert m.options["ge.autoMultistreamParallelMode"] == ("LoadBalance", 4)
    assert pyge.compile(graph).options["ge.autoMultistreamParallelMode"] is None


def test_a_bad_mode_in_the_variable_is_the_passs_error(opp, example, monkeypatch):
    monkeypatch.setenv("PYGE_OPP_PATH", str(opp))
    monkeypatch.setenv(ENV, "LoadBalance:99")
    with pytest.raises(pyge.CustomPassError, match="GeMsAutotunePass") as info:
        pyge.compile(example["four_branches"](64))
    assert "LoadBalance:99" in str(info.value)


def test_the_driver_compiles_every_candidate_and_keeps_the_numbers(opp, example, capsys):
    trials, pick = example["tune"](("LoadBalance:2", "MainStream:4"), steps=2, dim=64, opp=opp)
    assert [t.config for t in trials] == ["default", "LoadBalance:2", "MainStream:4"]
    assert [t.mode for t in trials] == [None, ("LoadBalance", 2), ("MainStream", 4)]
    assert [t.streams for t in trials] == [1, 2, 4]
    assert all(t.same and len(t.times_ms) == 2 for t in trials)
    assert pick in ("default", "LoadBalance:2", "MainStream:4")
    assert names() == []                      # the pass was registered for the tuning only
    assert example["main"](["--steps", "1", "--dim", "32", "--configs", "LoadBalance:2",
                            "--opp", str(opp)]) == 0
    out = capsys.readouterr().out
    assert "('LoadBalance', 2)" in out and "recommended: " in out


def test_the_candidates_compute_what_the_graph_says(opp, example):
    """The numbers every candidate is compared with are right in the first place."""
    graph = example["four_branches"](16)
    x = np.random.default_rng(0).standard_normal((16, 16)).astype(np.float32)
    y = pyge.compile(graph).run({"x": x})["y"]
    want = (-np.exp(np.maximum(x, 0)) - np.sqrt(np.abs(x)) - 1 / (1 + np.exp(x)) - np.abs(np.tanh(x)))
    np.testing.assert_allclose(y, want, rtol=1e-5, atol=1e-5)
