"""pyge.load_onnx: ONNX file or ModelProto -> pyge.Graph."""
from __future__ import annotations

import logging
import os
from pathlib import Path

import onnx
from google.protobuf.message import DecodeError

from ..errors import ModelLoadError
from ..ir.graph import Graph
from .onnx_proto import _read_type, model_from_proto

log = logging.getLogger(__name__)

# The opsets of the onnx node test cases pyge runs (onnx 1.23: up to 28; below 7, a few).
MIN_OPSET, MAX_OPSET = 7, 28


def _read_model(path: str | os.PathLike) -> onnx.ModelProto:
    p = Path(path)
    if not p.exists():
        raise ModelLoadError(f"model file not found: {p}")
    if p.is_dir():
        raise ModelLoadError(f"model path is a folder, not a file: {p}")
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
    try:
        onnx.load_external_data_for_model(mp, str(p.parent))
    except Exception as err:  # noqa: BLE001 - onnx raises OSError, ValueError or its own ValidationError
        first = str(err).strip().splitlines()[0] if str(err).strip() else type(err).__name__
        raise ModelLoadError(f"{p}: cannot load external data: {first}") from err
    return mp


def infer_model(mp: onnx.ModelProto) -> onnx.ModelProto:
    """ONNX type and shape inference where the model allows it (data propagation on).

    Inference serialises the whole model and parses it again in C++, weights included
    (benchmarks/bench_load.py times it), for nothing: only tensors that can feed a shape
    computation are read (onnx_proto.keeps_shape_data). The other root-graph initializers' raw data is set
    aside during inference and put into the model returned; `mp` itself is left without it
    (load_onnx's own copy, not used afterwards).
    """
    from .onnx_proto import keeps_shape_data
    from onnx import helper
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
            aside[t.name] = t.raw_data            # one copy out, one back in: ~0.1 s per GB
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


def load_onnx(model: str | os.PathLike | onnx.ModelProto | bytes, infer: bool = True) -> Graph:
    """Load an ONNX model (path, bytes or ModelProto) into a pyge Graph."""
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
        mp = _read_model(model)
        src = str(model)
    else:
        raise ModelLoadError(f"load_onnx expects a path, bytes or onnx.ModelProto, got {type(model).__name__}")
    opset = next((o.version for o in mp.opset_import if o.domain in ("", "ai.onnx")), None)
    if opset is not None and not (MIN_OPSET <= opset <= MAX_OPSET):
        log.warning("%s uses opset %d; pyge is tested on opsets %d..%d", src, opset, MIN_OPSET, MAX_OPSET)
    if infer:
        mp = infer_model(mp)
    try:
        g = model_from_proto(mp)
    except ModelLoadError as err:
        raise ModelLoadError(f"{src}: {err}") from err
    g.metadata.setdefault("source", src)
    return g


def refine_types(g: Graph) -> None:
    """Re-run ONNX inference on an IR graph and copy newly known dtypes/shapes back."""
    from .onnx_proto import graph_to_model
    # Only root-graph node outputs lacking a dtype or a shape are ever written back: when
    # none lacks one, inference (a whole-graph ONNX round trip) could change nothing.
    if all(o.dtype is not None and o.shape is not None for n in g._nodes for o in n._outputs):
        return
    try:
        mp = graph_to_model(g, weights="shapes")      # large weights' data is not needed
        inferred = onnx.shape_inference.infer_shapes(mp, check_type=False, strict_mode=False,
                                                     data_prop=True)
    except Exception as err:  # noqa: BLE001 - best effort
        log.info("shape inference on graph %r failed: %s", g.name, err)
        return
    infos = {vi.name: vi for vi in list(inferred.graph.value_info) + list(inferred.graph.output)}
    for n in g.nodes:
        for o in n.outputs:
            vi = infos.get(o.name)
            if vi is not None and (o.dtype is None or o.shape is None):
                _read_type(o, vi.type)
