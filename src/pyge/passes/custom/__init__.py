"""Custom stream passes: user passes run after the built-in logical stream allocation.

    registry.py  registration by name, in order (GE's REGISTER_CUSTOM_PASS)
    view.py      the read-only graph a pass receives (GE's ConstGraph)
    context.py   the StreamPassContext all of one model's passes share
    runner.py    one call of the stream passes per compiled model (GE's RunCustomStreamPass)
    plugins.py   passes loaded from <opp>/vendors/<vendor>/custom_fusion_passes/
"""
from __future__ import annotations

from .context import (GRAPH_FAILED, GRAPH_PARAM_INVALID, GRAPH_SUCCESS, GraphStatus, StreamBook,
                      StreamPassContext)
from .registry import (CustomPassRegistration, clear_custom_passes, custom_passes_scope,
                       custom_stream_pass, register_custom_pass, registered_passes,
                       unregister_custom_pass)
from .runner import AFTER_STAGE, BEFORE_STAGE, StreamPassResult, run_stream_passes
from .view import ConstGraph, ConstNode, TensorDesc

__all__ = [
    "run_stream_passes", "StreamPassResult", "register_custom_pass", "custom_stream_pass",
    "unregister_custom_pass", "clear_custom_passes", "registered_passes", "custom_passes_scope",
    "CustomPassRegistration", "StreamPassContext", "StreamBook", "GraphStatus", "GRAPH_SUCCESS",
    "GRAPH_FAILED", "GRAPH_PARAM_INVALID", "ConstGraph", "ConstNode", "TensorDesc", "BEFORE_STAGE",
    "AFTER_STAGE",
]
