"""Plugins: <opp>/vendors/<vendor>/custom_fusion_passes/*.py and the entry-point group."""
from __future__ import annotations

import importlib.metadata
import logging
import os
import sys
import textwrap

import pytest

import pyge
from pyge.passes.custom import plugins, registered_passes
from pyge.passes.custom.plugins import ensure_plugins_loaded, load_plugins, reset_plugins
from pyge.passes.custom.registry import restore_registry


@pytest.fixture(autouse=True)
def _clean(monkeypatch):
    saved = registered_passes()
    pyge.clear_custom_passes()
    reset_plugins()
    for var in plugins.ENV_VARS:
        monkeypatch.delenv(var, raising=False)
    monkeypatch.setattr(importlib.metadata, "entry_points", lambda **kw: [])
    yield
    restore_registry(saved)
    reset_plugins()
    for name in [m for m in sys.modules if m.startswith("pyge_plugins.")]:
        del sys.modules[name]


def _plugin(name: str, body: str = "") -> str:
    return textwrap.dedent(f"""\
        import pyge
        @pyge.custom_stream_pass({name!r})
        def fn(graph, ctx):
            {body or 'return pyge.GRAPH_SUCCESS'}
        """)


def _write(opp, vendor: str, filename: str, text: str):
    folder = opp / "vendors" / vendor / "custom_fusion_passes"
    folder.mkdir(parents=True, exist_ok=True)
    path = folder / filename
    path.write_text(text)
    path.chmod(0o644)
    return path


def _names():
    return [r.name for r in registered_passes()]


def test_vendors_and_files_in_lexical_order_other_files_skipped(tmp_path, caplog):
    opp = tmp_path / "opp"
    _write(opp, "b_vendor", "1.py", _plugin("B1"))
    _write(opp, "a_vendor", "2.py", _plugin("A2"))
    _write(opp, "a_vendor", "1.py", _plugin("A1"))
    skipped = _write(opp, "a_vendor", "notes.txt", "not python")
    sub = opp / "vendors" / "a_vendor" / "custom_fusion_passes" / "nested"
    sub.mkdir()
    (sub / "hidden.py").write_text(_plugin("Hidden"))
    with caplog.at_level(logging.WARNING, logger=plugins.__name__):
        report = load_plugins(opp)
    assert _names() == ["A1", "A2", "B1"]
    assert report.passes == ["A1", "A2", "B1"]
    assert [os.path.basename(os.path.dirname(os.path.dirname(f))) for f in report.files] == \
        ["a_vendor", "a_vendor", "b_vendor"]
    assert report.skipped == [str(skipped)] and report.subfolders == [str(sub)]
    assert "subfolder nested is not searched" in caplog.text


def test_symbolic_links_are_followed(tmp_path):
    real = tmp_path / "elsewhere"
    real.mkdir()
    target = real / "split.py"
    target.write_text(_plugin("Linked"))
    opp = tmp_path / "opp"
    folder = opp / "vendors" / "v" / "custom_fusion_passes"
    folder.mkdir(parents=True)
    (folder / "split.py").symlink_to(target)
    load_plugins(opp)
    assert _names() == ["Linked"]


def test_import_failure_names_the_file_and_undoes_the_load(tmp_path):
    opp = tmp_path / "opp"
    _write(opp, "v", "1_good.py", _plugin("Good"))
    bad = _write(opp, "v", "2_bad.py", "import pyge\ndef broken(:\n")
    with pytest.raises(pyge.PluginError, match=rf"plugin {bad} could not be loaded: SyntaxError"):
        load_plugins(opp)
    assert _names() == []                    # Good was unregistered again
    assert not any(m.startswith("pyge_plugins.") for m in sys.modules)


def test_runtime_error_and_duplicate_names_name_the_file(tmp_path):
    opp = tmp_path / "opp"
    bad = _write(opp, "v", "a.py", "raise RuntimeError('no licence')\n")
    with pytest.raises(pyge.PluginError, match=rf"{bad} could not be loaded: RuntimeError: no licence"):
        load_plugins(opp)
    bad.unlink()
    _write(opp, "v", "a.py", _plugin("Same"))
    dup = _write(opp, "w", "b.py", _plugin("Same"))
    with pytest.raises(pyge.PluginError, match=rf"{dup} could not be loaded: PassError: custom pass 'Same' "
                                               rf"is already registered \(from plugin .*a.py\)"):
        load_plugins(opp)


def test_writable_plugin_file_is_refused(tmp_path):
    opp = tmp_path / "opp"
    path = _write(opp, "v", "p.py", _plugin("P"))
    path.chmod(0o666)
    with pytest.raises(pyge.PluginError, match=rf"{path} refused: the plugin file is writable by group and others"):
        load_plugins(opp)
    assert _names() == []


def test_writable_folder_on_the_path_is_refused(tmp_path):
    opp = tmp_path / "opp"
    path = _write(opp, "v", "p.py", _plugin("P"))
    vendor = opp / "vendors" / "v"
    vendor.chmod(0o757)
    try:
        with pytest.raises(pyge.PluginError, match=rf"folder {vendor} on its path is writable by others"):
            load_plugins(opp)
    finally:
        vendor.chmod(0o755)
    load_plugins(opp)
    assert _names() == ["P"] and path.exists()


def test_env_vars_and_once_per_process(tmp_path, monkeypatch):
    ascend, mine = tmp_path / "ascend", tmp_path / "mine"
    _write(ascend, "v", "a.py", _plugin("FromAscend"))
    _write(mine, "v", "m.py", _plugin("FromPyge"))
    monkeypatch.setenv("ASCEND_OPP_PATH", str(ascend))
    monkeypatch.setenv("PYGE_OPP_PATH", str(mine))
    first = ensure_plugins_loaded()
    assert _names() == ["FromPyge"] and first.opp_path == str(mine)
    assert ensure_plugins_loaded() is first  # no second import (it would be a duplicate name)
    reset_plugins()
    pyge.clear_custom_passes()
    monkeypatch.delenv("PYGE_OPP_PATH")
    ensure_plugins_loaded()
    assert _names() == ["FromAscend"]


def test_compile_loads_plugins_before_compiling(tmp_path, monkeypatch):
    opp = tmp_path / "opp"
    _write(opp, "v", "split_abs.py", "import pyge\nfrom pyge.examples import split_abs\n"
           "pyge.register_custom_pass('SplitAbs').custom_allocate_stream_pass_fn(split_abs)\n")
    monkeypatch.setenv("PYGE_OPP_PATH", str(opp))
    m = pyge.compile(pyge.examples.reference_graph((4, 4)))
    assert m.num_streams == 2 and m.stream_of("Abs_1") != m.stream_of("Relu_1")


def test_missing_opp_folder_is_only_a_warning(tmp_path, caplog):
    with caplog.at_level(logging.WARNING, logger=plugins.__name__):
        report = load_plugins(tmp_path / "nowhere")
    assert report.files == [] and "is not a folder" in caplog.text


# -- entry points -------------------------------------------------------------------------

def _entry_points(tmp_path, monkeypatch, module_text: str, *eps):
    (tmp_path / "ep_plugin_mod.py").write_text(module_text)
    monkeypatch.syspath_prepend(str(tmp_path))
    sys.modules.pop("ep_plugin_mod", None)
    found = [importlib.metadata.EntryPoint(name, value, plugins.ENTRY_POINT_GROUP) for name, value in eps]
    monkeypatch.setattr(importlib.metadata, "entry_points",
                        lambda **kw: found if kw.get("group") == plugins.ENTRY_POINT_GROUP else [])


def test_entry_point_function_is_registered_under_its_name(tmp_path, monkeypatch):
    _entry_points(tmp_path, monkeypatch, "import pyge\ndef fn(graph, ctx):\n    return pyge.GRAPH_SUCCESS\n",
                  ("ZPass", "ep_plugin_mod:fn"), ("APass", "ep_plugin_mod:fn"))
    report = load_plugins(None)
    assert _names() == ["APass"]            # sorted by name; the same function only once
    assert report.entry_points == ["APass = ep_plugin_mod:fn", "ZPass = ep_plugin_mod:fn"]


def test_entry_point_module_registers_by_import(tmp_path, monkeypatch):
    _entry_points(tmp_path, monkeypatch, _plugin("ByImport"), ("mod", "ep_plugin_mod"))
    load_plugins(None)
    assert _names() == ["ByImport"]


def test_entry_point_failure_names_it(tmp_path, monkeypatch):
    _entry_points(tmp_path, monkeypatch, "raise ImportError('missing dependency')\n", ("broken", "ep_plugin_mod"))
    with pytest.raises(pyge.PluginError, match="entry point broken = ep_plugin_mod .*ImportError: missing dependency"):
        load_plugins(None)
