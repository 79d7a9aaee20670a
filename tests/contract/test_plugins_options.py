"""INTERFACE.md contract: plugins and options (acceptance checks call these names as written)."""
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
from .common import PLUGIN, make_opp, DUMP_RE, SHAPE, one_line, onnx_model, ref_graph, split_abs, split_model, x_in  # noqa: F401


# -- plugins -----------------------------------------------------------------------------------

def registered():
    from pyge.passes.custom import registered_passes
    return [r.name for r in registered_passes()]


@pytest.mark.parametrize("var", ["PYGE_OPP_PATH", "ASCEND_OPP_PATH"])
def test_plugins_load_in_lexical_order(tmp_path, monkeypatch, caplog, var):
    d = "vendors/{}/custom_fusion_passes/{}"
    opp = make_opp(tmp_path / "opp", {d.format("b_vendor", "a.py"): PLUGIN.format(name="B_A"),
                                      d.format("a_vendor", "z.py"): PLUGIN.format(name="A_Z"),
                                      d.format("a_vendor", "m.py"): PLUGIN.format(name="A_M"),
                                      d.format("a_vendor", "notes.txt"): "not python",
                                      d.format("a_vendor", "sub/deep.py"): "raise ValueError('searched')"})
    (tmp_path / "elsewhere.py").write_text(PLUGIN.format(name="Linked"))
    os.symlink(tmp_path / "elsewhere.py", opp / d.format("b_vendor", "b.py"))
    monkeypatch.setenv(var, str(opp))
    with caplog.at_level("WARNING", logger="pyge"):
        model = pyge.compile(ref_graph())
    assert registered() == ["A_M", "A_Z", "B_A", "Linked"]
    assert "subfolder sub is not searched" in caplog.text
    assert model.stream_of("Abs_1") != model.stream_of("Relu_1")


def test_pyge_opp_path_wins_over_ascend_opp_path(tmp_path, monkeypatch):
    d = "vendors/v/custom_fusion_passes/p.py"
    monkeypatch.setenv("PYGE_OPP_PATH", str(make_opp(tmp_path / "a", {d: PLUGIN.format(name="FromPyge")})))
    monkeypatch.setenv("ASCEND_OPP_PATH", str(make_opp(tmp_path / "b", {d: PLUGIN.format(name="FromAscend")})))
    pyge.compile(ref_graph())
    assert registered() == ["FromPyge"]


@pytest.mark.parametrize("body, cause", [("raise ValueError('broken plugin')", "ValueError: broken plugin"),
                                         ("import sys; sys.exit(4)", "SystemExit: 4"),
                                         ("def f(:\n", "SyntaxError")])
def test_failing_plugin_names_file_and_cause(tmp_path, monkeypatch, body, cause):
    opp = make_opp(tmp_path, {"vendors/v/custom_fusion_passes/a.py": PLUGIN.format(name="Good"),
                              "vendors/v/custom_fusion_passes/bad.py": body})
    monkeypatch.setenv("PYGE_OPP_PATH", str(opp))
    with pytest.raises(pyge.PluginError, match=re.escape(str(opp / "vendors/v/custom_fusion_passes/bad.py"))) as err:
        pyge.compile(ref_graph())
    assert cause in one_line(err) and registered() == []   # all or nothing


@pytest.mark.parametrize("target", ["vendors/v/custom_fusion_passes/a.py", "vendors/v", "vendors"])
def test_writable_plugin_or_folder_is_refused(tmp_path, monkeypatch, target):
    opp = make_opp(tmp_path / "opp", {"vendors/v/custom_fusion_passes/a.py": PLUGIN.format(name="P")})
    os.chmod(opp / target, os.stat(opp / target).st_mode | stat.S_IWOTH)
    monkeypatch.setenv("PYGE_OPP_PATH", str(opp))
    with pytest.raises(pyge.PluginError, match="writable by others") as err:
        pyge.compile(ref_graph())
    assert "a.py" in one_line(err) and registered() == []


def test_entry_point_group(tmp_path, monkeypatch):
    (tmp_path / "ep_passes.py").write_text(PLUGIN.replace("@pyge.custom_stream_pass({name!r})\n", ""))
    dist = tmp_path / "ep_passes-0.1.dist-info"
    dist.mkdir()
    (dist / "METADATA").write_text("Metadata-Version: 2.1\nName: ep-passes\nVersion: 0.1\n")
    (dist / "entry_points.txt").write_text("[pyge.custom_passes]\nEpSplit = ep_passes:fn\n")
    monkeypatch.syspath_prepend(str(tmp_path))
    try:
        model = pyge.compile(ref_graph())
        assert "EpSplit" in registered() and model.stream_of("Abs_1") == 1
        pyge.clear_custom_passes()
        reset_plugins()
        (dist / "entry_points.txt").write_text("[pyge.custom_passes]\nMissing = no_such_module_xyz:fn\n")
        with pytest.raises(pyge.PluginError, match="entry point Missing = no_such_module_xyz:fn") as err:
            pyge.compile(ref_graph())
        one_line(err)
    finally:
        sys.modules.pop("ep_passes", None)


# -- options -----------------------------------------------------------------------------------

@pytest.mark.parametrize("key, value", [("ge.enableSingleStream", "true"), ("ge.enableSingleStream", "false"),
                                        ("ge.streamMaxParallelNum", "2"), ("ge.streamMaxParallelNum", "compute:2,skip:1"),
                                        ("ge.autoMultistreamParallelMode", "None"),
                                        ("ge.autoMultistreamParallelMode", "LoadBalance:2"),
                                        ("ge.autoMultistreamParallelMode", "MainStream:64")])
def test_accepted_option_values(key, value):
    model = pyge.compile(ref_graph(), options={key: value})
    np.testing.assert_array_equal(model.run({"input": x_in()})["output"], np.maximum(x_in(), 0) + np.abs(x_in()))


@pytest.mark.parametrize("key, value, accepted", [
    ("ge.enableSingleStream", "yes", "true, false"), ("ge.streamMaxParallelNum", "zero", "ENGINE:N"),
    ("ge.streamMaxParallelNum", "0", "1..64"), ("ge.streamMaxParallelNum", "compute:x", "ENGINE:N"),
    ("ge.autoMultistreamParallelMode", "LoadBalance:65", "1 <= N <= 64"),
    ("ge.autoMultistreamParallelMode", "LoadBalance:0", "1 <= N <= 64"),
    ("ge.autoMultistreamParallelMode", "Greedy:2", "LoadBalance:N"), ("ge.unknownKey", "1", "ge.enableSingleStream")])
def test_bad_options_name_key_and_accepted_values(key, value, accepted):
    with pytest.raises(pyge.OptionError) as err:
        pyge.compile(ref_graph(), options={key: value})
    assert key in one_line(err) and accepted in str(err.value)


@pytest.mark.parametrize("value", ["compute:0", "compute:65", "compute:2,skip:99"])
def test_engine_form_out_of_range_names_the_whole_value(value):
    with pytest.raises(pyge.OptionError) as err:
        pyge.compile(ref_graph(), options={"ge.streamMaxParallelNum": value})
    assert f"ge.streamMaxParallelNum={value!r}" in str(err.value) and "ENGINE:N" in str(err.value)


def test_engine_named_twice_is_an_error():
    with pytest.raises(pyge.OptionError, match=r"names engine 'compute' twice; accepted values: N"):
        pyge.compile(ref_graph(), options={"ge.streamMaxParallelNum": "compute:2,compute:3"})
