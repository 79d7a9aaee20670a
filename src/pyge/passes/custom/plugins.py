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
others may write to is refused, as ssh refuses such key files: anyone who can write there
could run code in every compilation. Loading is all or nothing: on failure the passes
registered so far are unregistered again.

`ensure_plugins_loaded()` (called by every compile) loads once per process; `load_plugins`
loads explicitly and `reset_plugins` forgets the once-per-process state (for tests).
"""
from __future__ import annotations

import importlib.metadata
import importlib.util
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


def check_permissions(path: str, opp: str) -> None:
    """Refuse `path` if it, or a folder between `opp` and it, is writable by group or others."""
    folders = []
    rel = os.path.relpath(os.path.dirname(path), opp)
    current = opp
    folders.append(current)
    for part in ([] if rel == os.curdir else rel.split(os.sep)):
        current = os.path.join(current, part)
        folders.append(current)
    for p in [*folders, path]:
        try:
            mode = os.stat(p).st_mode
        except OSError as err:
            raise PluginError(f"plugin {path}: cannot check {p}: {err.strerror or err}") from err
        if mode & (stat.S_IWGRP | stat.S_IWOTH):
            who = "group and others" if mode & stat.S_IWGRP and mode & stat.S_IWOTH else (
                "group" if mode & stat.S_IWGRP else "others")
            what = "the plugin file" if p == path else f"folder {p} on its path"
            raise PluginError(f"plugin {path} refused: {what} is writable by {who} "
                              f"(mode {stat.S_IMODE(mode):o}); run chmod go-w on it")


def _load_opp(report: PluginReport, added_modules: list[str]) -> None:
    opp = report.opp_path
    if not os.path.isdir(opp):
        log.warning("plugin path %s (from $%s) is not a folder; no plugin files loaded", opp,
                    next((v for v in ENV_VARS if os.environ.get(v)), "argument"))
        return
    for vendor, path in find_plugin_files(opp, report):
        check_permissions(path, opp)
        _import_file(vendor, path, added_modules)
        report.files.append(path)


def _import_file(vendor: str, path: str, added_modules: list[str]) -> types.ModuleType:
    if not os.access(path, os.R_OK):
        cause = "it is a broken symbolic link" if not os.path.exists(path) else "it is not readable"
        raise PluginError(f"plugin {path} could not be loaded: {cause}")
    stem = os.path.splitext(os.path.basename(path))[0]
    name = "pyge_plugins." + ".".join(re.sub(r"\W", "_", s) or "_" for s in (vendor, stem))
    spec = importlib.util.spec_from_file_location(name, path)
    if spec is None or spec.loader is None:
        raise PluginError(f"plugin {path} could not be loaded: not importable as a Python file")
    module = importlib.util.module_from_spec(spec)
    sys.modules[name] = module
    added_modules.append(name)
    try:
        with registering_from(f"plugin {path}"):
            spec.loader.exec_module(module)
    # SystemExit too: a plugin calling sys.exit() must not end the user's program.
    except (Exception, SystemExit) as err:  # noqa: BLE001 - any failure names the file and the cause
        raise PluginError(f"plugin {path} could not be loaded: {type(err).__name__}: {err}") from err
    log.debug("imported plugin %s as %s", path, name)
    return module


def _load_entry_points(report: PluginReport) -> None:
    eps = sorted(importlib.metadata.entry_points(group=ENTRY_POINT_GROUP), key=lambda e: (e.name, e.value))
    for ep in eps:
        origin = f"entry point {ep.name} = {ep.value}"
        try:
            with registering_from(origin):
                obj = ep.load()
                if callable(obj) and not isinstance(obj, (types.ModuleType, type)):
                    if not any(r.stream_fn is obj for r in registered_passes()):
                        register_custom_pass(ep.name).custom_allocate_stream_pass_fn(obj)
        except (Exception, SystemExit) as err:  # noqa: BLE001
            raise PluginError(f"{origin} (group {ENTRY_POINT_GROUP}) could not be loaded: "
                              f"{type(err).__name__}: {err}") from err
        report.entry_points.append(f"{ep.name} = {ep.value}")
