"""What the commands share: reading a model of any kind, options and inputs from the command line.

A model argument is an offline model (.pgm, recognised by its magic bytes whatever its name),
a TensorFlow frozen graph (.pb, pyge.load_tf: needs the optional extra `pyge[tf]`), or an
ONNX file; no argument means the built-in inception-like block (pyge.builtin_models).
Everything that can be checked without the model (options, the TensorFlow flags) is checked
before it is loaded.
"""
from __future__ import annotations

import argparse
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from .. import progress
from ..errors import InputError, ModelLoadError
from ..ir.graph import Graph
from .args import UsageError


def options_of(args: argparse.Namespace) -> dict[str, str]:
    """The -O KEY=VALUE pairs, checked (an unknown key or a bad value is an OptionError)."""
    from ..options import parse_options
    out = dict(getattr(args, "option", None) or [])
    parse_options(out)
    return out


@dataclass
class Loaded:
    model: Any               # CompiledModel
    source: str              # what was loaded, for printing
    graph: Graph             # the graph inputs are made from
    compile_s: float = 0.0   # 0 for an offline model
    builtin: bool = False


def tf_flags(args: argparse.Namespace) -> tuple[list[str] | None, list[str] | None]:
    """--pb-inputs / --pb-outputs, refused for a model that is not a .pb."""
    ins, outs = getattr(args, "pb_inputs", None), getattr(args, "pb_outputs", None)
    path = getattr(args, "model", None)
    if (ins or outs) and (path is None or Path(path).suffix.lower() != ".pb"):
        flag = "--pb-inputs" if ins else "--pb-outputs"
        raise UsageError(f"{flag} applies only to a TensorFlow .pb model, not to {path or 'the built-in model'}")
    return ins, outs


def load_graph(path: str, pb_inputs: list[str] | None = None, pb_outputs: list[str] | None = None) -> Graph:
    """Read an ONNX or TensorFlow .pb file into a Graph (not compiled)."""
    p = Path(path)
    if not p.exists():
        raise ModelLoadError(f"model file not found: {p}")
    if p.suffix.lower() == ".pb":
        from ..frontends.tf import load_tf
        return load_tf(p, pb_inputs, pb_outputs)
    from ..frontends.onnx_loader import load_onnx
    return load_onnx(p)


def obtain_model(args: argparse.Namespace) -> Loaded:
    """The compiled model a command works on: built-in, offline (.pgm) or compiled now."""
    from ..compiler import compile_graph
    from ..model import load_model
    from ..modelfile import is_model_file
    opts = options_of(args)
    pb_inputs, pb_outputs = tf_flags(args)
    device = getattr(args, "device", None)
    path = getattr(args, "model", None)
    if path is not None and is_model_file(path):
        if opts:
            raise UsageError(f"{path} is an offline model: its options were fixed when it was compiled "
                             "(recompile the source model with --option instead)")
        with progress.task(f"loading {path}"):
            model = load_model(path, device=device)
        return Loaded(model, f"{path} (offline model)", model.graph)
    if path is None:
        from ..builtin_models import BUILTIN_NAME, inception_block
        graph, source = inception_block(), f"built-in {BUILTIN_NAME} (4 parallel branches joined by Concat)"
    else:
        with progress.task(f"loading {path}"):
            graph = load_graph(path, pb_inputs, pb_outputs)
        source = path
    load_kernels()
    t0 = time.perf_counter()
    with progress.task(f"compiling {graph.name}"):
        model = compile_graph(graph, device=device or "cpu", options=opts,
                              graph_id=getattr(args, "graph_id", None))
    return Loaded(model, source, graph, time.perf_counter() - t0, builtin=path is None)


def load_kernels() -> None:
    """Import torch and the kernels now, so that compile times do not include the import."""
    from ..kernels import registered_ops
    with progress.task("loading torch kernels"):
        registered_ops()


def make_feeds(args: argparse.Namespace, loaded: Loaded) -> tuple[dict[str, Any], str]:
    """Feeds from --input NAME=FILE.npy, random (seeded) for the rest; and a note saying which."""
    from ..builtin_models import random_inputs
    names = [loaded.model.plan.values[i].name for i in loaded.model.plan.inputs]
    given: dict[str, Any] = {}
    for item in getattr(args, "input", None) or []:
        name, sep, file = item.partition("=")
        if not sep:
            if len(names) != 1:
                raise UsageError(f"--input {item!r}: give NAME=FILE.npy (the model's inputs: {', '.join(names)})")
            name, file = names[0], item
        if name not in names:
            raise UsageError(f"--input {name!r}: the model has no such input (its inputs: {', '.join(names)})")
        given[name] = read_array(file)
    shapes = dict(getattr(args, "shape", None) or [])
    rest = [v for v in loaded.graph.inputs if v.name not in given]
    graph = Graph(loaded.graph.name)
    graph.inputs = rest
    seed = getattr(args, "seed", 0)
    feeds = random_inputs(graph, seed=seed, shapes=shapes)
    feeds.update(given)
    note = "from files" if not rest else (
        f"random, seed {seed}" if not given else f"{len(given)} from files, the rest random")
    return feeds, note


def read_array(file: str) -> np.ndarray:
    """A .npy file, read without pickle (an object array in a .npy could run code)."""
    try:
        return np.load(file, allow_pickle=False)
    except FileNotFoundError:
        raise InputError(f"input file not found: {file}") from None
    except (OSError, ValueError) as err:
        raise InputError(f"cannot read input file {file} as a .npy array: {err}") from err


__all__ = ["Loaded", "obtain_model", "tf_flags", "load_kernels", "make_feeds", "load_graph", "options_of",
           "read_array"]
