"""Custom pass plugins: Python files under the opp folder, and installed entry points.

Layout (GE's, with `.py` files where GE has shared libraries):

    <opp>/vendors/<vendor>/custom_fusion_passes/*.py

`<opp>` is $PYGE_OPP_PATH, else $ASCEND_OPP_PATH. Vendor folders are visited in lexical
order and the files in each in lexical order; symbolic links are followed; files not ending
in `.py` are skipped; folders inside `custom_fusion_passes` are not searched (a warning names
them). Then the entry points of group `pyge.custom_passes` are loaded, sorted by name: an
entry point may name a module (importing it registers its passes) or a stream pass function,
which is registered under the entry point's name unless importing it registered it already.

A file that cannot be imported stops loading with PluginError naming the file and the cause.
A plugin file, or a folder on its path inside `<opp>` (`<opp>` included), that group or
others may write to, or that someone other than the user or root owns, is refused, as ssh
refuses such key files: anyone who can write there could run code in every compilation. For
a symbolic link the rule also covers the file it resolves to, the folders above that file,
and the folder of every link in the chain (check_permissions). Plugins are compiled from
their source text and run as modules: no bytecode cache is read or written. Loading is all or
nothing: on failure the passes registered so far are unregistered again.

`ensure_plugins_loaded()` (called by every compile) loads once per process; `load_plugins`
loads explicitly and `reset_plugins` forgets the once-per-process state (for tests).
"""
from __future__ import annotations

import importlib.machinery
import importlib.metadata
import logging
import os
import re
import stat
import sys
import threading
import types
from dataclasses import dataclass, field

from ...errors import PluginError
from .registry import registered_passes, registering_from, register_custom_pass, restore_registry

log = logging.getLogger(__name__)

ENV_VARS = ("PYGE_OPP_PATH", "ASCEND_OPP_PATH")
ENTRY_POINT_GROUP = "pyge.custom_passes"
PASS_DIR = "custom_fusion_passes"


@dataclass
class PluginReport:
    """What one load found and did."""
    opp_path: str | None = None
    files: list[str] = field(default_factory=list)          # imported, in load order
    entry_points: list[str] = field(default_factory=list)   # "name = value", in load order
    passes: list[str] = field(default_factory=list)         # pass names registered by the load
    skipped: list[str] = field(default_factory=list)        # not *.py
    subfolders: list[str] = field(default_factory=list)     # inside custom_fusion_passes, not searched


_lock = threading.RLock()
_loaded: PluginReport | None = None


def opp_path_from_env() -> str | None:
    for var in ENV_VARS:
        value = os.environ.get(var)
        if value:
            return value
    return None


def ensure_plugins_loaded() -> PluginReport:
    """Load the plugins once per process (before the first compilation)."""
    global _loaded
    with _lock:
        if _loaded is None:
            _loaded = load_plugins(opp_path_from_env())
        return _loaded


def reset_plugins() -> None:
    """Forget that plugins were loaded (the passes they registered stay registered)."""
    global _loaded
    with _lock:
        _loaded = None


def load_plugins(opp_path: str | os.PathLike | None = None, entry_points: bool = True) -> PluginReport:
    """Import the plugin files under `opp_path` and (optionally) the entry points."""
    report = PluginReport(opp_path=os.fspath(opp_path) if opp_path is not None else None)
    with _lock:
        before = registered_passes()
        added_modules: list[str] = []
        try:
            if opp_path is not None:
                _load_opp(report, added_modules)
            if entry_points:
                _load_entry_points(report)
        except BaseException:
            restore_registry(before)
            for name in added_modules:
                sys.modules.pop(name, None)
            raise
        names_before = {r.name for r in before}
        report.passes = [r.name for r in registered_passes() if r.name not in names_before]
    if report.files or report.entry_points:
        log.info("loaded %d plugin file(s) and %d entry point(s); passes: %s", len(report.files),
                 len(report.entry_points), ", ".join(report.passes) or "none")
    return report


def find_plugin_files(opp: str, report: PluginReport | None = None) -> list[tuple[str, str]]:
    """(vendor, path) of every plugin file, in load order; fills report.skipped/subfolders."""
    report = report if report is not None else PluginReport(opp_path=opp)
    vendors_dir = os.path.join(opp, "vendors")
    if not os.path.isdir(vendors_dir):
        log.debug("no vendors folder in %s: no plugin files", opp)
        return []
    found = []
    for vendor in sorted(os.listdir(vendors_dir)):
        folder = os.path.join(vendors_dir, vendor, PASS_DIR)
        if not os.path.isdir(folder):
            continue
        for entry in sorted(os.listdir(folder)):
            path = os.path.join(folder, entry)
            if os.path.isdir(path):
                log.warning("plugin folder %s: subfolder %s is not searched (plugins must sit "
                            "directly in %s)", folder, entry, PASS_DIR)
                report.subfolders.append(path)
            elif entry.endswith(".py"):
                found.append((vendor, path))
            else:
                log.debug("plugin folder %s: %s is not a .py file, skipped", folder, entry)
                report.skipped.append(path)
    return found


def check_permissions(path: str, opp: str) -> tuple[int, int]:
    """Refuse the plugin `path` unless no one but its user (and root) could change what it runs.

    The rule is ssh's (OpenSSH's safe_path): the plugin file, and every folder from `opp` down
    to it (`opp` included), must be owned by the user or root and be writable by no group or
    others. When the path crosses symbolic links (the file, or a folder on the way, is a link),
    the rule also covers the file it resolves to and every folder above that file, and the
    folder holding each link of the chain (whoever can write there can point the link
    elsewhere). Above a real location inside `opp` the walk stops at `opp`, as ssh's stops at
    the home folder; outside `opp` it goes up to /, where one exception applies: a sticky
    folder (such as /tmp) is passed through when the entry taken from it is owned by the user
    or root, since the sticky bit lets no one else rename or remove that entry. Inside `opp`
    the sticky bit changes nothing: anyone who may add files there adds plugins.
    Returns (st_dev, st_ino) of the file checked, for the loader to match with the file it reads.
    """
    folders = [opp]
    rel = os.path.relpath(os.path.dirname(path), opp)
    for part in ([] if rel == os.curdir else rel.split(os.sep)):
        folders.append(os.path.join(folders[-1], part))
    for p in folders:
        _check_one(path, p, _stat(path, p), f"folder {p} on its path")
    _check_one(path, path, _stat(path, path), "the plugin file")
    real, links = _resolve(path, opp)
    if links:
        top = os.path.realpath(opp)
        for link, holder in links:
            _check_folders(path, holder, link, top, f"holding the link {link}")
        _check_one(path, real, _stat(path, real), f"{real}, the file its links resolve to,")
        _check_folders(path, os.path.dirname(real), real, top, f"above {real}, the file its links resolve to,")
    st = _stat(path, real)
    if not stat.S_ISREG(st.st_mode):
        raise PluginError(f"plugin {path} refused: {real} is not a regular file")
    return st.st_dev, st.st_ino


def _stat(path: str, p: str, follow: bool = True) -> os.stat_result:
    try:
        return os.stat(p) if follow else os.lstat(p)
    except OSError as err:
        cause = "it is a broken symbolic link" if p == path and os.path.islink(p) else err.strerror or err
        raise PluginError(f"plugin {path} could not be loaded: cannot check {p}: {cause}") from err


def _trusted(uid: int) -> bool:
    """Owned by this user or root (no owners to compare where the OS has no user ids)."""
    return not hasattr(os, "geteuid") or uid in (0, os.geteuid())


def _check_one(path: str, p: str, st: os.stat_result, what: str) -> None:
    """`what` (naming `p`) must be owned by this user or root and writable by no one else."""
    if not _trusted(st.st_uid):
        raise PluginError(f"plugin {path} refused: {what} is owned by uid {st.st_uid}, neither "
                          f"this user (uid {os.geteuid()}) nor root, who may write to it")
    mode = st.st_mode
    if mode & (stat.S_IWGRP | stat.S_IWOTH):
        who = "group and others" if mode & stat.S_IWGRP and mode & stat.S_IWOTH else (
            "group" if mode & stat.S_IWGRP else "others")
        raise PluginError(f"plugin {path} refused: {what} is writable by {who} "
                          f"(mode {stat.S_IMODE(mode):o}); run chmod go-w on it")


def _check_folders(path: str, folder: str, entry: str, top: str, why: str) -> None:
    """Check `folder` (holding `entry`) and the folders above it, as check_permissions says."""
    inside = os.path.commonpath([folder, top]) == top
    while True:
        st = _stat(path, folder)
        sticky_ok = (not inside and st.st_mode & stat.S_ISVTX and _trusted(st.st_uid)
                     and _trusted(_stat(path, entry, follow=False).st_uid))
        if not sticky_ok:
            _check_one(path, folder, st, f"folder {folder} {why}")
        parent = os.path.dirname(folder)
        if (inside and folder == top) or parent == folder:
            return
        folder, entry = parent, folder


# Symbolic links followed in one path before giving up, as Linux's own limit (ELOOP).
_MAX_LINKS = 40


def _resolve(path: str, opp: str) -> tuple[str, list[tuple[str, str]]]:
    """Follow `path` below `opp` one name at a time, as the kernel does.

    Returns the real path of the file and, for each symbolic link met on the way, the link
    and the real folder that holds it. os.path.realpath gives the same end point but hides
    the links that lead there, whose folders matter too.
    """
    current = os.path.realpath(opp)
    todo = list(reversed(os.path.relpath(path, opp).split(os.sep)))
    links: list[tuple[str, str]] = []
    while todo:
        part = todo.pop()
        if part in ("", os.curdir):
            continue
        if part == os.pardir:
            current = os.path.dirname(current)
            continue
        candidate = os.path.join(current, part)
        try:
            is_link = stat.S_ISLNK(os.lstat(candidate).st_mode)
            target = os.readlink(candidate) if is_link else None
        except OSError as err:
            raise PluginError(f"plugin {path} could not be loaded: cannot check {candidate}: "
                              f"{err.strerror or err}") from err
        if target is None:
            current = candidate
            continue
        links.append((candidate, current))
        if len(links) > _MAX_LINKS:
            raise PluginError(f"plugin {path} could not be loaded: more than {_MAX_LINKS} "
                              "symbolic links on its path (a loop?)")
        if os.path.isabs(target):
            current = os.sep
        todo.extend(reversed(target.split(os.sep)))
    return current, links


def _load_opp(report: PluginReport, added_modules: list[str]) -> None:
    opp = report.opp_path
    if not os.path.isdir(opp):
        log.warning("plugin path %s (from $%s) is not a folder; no plugin files loaded", opp,
                    next((v for v in ENV_VARS if os.environ.get(v)), "argument"))
        return
    for vendor, path in find_plugin_files(opp, report):
        checked = check_permissions(path, opp)
        _import_file(vendor, path, checked, added_modules)
        report.files.append(path)


def _read_source(path: str, checked: tuple[int, int]) -> bytes:
    """The plugin's source text, from the very file check_permissions looked at."""
    try:
        # O_NONBLOCK: had a FIFO taken the file's place, opening it would wait for a writer.
        fd = os.open(path, os.O_RDONLY | getattr(os, "O_NONBLOCK", 0))
        with os.fdopen(fd, "rb") as f:
            st = os.fstat(fd)
            if (st.st_dev, st.st_ino) != checked:
                raise PluginError(f"plugin {path} refused: it was replaced while being checked")
            return f.read()
    except OSError as err:
        raise PluginError(f"plugin {path} could not be loaded: {err.strerror or err}") from err


def _import_file(vendor: str, path: str, checked: tuple[int, int],
                 added_modules: list[str]) -> types.ModuleType:
    """Compile the plugin's source and run it as module pyge_plugins.<vendor>.<stem>.

    No import machinery is involved, so no bytecode cache is read or written: a `__pycache__`
    folder beside the plugins (which pyge does not check, and which umask 002 would make
    group-writable) could otherwise hold a .pyc with the source's time and size in its header,
    and that .pyc, not the checked source, would run.
    """
    source = _read_source(path, checked)
    stem = os.path.splitext(os.path.basename(path))[0]
    name = "pyge_plugins." + ".".join(re.sub(r"\W", "_", s) or "_" for s in (vendor, stem))
    module = types.ModuleType(name)
    module.__file__ = path
    module.__spec__ = importlib.machinery.ModuleSpec(name, None, origin=path)
    sys.modules[name] = module
    added_modules.append(name)
    try:
        code = compile(source, path, "exec", dont_inherit=True)
        with registering_from(f"plugin {path}"):
            exec(code, module.__dict__)  # noqa: S102 - running the plugin is the point
    # SystemExit too: a plugin calling sys.exit() must not end the user's program.
    except (Exception, SystemExit) as err:  # noqa: BLE001 - any failure names the file and the cause
        raise PluginError(f"plugin {path} could not be loaded: {type(err).__name__}: {err}") from err
    log.debug("ran plugin %s as module %s", path, name)
    return module


def _load_entry_points(report: PluginReport) -> None:
    eps = sorted(importlib.metadata.entry_points(group=ENTRY_POINT_GROUP), key=lambda e: (e.name, e.value))
    for ep in eps:
        origin = f"entry point {ep.name} = {ep.value}"
        try:
            with registering_from(origin):
                obj = ep.load()
                if callable(obj) and not isinstance(obj, (types.ModuleType, type)):
                    if not any(obj in (r.stream_fn, r.graph_fn) for r in registered_passes()):
                        register_custom_pass(ep.name).custom_allocate_stream_pass_fn(obj)
        except (Exception, SystemExit) as err:  # noqa: BLE001
            raise PluginError(f"{origin} (group {ENTRY_POINT_GROUP}) could not be loaded: "
                              f"{type(err).__name__}: {err}") from err
        report.entry_points.append(f"{ep.name} = {ep.value}")
