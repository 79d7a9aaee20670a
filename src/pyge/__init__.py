"""pyge: a graph compiler and executor with inter-operator concurrency on logical streams.

    import pyge
    g = pyge.load_onnx("model.onnx")
    model = pyge.compile(g, device="cpu")
    outputs = model.run({"input": x})
"""
from __future__ import annotations

import os as _os

# How torch's idle OpenMP threads wait between operators. Sleeping at once (PASSIVE) makes
# every operator pay a futex wake-up of the team; spinning without bound (ACTIVE) burns the
# cores after a run, which the other stream workers and anything else on the machine pay for.
# A bounded spin covers the gaps between one run's operators and then sleeps: GNU libgomp
# (pip's torch) counts spin iterations, Intel/LLVM OpenMP takes milliseconds.
# `python benchmarks/bench_omp_wait.py` measures all three (README, "OpenMP waits"). Only when
# the user has set none of these, and only if torch is imported after pyge (OpenMP reads them
# when it loads).
if not any(k in _os.environ for k in ("OMP_WAIT_POLICY", "GOMP_SPINCOUNT", "KMP_BLOCKTIME")):
    _os.environ["GOMP_SPINCOUNT"] = "10000"
    _os.environ["KMP_BLOCKTIME"] = "1"

from .compiler import compile_graph as compile  # noqa: A001 - the public name is pyge.compile
from .errors import (CustomPassError, ExecutionError, GraphCycleError, GraphError, InputError,
                     ModelFileError, ModelLoadError, OptionError, PassError, PlanError, PluginError,
                     PygeError, UnsupportedOperatorError, VerificationError, DumpError)
from .frontends.onnx_loader import load_onnx
from .ir import Graph, GraphBuilder, Node, Value, format_graph
from .model import CompiledModel
from .passes.custom import (GRAPH_FAILED, GRAPH_PARAM_INVALID, GRAPH_SUCCESS, StreamPassContext,
                            clear_custom_passes, custom_passes_scope, custom_stream_pass,
                            register_custom_pass, unregister_custom_pass)
from .passes.engines import register_engine
from . import examples  # noqa: E402 - pyge.examples.reference_graph() for the demo and tests

__version__ = "0.1.0"

__all__ = [
    "compile", "load_onnx", "Graph", "GraphBuilder", "Node", "Value", "format_graph", "CompiledModel",
    "PygeError", "ModelLoadError", "GraphError", "GraphCycleError", "UnsupportedOperatorError",
    "OptionError", "PassError", "CustomPassError", "PluginError", "PlanError", "VerificationError",
    "InputError", "ExecutionError", "ModelFileError", "DumpError",
    "register_custom_pass", "custom_stream_pass", "unregister_custom_pass", "clear_custom_passes",
    "custom_passes_scope", "StreamPassContext", "GRAPH_SUCCESS", "GRAPH_FAILED", "GRAPH_PARAM_INVALID",
    "register_engine", "examples",
]

# -- product surface: GE-style sessions and offline models (.pgm) ---------------------------
from .session import Session, SessionError  # noqa: E402
from .modelfile import load_model, save_model  # noqa: E402

__all__ += ["Session", "SessionError", "load_model", "save_model"]

# -- PyTorch front end (torch.export) ---------------------------------------------------------
from .frontends.torch_export import from_torch  # noqa: E402

__all__ += ["from_torch"]
