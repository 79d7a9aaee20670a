"""Graph passes from plugins: the same folders, entry points, order and refusals as stream
passes. GE loads the libraries of <opp>/vendors/<vendor>/custom_fusion_passes/ in lexical
order (vendors, then files) and runs the passes of one stage in the order they registered."""
from __future__ import annotations

import importlib.metadata
import sys
import textwrap

import pytest

import pyge
from pyge.examples import reference_graph
from pyge.passes.custom import plugins
from pyge.passes.custom.plugins import ensure_plugins_loaded, load_plugins

from _plugin_files import names, write_plugin


def graph_plugin(name: str, stage: str) -> str:
    """A plugin registering graph pass `name` at `stage` that appends its name to a list the
    test reads (the module `graph_pass_log`, made by the test)."""
    return textwrap.dedent(f"""\
        import pyge
        import graph_pass_log

        def fn(graph, ctx):
            graph_pass_log.calls.append(ctx.pass_name)
            return pyge.GRAPH_SUCCESS

        pyge.register_custom_pass({name!r}).custom_pass_fn(fn).stage({stage!r})
        """)


@pytest.fixture
def calls(tmp_path, monkeypatch):
    (tmp_path / "graph_pass_log.py").write_text("calls = []\n")
    monkeypatch.syspath_prepend(str(tmp_path))
    sys.modules.pop("graph_pass_log", None)
    import graph_pass_log
    yield graph_pass_log.calls
    sys.modules.pop("graph_pass_log", None)


def test_plugin_graph_passes_load_and_run_in_ges_order(tmp_path, monkeypatch, calls):
    opp = tmp_path / "opp"
    write_plugin(opp, "b_vendor", "1.py", graph_plugin("B1_before", "kBeforeInferShape"))
    write_plugin(opp, "a_vendor", "2.py", graph_plugin("A2_after", "AFTER_INFER_SHAPE"))
    write_plugin(opp, "a_vendor", "1.py", graph_plugin("A1_after", "AFTER_INFER_SHAPE"))
    write_plugin(opp, "a_vendor", "3.py", graph_plugin("A3_before", "BEFORE_INFER_SHAPE"))
    monkeypatch.setenv("PYGE_OPP_PATH", str(opp))
    report = ensure_plugins_loaded()
    assert report.passes == ["A1_after", "A2_after", "A3_before", "B1_before"] == names()
    pyge.compile(reference_graph())
    # stage order first; within a stage, the order GE loaded them in
    assert calls == ["A3_before", "B1_before", "A1_after", "A2_after"]


def test_a_refused_plugin_registers_no_graph_pass(tmp_path, calls):
    opp = tmp_path / "opp"
    write_plugin(opp, "v", "1.py", graph_plugin("Fine", "AFTER_INFER_SHAPE"))
    bad = write_plugin(opp, "v", "2.py", graph_plugin("Open", "AFTER_INFER_SHAPE"))
    bad.chmod(0o666)
    with pytest.raises(pyge.PluginError, match=rf"{bad} refused: the plugin file is writable by group and others"):
        load_plugins(opp)
    assert names() == []


def test_a_plugin_with_a_bad_stage_names_the_file(tmp_path, calls):
    opp = tmp_path / "opp"
    bad = write_plugin(opp, "v", "1.py", graph_plugin("Wrong", "kAfterAssignLogicStream"))
    with pytest.raises(pyge.PluginError, match=rf"plugin {bad} could not be loaded: PassError: custom pass "
                                               "'Wrong': stage AFTER_ASSIGN_LOGIC_STREAM runs stream passes"):
        load_plugins(opp)
    assert names() == []


def test_an_entry_point_to_a_graph_pass_is_not_taken_for_a_stream_pass(tmp_path, monkeypatch, calls):
    (tmp_path / "ep_graph_mod.py").write_text(graph_plugin("EpGraph", "AFTER_BUILTIN_FUSION_PASS"))
    monkeypatch.syspath_prepend(str(tmp_path))
    sys.modules.pop("ep_graph_mod", None)
    found = [importlib.metadata.EntryPoint("EpGraph", "ep_graph_mod:fn", plugins.ENTRY_POINT_GROUP)]
    monkeypatch.setattr(importlib.metadata, "entry_points",
                        lambda **kw: found if kw.get("group") == plugins.ENTRY_POINT_GROUP else [])
    try:
        load_plugins(None)
        assert names() == ["EpGraph"]
        pyge.compile(reference_graph())
        assert calls == ["EpGraph"]
    finally:
        sys.modules.pop("ep_graph_mod", None)
