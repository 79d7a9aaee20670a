"""Helpers for the plugin tests: plugin source text, plugin files, registered names."""
from __future__ import annotations

import os
from pathlib import Path

from pyge.passes.custom import registered_passes

PASS_DIR = "custom_fusion_passes"
OTHER_UID = 4242          # a user who is neither the test's user nor root (chown needs root)


def plugin_source(name: str) -> str:
    return ("import pyge\n"
            f"@pyge.custom_stream_pass({name!r})\n"
            "def fn(graph, ctx):\n"
            "    return pyge.GRAPH_SUCCESS\n")


def write_plugin(opp: Path, vendor: str, filename: str, text: str) -> Path:
    folder = opp / "vendors" / vendor / PASS_DIR
    folder.mkdir(parents=True, exist_ok=True)
    for p in (opp, opp / "vendors", opp / "vendors" / vendor, folder):
        p.chmod(0o755)
    path = folder / filename
    path.write_text(text)
    path.chmod(0o644)
    return path


def names() -> list[str]:
    return [r.name for r in registered_passes()]


def is_root() -> bool:
    return os.geteuid() == 0
