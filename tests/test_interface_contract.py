"""Acceptance audit: every name in /work/shared/INTERFACE.md, called exactly as written there.

Item by item: the Python API, custom stream passes and their context, plugins, options, the
dump environment, the command line, and the project rule on bad input (a specific PygeError
with a one-line message naming the culprit; nothing the user owns half-changed).
"""
from __future__ import annotations

import json
import os
import re
import stat
import sys
import textwrap

import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper

import pyge
from pyge import GRAPH_SUCCESS, register_custom_pass
from pyge.cli import main as cli_main
from pyge.passes.custom.plugins import reset_plugins

SHAPE = (4, 4)
DUMP_RE = re.compile(r"^ge_onnx_(\d{8})_graph_(\d+)_(.+)\.pbtxt$")


@pytest.fixture(autouse=True)
def _clean(monkeypatch):
    """No registrations, plugin state or dump settings leak in or out."""
    for var in ("DUMP_GE_GRAPH", "DUMP_GRAPH_LEVEL", "DUMP_GRAPH_PATH", "PYGE_OPP_PATH", "ASCEND_OPP_PATH"):
        monkeypatch.delenv(var, raising=False)
    reset_plugins()
    with pyge.custom_passes_scope():
        pyge.clear_custom_passes()
        yield
    reset_plugins()


def split_abs(graph, ctx):                   # the contract's example, verbatim
    for node in graph.get_direct_nodes():
        if node.name == "Abs_1":
            ctx.set_stream_id(node, ctx.allocate_next_stream_id())
    return GRAPH_SUCCESS


def ref_graph():
    return pyge.examples.reference_graph(SHAPE)


def x_in():
    return np.random.default_rng(0).standard_normal(SHAPE).astype(np.float32)


def onnx_model() -> onnx.ModelProto:
    x = helper.make_tensor_value_info("input", TensorProto.FLOAT, list(SHAPE))
    y = helper.make_tensor_value_info("output", TensorProto.FLOAT, list(SHAPE))
    nodes = [helper.make_node("Relu", ["input"], ["r"], name="Relu_1"),
             helper.make_node("Abs", ["input"], ["a"], name="Abs_1"),
             helper.make_node("Add", ["r", "a"], ["output"], name="Add_1")]
    return helper.make_model(helper.make_graph(nodes, "ref", [x], [y]), opset_imports=[helper.make_opsetid("", 17)])


def one_line(err) -> str:
    text = str(err.value if hasattr(err, "value") else err)
    assert "\n" not in text.strip(), text
    return text


def split_model(**kw):
    register_custom_pass("SplitAbs").custom_allocate_stream_pass_fn(split_abs)
    return pyge.compile(ref_graph(), **kw)


# -- Python API --------------------------------------------------------------------------------

def test_frontends_accept_what_the_contract_names(tmp_path):
    import torch
    path = tmp_path / "model.onnx"
    onnx.save(onnx_model(), path)
    for src in (str(path), path, onnx_model()):
        g = pyge.load_onnx(src)
        assert isinstance(g, pyge.Graph) and [n.name for n in g.nodes] == ["Relu_1", "Abs_1", "Add_1"]

    class M(torch.nn.Module):
        def forward(self, x):
            return torch.relu(x) + torch.abs(x)
    g = pyge.from_torch(M(), (torch.ones(*SHAPE),))
    out = pyge.compile(g).run({g.inputs[0].name: x_in()})
    np.testing.assert_allclose(next(iter(out.values())), np.maximum(x_in(), 0) + np.abs(x_in()), rtol=1e-6)
    b = pyge.GraphBuilder("name")
    v = b.input("input", "float32", SHAPE)
    b.op("Neg", [v], name="Neg_1", outputs=["output"])
    b.graph.outputs.append(b.graph.value("output"))
    assert pyge.compile(b.build()).run({"input": x_in()})["output"].tolist() == (-x_in()).tolist()


def test_compiled_model_properties():
    model = split_model(device="cpu", options={"ge.enableSingleStream": "false"})
    out = model.run({"input": x_in()})
    assert set(out) == {"output"} and isinstance(out["output"], np.ndarray)
    np.testing.assert_array_equal(out["output"], np.maximum(x_in(), 0) + np.abs(x_in()))
    assert model.stream_of("Abs_1") == 1 and model.stream_of("Relu_1") == 0
    assert model.num_streams == 2
    assert model.streams == [["Relu_1", "Add_1"], ["Abs_1"]]
    (e,) = model.events
    assert (e.event_id, e.src, e.dst, e.src_stream, e.dst_stream) == (0, "Abs_1", "Add_1", 1, 0)
    model.verify()
    assert 0 < model.memory.peak_bytes <= model.memory.no_reuse_bytes
    single = pyge.compile(ref_graph(), options={"ge.enableSingleStream": "true"})
    np.testing.assert_array_equal(single.run({"input": x_in()})["output"], out["output"])
    with pytest.raises(KeyError, match="Abs_9"):
        model.stream_of("Abs_9")


def test_verify_raises_on_an_unordered_dependency():
    from pyge.plan.plan import WAIT
    model = split_model()
    model.verify()
    model.plan.streams[0] = [st for st in model.plan.streams[0] if st.kind != WAIT]   # drop the Recv
    with pytest.raises(pyge.VerificationError, match="Abs_1.*Add_1"):
        model.verify()


@pytest.mark.parametrize("split", [False, True])
def test_outputs_share_no_memory_with_feeds_weights_or_each_other(split):
    b = pyge.GraphBuilder("views")
    x, w = b.input("x", "float32", (3,)), b.initializer("w", np.arange(3, dtype=np.float32))
    b.op("Identity", [w], name="Id_w", outputs=["y"])
    b.op("Add", [x, w], name="Add_1", outputs=["z"])
    b.op("Identity", [x], name="Id_x", outputs=["u"])
    b.op("Reshape", [x, b.constant(np.array([3], np.int64))], name="Reshape_1", outputs=["v"])
    b.graph.outputs += [b.graph.value(n) for n in "yzuv"]
    if split:   # every node on its own stream: the threaded executor
        register_custom_pass("Each").custom_allocate_stream_pass_fn(
            lambda g, c: [c.set_stream_id(n, c.allocate_next_stream_id()) for n in g.get_direct_nodes()] and 0)
    opts = {"ge.streamMaxParallelNum": "2"}
    model = pyge.compile(b.build(), options=opts)
    assert opts == {"ge.streamMaxParallelNum": "2"} and (model.num_streams > 1 or not split)
    feed = np.zeros(3, np.float32)
    for arr in model.run({"x": feed}).values():
        arr[:] = 100                           # the caller owns what run() returns
    assert feed.tolist() == [0, 0, 0]
    assert {k: v.tolist() for k, v in model.run({"x": feed}).items()} == {
        "y": [0, 1, 2], "z": [0, 1, 2], "u": [0, 0, 0], "v": [0, 0, 0]}


def test_save_load_and_profile(tmp_path):
    model = split_model()
    model.save(str(tmp_path / "model.pgm"))
    model2 = pyge.load_model(str(tmp_path / "model.pgm"))
    assert model2.streams == model.streams and model2.stream_of("Abs_1") == 1
    assert [(e.src, e.dst, e.event_id) for e in model2.events] == [(e.src, e.dst, e.event_id) for e in model.events]
    np.testing.assert_array_equal(model2.run({"input": x_in()})["output"], model.run({"input": x_in()})["output"])
    prof = model.profile({"input": x_in()}, runs=3)
    prof.save_trace(str(tmp_path / "trace.json"))
    trace = json.loads((tmp_path / "trace.json").read_text())
    ops = [ev for ev in (trace["traceEvents"] if isinstance(trace, dict) else trace) if ev.get("ph") == "X"]
    assert len(ops) == 3 * 3
    assert all(ev["tid"] == model.stream_of(ev["name"]) for ev in ops)
    assert sorted({ev["name"] for ev in ops}) == ["Abs_1", "Add_1", "Relu_1"]
    prof.plot(str(tmp_path / "timeline.png"))
    assert (tmp_path / "timeline.png").read_bytes()[:4] == b"\x89PNG"
    assert "stream 1" in str(prof.summary())


def test_session():
    sess = pyge.Session({"ge.enableSingleStream": "false"})
    sess.add_graph(1, ref_graph())
    sess.build_graph(1)
    out = sess.run_graph(1, {"input": x_in()})
    np.testing.assert_array_equal(out["output"], np.maximum(x_in(), 0) + np.abs(x_in()))
    with pytest.raises(pyge.PygeError, match="graph id 2"):
        sess.run_graph(2, {"input": x_in()})
    with pytest.raises(pyge.OptionError, match="ge.bogus"):
        pyge.Session({"ge.bogus": "1"})


def test_compilation_keeps_node_names():
    model = pyge.compile(pyge.load_onnx(onnx_model()))
    assert sorted(n for s in model.streams for n in s) == ["Abs_1", "Add_1", "Relu_1"]


# -- custom stream passes ----------------------------------------------------------------------

def if_graph():
    b = pyge.GraphBuilder("root")
    cond, x = b.input("cond", "bool", ()), b.input("x", "float32", (4,))
    pre = b.op("Sigmoid", [x], name="pre")
    then_b, else_b = pyge.GraphBuilder("then_body"), pyge.GraphBuilder("else_body")
    then_b.graph.outputs.append(then_b.op("Abs", [then_b.op("Relu", [pre], name="t_relu")], name="t_abs"))
    else_b.graph.outputs.append(else_b.op("Neg", [pre], name="e_neg"))
    b.graph.outputs.append(b.op("If", [cond], name="if", then_branch=then_b.graph, else_branch=else_b.graph))
    b.graph.outputs.append(b.op("Exp", [x], name="post"))
    return b.build()


def test_registration_forms_and_call_order():
    calls = []
    reg = register_custom_pass("First")
    assert reg.custom_allocate_stream_pass_fn(lambda g, c: calls.append(("First", g.name)) or GRAPH_SUCCESS) is reg

    @pyge.custom_stream_pass("Second")
    def second(graph, ctx):
        calls.append(("Second", graph.name, [n.name for n in graph.get_direct_nodes()],
                      [ctx.get_stream_id(n) for n in graph.get_direct_nodes()]))
        return GRAPH_SUCCESS
    assert callable(second)
    pyge.compile(if_graph())
    assert [c[:2] for c in calls] == [("First", "root"), ("Second", "root"), ("First", "then_body"),
                                      ("Second", "then_body"), ("First", "else_body"), ("Second", "else_body")]
    direct = {c[1]: c[2] for c in calls if c[0] == "Second"}
    assert direct == {"root": ["pre", "if", "post"], "then_body": ["t_relu", "t_abs"], "else_body": ["e_neg"]}
    # passes run after the built-in allocation: every node already has a stream
    assert all(s >= 0 for c in calls if c[0] == "Second" for s in c[3])


def test_context_methods():
    got = {}

    @pyge.custom_stream_pass("Ctx")
    def ctx_pass(graph, ctx):
        if not graph.is_root:
            return GRAPH_SUCCESS
        pre = graph.find_node("pre")
        foreign = next(n for n in graph.get_all_nodes() if n.name == "t_relu")
        mx = ctx.get_curr_max_stream_id()
        got.update(name=ctx.pass_name, opt=ctx.get_option_value("ge.streamMaxParallelNum"),
                   single=ctx.get_option_value("ge.enableSingleStream"), mx=mx, sid=ctx.get_stream_id(pre))
        for key, sid, node in (("neg", -1, pre), ("above", mx + 1, pre), ("foreign", 0, foreign)):
            got[key] = (ctx.set_stream_id(node, sid), ctx.get_error_message())
        new = ctx.allocate_next_stream_id()
        got.update(new=new, mx2=ctx.get_curr_max_stream_id(), ok=ctx.set_stream_id(pre, new))
        ctx.set_error_message("custom message")
        got["msg"] = ctx.get_error_message()
        return GRAPH_SUCCESS
    model = pyge.compile(if_graph(), options={"ge.streamMaxParallelNum": "2"})
    assert got["name"] == "Ctx" and got["opt"] == "2" and got["single"] == "false"
    assert got["new"] == got["mx"] + 1 == got["mx2"] and got["ok"] == GRAPH_SUCCESS and got["sid"] >= 0
    for key in ("neg", "above", "foreign"):
        assert got[key][0] != GRAPH_SUCCESS and got[key][1], key
    assert "then_body" in got["foreign"][1] and got["msg"] == "custom message"
    assert model.num_streams == len(model.streams) and model.stream_of("pre") < model.num_streams


@pytest.mark.parametrize("ret, code", [(pyge.GRAPH_FAILED, "GRAPH_FAILED"), (-7, "-7"), (None, "None"),
                                       ("ok", "'ok'"), (1.5, "1.5")])
def test_failing_pass_names_pass_code_and_message_and_changes_nothing(ret, code):
    g = ref_graph()
    before = pyge.format_graph(g), [(n.name, n.stream_id) for n in g.nodes]

    @pyge.custom_stream_pass("Bad")
    def bad(graph, ctx):
        ctx.set_stream_id(graph.find_node("Abs_1"), ctx.allocate_next_stream_id())
        ctx.set_error_message("no stream for Abs_1")
        return ret
    with pytest.raises(pyge.CustomPassError, match=rf"'Bad' failed with return code {re.escape(code)}") as err:
        pyge.compile(g)
    assert "no stream for Abs_1" in one_line(err) and err.value.pass_name == "Bad"
    assert (pyge.format_graph(g), [(n.name, n.stream_id) for n in g.nodes]) == before


@pytest.mark.parametrize("exc", [KeyError("Abs_2"), SystemExit(3), RecursionError("deep")])
def test_raising_pass_is_a_custom_pass_error(exc):
    def raises(graph, ctx):
        raise exc
    register_custom_pass("Raises").custom_allocate_stream_pass_fn(raises)
    with pytest.raises(pyge.CustomPassError, match=rf"'Raises' failed .*{type(exc).__name__}") as err:
        pyge.compile(ref_graph())
    one_line(err)


def test_numpy_integer_status_is_accepted():
    register_custom_pass("NpInt").custom_allocate_stream_pass_fn(lambda g, c: np.int64(0))
    assert pyge.compile(ref_graph()).num_streams == 1


def test_pass_cannot_mutate_the_graph_or_act_after_it_returned():
    kept = {}

    def mutate(graph, ctx):
        kept.update(ctx=ctx, node=graph.find_node("Abs_1"))
        graph.get_direct_nodes()[0].name = "renamed"
    register_custom_pass("Mutate").custom_allocate_stream_pass_fn(mutate)
    with pytest.raises(pyge.CustomPassError, match="'Mutate'.*read-only"):
        pyge.compile(ref_graph())
    pyge.clear_custom_passes()

    def keep(graph, ctx):
        kept.update(ctx=ctx, node=graph.find_node("Abs_1"))
        return GRAPH_SUCCESS
    register_custom_pass("Keep").custom_allocate_stream_pass_fn(keep)
    model = pyge.compile(ref_graph())
    assert kept["ctx"].set_stream_id(kept["node"], 0) != GRAPH_SUCCESS
    assert "after the pass call returned" in kept["ctx"].get_error_message()
    with pytest.raises(pyge.PassError, match="'Keep'"):
        kept["ctx"].allocate_next_stream_id()
    assert model.graph.node("Abs_1").stream_id == model.stream_of("Abs_1") == 0


def test_single_stream_runs_no_custom_pass():
    calls = []
    register_custom_pass("Never").custom_allocate_stream_pass_fn(lambda g, c: calls.append(1) or 5)
    assert pyge.compile(ref_graph(), options={"ge.enableSingleStream": "true"}).num_streams == 1
    assert calls == []


# -- plugins -----------------------------------------------------------------------------------

PLUGIN = """
import pyge
@pyge.custom_stream_pass({name!r})
def fn(graph, ctx):
    for n in graph.get_direct_nodes():
        if n.name == "Abs_1":
            ctx.set_stream_id(n, ctx.allocate_next_stream_id())
    return pyge.GRAPH_SUCCESS
"""


def make_opp(root, files: dict[str, str]):
    for rel, text in files.items():
        p = root / rel
        p.parent.mkdir(parents=True, exist_ok=True)
        p.write_text(textwrap.dedent(text))
    for dirpath, dirs, names in os.walk(root):
        for d in [dirpath, *(os.path.join(dirpath, n) for n in names)]:
            os.chmod(d, os.stat(d).st_mode & ~(stat.S_IWGRP | stat.S_IWOTH))
    return root


def registered():
    from pyge.passes.custom import registered_passes
    return [r.name for r in registered_passes()]


@pytest.mark.parametrize("var", ["PYGE_OPP_PATH", "ASCEND_OPP_PATH"])
def test_plugins_load_in_lexical_order(tmp_path, monkeypatch, caplog, var):
    d = "vendors/{}/custom_fusion_passes/{}"
    opp = make_opp(tmp_path / "opp", {d.format("b_vendor", "a.py"): PLUGIN.format(name="B_A"),
                                      d.format("a_vendor", "z.py"): PLUGIN.format(name="A_Z"),
                                      d.format("a_vendor", "m.py"): PLUGIN.format(name="A_M"),
                                      d.format("a_vendor", "notes.txt"): "not python",
                                      d.format("a_vendor", "sub/deep.py"): "raise ValueError('searched')"})
    (tmp_path / "elsewhere.py").write_text(PLUGIN.format(name="Linked"))
    os.symlink(tmp_path / "elsewhere.py", opp / d.format("b_vendor", "b.py"))
    monkeypatch.setenv(var, str(opp))
    with caplog.at_level("WARNING", logger="pyge"):
        model = pyge.compile(ref_graph())
    assert registered() == ["A_M", "A_Z", "B_A", "Linked"]
    assert "subfolder sub is not searched" in caplog.text
    assert model.stream_of("Abs_1") != model.stream_of("Relu_1")


def test_pyge_opp_path_wins_over_ascend_opp_path(tmp_path, monkeypatch):
    d = "vendors/v/custom_fusion_passes/p.py"
    monkeypatch.setenv("PYGE_OPP_PATH", str(make_opp(tmp_path / "a", {d: PLUGIN.format(name="FromPyge")})))
    monkeypatch.setenv("ASCEND_OPP_PATH", str(make_opp(tmp_path / "b", {d: PLUGIN.format(name="FromAscend")})))
    pyge.compile(ref_graph())
    assert registered() == ["FromPyge"]


@pytest.mark.parametrize("body, cause", [("raise ValueError('broken plugin')", "ValueError: broken plugin"),
                                         ("import sys; sys.exit(4)", "SystemExit: 4"),
                                         ("def f(:\n", "SyntaxError")])
def test_failing_plugin_names_file_and_cause(tmp_path, monkeypatch, body, cause):
    opp = make_opp(tmp_path, {"vendors/v/custom_fusion_passes/a.py": PLUGIN.format(name="Good"),
                              "vendors/v/custom_fusion_passes/bad.py": body})
    monkeypatch.setenv("PYGE_OPP_PATH", str(opp))
    with pytest.raises(pyge.PluginError, match=re.escape(str(opp / "vendors/v/custom_fusion_passes/bad.py"))) as err:
        pyge.compile(ref_graph())
    assert cause in one_line(err) and registered() == []   # all or nothing


@pytest.mark.parametrize("target", ["vendors/v/custom_fusion_passes/a.py", "vendors/v", "vendors"])
def test_writable_plugin_or_folder_is_refused(tmp_path, monkeypatch, target):
    opp = make_opp(tmp_path / "opp", {"vendors/v/custom_fusion_passes/a.py": PLUGIN.format(name="P")})
    os.chmod(opp / target, os.stat(opp / target).st_mode | stat.S_IWOTH)
    monkeypatch.setenv("PYGE_OPP_PATH", str(opp))
    with pytest.raises(pyge.PluginError, match="writable by others") as err:
        pyge.compile(ref_graph())
    assert "a.py" in one_line(err) and registered() == []


def test_entry_point_group(tmp_path, monkeypatch):
    (tmp_path / "ep_passes.py").write_text(PLUGIN.replace("@pyge.custom_stream_pass({name!r})\n", ""))
    dist = tmp_path / "ep_passes-0.1.dist-info"
    dist.mkdir()
    (dist / "METADATA").write_text("Metadata-Version: 2.1\nName: ep-passes\nVersion: 0.1\n")
    (dist / "entry_points.txt").write_text("[pyge.custom_passes]\nEpSplit = ep_passes:fn\n")
    monkeypatch.syspath_prepend(str(tmp_path))
    try:
        model = pyge.compile(ref_graph())
        assert "EpSplit" in registered() and model.stream_of("Abs_1") == 1
        pyge.clear_custom_passes()
        reset_plugins()
        (dist / "entry_points.txt").write_text("[pyge.custom_passes]\nMissing = no_such_module_xyz:fn\n")
        with pytest.raises(pyge.PluginError, match="entry point Missing = no_such_module_xyz:fn") as err:
            pyge.compile(ref_graph())
        one_line(err)
    finally:
        sys.modules.pop("ep_passes", None)


# -- options -----------------------------------------------------------------------------------

@pytest.mark.parametrize("key, value", [("ge.enableSingleStream", "true"), ("ge.enableSingleStream", "false"),
                                        ("ge.streamMaxParallelNum", "2"), ("ge.streamMaxParallelNum", "compute:2,skip:1"),
                                        ("ge.autoMultistreamParallelMode", "None"),
                                        ("ge.autoMultistreamParallelMode", "LoadBalance:2"),
                                        ("ge.autoMultistreamParallelMode", "MainStream:64")])
def test_accepted_option_values(key, value):
    model = pyge.compile(ref_graph(), options={key: value})
    np.testing.assert_array_equal(model.run({"input": x_in()})["output"], np.maximum(x_in(), 0) + np.abs(x_in()))


@pytest.mark.parametrize("key, value, accepted", [
    ("ge.enableSingleStream", "yes", "true, false"), ("ge.streamMaxParallelNum", "zero", "ENGINE:N"),
    ("ge.streamMaxParallelNum", "0", "1..64"), ("ge.streamMaxParallelNum", "compute:x", "ENGINE:N"),
    ("ge.autoMultistreamParallelMode", "LoadBalance:65", "1 <= N <= 64"),
    ("ge.autoMultistreamParallelMode", "LoadBalance:0", "1 <= N <= 64"),
    ("ge.autoMultistreamParallelMode", "Greedy:2", "LoadBalance:N"), ("ge.unknownKey", "1", "ge.enableSingleStream")])
def test_bad_options_name_key_and_accepted_values(key, value, accepted):
    with pytest.raises(pyge.OptionError) as err:
        pyge.compile(ref_graph(), options={key: value})
    assert key in one_line(err) and accepted in str(err.value)


# -- environment: dumps ------------------------------------------------------------------------

def dumps(folder):
    found = [(DUMP_RE.match(p.name), p) for p in folder.iterdir() if DUMP_RE.match(p.name)]
    return [(m.group(3), p) for m, p in sorted(found, key=lambda mp: int(mp[0].group(1)))]


def test_dump_files_names_stream_ids_and_events(tmp_path, monkeypatch):
    monkeypatch.setenv("DUMP_GE_GRAPH", "1")
    monkeypatch.setenv("DUMP_GRAPH_PATH", str(tmp_path))
    split_model()
    files = dumps(tmp_path)
    stages = [s for s, _ in files]
    assert stages[:2] == ["RunCustomPass_BeforeAssignLogicStreamSplitAbs", "RunCustomPass_AfterAssignLogicStreamSplitAbs"]
    for stage, path in files:
        mp = onnx.load_model(str(path), format="textproto")
        attrs = {n.name: {a.name: helper.get_attribute_value(a) for a in n.attribute} | {"op": n.op_type}
                 for n in mp.graph.node}
        assert all("_stream_id" in a for a in attrs.values()), stage
        if stage.startswith("RunCustomPass_Before"):
            assert attrs["Abs_1"]["_stream_id"] == attrs["Relu_1"]["_stream_id"]
        if stage.startswith("RunCustomPass_After"):
            assert attrs["Abs_1"]["_stream_id"] != attrs["Relu_1"]["_stream_id"]
    built = {n["op"]: n for n in attrs.values() if n["op"] in ("Send", "Recv")}   # the last dump: built graph
    assert built["Send"]["event_id"] == built["Recv"]["event_id"] == 0
    assert built["Send"]["_stream_id"] == 1 and built["Recv"]["_stream_id"] == 0


@pytest.mark.parametrize("level, expect", [("1", lambda s: "AssignLogicStream" in s and len(s) > 3),
                                           ("2", lambda s: len(s) == 3),
                                           ("3", lambda s: len(s) == 1),
                                           ("AfterAssignLogicStream", lambda s: s == ["RunCustomPass_AfterAssignLogicStreamSplitAbs"])])
def test_dump_levels(tmp_path, monkeypatch, level, expect):
    monkeypatch.setenv("DUMP_GE_GRAPH", "3")
    monkeypatch.setenv("DUMP_GRAPH_LEVEL", level)
    monkeypatch.chdir(tmp_path)                # DUMP_GRAPH_PATH defaults to the current folder
    split_model()
    assert expect([s for s, _ in dumps(tmp_path)])


@pytest.mark.parametrize("var, value", [("DUMP_GE_GRAPH", "7"), ("DUMP_GRAPH_LEVEL", "9")])
def test_bad_dump_environment(tmp_path, monkeypatch, var, value):
    monkeypatch.setenv("DUMP_GE_GRAPH", "2")
    monkeypatch.setenv("DUMP_GRAPH_PATH", str(tmp_path))
    monkeypatch.setenv(var, value)
    with pytest.raises(pyge.PygeError, match=var) as err:
        pyge.compile(ref_graph())
    one_line(err)


# -- command line ------------------------------------------------------------------------------

def cli(capsys, *argv):
    rc = cli_main([str(a) for a in argv])
    out, err = capsys.readouterr()
    return rc, out, err


@pytest.fixture()
def model_file(tmp_path):
    onnx.save(onnx_model(), tmp_path / "m.onnx")
    np.save(tmp_path / "x.npy", x_in())
    return tmp_path / "m.onnx"


def test_cli_commands(capsys, tmp_path, model_file):
    pgm = tmp_path / "m.pgm"
    rc, out, err = cli(capsys, "compile", model_file, "-o", pgm, "--device", "cpu",
                       "--option", "ge.streamMaxParallelNum=2", "--option", "ge.enableSingleStream=false")
    assert rc == 0 and pgm.exists(), err
    assert pyge.load_model(pgm).num_streams == 2
    for target in (model_file, pgm):                                    # random inputs
        rc, out, err = cli(capsys, "run", target)
        assert rc == 0 and "random" in out and "output" in out, err
    rc, out, err = cli(capsys, "run", pgm, "--input", f"input={tmp_path / 'x.npy'}", "--device", "cpu",
                       "--profile", tmp_path / "t.json", "--timeline", tmp_path / "t.png", "--runs", "2")
    assert rc == 0, err
    ops = [e for e in json.loads((tmp_path / "t.json").read_text())["traceEvents"] if e.get("ph") == "X"]
    assert len(ops) == 2 * 3 and (tmp_path / "t.png").exists()
    rc, out, err = cli(capsys, "run", model_file, "--option", "ge.streamMaxParallelNum=2", "--runs", "2")
    assert rc == 0, err
    for target, opts in ((model_file, ["--option", "ge.streamMaxParallelNum=2"]), (pgm, [])):
        rc, out, err = cli(capsys, "streams", target, *opts)
        assert rc == 0 and "Abs_1" in out and "e0" in out, err


def test_cli_demo(capsys, tmp_path, monkeypatch):
    import tempfile
    monkeypatch.setattr(tempfile, "tempdir", str(tmp_path))
    rc, out, err = cli(capsys, "demo")
    assert rc == 0, err
    assert "Abs_1" in out and "Send" in out and "Recv" in out
    folder = next(tmp_path.glob("pyge-demo-*"))
    names = [p.name for p in folder.rglob("*")]
    assert any("RunCustomPass_BeforeAssignLogicStreamSplitAbs" in n for n in names)
    assert any("RunCustomPass_AfterAssignLogicStreamSplitAbs" in n for n in names)
    assert any(n.endswith(".json") for n in names) and any(n.endswith(".png") for n in names)


@pytest.mark.parametrize("argv", [
    ["compile", "{d}/missing.onnx", "-o", "{d}/o.pgm"], ["compile", "{d}/junk.onnx", "-o", "{d}/o.pgm"],
    ["compile", "{m}"], ["run", "{m}", "--input", "input={d}/bad.npy"], ["run", "{m}", "--input", "nope={d}/x.npy"],
    ["run", "{m}", "--option", "ge.bogus=1"], ["run", "{m}", "--option", "ge.enableSingleStream=maybe"],
    ["run", "{m}", "--device", "tpu"], ["streams", "{d}/junk.onnx"], ["run", "{d}/junk.pgm"], ["frobnicate"]])
def test_cli_errors_are_one_line_and_non_zero(capsys, tmp_path, model_file, argv):
    (tmp_path / "junk.onnx").write_bytes(b"not a model")
    (tmp_path / "junk.pgm").write_bytes(b"not a model either")
    np.save(tmp_path / "bad.npy", np.ones(5, np.float32))
    rc, out, err = cli(capsys, *[a.format(d=tmp_path, m=model_file) for a in argv])
    assert rc != 0 and len(err.strip().splitlines()) == 1 and err.startswith("pyge"), err


def test_cli_failing_plugin_and_pass(capsys, tmp_path, monkeypatch, model_file):
    opp = make_opp(tmp_path / "opp", {"vendors/v/custom_fusion_passes/a.py": "import pyge\n"
                                      "pyge.register_custom_pass('Bad').custom_allocate_stream_pass_fn(lambda g, c: 7)\n"})
    monkeypatch.setenv("PYGE_OPP_PATH", str(opp))
    rc, out, err = cli(capsys, "streams", model_file)
    assert rc == 1 and err.strip().splitlines() == ["pyge: error: custom stream pass 'Bad' failed with return code 7: (no message)"]


def test_console_script_is_installed():
    import shutil
    assert shutil.which("pyge") or any(ep.name == "pyge" for ep in
                                        __import__("importlib.metadata").metadata.entry_points(group="console_scripts"))


# -- bad input ---------------------------------------------------------------------------------

@pytest.mark.parametrize("data", [b"", b"\x08\x01garbage\xff" * 8, b"hello"])
def test_corrupt_model_files(tmp_path, data):
    (tmp_path / "bad.onnx").write_bytes(data)
    with pytest.raises(pyge.ModelLoadError, match="bad.onnx") as err:
        pyge.load_onnx(tmp_path / "bad.onnx")
    one_line(err)
    model = pyge.compile(ref_graph())
    model.save(tmp_path / "m.pgm")
    raw = (tmp_path / "m.pgm").read_bytes()
    for i, broken in enumerate((raw[: len(raw) // 2], raw[:-1] + bytes([raw[-1] ^ 0xFF]), data)):
        (tmp_path / f"bad{i}.pgm").write_bytes(broken)
        with pytest.raises(pyge.ModelFileError, match=f"bad{i}.pgm") as err:
            pyge.load_model(tmp_path / f"bad{i}.pgm")
        one_line(err)


def test_unsupported_operator_names_op_and_node():
    b = pyge.GraphBuilder("u")
    v = b.input("input", "float32", SHAPE)
    b.op("FooBar", [v], name="Foo_1", outputs=["output"])
    b.graph.outputs.append(b.graph.value("output"))
    with pytest.raises(pyge.UnsupportedOperatorError, match="FooBar.*Foo_1") as err:
        pyge.compile(b.build())
    one_line(err)


@pytest.mark.parametrize("feeds, culprit", [({"input": np.ones((3, 4), np.float32)}, "shape"),
                                            ({"input": np.ones(SHAPE, np.float64)}, "dtype"),
                                            ({}, "input"), ({"input": np.ones(SHAPE, np.float32), "x": 1}, "'x'"),
                                            ({"input": "text"}, "input")])
def test_wrong_inputs_leave_the_model_usable(feeds, culprit):
    model = split_model()
    with pytest.raises(pyge.InputError, match=culprit) as err:
        model.run(feeds)
    one_line(err)
    np.testing.assert_array_equal(model.run({"input": x_in()})["output"], np.maximum(x_in(), 0) + np.abs(x_in()))


def test_failed_run_names_the_node_and_the_model_stays_usable():
    b = pyge.GraphBuilder("gather")
    x, idx = b.input("x", "float32", (4, 3)), b.input("idx", "int64", (2,))
    g1 = b.op("Gather", [b.op("Abs", [x], name="Abs_1"), idx], name="Gather_1", axis=0)
    g2 = b.op("Gather", [b.op("Relu", [x], name="Relu_1"), idx], name="Gather_2", axis=0)
    b.op("Add", [g1, g2], name="Add_1", outputs=["y"])
    b.graph.outputs.append(b.graph.value("y"))
    model = pyge.compile(b.build(), options={"ge.streamMaxParallelNum": "2"})
    assert model.num_streams == 2
    ones = np.ones((4, 3), np.float32)
    with pytest.raises(pyge.ExecutionError, match="Gather_[12]") as err:
        model.run({"x": ones, "idx": np.array([0, 9])})
    one_line(err)
    assert model.run({"x": ones, "idx": np.array([0, 1])})["y"].tolist() == [[2.0] * 3] * 2
