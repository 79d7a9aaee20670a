"""Custom graph passes (GE's CustomPassFn): registration and stages, the context, failures,
the detached working graph, graph attributes as options, dumps."""
from __future__ import annotations

import logging
import threading
import time

import numpy as np
import pytest

import pyge
from pyge import GRAPH_FAILED, GRAPH_SUCCESS, CustomPassStage, Node, Value
from pyge.dumps import load_dump
from pyge.examples import reference_graph
from pyge.passes.custom import registered_passes

pytestmark = pytest.mark.usefixtures("no_custom_passes")
STAGES = [s for s in CustomPassStage if s.runs_graph_passes]


def _ok(graph, ctx):
    return GRAPH_SUCCESS


# -- registration (GE's PassRegistrationData) ------------------------------------------------

def test_registration_has_ges_getters_and_default_stage():
    reg = pyge.register_custom_pass("G").custom_pass_fn(_ok)
    assert reg.get_pass_name() == "G" and reg.get_custom_pass_fn() is _ok
    assert reg.get_stage() is CustomPassStage.BEFORE_INFER_SHAPE          # GE's default
    assert reg.get_custom_allocate_stream_pass() is None
    assert reg.stage(CustomPassStage.kAfterInferShape) is reg
    assert reg.get_stage() is CustomPassStage.AFTER_INFER_SHAPE
    s = pyge.register_custom_pass("S").custom_allocate_stream_pass_fn(_ok)
    assert s.get_stage() is CustomPassStage.AFTER_ASSIGN_LOGIC_STREAM and s.get_custom_pass_fn() is None
    assert s.get_custom_allocate_stream_pass() is _ok


def test_stage_names_ges_aliases_and_pipeline_order():
    assert [s.name for s in CustomPassStage] == ["BEFORE_INFER_SHAPE", "AFTER_INFER_SHAPE",
                                                 "AFTER_BUILTIN_FUSION_PASS",
                                                 "AFTER_ORIGIN_GRAPH_OPTIMIZE",
                                                 "AFTER_ASSIGN_LOGIC_STREAM"]
    assert CustomPassStage.kBeforeInferShape is CustomPassStage.BEFORE_INFER_SHAPE
    assert CustomPassStage.kAfterAssignLogicStream is CustomPassStage.AFTER_ASSIGN_LOGIC_STREAM
    for text in ("AFTER_BUILTIN_FUSION_PASS", "kAfterBuiltinFusionPass", "AfterBuiltinFusionPass"):
        assert CustomPassStage.parse(text) is CustomPassStage.AFTER_BUILTIN_FUSION_PASS
    with pytest.raises(pyge.PassError, match="stage 'kCompatibleInherited' is not accepted; accepted "
                                             "stages: BEFORE_INFER_SHAPE, AFTER_INFER_SHAPE"):
        pyge.register_custom_pass("X").stage("kCompatibleInherited")


def test_one_registration_is_one_pass_at_one_stage():
    g = pyge.register_custom_pass("G").custom_pass_fn(_ok)
    with pytest.raises(pyge.PassError, match="'G' already has a graph pass function"):
        g.custom_allocate_stream_pass_fn(_ok)
    with pytest.raises(pyge.PassError, match="stage AFTER_ASSIGN_LOGIC_STREAM runs stream passes"):
        g.stage(CustomPassStage.AFTER_ASSIGN_LOGIC_STREAM)
    s = pyge.register_custom_pass("S").custom_allocate_stream_pass_fn(_ok)
    with pytest.raises(pyge.PassError, match="'S' already has a stream pass function"):
        s.custom_pass_fn(_ok)
    with pytest.raises(pyge.PassError, match="'S' is a stream pass, which runs at "
                                             "AFTER_ASSIGN_LOGIC_STREAM only, not at AFTER_INFER_SHAPE"):
        s.stage("AFTER_INFER_SHAPE")
    with pytest.raises(pyge.PassError, match="'T' is at stage AFTER_INFER_SHAPE; a stream pass runs"):
        pyge.register_custom_pass("T").stage("kAfterInferShape").custom_allocate_stream_pass_fn(_ok)
    with pytest.raises(pyge.PassError, match="the graph pass function must be callable"):
        pyge.register_custom_pass("U").custom_pass_fn("fn")
    assert g.get_stage() is CustomPassStage.BEFORE_INFER_SHAPE and s.get_custom_pass_fn() is None


def test_decorator_and_listing_by_stage():
    @pyge.custom_graph_pass("D", stage="AFTER_INFER_SHAPE")
    def d(graph, ctx):
        return GRAPH_SUCCESS
    assert d.__name__ == "d"
    pyge.register_custom_pass("E").custom_pass_fn(_ok)
    assert [r.name for r in registered_passes("AFTER_INFER_SHAPE")] == ["D"]
    assert [r.name for r in registered_passes(CustomPassStage.BEFORE_INFER_SHAPE)] == ["E"]
    with pytest.raises(pyge.PassError):
        pyge.custom_graph_pass("F", stage=CustomPassStage.AFTER_ASSIGN_LOGIC_STREAM)(d)
    assert "F" not in [r.name for r in registered_passes()]          # nothing left behind


# -- stages and calls ---------------------------------------------------------------------

def test_stages_are_reached_in_order_and_passes_in_registration_order():
    seen = []

    def note(tag):
        def fn(graph, ctx):
            seen.append((tag, ctx.pass_name, type(graph).__name__))
            return GRAPH_SUCCESS
        return fn
    for stage in reversed(STAGES):                      # registered last stage first
        for k in (1, 2):
            pyge.register_custom_pass(f"{stage.name}_{k}").custom_pass_fn(note(stage.name)).stage(stage)
    pyge.register_custom_pass("Stream").custom_allocate_stream_pass_fn(note("stream"))
    pyge.compile(reference_graph())
    assert seen == [(s.name, f"{s.name}_{k}", "Graph") for s in STAGES for k in (1, 2)] + \
        [("stream", "Stream", "ConstGraph")]


def test_graph_passes_run_once_per_compile_and_stream_runs_skip_them(caplog):
    calls = []
    pyge.register_custom_pass("Once").custom_pass_fn(lambda g, ctx: calls.append(1) or GRAPH_SUCCESS)
    with caplog.at_level(logging.WARNING):
        pyge.compile(reference_graph())
    assert calls == [1] and "no stream pass function" not in caplog.text


def test_a_registration_without_a_function_is_skipped_with_a_warning(caplog):
    pyge.register_custom_pass("Empty").stage("AFTER_INFER_SHAPE")
    with caplog.at_level(logging.WARNING):
        pyge.compile(reference_graph())
    assert "custom pass Empty (from the program) at stage AFTER_INFER_SHAPE has no graph pass function" in caplog.text


def test_the_context_names_the_pass_and_reads_options():
    got = {}

    def fn(graph, ctx):
        got.update(name=ctx.pass_name, also=ctx.get_pass_name(), fusion=ctx.get_option_value("ge.exec.enableFusion"),
                   unknown=ctx.get_option_value("no.such.key"), kind=type(ctx).__name__)
        return GRAPH_SUCCESS
    pyge.register_custom_pass("Ctx").custom_pass_fn(fn)
    pyge.compile(reference_graph(), options={"ge.exec.enableFusion": "false"})
    assert got == {"name": "Ctx", "also": "Ctx", "fusion": "false", "unknown": None, "kind": "CustomPassContext"}
    assert isinstance(pyge.CustomPassContext(None), pyge.CustomPassContext)


# -- failures: name, code, message ---------------------------------------------------------

def _fails(fn, stage=CustomPassStage.AFTER_INFER_SHAPE, **options) -> pyge.CustomPassError:
    pyge.register_custom_pass("Bad").custom_pass_fn(fn).stage(stage)
    g = reference_graph()
    before = pyge.format_graph(g)
    with pytest.raises(pyge.CustomPassError) as info:
        pyge.compile(g, options=options or None)
    assert pyge.format_graph(g) == before and info.value.pass_name == "Bad"
    return info.value


def test_a_failing_pass_is_reported_with_name_code_and_message():
    def fn(graph, ctx):
        ctx.set_error_message("pattern too wide")
        return -7
    err = _fails(fn)
    assert err.code == -7 and err.pass_message == "pattern too wide"
    assert str(err) == ("custom graph pass 'Bad' (stage AFTER_INFER_SHAPE) failed with return code -7: "
                        "pattern too wide")
    pyge.unregister_custom_pass("Bad")
    err = _fails(lambda g, ctx: GRAPH_FAILED)
    assert err.code is GRAPH_FAILED and "return code GRAPH_FAILED (4294967295): (no message)" in str(err)


def test_a_raising_pass_and_one_returning_no_status():
    def boom(graph, ctx):
        ctx.set_error_message("while matching Add_1")
        raise KeyError("Add_1")
    err = _fails(boom, CustomPassStage.BEFORE_INFER_SHAPE)
    assert err.code == "exception" and isinstance(err.__cause__, KeyError)
    assert "failed with return code exception: KeyError: 'Add_1'; pass message: while matching Add_1" in str(err)
    pyge.unregister_custom_pass("Bad")
    err = _fails(lambda g, ctx: None)
    assert err.code == "None" and "a graph pass must return a status such as GRAPH_SUCCESS, not NoneType" in str(err)


def test_a_pass_that_hangs_is_given_up_and_cannot_change_anything_later():
    release = threading.Event()
    late = []

    def slow(graph, ctx):
        release.wait(10)
        try:
            graph.set_attr("late", True)
        except pyge.GraphError as err:
            late.append(str(err))
        return GRAPH_SUCCESS
    err = _fails(slow, **{"pyge.customPassTimeout": "0.2"})
    assert err.code == "timeout" and "did not return within 0.2 s (option pyge.customPassTimeout)" in str(err)
    release.set()
    for _ in range(100):
        if late:
            break
        time.sleep(0.05)
    assert late and "can no longer be changed" in late[0]


def test_a_pass_may_not_compile_a_model_itself():
    def nested(graph, ctx):
        pyge.compile(reference_graph())
        return GRAPH_SUCCESS
    err = _fails(nested)
    assert "CustomPassError: custom pass 'Bad' failed with return code reentrant" in str(err)


# -- the working graph, detached -----------------------------------------------------------

def _weighted():
    b = pyge.GraphBuilder("w")
    x = b.input("x", "float32", (3,))
    w = b.initializer("w", np.array([1.0, 2.0, 3.0], np.float32))
    b.output(b.op("Mul", [b.op("LeakyRelu", [x], name="leaky", alpha=0.5), w], name="mul", outputs=["y"]))
    return b.build()


X3 = np.array([-2.0, 1.0, 4.0], np.float32)
Y3 = np.array([-1.0, 2.0, 12.0], np.float32)


def test_a_pass_that_keeps_the_graph_cannot_change_the_model_afterwards():
    kept = {}

    def keep(graph, ctx):
        kept.update(graph=graph, node=graph.find_node("leaky"), w=graph.initializers["w"])
        return GRAPH_SUCCESS
    pyge.register_custom_pass("Keeper").custom_pass_fn(keep).stage("AFTER_INFER_SHAPE")
    g = _weighted()
    m = pyge.compile(g)
    with pytest.raises(pyge.GraphError, match="it was handed to custom graph pass 'Keeper', which has returned"):
        kept["node"].set_attr("alpha", 9.0)
    with pytest.raises(pyge.GraphError, match="can no longer be changed"):
        kept["graph"].add_initializer("more", np.zeros(1))
    kept["node"].attrs["alpha"] = 9.0                 # plain writes reach only the pass's own graph
    kept["node"].op_type = "Relu"
    kept["w"].const = np.zeros(3, np.float32)
    np.testing.assert_array_equal(m.run({"x": X3})["y"], Y3)
    assert m.graph.node("leaky").attrs["alpha"] == 0.5 and m.graph.initializers["w"].const[2] == 3.0


def test_a_thread_the_pass_leaves_running_cannot_change_the_model():
    done = threading.Event()
    errors = []

    def later(graph):
        time.sleep(0.2)
        try:
            graph.find_node("leaky").set_attr("alpha", 9.0)
        except pyge.GraphError as err:
            errors.append(err)
        graph.find_node("leaky").attrs["alpha"] = 9.0
        done.set()

    def spawn(graph, ctx):
        threading.Thread(target=later, args=(graph,), daemon=True).start()
        return GRAPH_SUCCESS
    pyge.register_custom_pass("Spawner").custom_pass_fn(spawn)
    m = pyge.compile(_weighted())
    assert done.wait(10) and errors
    np.testing.assert_array_equal(m.run({"x": X3})["y"], Y3)


def test_weights_are_read_only_to_a_pass_and_its_own_arrays_are_copied():
    g = _weighted()
    user_w = g.initializers["w"].const
    mine = np.array([10.0, 10.0, 10.0], np.float32)
    refused = []

    def fn(graph, ctx):
        w = graph.initializers["w"]
        try:
            w.const[0] = 100.0                          # in place: the caller's array
        except ValueError as err:
            refused.append(str(err))
        mul = graph.find_node("mul")
        mul.set_input(1, graph.add_initializer("w10", mine))
        return GRAPH_SUCCESS
    pyge.register_custom_pass("Weights").custom_pass_fn(fn)
    m = pyge.compile(g)
    mine[:] = 0.0                                       # the pass's array, changed after the call
    assert refused and "read-only" in refused[0]
    np.testing.assert_array_equal(user_w, [1.0, 2.0, 3.0])
    assert g.initializers["w"].const is user_w and user_w.flags.writeable
    np.testing.assert_array_equal(m.run({"x": X3})["y"], np.array([-10.0, 10.0, 40.0], np.float32))
    assert m.graph.initializers["w"].const.flags.writeable  # the model reads writable originals


# -- graph attributes as options (GE's autotune pattern) -----------------------------------

def autotune(graph, ctx):
    """Pick LoadBalance:N from the graph's width: the most nodes at one depth."""
    depth: dict[str, int] = {}
    for n in graph.nodes:                                # topological order
        depth[n.name] = 1 + max((depth[p.name] for p in n.predecessors), default=-1)
    width = max(list(depth.values()).count(d) for d in set(depth.values()))
    graph.set_attr("ge.autoMultistreamParallelMode", f"LoadBalance:{min(width, 64)}")
    return GRAPH_SUCCESS


def _wide():
    """Four independent chains of three operators, joined by one Sum: width 4."""
    b = pyge.GraphBuilder("wide")
    x = b.input("x", "float32", (8, 8))
    heads = []
    for i in range(4):
        h = x
        for d, op in enumerate(("Relu", "Abs", "Neg")):
            h = b.op(op, [h], name=f"c{i}_{d}")
        heads.append(h)
    b.output(b.op("Sum", heads, name="join", outputs=["y"]))
    return b.build()


def test_an_attribute_set_by_a_pass_overrides_the_option():
    base = pyge.compile(_wide(), options={"ge.autoMultistreamParallelMode": "MainStream:1"})
    assert base.num_streams == 1
    pyge.register_custom_pass("AutoTune").custom_pass_fn(autotune)
    m = pyge.compile(_wide(), options={"ge.autoMultistreamParallelMode": "MainStream:1"})
    assert m.options["ge.autoMultistreamParallelMode"] == ("LoadBalance", 4)
    assert m.num_streams == 4 and len({m.stream_of(f"c{i}_0") for i in range(4)}) == 4
    feeds = {"x": np.random.default_rng(0).standard_normal((8, 8)).astype(np.float32)}
    np.testing.assert_array_equal(m.run(feeds)["y"], base.run(feeds)["y"])


def test_a_later_pass_sees_the_mode_as_an_option():
    seen = []
    pyge.register_custom_pass("AutoTune").custom_pass_fn(autotune)
    pyge.register_custom_pass("Reader").custom_pass_fn(
        lambda g, ctx: seen.append(ctx.get_option_value("ge.autoMultistreamParallelMode")) or GRAPH_SUCCESS
    ).stage("AFTER_ORIGIN_GRAPH_OPTIMIZE")
    pyge.compile(reference_graph())
    assert seen == ["LoadBalance:2"]


@pytest.mark.parametrize("value, options, message", [
    ("Fastest:2", {}, "option ge.autoMultistreamParallelMode='Fastest:2' is malformed; accepted values: "
                      "None, LoadBalance:N"),
    (2, {}, "graph attribute ge.autoMultistreamParallelMode must be a string such as 'LoadBalance:2', not int 2"),
    ("LoadBalance:2", {"ge.enableSingleStream": "true"}, "conflicts with ge.enableSingleStream=true"),
])
def test_a_mode_the_option_would_refuse_is_the_passs_error(value, options, message):
    def fn(graph, ctx):
        graph.set_attr("ge.autoMultistreamParallelMode", value)
        return GRAPH_SUCCESS
    err = _fails(fn, **options)
    assert err.code is None and "set a graph attribute the compiler cannot take: " in str(err)
    assert message in str(err)


def test_the_callers_graph_attribute_counts_too():
    g = _wide()
    g.set_attr("ge.autoMultistreamParallelMode", "LoadBalance:2")
    assert pyge.compile(g).num_streams == 2
    g.set_attr("ge.autoMultistreamParallelMode", "LoadBalance:0")
    with pytest.raises(pyge.OptionError, match="graph 'wide': option ge.autoMultistreamParallelMode="
                                               "'LoadBalance:0' is out of range"):
        pyge.compile(g)


# -- dumps ---------------------------------------------------------------------------------

def _dumps(tmp_path, monkeypatch, level=None):
    monkeypatch.setenv("DUMP_GE_GRAPH", "2")
    monkeypatch.setenv("DUMP_GRAPH_PATH", str(tmp_path))
    if level is not None:
        monkeypatch.setenv("DUMP_GRAPH_LEVEL", level)
    else:
        monkeypatch.delenv("DUMP_GRAPH_LEVEL", raising=False)
    return lambda: sorted(p.name.split("_", 5)[-1] for p in tmp_path.iterdir())


def test_dumps_around_each_graph_pass_with_ges_stage_names(tmp_path, monkeypatch):
    files = _dumps(tmp_path, monkeypatch)
    pyge.register_custom_pass("AutoTune").custom_pass_fn(autotune)
    pyge.register_custom_pass("Late").custom_pass_fn(_ok).stage("AFTER_ORIGIN_GRAPH_OPTIMIZE")
    pyge.compile(reference_graph())
    assert files() == sorted(["RunCustomPassBegin_BeforeInferShapeAutoTune.pbtxt",
                              "RunCustomPass_BeforeInferShapeAutoTune.pbtxt",
                              "RunCustomPassBeforeInfershape.pbtxt",
                              "RunCustomPassBegin_AfterOriginGraphOptimizeLate.pbtxt",
                              "RunCustomPass_AfterOriginGraphOptimizeLate.pbtxt",
                              "RunCustomPassAfterOriginGraphOptimize.pbtxt",
                              "RunCustomPass_BeforeAssignLogicStreamMiniDAGStreamPass.pbtxt",
                              "RunCustomPass_AfterAssignLogicStreamMiniDAGStreamPass.pbtxt",
                              "PreRunAfterBuild.pbtxt"])
    after = next(tmp_path.glob("*RunCustomPass_BeforeInferShapeAutoTune.pbtxt"))
    meta = {p.key: p.value for p in load_dump(str(after)).metadata_props}
    assert meta["pyge.graph_attr.ge.autoMultistreamParallelMode"] == "LoadBalance:2"
    before = next(tmp_path.glob("*RunCustomPassBegin_BeforeInferShapeAutoTune.pbtxt"))
    assert "pyge.graph_attr.ge.autoMultistreamParallelMode" not in {
        p.key for p in load_dump(str(before)).metadata_props}


def test_graph_pass_dumps_follow_the_levels(tmp_path, monkeypatch):
    pyge.register_custom_pass("P").custom_pass_fn(_ok).stage("AFTER_INFER_SHAPE")
    files = _dumps(tmp_path / "built", monkeypatch, "3")
    pyge.compile(reference_graph())
    assert files() == ["PreRunAfterBuild.pbtxt"]
    files = _dumps(tmp_path / "all", monkeypatch, "1")
    pyge.compile(reference_graph())
    assert {"RunCustomPass_AfterInferShapeP.pbtxt", "InferShapes.pbtxt"} <= set(files())
    files = _dumps(tmp_path / "named", monkeypatch, "AfterInferShape")
    pyge.compile(reference_graph())
    assert files() == ["RunCustomPassBegin_AfterInferShapeP.pbtxt", "RunCustomPass_AfterInferShape.pbtxt",
                       "RunCustomPass_AfterInferShapeP.pbtxt"]


def test_the_after_dump_is_written_when_the_pass_fails(tmp_path, monkeypatch):
    files = _dumps(tmp_path, monkeypatch)

    def half_done(graph, ctx):
        n = Node("Neg", "half")
        n.append_input(graph.inputs[0])
        n.add_output(Value("half_out"))
        graph.add_node(n)
        return -1
    pyge.register_custom_pass("Half").custom_pass_fn(half_done)
    with pytest.raises(pyge.CustomPassError):
        pyge.compile(reference_graph())
    assert files() == ["RunCustomPassBegin_BeforeInferShapeHalf.pbtxt", "RunCustomPass_BeforeInferShapeHalf.pbtxt"]
    after = next(tmp_path.glob("*RunCustomPass_BeforeInferShapeHalf.pbtxt"))
    assert "half" in [n.name for n in load_dump(str(after)).graph.node]


def test_the_handover_covers_tensor_attributes_and_gives_the_copy_the_originals():
    from pyge.passes.custom.detach import Handover
    g = _weighted()
    value, listed = np.ones(2, np.float32), np.zeros(3, np.float32)
    g.node("leaky").attrs.update(value=value, tensors=[listed])
    h = Handover(g)
    seen = g.node("leaky").attrs
    assert not seen["value"].flags.writeable and not seen["tensors"][0].flags.writeable
    assert not g.initializers["w"].const.flags.writeable
    with pytest.raises(ValueError, match="read-only"):
        seen["tensors"][0][0] = 1.0
    brought = np.full(3, 7.0, np.float32)
    g.node("mul").attrs["extra"] = brought
    g.seal("test")
    out = h.copy()
    attrs = out.node("leaky").attrs
    assert attrs["value"] is value and attrs["tensors"][0] is listed and out.initializers["w"].const.flags.writeable
    assert out.node("mul").attrs["extra"] is not brought and np.array_equal(out.node("mul").attrs["extra"], brought)
