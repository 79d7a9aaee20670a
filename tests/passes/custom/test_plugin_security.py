"""Plugins: no bytecode cache, and the permission rule through symbolic links (issue 20, 1-2).

Each test builds its own opp folder under tmp_path. pytest's tmp_path lies below /tmp, a sticky
world-writable folder owned by root, which the rule passes through outside <opp>; the tests
that need a folder others may write to make one with chmod.
"""
from __future__ import annotations

import importlib.util
import marshal
import os
import stat
import sys

import pytest

import pyge
from pyge.passes.custom.plugins import load_plugins

from _plugin_files import OTHER_UID, PASS_DIR, is_root, names, plugin_source, write_plugin

needs_root = pytest.mark.skipif(not is_root(), reason="chown to another user needs root")


def _plant_pyc(source_path, evil_text: str, pycache_mode: int) -> str:
    """A .pyc for `source_path` whose header keeps the source's mtime and size (what the
    import system checks), holding the code of `evil_text`."""
    pyc = importlib.util.cache_from_source(str(source_path))
    os.makedirs(os.path.dirname(pyc), exist_ok=True)
    os.chmod(os.path.dirname(pyc), pycache_mode)
    st = os.stat(source_path)
    header = importlib.util.MAGIC_NUMBER + (0).to_bytes(4, "little") + \
        (int(st.st_mtime) & 0xFFFFFFFF).to_bytes(4, "little") + (st.st_size & 0xFFFFFFFF).to_bytes(4, "little")
    with open(pyc, "wb") as f:
        f.write(header + marshal.dumps(compile(evil_text, str(source_path), "exec")))
    return pyc


# -- 1: compiled from source, no bytecode cache read or written ---------------------------------

def test_no_bytecode_cache_is_written_with_umask_002(tmp_path, monkeypatch):
    opp = tmp_path / "opp"
    path = write_plugin(opp, "v", "p.py", plugin_source("P"))
    monkeypatch.setattr(sys, "dont_write_bytecode", False)
    old = os.umask(0o002)
    try:
        load_plugins(opp)
    finally:
        os.umask(old)
    assert names() == ["P"]
    assert sorted(os.listdir(path.parent)) == ["p.py"]        # no __pycache__ made


@pytest.mark.parametrize("pycache_mode", [0o775, 0o755])
@pytest.mark.parametrize("dont_write", [True, False])
def test_a_planted_pyc_matching_the_source_is_not_run(tmp_path, monkeypatch, pycache_mode, dont_write):
    opp = tmp_path / "opp"
    path = write_plugin(opp, "v", "p.py", plugin_source("Good"))
    evil = plugin_source("Evil").ljust(len(plugin_source("Good")))
    pyc = _plant_pyc(path, evil, pycache_mode)
    monkeypatch.setattr(sys, "dont_write_bytecode", dont_write)   # PYTHONDONTWRITEBYTECODE=1 or not
    report = load_plugins(opp)
    assert names() == ["Good"] and report.passes == ["Good"]
    assert report.subfolders == [str(path.parent / "__pycache__")]  # reported, never searched
    assert os.path.getmtime(pyc) and len(os.listdir(os.path.dirname(pyc))) == 1  # left as it was


def test_a_plugin_runs_as_a_module_of_its_own(tmp_path):
    opp = tmp_path / "opp"
    path = write_plugin(opp, "acme", "10-split.py", plugin_source("P") + (
        "import dataclasses, sys\n"
        "@dataclasses.dataclass\n"
        "class Cfg:\n"
        "    n: int = 1\n"
        "ME = sys.modules[__name__]\n"))
    load_plugins(opp)
    mod = sys.modules["pyge_plugins.acme.10_split"]
    assert mod.ME is mod and mod.__file__ == str(path) and mod.Cfg().n == 1
    assert mod.__spec__.origin == str(path)


def test_a_source_encoding_cookie_is_honoured(tmp_path):
    opp = tmp_path / "opp"
    text = "# -*- coding: latin-1 -*-\n" + plugin_source("Latin") + "LABEL = 'caf\xe9'\n"
    path = write_plugin(opp, "v", "p.py", "")
    path.write_bytes(text.encode("latin-1"))
    load_plugins(opp)
    assert sys.modules["pyge_plugins.v.p"].LABEL == "caf\xe9"


# -- 2: the rule applies through symbolic links ---------------------------------------------------

def _world_writable(folder, sticky: bool = False):
    folder.mkdir(parents=True, exist_ok=True)
    folder.chmod(0o1777 if sticky else 0o777)
    return folder


def _safe(folder):
    folder.mkdir(parents=True, exist_ok=True)
    folder.chmod(0o755)
    return folder


def _target(folder, name="real.py", pass_name="Linked"):
    p = folder / name
    p.write_text(plugin_source(pass_name))
    p.chmod(0o644)
    return p


def _link_in(opp, target, filename="p.py"):
    folder = write_plugin(opp, "v", "keep.txt", "").parent
    link = folder / filename
    link.symlink_to(target)
    return link


def test_link_to_a_file_in_a_world_writable_folder_is_refused(tmp_path):
    ww = _world_writable(tmp_path / "ww")
    link = _link_in(tmp_path / "opp", _target(ww))
    with pytest.raises(pyge.PluginError, match=rf"plugin {link} refused: folder {ww} above {ww}/real.py, the file "
                                               r"its links resolve to, is writable by group and others \(mode 777\)"):
        load_plugins(tmp_path / "opp")
    assert names() == []


def test_link_to_a_file_below_a_world_writable_folder_is_refused(tmp_path):
    ww = _world_writable(tmp_path / "ww")
    deep = _safe(_safe(ww / "a") / "b")
    link = _link_in(tmp_path / "opp", _target(deep))
    with pytest.raises(pyge.PluginError, match=rf"folder {ww} above .* is writable by group and others"):
        load_plugins(tmp_path / "opp")
    assert str(link) and names() == []


def test_a_chain_of_links_through_a_world_writable_folder_is_refused(tmp_path):
    real = _target(_safe(tmp_path / "safe"))
    ww = _world_writable(tmp_path / "ww")
    (ww / "hop.py").symlink_to(real)                 # anyone may point this one elsewhere
    _link_in(tmp_path / "opp", ww / "hop.py")
    with pytest.raises(pyge.PluginError,
                       match=rf"folder {ww} holding the link {ww}/hop.py is writable by group and others"):
        load_plugins(tmp_path / "opp")
    assert names() == []


def test_a_relative_chain_of_safe_links_loads(tmp_path):
    real = _target(_safe(_safe(tmp_path / "safe") / "passes"))
    (tmp_path / "safe" / "hop.py").symlink_to(os.path.join("passes", "real.py"))
    opp = tmp_path / "opp"
    link = _link_in(opp, os.path.join("..", "..", "..", "..", "safe", "hop.py"))
    assert os.path.realpath(link) == str(real)
    load_plugins(opp)
    assert names() == ["Linked"]


def test_a_linked_vendor_folder_is_checked_where_it_really_is(tmp_path):
    ww = _world_writable(tmp_path / "ww")
    elsewhere = _safe(_safe(ww / "vendor") / PASS_DIR)
    _target(elsewhere, "p.py", "FromLinkedVendor")
    opp = tmp_path / "opp"
    _safe(_safe(opp) / "vendors")
    (opp / "vendors" / "v").symlink_to(ww / "vendor")
    with pytest.raises(pyge.PluginError, match=rf"folder {ww} above .* is writable by group and others"):
        load_plugins(opp)
    ww.chmod(0o755)
    load_plugins(opp)
    assert names() == ["FromLinkedVendor"]


def test_a_link_target_inside_opp_is_checked_up_to_opp_sticky_or_not(tmp_path):
    opp = tmp_path / "opp"
    shared = _world_writable(opp / "shared", sticky=True)   # inside opp the sticky bit does not help
    link = _link_in(opp, _target(shared))
    with pytest.raises(pyge.PluginError,
                       match=rf"{link} refused: folder {shared} above .* is writable by group and others \(mode 1777\)"):
        load_plugins(opp)
    shared.chmod(0o755)
    load_plugins(opp)
    assert names() == ["Linked"]


def test_a_sticky_folder_outside_opp_is_passed_through_as_ssh_would_not(tmp_path):
    # /tmp itself is such a folder: every other link test passes through it.
    sticky = _world_writable(tmp_path / "sticky", sticky=True)
    _link_in(tmp_path / "opp", _target(_safe(sticky / "mine")))
    load_plugins(tmp_path / "opp")
    assert names() == ["Linked"]


def test_the_file_a_link_resolves_to_must_not_be_writable(tmp_path):
    real = _target(_safe(tmp_path / "safe"))
    real.chmod(0o666)
    link = _link_in(tmp_path / "opp", real)
    with pytest.raises(pyge.PluginError, match=rf"{link} refused: the plugin file is writable by group and others"):
        load_plugins(tmp_path / "opp")


@needs_root
def test_a_sticky_folder_entry_owned_by_someone_else_is_refused(tmp_path):
    sticky = _world_writable(tmp_path / "sticky", sticky=True)
    theirs = _safe(sticky / "theirs")
    os.chown(theirs, OTHER_UID, -1)
    _link_in(tmp_path / "opp", _target(theirs))
    with pytest.raises(pyge.PluginError, match=rf"folder {theirs} above .* is owned by uid {OTHER_UID}, "
                                               r"neither this user \(uid 0\) nor root"):
        load_plugins(tmp_path / "opp")


@needs_root
def test_a_link_in_a_sticky_folder_owned_by_someone_else_is_refused(tmp_path):
    real = _target(_safe(tmp_path / "safe"))
    sticky = _world_writable(tmp_path / "sticky", sticky=True)
    hop = sticky / "hop.py"
    hop.symlink_to(real)
    os.lchown(hop, OTHER_UID, -1)                  # whoever made it may replace it
    _link_in(tmp_path / "opp", hop)
    with pytest.raises(pyge.PluginError,
                       match=rf"folder {sticky} holding the link {hop} is writable by group and others"):
        load_plugins(tmp_path / "opp")
    os.lchown(hop, 0, -1)
    load_plugins(tmp_path / "opp")
    assert names() == ["Linked"]


@needs_root
@pytest.mark.parametrize("what", ["file", "folder"])
def test_a_plugin_or_folder_owned_by_someone_else_is_refused(tmp_path, what):
    path = write_plugin(tmp_path / "opp", "v", "p.py", plugin_source("P"))
    os.chown(path if what == "file" else path.parent, OTHER_UID, -1)
    with pytest.raises(pyge.PluginError, match=rf"{path} refused: .* is owned by uid {OTHER_UID}"):
        load_plugins(tmp_path / "opp")


def test_a_link_loop_is_an_error_not_a_hang(tmp_path):
    opp = tmp_path / "opp"
    folder = write_plugin(opp, "v", "keep.txt", "").parent
    (folder / "a.py").symlink_to(folder / "b.py")
    (folder / "b.py").symlink_to(folder / "a.py")
    with pytest.raises(pyge.PluginError, match=r"a.py could not be loaded: cannot check .*a.py"):
        load_plugins(opp)


def test_a_broken_link_names_the_file(tmp_path):
    opp = tmp_path / "opp"
    link = _link_in(opp, tmp_path / "gone.py")
    with pytest.raises(pyge.PluginError, match=rf"plugin {link} could not be loaded: .*broken symbolic link"):
        load_plugins(opp)


@pytest.mark.timeout(20)
def test_a_fifo_named_like_a_plugin_is_refused_not_read(tmp_path):
    opp = tmp_path / "opp"
    folder = write_plugin(opp, "v", "keep.txt", "").parent
    os.mkfifo(folder / "p.py", 0o644)                # reading it would wait forever
    with pytest.raises(pyge.PluginError, match=r"p.py refused: .*p.py is not a regular file"):
        load_plugins(opp)


def test_a_plugin_replaced_after_its_check_is_refused(tmp_path, monkeypatch):
    from pyge.passes.custom import plugins
    path = write_plugin(tmp_path / "opp", "v", "p.py", plugin_source("P"))
    real_check = plugins.check_permissions

    def check_then_swap(p, opp):
        checked = real_check(p, opp)
        os.replace(_target(_safe(tmp_path / "other")), p)   # another file under the same name
        return checked
    monkeypatch.setattr(plugins, "check_permissions", check_then_swap)
    with pytest.raises(pyge.PluginError, match=rf"{path} refused: it was replaced while being checked"):
        load_plugins(tmp_path / "opp")
    assert stat.S_ISREG(os.stat(path).st_mode) and names() == []
