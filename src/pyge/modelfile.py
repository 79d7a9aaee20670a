"""Offline models (.pgm): a compiled plan plus its graph, loadable without re-running passes.

Layout (all integers little-endian):

    magic        8 bytes   b"PYGEMDL\\0"
    version      uint32    1; 2 for a dynamic-shape model (its sub-models: modelfile_parts.py)
    header_len   uint64    then header_len bytes of UTF-8 JSON: pyge version, device, options,
                           the plan (values, nodes, streams of steps, events, memory plan,
                           custom streams) and per-graph node info (stream id, engine, control
                           edges) for the root graph and every subgraph
    graph_len    uint64    then graph_len bytes: the compiled graph as an ONNX ModelProto with
                           its weights; root nodes carry `_stream_id` for viewing in Netron
    sha256       32 bytes  over every byte before it

Loading is safe on an untrusted file: JSON and protobuf only (no pickle, no code), lengths and
checksum checked before anything is parsed, external-data tensors refused (they would make the
loader read other files), and the plan trusted no more than a stranger's: modelfile_check.py
range-checks every index, checks that the plan is its graph's (values, kinds, producers,
each node's inputs and outputs) and verifies it, so a crafted file fails with
ModelFileError naming the culprit rather than computing something else or racing.
"""
from __future__ import annotations

import hashlib
import json
import logging
import os
import struct
import tempfile
from dataclasses import MISSING, fields, is_dataclass
from pathlib import Path
from typing import Any

import numpy as np
import onnx
from google.protobuf.message import DecodeError

from ._version import __version__
from .devices import check_device
from .errors import ModelFileError, PygeError
from .frontends.onnx_proto import check_strings, graph_to_model, model_from_proto, sort_graphs
from .ir.graph import Graph
from .modelfile_parts import PARTS_VERSION, check_calls, decode_parts, encode_parts, split_body
from .options import Options, parse_options
from .modelfile_check import as_index, as_int, check_plan
from .plan.plan import Buffer, Event, MemoryPlan, Plan, PlanNode, PlanValue, Step

log = logging.getLogger(__name__)

MAGIC = b"PYGEMDL\0"
FORMAT_VERSION = PARTS_VERSION   # the newest this reader knows; static models are written as 1
_PRE = struct.Struct("<8sIQ")     # magic, version, header_len
_LEN = struct.Struct("<Q")
_SHA = 32
_STREAM_ATTR = "_stream_id"


# ---------------------------------------------------------------------------------------
# saving


def save_model(model, path: str | os.PathLike) -> Path:
    """Write `model` (a CompiledModel) to `path`; the file is replaced atomically."""
    p = Path(path)
    header = {
        "format": "pyge-model", "pyge_version": __version__, "device": model.device,
        "options": model.options.as_dict(), "plan": _encode(model.plan),
        "node_info": [_node_info(g) for g in _walk(model.graph)],
    }
    body = _graph_bytes(model.graph)
    version = 1
    if model.partitioned:         # modelfile_parts.py: the static sub-models follow the root
        header["submodels"], blobs = encode_parts(model, _encode, lambda g: [_node_info(x) for x in _walk(g)],
                                                  _graph_bytes)
        body = b"".join([body, *blobs])
        version = PARTS_VERSION
    head = json.dumps(header, sort_keys=True, separators=(",", ":")).encode("utf-8")
    data = _PRE.pack(MAGIC, version, len(head)) + head + _LEN.pack(len(body)) + body
    data += hashlib.sha256(data).digest()
    try:
        fd, tmp = tempfile.mkstemp(prefix=".pgm-", dir=str(p.parent))
    except OSError as err:
        raise ModelFileError(f"cannot write offline model {p}: {err.strerror or err}") from err
    try:
        os.chmod(tmp, 0o666 & ~_umask())   # mkstemp's 0o600 would hide the model from other users
        with os.fdopen(fd, "wb") as f:
            f.write(data)
        os.replace(tmp, p)
    except BaseException as err:
        Path(tmp).unlink(missing_ok=True)
        if isinstance(err, OSError):
            raise ModelFileError(f"cannot write offline model {p}: {err.strerror or err}") from err
        raise
    return p


def _umask() -> int:
    """The process's umask, read without changing it where Linux shows it (os.umask can only
    set it, and setting it briefly would race with other threads creating files)."""
    try:
        with open("/proc/self/status") as f:
            for line in f:
                if line.startswith("Umask:"):
                    return int(line.split()[1], 8)
    except (OSError, ValueError, IndexError):
        pass
    mask = os.umask(0o022)
    os.umask(mask)
    return mask


def _graph_bytes(graph: Graph) -> bytes:
    root = {id(n) for n in graph.nodes}
    hook = (lambda n: {_STREAM_ATTR: int(n.stream_id)} if id(n) in root else {})
    try:
        return graph_to_model(graph, weights=True, node_hook=hook).SerializeToString()
    except ValueError as err:  # protobuf refuses messages over 2 GiB
        raise ModelFileError(f"graph {graph.name!r} cannot be written: {err}") from err


def _walk(graph) -> list:
    """Graph then subgraphs, depth first, attributes in sorted order (stable across a save/load)."""
    out = [graph]
    for n in graph.nodes:
        for k in sorted(n.attrs):
            a = n.attrs[k]
            for sg in (a if isinstance(a, list) else [a]):
                if isinstance(sg, Graph):
                    out.extend(_walk(sg))
    return out


def _node_info(g) -> list:
    index = {id(n): i for i, n in enumerate(g.nodes)}
    return [[n.stream_id, n.engine, [index[id(p)] for p in n._control_preds if id(p) in index]]
            for n in g.nodes]


def _encode(obj: Any) -> Any:
    if isinstance(obj, Step):
        return [obj.kind, obj.arg]
    if is_dataclass(obj):
        return {f.name: _encode(getattr(obj, f.name)) for f in fields(obj)}
    if isinstance(obj, (list, tuple)):
        return [_encode(x) for x in obj]
    if isinstance(obj, dict):
        return {str(k): _encode(v) for k, v in obj.items() if _jsonable(k, v)}
    if isinstance(obj, np.generic):
        return obj.item()
    return obj


def _jsonable(key: Any, v: Any) -> bool:
    try:
        json.dumps(_encode(v))
        return True
    except (TypeError, ValueError):
        log.info("plan entry %r of type %s is not saved", key, type(v).__name__)
        return False


# ---------------------------------------------------------------------------------------
# loading


def read_model(path: str | os.PathLike, device: str | None = None) -> tuple[Graph, Plan, str, Options, list | None]:
    """Read a .pgm file: its (graph, plan, device, options, static sub-models), checked and
    verified, without running any compiler pass (pyge.load_model makes the CompiledModel).
    The sub-models are (name, graph, plan) each for a dynamic-shape model, else None."""
    p = Path(path)
    header, body = _split(p, _read(p))
    try:
        root_body, pieces = split_body(header, body)
        plan = _decode_plan(header["plan"])
        graph = _decode_graph(root_body, header["node_info"])
        check_plan(plan, graph)
        statics = decode_parts(pieces, _decode_plan, _decode_graph, check_plan) if pieces else None
        if statics is not None:
            check_calls(graph, plan, statics)
        options = parse_options(header.get("options", {}))
        dev = check_device(device or header.get("device", "cpu"))
    except PygeError as err:
        raise ModelFileError(f"{p}: {err}") from err
    except (IndexError, KeyError, TypeError, ValueError, AttributeError, RecursionError) as err:
        raise ModelFileError(f"{p}: inconsistent model file ({type(err).__name__}: {err})") from err
    return graph, plan, dev, options, statics


def _read(p: Path) -> bytes:
    if not p.exists():
        raise ModelFileError(f"model file not found: {p}")
    if p.is_dir():
        raise ModelFileError(f"model path is a folder, not a file: {p}")
    try:
        return p.read_bytes()
    except OSError as err:
        raise ModelFileError(f"cannot read model file {p}: {err.strerror}") from err


def is_model_file(path: str | os.PathLike) -> bool:
    """True when the file starts with the .pgm magic bytes."""
    try:
        with open(path, "rb") as f:
            return f.read(len(MAGIC)) == MAGIC
    except OSError:
        return False


def _split(p: Path, data: bytes) -> tuple[dict, bytes]:
    """Check magic, checksum, version and lengths, in that order; return (header dict, graph
    bytes). The checksum comes before the version and the lengths: a flipped bit anywhere
    (the version field included) is corruption, not a newer format or a truncation."""
    if len(data) < len(MAGIC) or data[:len(MAGIC)] != MAGIC:
        raise ModelFileError(f"{p} is not a pyge offline model (bad magic bytes)")
    if len(data) < _PRE.size + _LEN.size + _SHA:
        raise ModelFileError(f"{p} is truncated ({len(data)} bytes, shorter than any offline model)")
    if hashlib.sha256(data[:-_SHA]).digest() != data[-_SHA:]:
        raise ModelFileError(f"{p} is {_corruption(data)}")
    _, version, head_len = _PRE.unpack_from(data)
    if version > FORMAT_VERSION:
        raise ModelFileError(f"{p} has format version {version}, newer than this pyge supports "
                             f"(versions up to {FORMAT_VERSION}); upgrade pyge or recompile the model")
    if version < 1:
        raise ModelFileError(f"{p} has unsupported format version {version} (supported: 1..{FORMAT_VERSION})")
    at = _PRE.size + head_len
    body_len = _LEN.unpack_from(data, at)[0] if at + _LEN.size <= len(data) else -1
    if body_len < 0 or at + _LEN.size + body_len + _SHA != len(data):
        raise ModelFileError(f"{p}: its section lengths do not add up to its {len(data)} bytes")
    try:
        header = json.loads(data[_PRE.size:at].decode("utf-8"))
    except (UnicodeDecodeError, ValueError, RecursionError) as err:
        raise ModelFileError(f"{p}: header is not valid JSON ({err})") from err
    if not isinstance(header, dict) or header.get("format") != "pyge-model":
        raise ModelFileError(f"{p}: header is not a pyge model header")
    return header, data[at + _LEN.size:-_SHA]


def _corruption(data: bytes) -> str:
    """What a checksum mismatch most likely is, for the message: bytes appended to an intact
    model, a cut file (the sections claim more bytes than there are), or corruption."""
    _, _, head_len = _PRE.unpack_from(data)
    at = _PRE.size + head_len
    if at + _LEN.size <= len(data):
        end = at + _LEN.size + _LEN.unpack_from(data, at)[0]
        if end + _SHA < len(data) and hashlib.sha256(data[:end]).digest() == data[end:end + _SHA]:
            return f"followed by unexpected bytes ({len(data) - end - _SHA} after its checksum)"
        if end + _SHA > len(data):
            return (f"corrupt or truncated (SHA-256 checksum mismatch; its sections claim "
                    f"{end + _SHA} bytes, the file has {len(data)})")
    return "corrupt (SHA-256 checksum mismatch)"


def _decode(cls, d: Any):
    if not isinstance(d, dict):
        raise ModelFileError(f"{cls.__name__} record is not an object")
    kw = {}
    for f in fields(cls):
        if f.name in d:
            v = d[f.name]
            kw[f.name] = tuple(v) if isinstance(v, list) and str(f.type).startswith("tuple") else v
        elif f.default is MISSING and f.default_factory is MISSING:
            raise ModelFileError(f"{cls.__name__} record lacks field {f.name!r}")
    return cls(**kw)


def _decode_plan(d: dict) -> Plan:
    if not isinstance(d, dict):
        raise ModelFileError("plan is not an object")
    known = {f.name for f in fields(Plan)}
    kw = {k: v for k, v in d.items() if k in known}
    kw["values"] = [_decode(PlanValue, x) for x in d.get("values", [])]
    kw["nodes"] = [_decode(PlanNode, x) for x in d.get("nodes", [])]
    kw["events"] = [_decode(Event, x) for x in d.get("events", [])]
    kw["streams"] = [[_step(s) for s in steps] for steps in d.get("streams", [])]
    mem = dict(d.get("memory", {}))
    mem["buffers"] = [_decode(Buffer, b) for b in mem.get("buffers", [])]
    kw["memory"] = _decode(MemoryPlan, mem)
    return _decode(Plan, kw)


def _step(s: Any) -> Step:
    if not (isinstance(s, list) and len(s) == 2):
        raise ModelFileError(f"malformed stream step {s!r}")
    return Step(s[0], s[1])


def _decode_graph(body: bytes, node_info: Any):
    mp = onnx.ModelProto()
    try:
        mp.ParseFromString(body)
    except (DecodeError, ValueError, RuntimeError) as err:
        raise ModelFileError(f"graph section is not a valid ONNX model ({err})") from err
    _refuse_external_data(mp.graph)
    check_strings(mp, "graph section")          # a ModelLoadError; read_model makes it a ModelFileError
    graph = model_from_proto(mp, sort=False)   # node_info lists nodes in the file's order
    graphs = _walk(graph)
    if not isinstance(node_info, list) or len(node_info) != len(graphs):
        raise ModelFileError("node info does not match the graph's subgraphs")
    for g, info in zip(graphs, node_info):
        nodes = g.nodes
        if not isinstance(info, list) or len(info) != len(nodes):
            raise ModelFileError(f"node info does not match graph {g.name!r}")
        for n, rec in zip(nodes, info):
            n.attrs.pop(_STREAM_ATTR, None)
            stream, engine, preds = rec
            n.stream_id = as_int(stream, f"stream of node {n.name!r}")
            n.engine = engine if isinstance(engine, str) else None
            n.control_preds = [nodes[as_index(i, len(nodes), f"control edge of {n.name!r}")] for i in preds]
        g.invalidate()
    sort_graphs(graph)
    return graph


def _refuse_external_data(gp: onnx.GraphProto) -> None:
    """External data would make the loader open files named by the model file: refuse it."""
    tensors = list(gp.initializer) + [s.values for s in gp.sparse_initializer]
    for node in gp.node:
        for a in node.attribute:
            tensors.extend([a.t] if a.HasField("t") else [])
            tensors.extend(a.tensors)
            for sub in ([a.g] if a.HasField("g") else []) + list(a.graphs):
                _refuse_external_data(sub)
    for t in tensors:
        if t.data_location == onnx.TensorProto.EXTERNAL or len(t.external_data):
            raise ModelFileError(f"tensor {t.name!r} refers to external data, which .pgm files may not")


__all__ = ["save_model", "read_model", "is_model_file", "MAGIC", "FORMAT_VERSION"]
