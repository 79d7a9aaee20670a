"""pyge: a graph compiler and executor with inter-operator concurrency on logical streams.

    import pyge
    g = pyge.load_onnx("model.onnx")
    model = pyge.compile(g, device="cpu")
    outputs = model.run({"input": x})
"""
from __future__ import annotations

from .compiler import compile_graph as compile  # noqa: A001 - the public name is pyge.compile
from .errors import (CustomPassError, ExecutionError, GraphCycleError, GraphError, InputError,
                     ModelFileError, ModelLoadError, OptionError, PassError, PlanError, PluginError,
                     PygeError, UnsupportedOperatorError, VerificationError, DumpError)
from .frontends.onnx_loader import load_onnx
from .ir import Graph, GraphBuilder, Node, Value, format_graph
from .model import CompiledModel

__version__ = "0.1.0"

__all__ = [
    "compile", "load_onnx", "Graph", "GraphBuilder", "Node", "Value", "format_graph", "CompiledModel",
    "PygeError", "ModelLoadError", "GraphError", "GraphCycleError", "UnsupportedOperatorError",
    "OptionError", "PassError", "CustomPassError", "PluginError", "PlanError", "VerificationError",
    "InputError", "ExecutionError", "ModelFileError", "DumpError",
]
