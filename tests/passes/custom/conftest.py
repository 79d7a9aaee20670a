"""Plugin tests start and end with an empty registry, no plugin state and no opp variables."""
from __future__ import annotations

import importlib.metadata
import sys

import pytest

import pyge
from pyge.passes.custom import plugins, registered_passes
from pyge.passes.custom.plugins import reset_plugins
from pyge.passes.custom.registry import restore_registry


@pytest.fixture(autouse=True)
def _clean_plugins(monkeypatch):
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
