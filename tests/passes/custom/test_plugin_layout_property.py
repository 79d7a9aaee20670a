"""Random plugin folder layouts and permission bits against a simple oracle (issue 20).

A layout is drawn as plain data (vendors, what each is, the entries of its
custom_fusion_passes folder, links into and out of <opp>, modes, owners), built on disk, loaded,
and compared with what the oracle says from the data alone: which files load, in which order,
which are skipped or reported, or which file stops the load and why. The oracle knows the rule
(INTERFACE.md, "Plugins"), not the code: a folder or file is bad when group or others may write
to it, except a sticky folder outside <opp>; through a link the folders of the link, of the
real file and above it count too.
"""
from __future__ import annotations

import os
import shutil
import sys
import tempfile
from dataclasses import dataclass, field
from pathlib import Path

import pytest
from hypothesis import HealthCheck, event, given, settings
from hypothesis import strategies as st

import pyge
from pyge.passes.custom.plugins import load_plugins, reset_plugins

from _plugin_files import OTHER_UID, PASS_DIR, is_root, names, plugin_source

SAFE, GROUP_W, OTHER_W, STICKY = 0o755, 0o775, 0o757, 0o1777
# Mostly safe, so that whole layouts load often enough; each bad mode is still drawn often.
FOLDER_MODES = st.sampled_from([SAFE] * 30 + [0o700, GROUP_W, OTHER_W])
OUTSIDE_MODES = st.sampled_from([SAFE] * 8 + [STICKY] * 3 + [0o777])     # folders outside <opp>
FILE_MODES = st.sampled_from([0o644] * 20 + [0o600, 0o664, 0o646])
RARELY = st.sampled_from([False] * 12 + [True])


@dataclass
class Entry:
    name: str
    kind: str               # file, link_in, link_out, broken, dir
    mode: int = 0o644       # of the file (the link's target for links)
    holder_mode: int = SAFE  # of the folder holding the link's target
    fails: bool = False     # the plugin raises when run
    foreign: bool = False   # owned by another user (only drawn as root)


@dataclass
class Vendor:
    name: str
    kind: str               # folder, link (to a folder outside <opp>), file, empty (no pass folder)
    mode: int = SAFE
    pass_dir_mode: int = SAFE
    entries: list[Entry] = field(default_factory=list)


@dataclass
class Layout:
    opp_mode: int
    vendors_mode: int
    outside_mode: int       # the folder outside <opp> that links point into
    vendors: list[Vendor]


@st.composite
def entries(draw):
    found = []
    names_ = st.lists(st.sampled_from(["a.py", "b.py", "c.py", "notes.txt", "sub"]), unique=True, min_size=1, max_size=4)
    for name in draw(names_):
        kinds = ["file"] * 4 + ["link_in", "link_out"] * 2 + ["broken"]
        kind = "dir" if name == "sub" else draw(st.sampled_from(kinds))
        fails, foreign = draw(RARELY), is_root() and draw(RARELY)
        found.append(Entry(name, kind, draw(FILE_MODES), draw(OUTSIDE_MODES), fails, foreign))
    return found


@st.composite
def layouts(draw):
    vendors = []
    for name in draw(st.lists(st.sampled_from(["acme", "b", "zeta", "b2"]), unique=True, min_size=1, max_size=3)):
        kind = draw(st.sampled_from(["folder"] * 4 + ["link"] * 3 + ["file", "empty"]))
        vendors.append(Vendor(name, kind, draw(FOLDER_MODES), draw(FOLDER_MODES), draw(entries())))
    return Layout(draw(FOLDER_MODES), draw(FOLDER_MODES), draw(OUTSIDE_MODES), vendors)


def _pass_name(v: Vendor, e: Entry) -> str:
    return f"{v.name}_{e.name[:-3]}"


# -- building it -------------------------------------------------------------------------------

def build(root: Path, lay: Layout) -> Path:
    opp, outside = root / "opp", root / "outside"
    for p in (opp / "vendors", opp / "shared", outside):
        p.mkdir(parents=True, exist_ok=True)
    for v in lay.vendors:
        vdir = opp / "vendors" / v.name
        if v.kind == "file":
            vdir.write_text("not a folder")
            continue
        real = outside / f"vendor_{v.name}" if v.kind == "link" else vdir
        real.mkdir()
        if v.kind == "link":
            vdir.symlink_to(real)
        if v.kind != "empty":
            _build_entries(opp, outside, v, real / PASS_DIR)
            (real / PASS_DIR).chmod(v.pass_dir_mode)
        real.chmod(v.mode)
    (opp / "shared").chmod(SAFE)
    (opp / "vendors").chmod(lay.vendors_mode)
    opp.chmod(lay.opp_mode)
    outside.chmod(lay.outside_mode)
    return opp


def _build_entries(opp: Path, outside: Path, v: Vendor, folder: Path) -> None:
    folder.mkdir()
    for e in v.entries:
        path = folder / e.name
        text = plugin_source(_pass_name(v, e)) + ("raise RuntimeError('plugin failed')\n" if e.fails else "")
        if e.kind == "dir":
            path.mkdir()
            (path / "deep.py").write_text("raise RuntimeError('searched')\n")
            continue
        if e.kind == "broken":
            path.symlink_to(outside / "missing" / e.name)
            continue
        if e.kind == "file":
            target = path
        else:
            holder = (opp / "shared" if e.kind == "link_in" else outside) / f"{v.name}_{e.name}.d"
            holder.mkdir()
            target = holder / e.name
        target.write_text(text)
        target.chmod(e.mode)
        if e.foreign:
            os.chown(target, OTHER_UID, -1)
        if target != path:
            path.symlink_to(target)
            target.parent.chmod(e.holder_mode)


# -- the oracle ------------------------------------------------------------------------------------

def _writable(mode: int) -> bool:
    return bool(mode & 0o022)


def _outside_ok(mode: int) -> bool:
    return not _writable(mode) or bool(mode & 0o1000)


def expected(opp: Path, lay: Layout):
    """("ok", pass names, files, skipped, subfolders) or ("error", path, word in the message)."""
    passes, files, skipped, subfolders = [], [], [], []
    for v in sorted(lay.vendors, key=lambda v: v.name):
        if v.kind in ("file", "empty"):
            continue
        folder = opp / "vendors" / v.name / PASS_DIR
        for e in sorted(v.entries, key=lambda e: e.name):
            path = folder / e.name
            if e.kind == "dir":
                subfolders.append(str(path))
                continue
            if not e.name.endswith(".py"):
                skipped.append(str(path))
                continue
            bad = _refused(lay, v, e)
            if bad:
                return ("error", str(path), bad)
            passes.append(_pass_name(v, e))
            files.append(str(path))
    return ("ok", passes, files, skipped, subfolders)


def _refused(lay: Layout, v: Vendor, e: Entry) -> str | None:
    # In the order the rule is applied: the folders from <opp> down, the file, then the links.
    if any(_writable(m) for m in (lay.opp_mode, lay.vendors_mode, v.mode, v.pass_dir_mode)):
        return "refused"
    if e.kind == "broken":
        return "could not be loaded"
    if _writable(e.mode) or e.foreign:
        return "refused"
    # Through links: the vendor link's real folders lie in `outside`; a file link's target
    # lies in a holder inside opp/shared (strict up to <opp>) or inside `outside`.
    through_outside = v.kind == "link" or e.kind == "link_out"
    if through_outside and not _outside_ok(lay.outside_mode):
        return "refused"
    if e.kind == "link_in" and _writable(e.holder_mode):
        return "refused"
    if e.kind == "link_out" and not _outside_ok(e.holder_mode):
        return "refused"
    if e.fails:
        return "could not be loaded"
    return None


# -- the property ----------------------------------------------------------------------------------

def _forget_plugins():
    pyge.clear_custom_passes()
    reset_plugins()
    for name in [m for m in sys.modules if m.startswith("pyge_plugins.")]:
        del sys.modules[name]


@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(layouts())
def test_random_layouts_load_as_the_rule_says(lay):
    root = Path(tempfile.mkdtemp(prefix="pyge-plugins-"))
    try:
        opp = build(root, lay)
        want = expected(opp, lay)
        event(f"{want[0]}: {want[2]}" if want[0] == "error" else f"ok with {len(want[1])} plugin(s)")
        _forget_plugins()
        if want[0] == "error":
            with pytest.raises(pyge.PluginError) as err:
                load_plugins(opp, entry_points=False)
            message = str(err.value)
            assert message.startswith(f"plugin {want[1]} {want[2]}"), (message, want)
            assert names() == []                           # all or nothing
        else:
            report = load_plugins(opp, entry_points=False)
            assert (report.passes, report.files, report.skipped, report.subfolders) == want[1:], report
            assert names() == want[1]
            assert not any((Path(f).parent / "__pycache__").exists() for f in report.files)
    finally:
        _forget_plugins()
        shutil.rmtree(root, ignore_errors=True)
