"""pyge: a graph compiler and executor with inter-operator concurrency on logical streams.

    import pyge
    g = pyge.load_onnx("model.onnx")
    model = pyge.compile(g, device="cpu")
    outputs = model.run({"input": x})

Importing pyge is cheap: the public names below are resolved on first use (PEP 562), so that
`pyge --help` and tools that only need the error classes do not pay for importing torch.
`from pyge import X` works for every name in `__all__`, and so does `pyge.<submodule>`.
"""
from __future__ import annotations

import importlib as _importlib
import importlib.util as _importlib_util
import os as _os

# How torch's idle OpenMP threads wait between operators. Sleeping at once (PASSIVE) makes
# every operator pay a futex wake-up of the team; spinning without bound (ACTIVE) burns the
# cores after a run, which the other stream workers and anything else on the machine pay for.
# A bounded spin covers the gaps between one run's operators and then sleeps: GNU libgomp
# (pip's torch) counts spin iterations, Intel/LLVM OpenMP takes milliseconds.
# `python benchmarks/bench_omp_wait.py` measures all three (docs/performance.md, "OpenMP
# waits"). Under a core kept busy by other work, any spin hurts (a spinning thread loses the
# scheduler's credit for sleepers while its team waits for it at every barrier); there the
# executors shrink their teams instead (executors/contention.py, benchmarks/bench_busy.py).
# Only when the user has set none of these, and only if torch is imported after pyge (OpenMP
# reads them when it loads): torch is imported lazily, by the first use of a name that needs
# it, so it always comes after this.
if not any(k in _os.environ for k in ("OMP_WAIT_POLICY", "GOMP_SPINCOUNT", "KMP_BLOCKTIME")):
    _os.environ["GOMP_SPINCOUNT"] = "10000"
    _os.environ["KMP_BLOCKTIME"] = "1"

# The error family is plain Python: imported at once, so `except pyge.PygeError` costs nothing.
from .errors import (CustomPassError, DistributedError, DumpError, ExecutionError,  # noqa: E402
                     GraphCycleError, GraphError, InputError, ModelFileError, ModelLoadError,
                     OptionError, PassError, PlanError, PluginError, PygeError,
                     UnsupportedOperatorError, VerificationError)

from ._version import __version__  # noqa: E402

# public name -> (module relative to pyge, attribute in it; None: the module itself)
_LAZY: dict[str, tuple[str, str | None]] = {
    "compile": (".compiler", "compile_graph"),
    "load_onnx": (".frontends.onnx_loader", "load_onnx"),
    "load_tf": (".frontends.tf", "load_tf"),
    "from_torch": (".frontends.torch_export", "from_torch"),
    "Graph": (".ir", "Graph"),
    "GraphBuilder": (".ir", "GraphBuilder"),
    "Node": (".ir", "Node"),
    "Value": (".ir", "Value"),
    "format_graph": (".ir", "format_graph"),
    "CompiledModel": (".model", "CompiledModel"),
    "register_custom_pass": (".passes.custom", "register_custom_pass"),
    "custom_stream_pass": (".passes.custom", "custom_stream_pass"),
    "unregister_custom_pass": (".passes.custom", "unregister_custom_pass"),
    "clear_custom_passes": (".passes.custom", "clear_custom_passes"),
    "custom_passes_scope": (".passes.custom", "custom_passes_scope"),
    "StreamPassContext": (".passes.custom", "StreamPassContext"),
    "CustomPassContext": (".passes.custom", "CustomPassContext"),
    "CustomPassStage": (".passes.custom", "CustomPassStage"),
    "custom_graph_pass": (".passes.custom", "custom_graph_pass"),
    "GRAPH_SUCCESS": (".passes.custom", "GRAPH_SUCCESS"),
    "GRAPH_FAILED": (".passes.custom", "GRAPH_FAILED"),
    "GRAPH_PARAM_INVALID": (".passes.custom", "GRAPH_PARAM_INVALID"),
    "register_engine": (".passes.graph.engines", "register_engine"),
    "examples": (".examples", None),
    "Session": (".session", "Session"),
    "SessionError": (".session", "SessionError"),
    "load_model": (".model", "load_model"),
    "save_model": (".modelfile", "save_model"),
}

__all__ = [
    "compile", "load_onnx", "Graph", "GraphBuilder", "Node", "Value", "format_graph", "CompiledModel",
    "PygeError", "ModelLoadError", "GraphError", "GraphCycleError", "UnsupportedOperatorError",
    "OptionError", "PassError", "CustomPassError", "PluginError", "PlanError", "VerificationError",
    "InputError", "ExecutionError", "ModelFileError", "DumpError", "DistributedError",
    "register_custom_pass", "custom_stream_pass", "unregister_custom_pass", "clear_custom_passes",
    "custom_passes_scope", "StreamPassContext", "CustomPassContext", "CustomPassStage",
    "custom_graph_pass", "GRAPH_SUCCESS", "GRAPH_FAILED", "GRAPH_PARAM_INVALID",
    "register_engine", "examples",
    "Session", "SessionError", "load_model", "save_model",
    "from_torch", "load_tf",
]


def __getattr__(name: str):
    """Resolve a public name (or a submodule, `pyge.kernels` say) on first use, then keep it."""
    if name in _LAZY:
        module, attr = _LAZY[name]
        mod = _importlib.import_module(module, __name__)
        value = mod if attr is None else getattr(mod, attr)
    elif not name.startswith("__") and _importlib_util.find_spec(f"{__name__}.{name}") is not None:
        value = _importlib.import_module(f"{__name__}.{name}")
    else:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    globals()[name] = value
    return value


def __dir__() -> list[str]:
    return sorted(set(globals()) | set(__all__))
