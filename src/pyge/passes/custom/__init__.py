"""Custom passes: user stream passes, run after the built-in logical stream allocation, and
user graph passes, run at GE's graph stages.

    registry.py      registration by name, in order, with its stage (GE's REGISTER_CUSTOM_PASS)
    view.py          the read-only graph a stream pass receives (GE's ConstGraph)
    context.py       the StreamPassContext all of one model's stream passes share
    runner.py        one call of the stream passes per compiled model (GE's RunCustomStreamPass)
    pass_context.py  the CustomPassContext of one graph pass call
    graph_passes.py  the graph passes of one stage, each checked and adopted (GE's CustomPassFn)
    detach.py        handing the working graph to a graph pass and taking it back detached
    graph_check.py   what is checked on the graph a graph pass returns
    plugins.py       passes loaded from <opp>/vendors/<vendor>/custom_fusion_passes/
"""
from __future__ import annotations

from .context import (GRAPH_FAILED, GRAPH_PARAM_INVALID, GRAPH_SUCCESS, GraphStatus, StreamBook,
                      StreamPassContext)
from .pass_context import CustomPassContext
from .registry import (CustomPassRegistration, CustomPassStage, clear_custom_passes,
                       custom_graph_pass, custom_passes_scope, custom_stream_pass,
                       register_custom_pass, registered_passes, unregister_custom_pass)
from .runner import AFTER_STAGE, BEFORE_STAGE, StreamPassResult, run_stream_passes
from .view import ConstGraph, ConstNode, TensorDesc

__all__ = [
    "run_stream_passes", "StreamPassResult", "register_custom_pass", "custom_stream_pass",
    "unregister_custom_pass", "clear_custom_passes", "registered_passes", "custom_passes_scope",
    "CustomPassRegistration", "StreamPassContext", "StreamBook", "GraphStatus", "GRAPH_SUCCESS",
    "GRAPH_FAILED", "GRAPH_PARAM_INVALID", "ConstGraph", "ConstNode", "TensorDesc", "BEFORE_STAGE",
    "AFTER_STAGE", "CustomPassStage", "CustomPassContext", "custom_graph_pass",
]
