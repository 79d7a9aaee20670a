"""pyge.load_tf: a TensorFlow frozen graph (GraphDef, `.pb`) -> pyge.Graph, through tf2onnx.

GE parses TensorFlow `.pb` models itself; pyge converts them to ONNX with tf2onnx and loads
that, so one front end (onnx_loader) defines what a graph is. TensorFlow and tf2onnx are an
optional extra (`pip install -e '.[tf]'` in pyge's folder): they are imported only when a model is loaded, and
their absence is a ModelLoadError that says what to install.

Inputs default to the graph's Placeholders and outputs to the nodes nothing reads (ops that
are sinks by nature, NoOp, Assert, save/restore and variable handles, excepted); tensor names
are TensorFlow's `node:0`.
"""
from __future__ import annotations

import os
from pathlib import Path
from typing import Any, Sequence

from ..errors import ModelLoadError
from ..ir.graph import Graph

DEFAULT_OPSET = 17
_NOT_OUTPUTS = frozenset({"NoOp", "Const", "Placeholder", "Assert", "SaveV2", "RestoreV2", "VarHandleOp"})


def _import_tf(src: str):
    try:
        import tensorflow as tf
        from tf2onnx import convert
    except ImportError as err:
        raise ModelLoadError(f"{src}: reading TensorFlow models needs TensorFlow and tf2onnx "
                             f"(the optional extra: pip install -e '.[tf]'); missing: {err.name or err}") from err
    return tf, convert


def placeholders(graph_def) -> list[str]:
    """The `node:0` names of the GraphDef's Placeholders: the default inputs."""
    return [f"{n.name}:0" for n in graph_def.node if n.op == "Placeholder"]


def sinks(graph_def) -> list[str]:
    """The `node:0` names of the nodes no other node reads: the default outputs."""
    read = {i.lstrip("^").split(":")[0] for n in graph_def.node for i in n.input}
    return [f"{n.name}:0" for n in graph_def.node if n.name not in read and n.op not in _NOT_OUTPUTS]


def _graph_def(tf, model: Any) -> tuple[Any, str]:
    """The GraphDef to convert and a name for it in messages."""
    if isinstance(model, (str, os.PathLike)):
        p = Path(model)
        if not p.is_file():
            what = "is a folder, not a file" if p.is_dir() else "not found"
            raise ModelLoadError(f"model file {what}: {p}")
        try:
            data = p.read_bytes()
        except OSError as err:
            raise ModelLoadError(f"cannot read model file {p}: {err.strerror or err}") from err
        src = str(p)
    elif isinstance(model, (bytes, bytearray)):
        data, src = bytes(model), "<bytes>"
    elif hasattr(model, "node") and hasattr(model, "SerializeToString"):
        return model, "<GraphDef>"
    else:
        raise ModelLoadError(f"load_tf expects a path, bytes or a tf GraphDef, got {type(model).__name__}")
    from google.protobuf.message import DecodeError
    gd = tf.compat.v1.GraphDef()
    try:
        gd.ParseFromString(data)
    except (DecodeError, ValueError, RuntimeError) as err:
        raise ModelLoadError(f"{src} is not a TensorFlow GraphDef ({err})") from err
    if not gd.node:
        raise ModelLoadError(f"{src} is not a TensorFlow GraphDef (no nodes)")
    return gd, src


def load_tf(model: str | os.PathLike | bytes | Any, inputs: Sequence[str] | None = None,
            outputs: Sequence[str] | None = None, opset: int = DEFAULT_OPSET) -> Graph:
    """Load a frozen TensorFlow GraphDef (a `.pb` path, its bytes, or a GraphDef) into a Graph.

    `inputs` / `outputs` are tensor names (`node:0`); by default the Placeholders and the nodes
    nothing reads. The graph is converted with tf2onnx at `opset` and loaded as ONNX.
    """
    tf, convert = _import_tf(str(model) if isinstance(model, (str, os.PathLike)) else "load_tf")
    from .onnx_loader import load_onnx
    gd, src = _graph_def(tf, model)
    inputs = list(inputs) if inputs else placeholders(gd)
    outputs = list(outputs) if outputs else sinks(gd)
    if not outputs:
        raise ModelLoadError(f"{src}: no output found; name the output tensors (NODE:0)")
    try:
        mp, _ = convert.from_graph_def(gd, input_names=inputs, output_names=outputs, opset=opset)
    except Exception as err:  # noqa: BLE001 - tf2onnx raises many kinds; keep the cause
        text = str(err).strip()
        msg = text.splitlines()[0] if text else type(err).__name__
        raise ModelLoadError(f"{src}: tf2onnx could not convert the graph: {msg}") from err
    g = load_onnx(mp)
    g.metadata["source"] = src
    return g


__all__ = ["load_tf", "placeholders", "sinks", "DEFAULT_OPSET"]
