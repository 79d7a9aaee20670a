"""Plugin loading (minimal first version: nothing to load)."""
from __future__ import annotations


def ensure_plugins_loaded() -> None:
    return None
