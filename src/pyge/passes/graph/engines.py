"""Engines: which kind of unit runs each op type (the assign_engines pass).

GE splits a graph by engine before it allocates streams, and the stream rules depend on
the engine's *kind* (GE's EngineConf flags):

    compute      device kernels; streams are allocated by dependency (GE: AI Core, Vector)
    skip         no device work: constants, shape queries and views; the node takes its
                 neighbours' stream afterwards (GE: skip_assign_stream, ge_local ops)
    independent  copies between host and device and collectives: their own streams, one
                 per stream label (GE: HCCL, independent = true)
    attach       host-side ops inside a device model: they ride on a predecessor's stream,
                 whatever its engine (GE: attach = true)

The table is data: ``ENGINE_OF`` maps op type -> engine name and ``ENGINE_KIND`` maps
engine name -> kind. The four built-in engines are named after their kind. Users extend
both with ``register_engine`` (``pyge.register_engine``); an op type that is in neither
table is a compute op.

Choices for the skip engine: only ops whose result is a view of, or metadata about, their
input (Identity, Reshape, Squeeze, Unsqueeze, Flatten), or a value known at compile time
(Constant, Shape, Size). Transpose is not a skip op: its consumers need it contiguous, which
is a copy. Most Constant nodes never reach the stream passes anyway: ``fold_constants``
turns them into initializers unless ``ge.exec.enableFusion=false``.
"""
from __future__ import annotations

import logging

from ...errors import GraphError, PassError
from ...ir.graph import Graph, Node

log = logging.getLogger(__name__)

COMPUTE, SKIP, INDEPENDENT, ATTACH = "compute", "skip", "independent", "attach"
KINDS = (COMPUTE, SKIP, INDEPENDENT, ATTACH)

# engine name -> kind; the built-in engines are named after their kind.
ENGINE_KIND: dict[str, str] = {k: k for k in KINDS}

_SKIP_OPS = ("Constant", "Shape", "Size", "Identity", "Reshape", "Squeeze", "Unsqueeze", "Flatten")
# Host<->device copies (ONNX Runtime's names) and collectives (GE's HCCL names and generic ones).
_INDEPENDENT_OPS = ("MemcpyFromHost", "MemcpyToHost", "MemcpyAsync",
                    "HcomAllReduce", "HcomAllGather", "HcomBroadcast", "HcomReduceScatter",
                    "HcomSend", "HcomReceive", "AllReduce", "AllGather", "ReduceScatter", "Broadcast",
                    "AllToAll")
# Ops that run on the host even inside a device model: control flow (the condition or trip
# count is read on the host), sequences, optionals and strings.
_ATTACH_OPS = ("If", "Loop", "Scan",
               "SequenceConstruct", "SequenceEmpty", "SequenceAt", "SequenceInsert", "SequenceErase",
               "SequenceLength", "SplitToSequence", "ConcatFromSequence", "SequenceMap",
               "Optional", "OptionalHasElement", "OptionalGetElement",
               "StringNormalizer", "StringConcat", "StringSplit", "RegexFullMatch")

# op type (or "domain::op_type" for ops outside the default domain) -> engine name
ENGINE_OF: dict[str, str] = {}
ENGINE_OF.update((op, SKIP) for op in _SKIP_OPS)
ENGINE_OF.update((op, INDEPENDENT) for op in _INDEPENDENT_OPS)
ENGINE_OF.update((op, ATTACH) for op in _ATTACH_OPS)
_BUILTIN_ENGINE_OF = dict(ENGINE_OF)


def register_engine(op_type: str, engine: str, kind: str | None = None) -> None:
    """Put `op_type` on `engine`. A new engine name needs its `kind` (compute, skip,
    independent or attach); `op_type` may be qualified as ``"domain::OpType"``.

        pyge.register_engine("MyAllToAll", "independent")
        pyge.register_engine("com.acme::Dvpp", "dvpp", kind="compute")
    """
    if not isinstance(op_type, str) or not op_type:
        raise PassError(f"register_engine: op type must be a non-empty string, got {op_type!r}")
    if not isinstance(engine, str) or not engine:
        raise PassError(f"register_engine: engine must be a non-empty string, got {engine!r}")
    if kind is not None and kind not in KINDS:
        raise PassError(f"register_engine: kind {kind!r} of engine {engine!r} is not one of "
                        f"{', '.join(KINDS)}")
    known = ENGINE_KIND.get(engine)
    if known is None:
        if kind is None:
            raise PassError(f"register_engine: engine {engine!r} is new, so its kind is needed "
                            f"(one of {', '.join(KINDS)}); known engines: {', '.join(sorted(ENGINE_KIND))}")
        ENGINE_KIND[engine] = kind
    elif kind is not None and kind != known:
        raise PassError(f"register_engine: engine {engine!r} is already of kind {known!r}, not {kind!r}")
    ENGINE_OF[op_type] = engine
    log.debug("op type %s now runs on engine %s (%s)", op_type, engine, ENGINE_KIND[engine])


def reset_engines() -> None:
    """Forget every user registration (for tests)."""
    ENGINE_OF.clear()
    ENGINE_OF.update(_BUILTIN_ENGINE_OF)
    for name in [e for e in ENGINE_KIND if e not in KINDS]:
        del ENGINE_KIND[name]


def engine_of(op_type: str, domain: str = "") -> str:
    if domain and domain != "ai.onnx":
        qualified = ENGINE_OF.get(f"{domain}::{op_type}")
        if qualified is not None:
            return qualified
    return ENGINE_OF.get(op_type, COMPUTE)


def kind_of(node: Node) -> str:
    """The kind of the node's engine (compute, skip, independent, attach)."""
    if node.engine is None:
        raise GraphError(f"node {node.name!r} ({node.op_type}) has no engine yet; run assign_engines first")
    return ENGINE_KIND.get(node.engine, COMPUTE)


def engine_names() -> list[str]:
    return sorted(ENGINE_KIND)


def assign_engines(graph: Graph) -> None:
    """Set `node.engine` for every node of `graph` and of all its subgraphs."""
    for g in graph.all_graphs():
        for n in g.nodes:
            n.engine = engine_of(n.op_type, n.domain)
