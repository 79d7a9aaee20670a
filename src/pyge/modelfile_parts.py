"""The parts of a dynamic-shape model in a .pgm file (modelfile.py's format version 2).

A static model is written as format version 1, as before. A partitioned model (one with a
dynamic root and static sub-models, `model.submodels`) is written as version 2: the header's
`plan` and `node_info` and the graph section's first ONNX model are the root's, as in a
version-1 file, and the header's `submodels` lists each static sub-model in execution order
with its name, its plan, its node info and the byte length of its own ONNX model, which
follows the root's in the graph section (one checksum covers them all). A version-1 reader
refuses the file by its version number rather than misreading it.

Loading checks what joins the parts: every call node of the root names a stored sub-model,
each sub-model is called exactly once, and a call node reads and makes as many values as
its sub-model's plan takes and returns; each part's plan is checked and verified as a
version-1 plan is.
"""
from __future__ import annotations

from typing import Any, Callable

from .errors import ModelFileError
from .submodels import is_call

PARTS_VERSION = 2
SUBMODEL_ATTR = "submodel"


def encode_parts(model, encode_plan: Callable, node_info: Callable, graph_bytes: Callable) -> tuple[list, list]:
    """(header entries, ONNX model bytes) of the static sub-models of `model`."""
    entries, blobs = [], []
    for part in model.submodels[1:]:
        data = graph_bytes(part.graph)
        entries.append({"name": part.name, "kind": part.kind, "plan": encode_plan(part.plan),
                        "node_info": node_info(part.graph), "graph_bytes": len(data)})
        blobs.append(data)
    return entries, blobs


def split_body(header: dict, body: bytes) -> tuple[bytes, list[tuple[dict, bytes]]]:
    """The root's ONNX bytes and (entry, bytes) per sub-model, from a file's graph section."""
    entries = header.get("submodels")
    if entries is None:
        return body, []
    if not isinstance(entries, list) or not entries:
        raise ModelFileError("the header's submodels is not a non-empty list")
    sizes = []
    for k, e in enumerate(entries):
        n = e.get("graph_bytes") if isinstance(e, dict) else None
        if isinstance(n, bool) or not isinstance(n, int) or n < 0:
            raise ModelFileError(f"sub-model #{k} of the header has no valid graph_bytes")
        sizes.append(n)
    root_len = len(body) - sum(sizes)
    if root_len <= 0:
        raise ModelFileError("the sub-models' graph sizes exceed the graph section")
    out, at = [], root_len
    for e, n in zip(entries, sizes):
        out.append((e, body[at:at + n]))
        at += n
    return body[:root_len], out


def decode_parts(pieces: list[tuple[dict, bytes]], decode_plan: Callable, decode_graph: Callable,
                 check_plan: Callable) -> list[tuple[str, Any, Any]]:
    """(name, graph, plan) per stored sub-model, each plan checked against its graph."""
    out = []
    for k, (entry, data) in enumerate(pieces):
        name = entry.get("name")
        if not isinstance(name, str) or not name or entry.get("kind") != "static":
            raise ModelFileError(f"sub-model #{k} has no name or is not a static sub-model")
        try:
            plan = decode_plan(entry["plan"])
            graph = decode_graph(data, entry["node_info"])
            check_plan(plan, graph)
        except ModelFileError as err:
            raise ModelFileError(f"static sub-model {name!r}: {err}") from err
        if plan.graph_name != name or graph.name != name:
            raise ModelFileError(f"static sub-model {name!r}: its plan or graph carries another name")
        out.append((name, graph, plan))
    return out


def check_calls(root_graph, root_plan, statics: list[tuple[str, Any, Any]]) -> None:
    """Every call node of the root runs one stored sub-model, each sub-model is called once,
    and the call's inputs and outputs match the sub-model's."""
    plans = {name: plan for name, _, plan in statics}
    if len(plans) != len(statics):
        raise ModelFileError("two stored sub-models have one name")
    called: set[str] = set()
    by_name = {pn.name: pn for pn in root_plan.nodes}
    for n in root_graph.nodes:
        if not is_call(n):
            continue
        target = n.attrs.get(SUBMODEL_ATTR)
        if target not in plans:
            raise ModelFileError(f"call node {n.name!r} names sub-model {target!r}, which the file does not hold")
        if target in called:
            raise ModelFileError(f"sub-model {target!r} is called twice")
        called.add(target)
        pn, sub = by_name[n.name], plans[target]
        if len(pn.inputs) != len(sub.inputs) or len(pn.outputs) != len(sub.outputs):
            raise ModelFileError(f"call node {n.name!r} has {len(pn.inputs)} inputs and {len(pn.outputs)} "
                                 f"outputs, sub-model {target!r} takes {len(sub.inputs)} and makes "
                                 f"{len(sub.outputs)}")
    missing = sorted(set(plans) - called)
    if missing:
        raise ModelFileError(f"sub-model {missing[0]!r} is stored but no call node runs it")


__all__ = ["PARTS_VERSION", "encode_parts", "split_body", "decode_parts", "check_calls"]
