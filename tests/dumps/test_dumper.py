"""Dumps written by pyge.compile: names, order, levels, modes, stream attributes, errors."""
from __future__ import annotations

import numpy as np
import pytest

import pyge
from pyge.dumps import BUILT_STAGE, Dumper, dump_file_name, load_dump
from pyge.dumps.config import FULL, NO_WEIGHTS, STRUCTURE
from pyge.dumps.convert import graph_model
from pyge.errors import DumpError, OptionError

from ._helpers import compile_reference, dumps_in, node_attrs

BEFORE = "RunCustomPass_BeforeAssignLogicStreamSplitAbs"
AFTER = "RunCustomPass_AfterAssignLogicStreamSplitAbs"
DETAIL = ["InferShapes", "FoldConstants", "FuseConvBN", "AssignLogicStream", "StreamPolicy"]


@pytest.fixture
def dump_env(tmp_path, monkeypatch):
    def set_env(mode="1", level=None):
        monkeypatch.setenv("DUMP_GE_GRAPH", mode)
        monkeypatch.setenv("DUMP_GRAPH_PATH", str(tmp_path))
        if level is None:
            monkeypatch.delenv("DUMP_GRAPH_LEVEL", raising=False)
        else:
            monkeypatch.setenv("DUMP_GRAPH_LEVEL", level)
        return tmp_path
    return set_env


def test_file_name():
    assert dump_file_name(7, 3, "RunCustomPass_AfterAssignLogicStreamX") == \
        "ge_onnx_00000007_graph_3_RunCustomPass_AfterAssignLogicStreamX.pbtxt"
    assert dump_file_name(1, 1, "a/b c") == "ge_onnx_00000001_graph_1_a_b_c.pbtxt"


def test_nothing_written_when_unset(tmp_path, monkeypatch):
    monkeypatch.delenv("DUMP_GE_GRAPH", raising=False)
    monkeypatch.chdir(tmp_path)
    monkeypatch.setenv("DUMP_GRAPH_PATH", str(tmp_path))
    compile_reference()
    assert list(tmp_path.iterdir()) == []
    assert not Dumper.from_env(1).enabled


def test_default_level_custom_pass_and_built(dump_env):
    folder = dump_env()
    model = compile_reference()
    dumps = dumps_in(folder)
    assert [d[2] for d in dumps] == [BEFORE, AFTER, BUILT_STAGE]
    seqs = [d[0] for d in dumps]
    assert seqs == sorted(seqs) and len(set(seqs)) == 3
    before, after, built = (node_attrs(d[3]) for d in dumps)
    assert before["Abs_1"]["stream_id"] == before["Relu_1"]["stream_id"]
    assert after["Abs_1"]["stream_id"] != after["Relu_1"]["stream_id"]
    assert built["Abs_1"]["stream_id"] == model.stream_of("Abs_1") == 1
    for attrs in (before, after, built):   # GE's attribute name, on every node
        assert all("stream_id" in a and "_stream_id" not in a and "_engine" in a for a in attrs.values())


def test_built_graph_has_send_recv_with_event_ids(dump_env):
    folder = dump_env()
    model = compile_reference()
    mp = load_dump(dumps_in(folder)[-1][3])
    kinds = [n.op_type for n in mp.graph.node]
    assert kinds.count("Send") == kinds.count("Recv") == len(model.events) >= 1
    names = [n.name for n in mp.graph.node]
    attrs = node_attrs(dumps_in(folder)[-1][3])
    ev = model.events[0]
    send = next(n for n in mp.graph.node if n.op_type == "Send")
    recv = next(n for n in mp.graph.node if n.op_type == "Recv")
    assert attrs[send.name]["event_id"] == attrs[recv.name]["event_id"] == ev.event_id
    assert attrs[send.name]["send_event_id_list"] == attrs[recv.name]["recv_event_id_list"] == [ev.event_id]
    assert attrs[send.name]["stream_id"] == ev.src_stream and attrs[recv.name]["stream_id"] == ev.dst_stream
    assert names.index(ev.src) < names.index(send.name) < names.index(recv.name) < names.index(ev.dst)
    assert send.domain == recv.domain == "pyge"
    assert any(o.domain == "pyge" for o in mp.opset_import)


def test_level_1_all_stages_in_pipeline_order(dump_env):
    folder = dump_env(level="1")
    compile_reference()
    stages = [d[2] for d in dumps_in(folder)]
    assert stages[:len(DETAIL)] == DETAIL
    assert stages.index(BEFORE) < stages.index(AFTER) < stages.index("RenumberStreams")
    assert stages[-1] == BUILT_STAGE


def test_level_3_built_only(dump_env):
    folder = dump_env(level="3")
    compile_reference()
    assert [d[2] for d in dumps_in(folder)] == [BUILT_STAGE]


def test_level_substring(dump_env):
    folder = dump_env(level="AfterAssign|Infer")
    compile_reference()
    assert [d[2] for d in dumps_in(folder)] == ["InferShapes", AFTER]


def test_numbers_continue_across_compiles(dump_env):
    folder = dump_env(level="3")
    compile_reference()
    compile_reference(with_pass=False)
    (s1, g1, _, _), (s2, g2, _, _) = dumps_in(folder)
    assert s2 > s1 and g2 != g1


def test_malformed_env_is_option_error(dump_env, monkeypatch):
    dump_env()
    monkeypatch.setenv("DUMP_GE_GRAPH", "full")
    with pytest.raises(OptionError, match="DUMP_GE_GRAPH"):
        compile_reference()


def test_unwritable_folder_fails_before_compiling(tmp_path, monkeypatch):
    blocker = tmp_path / "blocker"
    blocker.write_text("not a folder")
    monkeypatch.setenv("DUMP_GE_GRAPH", "1")
    monkeypatch.setenv("DUMP_GRAPH_PATH", str(blocker / "dumps"))
    with pytest.raises(DumpError, match="blocker"):
        compile_reference()


def _weighted_graph():
    b = pyge.GraphBuilder("w")
    x = b.input("x", "float32", (2, 4))
    w = b.initializer("w", np.arange(16, dtype=np.float32).reshape(4, 4))
    y = b.op("MatMul", [x, w], name="MatMul_0")
    b.output(b.op("Relu", [y], name="Relu_0"), "y")
    g = b.build()
    for i, n in enumerate(g.nodes):
        n.stream_id, n.engine = i, "compute"
    return g


def test_modes():
    g = _weighted_graph()
    full = load_text(graph_model(g, FULL))
    assert full.graph.initializer[0].raw_data
    from pyge.dumps.convert import finish
    light = finish(graph_model(g, NO_WEIGHTS), NO_WEIGHTS, {})
    assert len(light.graph.initializer) == 0           # weights left out become typed inputs
    w = next(v for v in light.graph.input if v.name == "w")
    assert [d.dim_value for d in w.type.tensor_type.shape.dim] == [4, 4]
    bare = finish(graph_model(g, STRUCTURE), STRUCTURE, {})
    assert len(bare.graph.initializer) == 0 and len(bare.graph.value_info) == 0
    assert [n.op_type for n in bare.graph.node] == ["MatMul", "Relu", "Identity"]


def load_text(mp):
    from pyge.dumps.convert import parse_text, to_text
    return parse_text(to_text(mp))


def test_subgraph_nodes_carry_streams():
    def branch(name, value):
        b = pyge.GraphBuilder(name)
        b.output(b.op("Identity", [b.constant(np.full((2,), value, np.float32), f"{name}_c")],
                      name=f"{name}_id"), f"{name}_out")
        return b.build()
    b = pyge.GraphBuilder("main")
    c = b.input("cond", "bool", ())
    out = b.op("If", [c], name="If_0", then_branch=branch("then", 1.0), else_branch=branch("else", 2.0))
    b.output(out, "y")
    g = b.build()
    for sg in g.all_graphs():
        for n in sg.nodes:
            n.stream_id, n.engine = 0, "compute"
    mp = load_text(graph_model(g, FULL))
    if_node = next(n for n in mp.graph.node if n.op_type == "If")
    for a in if_node.attribute:
        if a.name.endswith("branch"):
            assert a.g.node and all(any(x.name == "stream_id" for x in n.attribute) for n in a.g.node)


def test_dumper_methods_are_no_ops_when_disabled():
    d = Dumper(None, 5)
    g = _weighted_graph()
    assert d.stage("InferShapes", g, level=1) is None and d.built(g, None) is None and d.files == []


def test_every_dump_is_valid_onnx_apart_from_pyge_attributes(dump_env):
    import onnx
    folder = dump_env(level="1")
    compile_reference()
    dumps = dumps_in(folder)
    assert len(dumps) >= 7
    for _, _, stage, path in dumps:
        mp = load_dump(path)
        for n in mp.graph.node:
            keep = [a for a in n.attribute if not a.name.startswith("_") and a.name != "stream_id"]
            del n.attribute[:]
            n.attribute.extend(keep)
        onnx.checker.check_model(mp, full_check=True)


def test_write_failure_is_dump_error_naming_the_file(tmp_path, monkeypatch):
    folder = tmp_path / "gone"
    monkeypatch.setenv("DUMP_GE_GRAPH", "3")
    monkeypatch.setenv("DUMP_GRAPH_PATH", str(folder))
    d = Dumper.from_env(9)
    folder.rmdir()   # removed after the check, e.g. by another process
    with pytest.raises(DumpError, match=r"gone/ge_onnx_\d{8}_graph_9_X\.pbtxt"):
        d.stage("X", _weighted_graph())


@pytest.mark.parametrize("mode", ["1", "2", "3"])
@pytest.mark.parametrize("level", ["1", "2", "3"])
def test_every_dump_loads_with_a_plain_onnx_load(dump_env, mode, level):
    """Weights a mode leaves out are left out, not pointed to an external file that does not
    exist, so onnx.load (which follows external data) reads every dump as it is."""
    import onnx
    folder = dump_env(mode=mode, level=level)
    b = pyge.GraphBuilder("weights")
    x = b.input("x", "float32", (2, 4))
    w = b.initializer("w", np.arange(16, dtype=np.float32).reshape(4, 4))
    k = b.op("Constant", [], name="k", value=np.ones((2, 4), np.float32))
    y = b.op("Add", [b.op("MatMul", [x, w], name="MatMul_0"), k], name="Add_0")
    b.output(b.op("Abs", [y], name="Abs_1"), "y")
    compile_reference(with_pass=False, graph=b.build(), options={"ge.exec.enableFusion": "false"})
    dumps = dumps_in(folder)
    assert dumps
    for _, _, stage, path in dumps:
        mp = onnx.load(path)                       # .pbtxt: onnx reads the text format
        assert "Abs_1" in {n.name for n in mp.graph.node}, stage
        if mode == "2":
            assert "w" in {v.name for v in mp.graph.input}
        tensors = list(mp.graph.initializer) + [a.t for n in mp.graph.node for a in n.attribute if a.HasField("t")]
        assert all(t.data_location == onnx.TensorProto.DEFAULT and not t.external_data for t in tensors)


def test_after_dump_is_written_when_the_pass_fails(dump_env):
    folder = dump_env()

    def moves_then_fails(graph, ctx):
        ctx.set_stream_id(graph.find_node("Abs_1"), ctx.allocate_next_stream_id())
        return pyge.GRAPH_FAILED
    with pyge.custom_passes_scope():
        pyge.register_custom_pass("Fails").custom_allocate_stream_pass_fn(moves_then_fails)
        with pytest.raises(pyge.CustomPassError):
            pyge.compile(pyge.examples.reference_graph((2, 2)))
    dumps = dumps_in(folder)
    assert [d[2] for d in dumps] == ["RunCustomPass_BeforeAssignLogicStreamFails",
                                     "RunCustomPass_AfterAssignLogicStreamFails"]
    after = node_attrs(dumps[1][3])
    assert after["Abs_1"]["stream_id"] != after["Relu_1"]["stream_id"]   # what it did before failing


def test_the_dag_pass_is_dumped_as_a_stream_pass(dump_env):
    folder = dump_env()
    compile_reference(options={"ge.autoMultistreamParallelMode": "LoadBalance:2"})
    stages = [d[2] for d in dumps_in(folder)]
    assert stages == ["RunCustomPass_BeforeAssignLogicStreamMiniDAGStreamPass",
                      "RunCustomPass_AfterAssignLogicStreamMiniDAGStreamPass", BEFORE, AFTER, BUILT_STAGE]


def test_a_fused_node_names_the_nodes_it_replaced(dump_env):
    folder = dump_env(level="3")
    b = pyge.GraphBuilder("fuse")
    x = b.input("x", "float32", (1, 2, 4, 4))
    w = b.initializer("w", np.ones((2, 2, 1, 1), np.float32))
    y = b.op("Relu", [b.op("Conv", [x, w], name="Conv_0")], name="Relu_0")
    b.output(b.op("Abs", [y], name="Abs_0"), "out")
    model = pyge.compile(b.build())
    attrs = node_attrs(dumps_in(folder)[-1][3])
    assert attrs["Conv_0"]["op_type"] == "FusedConv"
    assert [s.decode() for s in attrs["Conv_0"]["_datadump_original_op_names"]] == ["Conv_0", "Relu_0"]
    assert model.stream_of("Relu_0") == model.stream_of("Conv_0")
