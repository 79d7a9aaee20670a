"""What the commands share: reading a model of any kind, options and inputs from the command line.

A model argument is an offline model (.pgm, recognised by its magic bytes whatever its name),
a TensorFlow frozen graph (.pb, needs the optional extra `pyge[tf]`), or an ONNX file; no
argument means the built-in inception-like block (pyge.builtin_models).
"""
from __future__ import annotations

import argparse
import os
import re
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from . import progress
from .errors import InputError, ModelLoadError, PygeError
from .ir.graph import Graph


class UsageError(PygeError):
    """The command line asks for something that cannot be done (exit status 2)."""


def key_value(text: str) -> tuple[str, str]:
    """argparse type for KEY=VALUE."""
    key, sep, value = text.partition("=")
    if not sep or not key.strip():
        raise argparse.ArgumentTypeError(f"expected KEY=VALUE, got {text!r}")
    return key.strip(), value.strip()


def options_of(args: argparse.Namespace) -> dict[str, str]:
    out: dict[str, str] = {}
    for k, v in getattr(args, "option", None) or []:
        out[k] = v
    return out


@dataclass
class Loaded:
    model: Any               # CompiledModel
    source: str              # what was loaded, for printing
    graph: Graph             # the graph inputs are made from
    compile_s: float = 0.0   # 0 for an offline model
    builtin: bool = False


def load_graph(path: str, pb_inputs: list[str] | None = None, pb_outputs: list[str] | None = None) -> Graph:
    """Read an ONNX or TensorFlow .pb file into a Graph (not compiled)."""
    from .frontends.onnx_loader import load_onnx
    p = Path(path)
    if not p.exists():
        raise ModelLoadError(f"model file not found: {p}")
    if p.suffix.lower() == ".pb":
        return load_tf_pb(p, pb_inputs, pb_outputs)
    return load_onnx(p)


def obtain_model(args: argparse.Namespace) -> Loaded:
    """The compiled model a command works on: built-in, offline (.pgm) or compiled now."""
    import time

    from .compiler import compile_graph
    from .modelfile import is_model_file, load_model
    opts = options_of(args)
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
        from .builtin_models import BUILTIN_NAME, inception_block
        graph, source = inception_block(), f"built-in {BUILTIN_NAME} (4 parallel branches joined by Concat)"
    else:
        with progress.task(f"loading {path}"):
            graph = load_graph(path, getattr(args, "pb_inputs", None), getattr(args, "pb_outputs", None))
        source = path
    load_kernels()
    t0 = time.perf_counter()
    with progress.task(f"compiling {graph.name}"):
        model = compile_graph(graph, device=device or "cpu", options=opts,
                              graph_id=getattr(args, "graph_id", None))
    return Loaded(model, source, graph, time.perf_counter() - t0, builtin=path is None)


def load_kernels() -> None:
    """Import torch and the kernels now, so that compile times do not include the import."""
    from .kernels import registered_ops
    with progress.task("loading torch kernels"):
        registered_ops()


def make_feeds(args: argparse.Namespace, loaded: Loaded) -> tuple[dict[str, Any], str]:
    """Feeds from --input NAME=FILE.npy, random (seeded) for the rest; and a note saying which."""
    from .builtin_models import random_inputs
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
    shapes = {k: _dims(k, v) for k, v in getattr(args, "shape", None) or []}
    rest = [v for v in loaded.graph.inputs if v.name not in given]
    graph = Graph(loaded.graph.name)
    graph.inputs = rest
    feeds = random_inputs(graph, seed=getattr(args, "seed", 0), shapes=shapes)
    feeds.update(given)
    note = "from files" if not rest else (
        f"random, seed {getattr(args, 'seed', 0)}" if not given else f"{len(given)} from files, the rest random")
    return feeds, note


def read_array(file: str) -> np.ndarray:
    """A .npy file, read without pickle (an object array in a .npy could run code)."""
    try:
        return np.load(file, allow_pickle=False)
    except FileNotFoundError:
        raise InputError(f"input file not found: {file}") from None
    except (OSError, ValueError) as err:
        raise InputError(f"cannot read input file {file} as a .npy array: {err}") from err


def _dims(name: str, text: str) -> tuple[int, ...]:
    if not re.fullmatch(r"\s*\d+(\s*,\s*\d+)*\s*|\s*", text):
        raise UsageError(f"--shape {name}={text!r}: expected comma-separated sizes, e.g. 1,3,224,224")
    return tuple(int(d) for d in text.split(",") if d.strip())


def safe_filename(name: str) -> str:
    """An output name as a file name: anything but letters, digits, '.', '-' and '_' becomes '_'."""
    s = re.sub(r"[^\w.-]", "_", name).lstrip(".")
    return s or "output"


# ---------------------------------------------------------------------------------------
# TensorFlow frozen graphs (optional extra: pip install "pyge[tf]")

_TF_SINKS_SKIPPED = {"NoOp", "Const", "Placeholder", "Assert", "SaveV2", "RestoreV2", "VarHandleOp"}


def load_tf_pb(path: Path, inputs: list[str] | None = None, outputs: list[str] | None = None,
               opset: int = 17) -> Graph:
    """A frozen TensorFlow GraphDef (.pb) converted by tf2onnx, then loaded as ONNX.

    Inputs default to the Placeholders and outputs to the nodes nothing reads; tensor names
    are TensorFlow's `node:0`.
    """
    try:
        import tensorflow as tf
        from tf2onnx import convert
    except ImportError as err:
        raise ModelLoadError(f"{path}: reading TensorFlow .pb files needs TensorFlow and tf2onnx "
                             f"(pip install \"pyge[tf]\"); missing: {err.name}") from err
    from google.protobuf.message import DecodeError

    from .frontends.onnx_loader import load_onnx
    gd = tf.compat.v1.GraphDef()
    try:
        gd.ParseFromString(path.read_bytes())
    except (DecodeError, ValueError, RuntimeError) as err:
        raise ModelLoadError(f"{path} is not a TensorFlow GraphDef ({err})") from err
    inputs = inputs or [f"{n.name}:0" for n in gd.node if n.op == "Placeholder"]
    outputs = outputs or _tf_sinks(gd)
    if not outputs:
        raise ModelLoadError(f"{path}: no output found; name them with --pb-outputs NODE:0")
    try:
        mp, _ = convert.from_graph_def(gd, input_names=inputs, output_names=outputs, opset=opset)
    except Exception as err:  # noqa: BLE001 - tf2onnx raises many kinds; keep the cause
        msg = str(err).strip().splitlines()[0] if str(err).strip() else type(err).__name__
        raise ModelLoadError(f"{path}: tf2onnx could not convert the graph: {msg}") from err
    g = load_onnx(mp)
    g.metadata["source"] = str(path)
    return g


def _tf_sinks(gd) -> list[str]:
    read = set()
    for n in gd.node:
        for i in n.input:
            read.add(i.lstrip("^").split(":")[0])
    return [f"{n.name}:0" for n in gd.node if n.name not in read and n.op not in _TF_SINKS_SKIPPED]


def env_flag(name: str) -> bool:
    return os.environ.get(name, "").strip().lower() not in ("", "0", "false", "no")


__all__ = ["UsageError", "Loaded", "obtain_model", "load_kernels", "make_feeds", "load_graph", "key_value", "options_of",
           "read_array", "safe_filename", "load_tf_pb", "env_flag"]
