"""pyge.compile: graph -> CompiledModel, through a numbered sequence of named passes.

     1 clone             work on a copy: a failed compile leaves the user's graph untouched
     2 check_ops         every op has a kernel (UnsupportedOperatorError lists them all)
     3 infer_types       ONNX type/shape inference on the copy
    3a collectives       (com.microsoft AllReduce/AllGather/AllToAll) the process group,
                         checks against it, their output types, pyge.collectiveTimeout
     4 fold_constants    (ge.exec.enableFusion) constant subgraphs become initializers
     5 fuse_conv_bn      (ge.exec.enableFusion) per-channel affine chains (BatchNormalization,
                         Mul/Add/Sub/Div by constants) folded into their Conv, then
                         Conv(+Add)(+Relu) fused into one oneDNN call (FusedConv), other
                         affine chains (+Relu) into one addcmul (pyge.MulAdd), and
                         Reshape->Transpose->Reshape channel shuffles into pyge.ChannelShuffle
     6 assign_engines    every node gets an engine (compute, skip, independent, attach)
     7 allocate_streams  GE's built-in chain on engine clusters, or single stream
     8 stream_policy     (pyge.streamPolicy / pyge.policyFile) a built-in policy pass
     9 custom_passes     the stream passes, once per model: GE's DAG pass (automatic mode),
                         then the user's; afterwards control-flow bodies follow their node
    10 renumber_streams  used ids -> 0..N-1
    11 build_plan        per-stream launch lists
   11a order_collectives one issue order of the collectives on every rank (control edges)
    12 insert_events     minimal Send/Recv pairs
    13 assign_event_ids  reuse physical event ids
    14 plan_memory       stream-aware buffer reuse and release points
    15 verify            happens-before, deadlock freedom, reuse safety (pyge.verify)
"""
from __future__ import annotations

import gc
import itertools
import logging
import os
from typing import Any, Mapping

from .errors import GraphError, PygeError, UnsupportedOperatorError
from .ir.clone import clone_graph
from .ir.graph import Graph
from .options import Options, parse_options
from .passes.pipeline import CompileState, Pass, run_pipeline

log = logging.getLogger(__name__)
_graph_ids = itertools.count(1)


def _clone(st: CompileState) -> None:
    st.graph = clone_graph(st.graph)
    for g in st.graph.all_graphs():
        g.sort()


def _check_ops(st: CompileState) -> None:
    from .kernels.registry import is_supported, opset_of
    missing: dict[str, str] = {}
    for g in st.graph.all_graphs():
        for n in g.nodes:
            if not is_supported(n.op_type, n.domain, opset_of(n)):
                key = f"{n.domain + '.' if n.domain else ''}{n.op_type}"
                missing.setdefault(key, n.name)
    if missing:
        raise UnsupportedOperatorError(missing)


def _infer(st: CompileState) -> None:
    from .frontends.onnx_loader import refine_types
    refine_types(st.graph)


def _collectives(st: CompileState) -> None:
    from .passes.graph.collectives import prepare_collectives
    prepare_collectives(st.graph, st.device, st.options["pyge.collectiveTimeout"])


def _fold(st: CompileState) -> None:
    if st.options["ge.exec.enableFusion"]:
        from .passes.graph.fold_constants import fold_constants
        fold_constants(st.graph)


def _fuse(st: CompileState) -> None:
    if st.options["ge.exec.enableFusion"]:
        from .passes.graph.fuse_affine import fuse_affine
        from .passes.graph.fuse_conv_act import fuse_conv_act
        from .passes.graph.fuse_conv_bn import fuse_conv_bn
        from .passes.graph.fuse_shuffle import fuse_channel_shuffle
        fuse_conv_bn(st.graph)
        fuse_conv_act(st.graph)
        fuse_affine(st.graph)
        fuse_channel_shuffle(st.graph)


def _engines(st: CompileState) -> None:
    from .passes.graph.engines import assign_engines
    assign_engines(st.graph)


def _streams(st: CompileState) -> None:
    from .passes.streams import allocate_streams
    st.max_stream_id = allocate_streams(st.graph, st.options).max_drawn


def _policy(st: CompileState) -> None:
    if st.options.single_stream:
        return
    if st.options["pyge.streamPolicy"] != "ge" or st.options["pyge.policyFile"]:
        from .passes.policies import apply_policy
        apply_policy(st.graph, st.options)


def _custom(st: CompileState) -> None:
    if st.options.single_stream:
        return  # GE: with ge.enableSingleStream=true no custom stream pass runs
    from .passes.custom import run_stream_passes
    from .passes.streams import follow_parents
    on_stage = st.dumper.stage if st.dumper is not None else None
    # a policy may have used ids beyond those the built-in chain drew
    drawn = max([st.max_stream_id] + [n.stream_id for n in st.graph.nodes])
    result = run_stream_passes(st.graph, st.options, drawn, on_stage)
    st.max_stream_id = result.max_stream_id
    st.custom_ids = set(result.custom_ids)
    follow_parents(st.graph)


def _renumber(st: CompileState) -> None:
    from .passes.streams.renumber import renumber_streams
    st.num_streams, st.custom_streams = renumber_streams(st.graph, st.custom_ids)


def _build(st: CompileState) -> None:
    from .plan.build import build_plan
    st.plan = build_plan(st.graph, st.num_streams, st.custom_streams, st.options.as_dict())


def _order_collectives(st: CompileState) -> None:
    from .passes.graph.collectives import order_collectives
    order_collectives(st.plan, st.graph)


def _events(st: CompileState) -> None:
    from .passes.sync.events import insert_events
    insert_events(st.plan)


def _event_ids(st: CompileState) -> None:
    from .passes.sync.event_ids import assign_event_ids
    assign_event_ids(st.plan, st.options["pyge.maxEventNum"])


def _memory(st: CompileState) -> None:
    from .passes.memory.planner import plan_memory
    plan_memory(st.plan, st.options)


def _verify(st: CompileState) -> None:
    if st.options["pyge.verify"]:
        from .passes.verify.checks import verify_plan
        verify_plan(st.plan)


PIPELINE = [
    Pass("clone", _clone, ensures=("owned", "sorted")),
    Pass("check_ops", _check_ops, requires=("owned",), ensures=("supported",)),
    Pass("infer_types", _infer, requires=("owned",), ensures=("typed",), dump_stage="InferShapes"),
    Pass("collectives", _collectives, requires=("typed",), ensures=("collectives",)),
    Pass("fold_constants", _fold, requires=("typed",), ensures=("folded",), dump_stage="FoldConstants"),
    Pass("fuse_conv_bn", _fuse, requires=("folded",), ensures=("fused",), dump_stage="FuseConvBN"),
    Pass("assign_engines", _engines, requires=("fused",), ensures=("engines",)),
    Pass("allocate_streams", _streams, requires=("engines",), ensures=("streams",),
         dump_stage="AssignLogicStream"),
    Pass("stream_policy", _policy, requires=("streams",), ensures=("policy",), dump_stage="StreamPolicy"),
    Pass("custom_passes", _custom, requires=("policy",), ensures=("custom",)),
    Pass("renumber_streams", _renumber, requires=("custom",), ensures=("dense_streams",),
         dump_stage="RenumberStreams"),
    Pass("build_plan", _build, requires=("dense_streams",), ensures=("plan",)),
    Pass("order_collectives", _order_collectives, requires=("plan",), ensures=("collectives_ordered",)),
    Pass("insert_events", _events, requires=("plan",), ensures=("events",)),
    Pass("assign_event_ids", _event_ids, requires=("events",), ensures=("event_ids",)),
    Pass("plan_memory", _memory, requires=("event_ids",), ensures=("memory",)),
    Pass("verify", _verify, requires=("memory",), ensures=("verified",)),
]


def compile_graph(graph: Graph | str | os.PathLike, device: str | None = None,
                  options: Mapping[str, Any] | Options | None = None, graph_id: int | None = None):
    """Compile `graph` for `device` ("cpu", the default, or "cuda"). Returns a CompiledModel.

    `graph` may be a path: a .onnx file is loaded and compiled, a .pgm loaded as the offline
    model it is (on the device it was compiled for unless `device` is given; model_path.py).
    A cuda device without a usable GPU fails here, not at the first run.
    """
    from .dumps import Dumper
    from .model import CompiledModel
    if isinstance(graph, (str, os.PathLike)):
        from .model_path import compile_path
        return compile_path(graph, device, options, graph_id)
    if not isinstance(graph, Graph):
        raise GraphError(f"pyge.compile expects a pyge.Graph or a model path, got {type(graph).__name__} "
                         "(or use pyge.load_onnx or pyge.from_torch first)")
    opts = parse_options(options)             # validate what the user gave, as given
    dev = _check_device("cpu" if device is None else device)
    from .executors import check_usable
    check_usable(dev)
    from .passes.policies.defaults import with_default_policy
    opts = parse_options(with_default_policy(opts, dev))  # the device's default stream policy
    from .passes.custom.plugins import ensure_plugins_loaded
    ensure_plugins_loaded()
    gid = graph_id if graph_id is not None else next(_graph_ids)
    st = CompileState(graph=graph, options=opts, device=dev, graph_id=gid, dumper=Dumper.from_env(gid))
    # The cyclic GC would rescan the whole (growing) heap again and again while the passes
    # allocate millions of small objects: ~10 s of a 100k-node compile. The passes make no
    # garbage cycles worth collecting mid-compile; collection resumes afterwards.
    gc_was_enabled = gc.isenabled()
    gc.disable()
    try:
        run_pipeline(PIPELINE, st)
    finally:
        if gc_was_enabled:
            gc.enable()
    if st.dumper is not None:
        st.dumper.built(st.graph, st.plan)
    return CompiledModel(st.graph, st.plan, dev, opts, timings=st.timings)


def _check_device(device: Any) -> str:
    from .errors import OptionError
    d = str(device)
    if d == "cpu" or d == "cuda" or (d.startswith("cuda:") and d[5:].isdigit()):
        return d
    raise OptionError(f"unknown device {device!r}; accepted values: cpu, cuda, cuda:N")


__all__ = ["compile_graph", "PIPELINE", "PygeError"]
