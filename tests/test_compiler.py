"""pyge/compiler.py: the pass lists (the one statement of the order), their contracts, and the
stage passes where GE's custom graph passes run."""
from __future__ import annotations

import numpy as np
import pytest

import pyge
from pyge import compiler
from pyge.compiler import GRAPH_PASSES, MODEL_PASSES, PIPELINE, PLAN_PASSES, run_graph_passes
from pyge.errors import InvariantError, PostconditionError, PreconditionError
from pyge.examples import reference_graph
from pyge.options import parse_options
from pyge.passes import conditions as C
from pyge.passes.pipeline import CompileState, Pass, run_pipeline

GRAPH_ORDER = ["clone", "check_ops", "custom_before_infer_shape", "infer_types", "collectives",
               "custom_after_infer_shape",
               "fold_constants", "fuse_dropout", "fuse_conv_bn", "fuse_conv_act", "fuse_affine",
               "fuse_shuffle", "place_shuffle", "fuse_concat_relu", "pool_concat", "fuse_attention",
               "custom_after_builtin_fusion_pass", "assign_engines",
               "custom_after_origin_graph_optimize", "partition"]
MODEL_ORDER = ["allocate_streams", "stream_policy", "custom_passes", "renumber_streams",
               "build_plan", "order_collectives", "insert_events", "assign_event_ids",
               "plan_memory", "verify"]


def test_the_lists_in_order():
    assert [p.name for p in GRAPH_PASSES] == GRAPH_ORDER
    assert [p.name for p in MODEL_PASSES] == MODEL_ORDER
    assert [p.name for p in PIPELINE] == GRAPH_ORDER + MODEL_ORDER
    assert PLAN_PASSES == MODEL_PASSES[-len(PLAN_PASSES):]


def test_every_requirement_is_ensured_earlier():
    """A condition a pass requires is established by a pass before it (no_events_yet is the
    one fact that holds only until insert_events, so no pass can ensure it for good)."""
    established = set()
    for p in GRAPH_PASSES + MODEL_PASSES:
        for c in p.requires:
            assert c.name in established or c is C.NO_EVENTS_YET, (p.name, c.name)
        established.update(c.name for c in p.ensures)


def test_compile_times_every_pass():
    m = pyge.compile(reference_graph())
    assert [n for n, _ in m.compile_timings] == [p.name for p in PIPELINE]


def _state():
    g = reference_graph()
    return CompileState(graph=g, options=parse_options(None), source=g)


def test_stage_passes_see_the_graph_at_their_stage(no_custom_passes):
    seen = {}

    def at(stage):
        def look(graph, ctx):
            add = graph.find_node("Add_1")
            seen[stage] = (add.outputs[0].dtype, add.engine)
            return pyge.GRAPH_SUCCESS
        return look
    for stage in pyge.CustomPassStage:
        if stage.runs_graph_passes:
            pyge.register_custom_pass(f"look_{stage.name}").custom_pass_fn(at(stage.name)).stage(stage)
    g = reference_graph()
    g.node("Add_1").outputs[0].dtype = None
    pyge.compile(g)
    assert seen == {"BEFORE_INFER_SHAPE": (None, None), "AFTER_INFER_SHAPE": ("float32", None),
                    "AFTER_BUILTIN_FUSION_PASS": ("float32", None),
                    "AFTER_ORIGIN_GRAPH_OPTIMIZE": ("float32", "compute")}


def test_a_fusion_that_corrupts_the_graph_is_caught_after_it(monkeypatch):
    def corrupt(graph):
        graph.nodes[-1].inputs[0].uses.clear()
        return 1
    monkeypatch.setattr(compiler.fuse_conv_act, "fuse_conv_act", corrupt)
    with pytest.raises(InvariantError, match="after pass 'fuse_conv_act': invariant well_formed "
                                             r"\(from pass 'clone'\)"):
        pyge.compile(reference_graph())


def test_a_pass_that_breaks_its_promise(monkeypatch):
    monkeypatch.setattr(compiler.engines, "assign_engines", lambda graph: None)
    with pytest.raises(PostconditionError, match="pass 'assign_engines' should ensure "
                                                 "engines_assigned: node '"):
        pyge.compile(reference_graph())


def test_plan_passes_refuse_streams_out_of_range():
    m = pyge.compile(reference_graph())
    st = CompileState(graph=m.graph, options=parse_options(None), num_streams=1)
    m.graph.nodes[0].stream_id = 3
    with pytest.raises(PreconditionError, match="pass 'build_plan' requires streams_in_range: "
                                                r"node '.*' has stream 3, outside 0..0"):
        run_pipeline(PLAN_PASSES, st)


def test_insert_events_refuses_a_plan_with_events():
    m = pyge.compile(reference_graph(), options={"ge.enableSingleStream": "true"})
    insert_events = next(p for p in PLAN_PASSES if p.name == "insert_events")
    st = CompileState(graph=m.graph, options=m.options, num_streams=1, plan=m.plan)
    st.plan.streams[0].insert(1, st.plan.streams[0][0].__class__(1, 0))   # a stray RECORD
    with pytest.raises(PreconditionError, match="requires no_events_yet"):
        run_pipeline([insert_events], st)


def test_the_callers_graph_is_never_changed():
    g = reference_graph()
    before = pyge.format_graph(g)
    m = pyge.compile(g)
    assert pyge.format_graph(g) == before and m.graph is not g


def test_fusion_off_runs_the_fusion_passes_as_no_ops():
    st = _state()
    st.options = parse_options({"ge.exec.enableFusion": "false"})
    run_graph_passes(st)
    results = dict(st.results)
    assert not any(results[n].modified for n in ("fold_constants", "fuse_dropout", "fuse_conv_bn",
                                                 "fuse_conv_act", "fuse_affine", "fuse_shuffle",
                                                 "place_shuffle", "fuse_concat_relu",
                                                 "pool_concat", "fuse_attention"))
    assert results["clone"].modified and results["assign_engines"].modified


def test_results_say_what_changed():
    b = pyge.GraphBuilder("fold")
    x = b.input("x", "float32", (2,))
    c = b.op("Abs", [b.initializer("c", np.array([-1.0, 2.0], dtype=np.float32))], name="abs_c")
    b.output(b.op("Add", [x, c], name="add"))
    st = CompileState(graph=b.build(), options=parse_options(None))
    run_graph_passes(st)
    results = dict(st.results)
    assert results["fold_constants"].modified and results["fold_constants"].note == "1 folded"
    assert not results["check_ops"].modified and not results["fuse_conv_bn"].modified
    assert isinstance(GRAPH_PASSES[0], Pass)
