"""Custom stream passes (minimal first version: none registered)."""
from __future__ import annotations

GRAPH_SUCCESS = 0
GRAPH_FAILED = 1


def run_custom_passes(graph, options, on_stage=None) -> set[int]:
    return set()
