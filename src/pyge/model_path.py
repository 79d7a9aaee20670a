"""pyge.compile(path): a model file is loaded first, by its suffix.

    pyge.compile("model.onnx")   load_onnx, then compile
    pyge.compile("model.pgm")    load_model: an offline model is compiled already

An offline model's plan was fixed when it was compiled, so the options given with a .pgm
may only be those that act at run time (RUN_TIME_OPTIONS) or repeat what it was compiled
with; any other is an OptionError that says so (recompile the source model instead).
The command line tells a .pgm by its magic bytes; here the suffix decides, so that a
wrong or missing suffix is an error naming the path rather than a guess. `graph_id` names
the dumps of a compile: a .pgm is not compiled, so it writes none. compiler.compile_graph
asks `checked_path` and `is_offline`, then loads the .onnx itself or returns `load_offline`'s
model (this module does not import the compiler).
"""
from __future__ import annotations

import os
from pathlib import Path
from typing import Any, Mapping

from .errors import ModelLoadError, OptionError
from .model import CompiledModel, load_model
from .options import parse_options

SUFFIXES = (".onnx", ".pgm")
# Options the executors read when a model runs, not the compiler: they leave a plan as it is.
RUN_TIME_OPTIONS = ("pyge.cudaGraph", "pyge.intraOpThreads")


def checked_path(path: str | os.PathLike) -> Path:
    """`path` as a Path if it names an existing .onnx or .pgm file, else ModelLoadError."""
    p = Path(path)
    suffix = p.suffix.lower()
    if suffix not in SUFFIXES:
        kind = f"a {suffix!r} file" if suffix else "a file without a suffix"
        raise ModelLoadError(f"pyge.compile: {p} is {kind}; accepted: .onnx, .pgm "
                             "(a TensorFlow .pb: pyge.load_tf(path) first)")
    if not p.exists():
        raise ModelLoadError(f"model file not found: {p}")
    if not p.is_file():
        raise ModelLoadError(f"model path is not a file: {p}")
    return p


def is_offline(p: Path) -> bool:
    return p.suffix.lower() == ".pgm"


def load_offline(p: Path, device: str | None, options: Mapping[str, Any] | None) -> CompiledModel:
    """The offline model at `p`, with the run-time options among `options` applied."""
    from .executors import check_usable        # deferred on purpose: executors load torch
    given = parse_options(options)           # unknown keys and bad values first, as compile does
    model = load_model(p, device=device)
    for key, value in given.raw.items():
        if key not in RUN_TIME_OPTIONS and given[key] != model.options[key]:
            raise OptionError(
                f"option {key}={value!r} would change the plan of {p}, which is compiled already "
                f"(with {key}={model.options.get_string(key)!r}); recompile the source model with it "
                f"(a .pgm takes only the run-time options {', '.join(RUN_TIME_OPTIONS)})")
    run_time = {k: v for k, v in given.raw.items() if k in RUN_TIME_OPTIONS}
    if run_time:
        model.options = model.options.merged(run_time)
    check_usable(model.device)
    return model


__all__ = ["checked_path", "is_offline", "load_offline", "RUN_TIME_OPTIONS", "SUFFIXES"]
