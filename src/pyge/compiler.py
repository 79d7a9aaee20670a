"""pyge.compile: graph -> CompiledModel, through the two pass lists below.

GRAPH_PASSES run once per compilation, on the compiler's copy of the graph: copy it,
check operators, infer types (the collectives' too), fold constants, the fusions,
assign engines. MODEL_PASSES
run once per compiled (sub-)model: stream allocation (GE's chain on engine clusters), the
stream policy, the stream passes (GE's DAG pass of the automatic mode, then the user's;
control-flow bodies then follow their node), renumbering, then the plan, one order of its
collectives, its events, event ids, memory plan and verification.
The last graph pass is the dynamic-shape partition (passes/partition/): a fully static graph
compiles to one static model as before; otherwise the model passes run once per part, the
dynamic root first (on one stream unless ENABLE_DYNAMIC_SHAPE_MULTI_STREAM=1, GE's switch),
then each static sub-model (`_compile_parts`; docs/dynamic_shapes.md).

These lists are the one statement of the pass order: documentation names passes, not
positions. Each pass's `requires` / `ensures` are Conditions (passes/conditions.py) that
run_pipeline checks (passes/pipeline.py).

The custom_<stage> passes run GE's custom graph passes (`custom_pass_fn`) of each stage
(passes/custom/graph_passes.py): BEFORE_INFER_SHAPE after check_ops, AFTER_INFER_SHAPE after
type inference (infer_types and the collectives' types), AFTER_BUILTIN_FUSION_PASS after the
fusions, AFTER_ORIGIN_GRAPH_OPTIMIZE at the end of the graph passes. Each checks what every
user pass returns and re-runs, on it, the built-in steps of earlier stages whose facts a
rewrite may undo (its `redo`: the collectives' preparation, engine assignment), so that the
graph stays as the later passes require.
"""
from __future__ import annotations

import contextlib
import gc
import itertools
import logging
import os
from typing import Any, Callable, Mapping

from . import model_path
from .devices import check_device
from .dumps import Dumper
from .errors import GraphError, PygeError
from .frontends.onnx_loader import load_onnx
from .ir.clone import clone_graph
from .ir.graph import Graph
from .model import CompiledModel
from .submodels import make_parts
from .options import Options, parse_options
from .passes.conditions import (ACYCLIC, COLLECTIVES_CHAINED, DENSE_STREAMS, ENGINES_ASSIGNED,
                                EVENT_IDS_DENSE, EVENTS_PLACED, MEMORY_PLANNED, NO_EVENTS_YET,
                                OPS_CHECKED, OPS_SUPPORTED, OWNED, PLAN_BUILT,
                                STREAMS_ASSIGNED, STREAMS_IN_RANGE)
from .passes.custom import CustomPassStage, run_stream_passes
from .passes.custom.graph_passes import stage_pass
from .passes.custom.plugins import ensure_plugins_loaded
from .passes.graph import (check_ops, engines, fold_constants, fuse_affine, fuse_attention,
                           fuse_concat_relu, fuse_conv_act, fuse_conv_bn, fuse_dropout,
                           fuse_shuffle, infer_types, place_shuffle, pool_concat)
from .passes.graph import collectives as graph_collectives
from .passes.memory import planner as memory
from .passes.partition import PARTITIONED, partition_graph
from .passes.pipeline import UNCHANGED, CompileState, Pass, PassResult, changed, run_pipeline
from .passes.policies import apply_policy
from .passes.policies.defaults import with_default_policy
from .passes.streams import allocate_streams, follow_parents
from .passes.streams._graph import Topo
from .passes.streams.renumber import renumber_streams
from .passes.sync import collectives as sync_collectives
from .passes.sync import event_ids, events
from .passes.verify.checks import verify_plan
from .plan.build import build_plan

log = logging.getLogger(__name__)
_graph_ids = itertools.count(1)
# GE's switch: the dynamic part of a dynamic-shape model runs on several streams too.
MULTI_STREAM_ENV = "ENABLE_DYNAMIC_SHAPE_MULTI_STREAM"

# -- the passes as functions of the state (the algorithms live in their own files) --------

def _stream_ids(graphs: list[Graph]) -> list[int]:
    """Every node's stream id, over `graphs` (a graph's all_graphs(): the passes that compare
    ids before and after themselves add or remove no subgraph, so one list serves both)."""
    return [n.stream_id for g in graphs for n in g._nodes]


def _clone(st: CompileState) -> PassResult:
    if st.source is None:
        st.source = st.graph
    st.graph = clone_graph(st.source)   # sorted: each graph is copied in a topological order
    return PassResult(True, "copied")


def _check_ops(st: CompileState) -> PassResult:
    check_ops.check_ops(st.graph)
    # For the postcondition checked next (OPS_SUPPORTED): the same walk, on the same graph.
    st.graph._derived[OPS_CHECKED] = (st.graph._version, None)
    return UNCHANGED


def _infer(st: CompileState) -> PassResult:
    return changed(infer_types.infer_types(st.graph), "values typed")


def _collectives(st: CompileState) -> PassResult:
    timeout = st.options["pyge.collectiveTimeout"]
    return changed(graph_collectives.prepare_collectives(st.graph, st.device, timeout), "collectives")


def _when_fusing(module, fn: str, what: str) -> Callable[[CompileState], PassResult]:
    """`module.fn(graph)` if ge.exec.enableFusion, looked up at call time (so that a caller
    may swap one fusion out, as benchmarks/bench_fusion.py does)."""
    def run(st: CompileState) -> PassResult:
        if not st.options["ge.exec.enableFusion"]:
            return UNCHANGED
        return changed(getattr(module, fn)(st.graph), what)
    return run


def _engines(st: CompileState) -> PassResult:
    graphs = st.graph.all_graphs()
    before = [n.engine for g in graphs for n in g._nodes]
    engines.assign_engines(st.graph)
    return PassResult(before != [n.engine for g in graphs for n in g._nodes])


def _partition(st: CompileState) -> PassResult:
    st.partition = partition_graph(st.graph, st.device, st.options["ge.exec.static_model_ops_lower_limit"])
    if st.partition is None:
        return UNCHANGED
    log.debug("dynamic-shape partition of %r:\n%s", st.graph.name, st.partition.describe())
    return PassResult(True, f"{len(st.partition.statics)} static sub-model(s)")


def _streams(st: CompileState) -> PassResult:
    st.max_stream_id = allocate_streams(st.graph, st.options).max_drawn
    return PassResult(True, f"stream ids up to {st.max_stream_id} drawn")


def _policy(st: CompileState) -> PassResult:
    if st.options.single_stream:
        return UNCHANGED
    if st.options["pyge.streamPolicy"] == "ge" and not st.options["pyge.policyFile"]:
        return UNCHANGED
    graphs = st.graph.all_graphs()
    before = _stream_ids(graphs)
    apply_policy(st.graph, st.options)
    return PassResult(before != _stream_ids(graphs))


def _custom(st: CompileState) -> PassResult:
    if st.options.single_stream:
        return UNCHANGED  # GE: with ge.enableSingleStream=true no custom stream pass runs
    on_stage = st.dumper.stage if st.dumper is not None else None
    graphs = st.graph.all_graphs()
    before = _stream_ids(graphs)
    # a policy may have used ids beyond those the built-in chain drew
    drawn = max([st.max_stream_id] + [n.stream_id for n in st.graph.nodes])
    result = run_stream_passes(st.graph, st.options, drawn, on_stage)
    st.max_stream_id = result.max_stream_id
    st.custom_ids = set(result.custom_ids)
    follow_parents(st.graph)
    return PassResult(before != _stream_ids(graphs), f"{len(st.custom_ids)} ids allocated")


def _renumber(st: CompileState) -> PassResult:
    Topo.forget(st.graph)          # the stream passes are done with it: not kept on the model
    graphs = st.graph.all_graphs()
    before = _stream_ids(graphs)
    st.num_streams, st.custom_streams = renumber_streams(st.graph, st.custom_ids)
    return PassResult(before != _stream_ids(graphs), f"{st.num_streams} streams")


def _build(st: CompileState) -> PassResult:
    st.plan = build_plan(st.graph, st.num_streams, st.custom_streams, st.options.as_dict())
    return PassResult(True, f"{len(st.plan.nodes)} nodes")


def _order_collectives(st: CompileState) -> PassResult:
    return changed(sync_collectives.order_collectives(st.plan, st.graph), "control edges")


def _events(st: CompileState) -> PassResult:
    return changed(events.insert_events(st.plan), "events")


def _event_ids(st: CompileState) -> PassResult:
    before = [e.event_id for e in st.plan.events]
    used = event_ids.assign_event_ids(st.plan, st.options["pyge.maxEventNum"])
    return PassResult(before != [e.event_id for e in st.plan.events], f"{used} physical ids")


def _memory(st: CompileState) -> PassResult:
    return PassResult(True, str(memory.plan_memory(st.plan, st.options)))


def _verify(st: CompileState) -> PassResult:
    if st.options["pyge.verify"]:
        verify_plan(st.plan)
    return UNCHANGED


# -- the order ----------------------------------------------------------------------------

GRAPH_PASSES = [
    Pass("clone", _clone, ensures=(OWNED, ACYCLIC)),
    Pass("check_ops", _check_ops, requires=(OWNED,), ensures=(OPS_SUPPORTED,)),
    stage_pass(CustomPassStage.BEFORE_INFER_SHAPE),
    Pass("infer_types", _infer, requires=(OWNED,), dump_stage="InferShapes"),
    Pass("collectives", _collectives, requires=(OWNED,)),
    stage_pass(CustomPassStage.AFTER_INFER_SHAPE, redo=(_collectives,)),
    Pass("fold_constants", _when_fusing(fold_constants, "fold_constants", "folded"),
         requires=(OWNED, OPS_SUPPORTED), dump_stage="FoldConstants"),
    Pass("fuse_dropout", _when_fusing(fuse_dropout, "fuse_dropout", "removed"),
         requires=(OWNED, ACYCLIC)),
    Pass("fuse_conv_bn", _when_fusing(fuse_conv_bn, "fuse_conv_bn", "convs folded"),
         requires=(OWNED, ACYCLIC)),
    Pass("fuse_conv_act", _when_fusing(fuse_conv_act, "fuse_conv_act", "fused"),
         requires=(OWNED, ACYCLIC)),
    Pass("fuse_affine", _when_fusing(fuse_affine, "fuse_affine", "fused"),
         requires=(OWNED, ACYCLIC)),
    Pass("fuse_shuffle", _when_fusing(fuse_shuffle, "fuse_channel_shuffle", "fused"),
         requires=(OWNED, ACYCLIC)),
    Pass("place_shuffle", _when_fusing(place_shuffle, "place_channel_shuffle", "placed"),
         requires=(OWNED, ACYCLIC)),
    Pass("fuse_concat_relu", _when_fusing(fuse_concat_relu, "fuse_concat_relu", "fused"),
         requires=(OWNED, ACYCLIC)),
    Pass("pool_concat", _when_fusing(pool_concat, "pool_before_concat", "moved"),
         requires=(OWNED, ACYCLIC)),
    # The dump stage keeps its name from when one pass ran every fusion: the graph after all.
    Pass("fuse_attention", _when_fusing(fuse_attention, "fuse_attention", "fused"),
         requires=(OWNED, ACYCLIC), dump_stage="FuseConvBN"),
    stage_pass(CustomPassStage.AFTER_BUILTIN_FUSION_PASS, redo=(_collectives,)),
    Pass("assign_engines", _engines, requires=(OWNED,), ensures=(ENGINES_ASSIGNED,)),
    stage_pass(CustomPassStage.AFTER_ORIGIN_GRAPH_OPTIMIZE, redo=(_collectives, _engines)),
    Pass("partition", _partition, requires=(ENGINES_ASSIGNED, ACYCLIC), ensures=(PARTITIONED,)),
]

STREAM_PASSES = [
    Pass("allocate_streams", _streams, requires=(ENGINES_ASSIGNED,), ensures=(STREAMS_ASSIGNED,),
         dump_stage="AssignLogicStream"),
    Pass("stream_policy", _policy, requires=(STREAMS_ASSIGNED,), dump_stage="StreamPolicy"),
    Pass("custom_passes", _custom, requires=(STREAMS_ASSIGNED,)),
    Pass("renumber_streams", _renumber, requires=(STREAMS_ASSIGNED,),
         ensures=(DENSE_STREAMS, STREAMS_IN_RANGE), dump_stage="RenumberStreams"),
]

PLAN_PASSES = [
    Pass("build_plan", _build, requires=(STREAMS_IN_RANGE, ACYCLIC), ensures=(PLAN_BUILT,)),
    Pass("order_collectives", _order_collectives, requires=(PLAN_BUILT, NO_EVENTS_YET),
         ensures=(COLLECTIVES_CHAINED,)),
    Pass("insert_events", _events, requires=(PLAN_BUILT, NO_EVENTS_YET), ensures=(EVENTS_PLACED,)),
    Pass("assign_event_ids", _event_ids, requires=(EVENTS_PLACED,), ensures=(EVENT_IDS_DENSE,)),
    Pass("plan_memory", _memory, requires=(EVENT_IDS_DENSE,), ensures=(MEMORY_PLANNED,)),
    Pass("verify", _verify, requires=(MEMORY_PLANNED,)),
]

MODEL_PASSES = STREAM_PASSES + PLAN_PASSES

# Every pass in order (for tools that report per-pass timings; the lists above are the source).
PIPELINE = [p for p in GRAPH_PASSES + MODEL_PASSES if isinstance(p, Pass)]


def run_graph_passes(st: CompileState) -> None:
    """GRAPH_PASSES on `st`, the custom graph passes at their stages included."""
    run_pipeline(GRAPH_PASSES, st)


def run_model_passes(st: CompileState) -> None:
    """MODEL_PASSES on one (sub-)model's state: streams, then the plan."""
    run_pipeline(MODEL_PASSES, st)


def compile_graph(graph: Graph | str | os.PathLike, device: str | None = None,
                  options: Mapping[str, Any] | Options | None = None,
                  graph_id: int | None = None) -> CompiledModel:
    """Compile `graph` for `device` ("cpu", the default, or "cuda"). Returns a CompiledModel.

    `graph` may be a path: a .onnx file is loaded and compiled, a .pgm loaded as the offline
    model it is (on the device it was compiled for unless `device` is given; model_path.py).
    A cuda device without a usable GPU fails here, not at the first run.
    """
    if isinstance(graph, (str, os.PathLike)):
        path = model_path.checked_path(graph)
        if model_path.is_offline(path):
            return model_path.load_offline(path, device, options)
        graph = load_onnx(path)
    if not isinstance(graph, Graph):
        raise GraphError(f"pyge.compile expects a pyge.Graph or a model path, got {type(graph).__name__} "
                         "(or use pyge.load_onnx or pyge.from_torch first)")
    opts = parse_options(options)             # validate what the user gave, as given
    dev = check_device("cpu" if device is None else device)
    from .executors import check_usable           # deferred on purpose: executors load torch
    check_usable(dev)
    opts = parse_options(with_default_policy(opts, dev))  # the device's default stream policy
    ensure_plugins_loaded()
    gid = graph_id if graph_id is not None else next(_graph_ids)
    st = CompileState(graph=graph, options=opts, device=dev, graph_id=gid,
                      dumper=Dumper.from_env(gid), source=graph)
    with _collector_paused():
        run_graph_passes(st)
        if st.partition is not None:
            return _compile_parts(st)
        run_model_passes(st)
    if st.dumper is not None:
        st.dumper.built(st.graph, st.plan)
    # st.options: a graph attribute set by a custom graph pass may have overridden an option
    return CompiledModel(st.graph, st.plan, dev, st.options, timings=st.timings)


@contextlib.contextmanager
def _collector_paused():
    """The cyclic GC off while the passes run, and the objects they made kept out of its
    young generations afterwards.

    With the collector on, it would rescan the whole (growing) heap again and again while
    the passes allocate millions of small objects on large graphs; they make no garbage
    cycles worth collecting mid-compile. Turned back on, its first young collection would
    still walk every object the compile made (a plan of 100,000 nodes is ~2 million), only
    to promote them: so they are moved to the oldest generation unscanned (gc.freeze, then
    gc.unfreeze), where the next full collection sees them as it sees any long-lived object.
    The caller's own young objects are collected first, at the start, so that none of
    their garbage cycles is promoted with them; a process that froze objects itself (its
    gc.freeze before a fork) keeps them frozen: then the compile's objects stay young."""
    was_enabled = gc.isenabled()
    promote = was_enabled and gc.get_freeze_count() == 0
    if promote:
        gc.collect(1)
    gc.disable()
    try:
        yield
    finally:
        if promote:
            gc.freeze()
            gc.unfreeze()
        if was_enabled:
            gc.enable()


def _root_options(opts: Options, env: Mapping[str, str] = os.environ) -> Options:
    """The dynamic root's options: one stream, unless GE's switch asks for more streams."""
    if env.get(MULTI_STREAM_ENV, "").strip() == "1":
        return opts
    return opts.merged({"ge.enableSingleStream": "true", "ge.autoMultistreamParallelMode": "None"})


def _compile_parts(st: CompileState) -> CompiledModel:
    """MODEL_PASSES once per part of a dynamic-shape model, root first (so its dumps come
    first), then each static sub-model in execution order with the compile's own options:
    its own streams, stream passes, events, memory plan and verification."""
    part = st.partition
    graphs = [(part.root, _root_options(st.options))] + [(p.graph, st.options) for p in part.statics]
    states = [CompileState(graph=g, options=o, device=st.device, graph_id=st.graph_id,
                           dumper=st.dumper.for_part(g.name) if st.dumper is not None else None)
              for g, o in graphs]
    for s in states:
        run_model_passes(s)
    if st.dumper is not None:
        for s in states:
            s.dumper.built(s.graph, s.plan)
    root = states[0]
    parts = make_parts(root.graph, root.plan, [(s.graph.name, s.graph, s.plan) for s in states[1:]])
    timings = st.timings + [t for s in states for t in s.timings]
    return CompiledModel(root.graph, root.plan, st.device, st.options, timings=timings, submodels=parts)


__all__ = ["compile_graph", "GRAPH_PASSES", "MODEL_PASSES", "PIPELINE", "run_graph_passes",
           "run_model_passes", "PygeError"]
