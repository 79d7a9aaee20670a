"""pyge.load_onnx: ONNX file or ModelProto -> pyge.Graph."""
from __future__ import annotations

import logging
import os
import stat
from pathlib import Path
from typing import Iterator

import onnx
from google.protobuf.message import DecodeError
from onnx import helper

from ..errors import ModelGraphCycleError, ModelLoadError
from ..ir.graph import Graph
from .onnx_proto import check_strings, keeps_shape_data, model_from_proto

log = logging.getLogger(__name__)

# The opsets of the onnx node test cases pyge runs (onnx 1.23: up to 28; below 7, a few).
MIN_OPSET, MAX_OPSET = 7, 28


def _read_model(path: str | os.PathLike, base_dir: str | os.PathLike | None = None) -> onnx.ModelProto:
    p = Path(path)
    if not p.exists():
        raise ModelLoadError(f"model file not found: {p}")
    if p.is_dir():
        raise ModelLoadError(f"model path is a folder, not a file: {p}")
    if not p.is_file():                       # a FIFO or a device would be read forever
        raise ModelLoadError(f"model path is not a regular file: {p}")
    try:
        data = p.read_bytes()
    except OSError as err:
        raise ModelLoadError(f"cannot read model file {p}: {err.strerror}") from err
    if not data:
        raise ModelLoadError(f"model file is empty: {p}")
    mp = onnx.ModelProto()
    try:
        mp.ParseFromString(data)
    except (DecodeError, ValueError, RuntimeError) as err:
        raise ModelLoadError(f"{p} is not a valid ONNX model (protobuf parse failed: {err})") from err
    if not mp.HasField("graph") or (not mp.graph.node and not mp.graph.output):
        raise ModelLoadError(f"{p} is not a valid ONNX model (no graph)")
    read_external_data(mp, p.parent if base_dir is None else base_dir, str(p))
    return mp


def _tensors(mp: onnx.ModelProto) -> Iterator[onnx.TensorProto]:
    """Every tensor of the model that can keep its data in a file: initializers, sparse
    ones, attribute values, in subgraphs and functions too (onnx's own walk, written out)."""
    def graph(gp: onnx.GraphProto) -> Iterator[onnx.TensorProto]:
        yield from gp.initializer
        for sp in gp.sparse_initializer:
            yield from (sp.values, sp.indices)
        for n in gp.node:
            yield from node(n)

    def node(n: onnx.NodeProto) -> Iterator[onnx.TensorProto]:
        for a in n.attribute:
            if a.HasField("t"):
                yield a.t
            yield from a.tensors
            for sp in ([a.sparse_tensor] if a.HasField("sparse_tensor") else []) + list(a.sparse_tensors):
                yield from (sp.values, sp.indices)
            if a.HasField("g"):
                yield from graph(a.g)
            for g in a.graphs:
                yield from graph(g)
    yield from graph(mp.graph)
    for f in mp.functions:
        for n in f.node:
            yield from node(n)


def external_locations(mp: onnx.ModelProto) -> list[str]:
    """The locations (as written in the model) of every tensor kept in an external file."""
    return sorted({_entry(t, "location") or "" for t in _tensors(mp)
                   if t.data_location == onnx.TensorProto.EXTERNAL} - {""})


def read_external_data(mp: onnx.ModelProto, base_dir: str | os.PathLike | None, src: str) -> None:
    """Read every external-data tensor of `mp` into the tensor, from files inside `base_dir`.

    A location must be a relative path that stays inside `base_dir` once `..` and symbolic
    links are resolved (onnx's checker has the same rules), and name a regular file: a model
    must not read whatever file its author names. Without `base_dir` (bytes, a ModelProto)
    there is no folder to read from, and the model is refused rather than read relative to
    the current working folder.
    """
    external = [t for t in _tensors(mp) if t.data_location == onnx.TensorProto.EXTERNAL]
    if not external:
        return
    if base_dir is None:
        t = external[0]
        raise ModelLoadError(f"{src}: tensor {t.name!r} keeps its data in the external file "
                             f"{_entry(t, 'location')!r}, and bytes or a ModelProto have no folder to "
                             "read it from; pass base_dir= (the folder the model was saved in)")
    base = os.path.realpath(base_dir)
    if not os.path.isdir(base):
        raise ModelLoadError(f"{src}: base_dir {os.fspath(base_dir)} is not a folder")
    for t in external:
        _read_tensor_data(t, base, src)


def _entry(t: onnx.TensorProto, key: str) -> str | None:
    return next((e.value for e in t.external_data if e.key == key), None)


def _read_tensor_data(t: onnx.TensorProto, base: str, src: str) -> None:
    loc = _entry(t, "location")
    where = f"{src}: tensor {t.name!r}: external data location {loc!r}"
    if not loc:
        raise ModelLoadError(f"{src}: tensor {t.name!r} is marked external but names no location")
    if "\0" in loc or os.path.isabs(loc) or loc.startswith(("/", "\\")):
        raise ModelLoadError(f"{where} is not a relative path; external data must lie in {base}")
    real = os.path.realpath(os.path.join(base, loc))
    if os.path.commonpath([real, base]) != base:
        raise ModelLoadError(f"{where} points outside the model's folder {base}")
    try:
        offset, length = (int(v) if v is not None else None for v in (_entry(t, "offset"), _entry(t, "length")))
    except ValueError:
        raise ModelLoadError(f"{where}: offset and length must be integers") from None
    try:
        # O_NONBLOCK: opening a FIFO would otherwise wait for a writer (no effect on files).
        fd = os.open(real, os.O_RDONLY | getattr(os, "O_NONBLOCK", 0))
        with os.fdopen(fd, "rb") as f:
            st = os.fstat(fd)
            if not stat.S_ISREG(st.st_mode):
                raise ModelLoadError(f"{where} is not a regular file")
            start = offset or 0
            size = st.st_size - start if length is None else length
            if start < 0 or size < 0 or start + size > st.st_size:
                raise ModelLoadError(f"{where}: offset {offset} and length {length} do not fit in the "
                                     f"file's {st.st_size} bytes")
            f.seek(start)
            data = f.read(size)
    except OSError as err:
        raise ModelLoadError(f"{where} cannot be read: {err.strerror or err}") from err
    t.raw_data = data
    t.data_location = onnx.TensorProto.DEFAULT
    del t.external_data[:]


def infer_model(mp: onnx.ModelProto) -> onnx.ModelProto:
    """ONNX type and shape inference where the model allows it (data propagation on).

    Inference serialises the whole model and parses it again in C++, weights included
    (benchmarks/bench_load.py times it), for nothing: only tensors that can feed a shape
    computation are read (onnx_proto.keeps_shape_data). The other root-graph initializers' raw data is set
    aside during inference and put into the model returned; `mp` itself is left without it
    (load_onnx's own copy, not used afterwards).
    """
    aside: dict[str, bytes] = {}
    for t in mp.graph.initializer:
        if t.data_type == onnx.TensorProto.STRING or not t.HasField("raw_data"):
            continue
        size = 1
        for d in t.dims:
            size *= d
        try:
            dtype = helper.tensor_dtype_to_np_dtype(t.data_type)
        except (KeyError, ValueError, TypeError):  # an undefined type: leave it to the loader
            continue
        if not keeps_shape_data(dtype, size):
            aside[t.name] = t.raw_data            # one copy out, one back in
            t.ClearField("raw_data")
    out = mp
    try:
        out = onnx.shape_inference.infer_shapes(mp, check_type=False, strict_mode=False,
                                                data_prop=True)
    except Exception as err:  # noqa: BLE001 - inference is best effort
        log.info("shape inference failed, continuing without it: %s", err)
    finally:
        for t in out.graph.initializer:
            if t.name in aside:
                t.raw_data = aside[t.name]
    return out


def load_onnx(model: str | os.PathLike | onnx.ModelProto | bytes, infer: bool = True,
              base_dir: str | os.PathLike | None = None) -> Graph:
    """Load an ONNX model (path, bytes or ModelProto) into a pyge Graph.

    Tensors kept in external files are read from `base_dir`: by default the model file's
    folder for a path; for bytes or a ModelProto there is no default, and a model with
    external data is refused without one. A ModelProto given is not changed.
    """
    if isinstance(model, onnx.ModelProto):
        mp = onnx.ModelProto()
        mp.CopyFrom(model)
        src = f"<ModelProto {mp.graph.name!r}>"
    elif isinstance(model, (bytes, bytearray)):
        mp = onnx.ModelProto()
        try:
            mp.ParseFromString(bytes(model))
        except (DecodeError, ValueError, RuntimeError) as err:
            raise ModelLoadError(f"bytes are not a valid ONNX model: {err}") from err
        src = "<bytes>"
    elif isinstance(model, (str, os.PathLike)):
        mp = _read_model(model, base_dir)
        src = str(model)
    else:
        raise ModelLoadError(f"load_onnx expects a path, bytes or onnx.ModelProto, got {type(model).__name__}")
    check_strings(mp, src)
    if not isinstance(model, (str, os.PathLike)):
        read_external_data(mp, base_dir, src)
    opset = next((o.version for o in mp.opset_import if o.domain in ("", "ai.onnx")), None)
    if opset is not None and not (MIN_OPSET <= opset <= MAX_OPSET):
        log.warning("%s uses opset %d; pyge is tested on opsets %d..%d", src, opset, MIN_OPSET, MAX_OPSET)
    if infer:
        mp = infer_model(mp)
    try:
        g = model_from_proto(mp)
    except ModelGraphCycleError as err:         # keeps its class: a GraphCycleError too
        raise ModelGraphCycleError(f"{src}: {err}", err.nodes) from err
    except ModelLoadError as err:
        raise ModelLoadError(f"{src}: {err}") from err
    g.metadata.setdefault("source", src)
    return g
