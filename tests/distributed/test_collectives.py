"""Collectives in one process: the process group, compile-time checks, streams, the issue
order and its verifier, offline models. (Two real ranks: test_collectives_ranks.py.)"""
from __future__ import annotations

import threading

import numpy as np
import pytest

import pyge
from pyge import tensor_parallel as tp
from pyge.kernels.collective import TIMEOUT_ATTR
from pyge.options import parse_options

from .conftest import MS, feeds_for, one_collective

SHAPE = tp.BlockShape(batch=8, model=16, hidden=32, branch=16)


def test_no_group_and_no_torchrun_says_how_to_launch(no_env):
    with pytest.raises(pyge.DistributedError) as info:
        pyge.compile(tp.block_graph(SHAPE, 0, 1))
    msg = str(info.value)
    assert "\n" not in msg and "'AllReduce'" in msg and "torchrun --nproc-per-node" in msg
    assert "RANK, WORLD_SIZE, MASTER_ADDR, MASTER_PORT are not set" in msg


def test_pyge_run_without_torchrun_says_how_to_launch(no_env, tmp_path, capsys):
    from pyge.cli import main
    from .test_collectives_ranks import allreduce_model
    allreduce_model(tmp_path / "allreduce.onnx")
    assert main(["run", str(tmp_path / "allreduce.onnx")]) != 0
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1 and "torchrun --nproc-per-node" in err


def test_a_model_without_collectives_needs_no_group(no_env):
    m = pyge.compile(pyge.examples.reference_graph((4, 4)))
    assert "collectives" in m.plan.meta and m.plan.meta["collectives"] == []


def test_unreachable_master_is_a_distributed_error(no_env, monkeypatch):
    import socket
    s = socket.socket()
    s.bind(("127.0.0.1", 0))            # a port nobody listens on (bound, never accepting)
    env = {"RANK": "1", "WORLD_SIZE": "2", "MASTER_ADDR": "127.0.0.1", "MASTER_PORT": str(s.getsockname()[1])}
    for k, v in env.items():
        monkeypatch.setenv(k, v)
    try:
        with pytest.raises(pyge.DistributedError, match="initialising a gloo process group from the environment"):
            pyge.compile(one_collective(), options={"pyge.collectiveTimeout": "1"})
    finally:
        s.close()


def test_the_callers_group_is_used_and_collectives_get_their_own_stream(group):
    g = tp.block_graph(SHAPE, 0, 1)
    m = pyge.compile(g)
    ar = m.stream_of("AllReduce")
    assert m.streams[ar] == ["AllReduce"]                    # the independent engine's stream
    assert m.stream_of("RowParallel_MatMul") == m.stream_of("Branch_MatMul_1") != ar
    assert {(e.src, e.dst) for e in m.events} == {("RowParallel_MatMul", "AllReduce"), ("AllReduce", "Bias")}
    x = tp.block_inputs(SHAPE)
    out = m.run(x)
    ref = tp.reference(x["x"], tp.full_weights(SHAPE))
    np.testing.assert_allclose(out["out"], ref["out"], rtol=1e-5, atol=1e-5)
    single = pyge.compile(g, options={"ge.enableSingleStream": "true"})
    assert single.num_streams == 1
    np.testing.assert_allclose(single.run(x)["out"], out["out"], rtol=1e-6, atol=1e-6)


def test_on_the_cpu_a_collective_runs_on_its_streams_thread(group):
    m = pyge.compile(tp.block_graph(SHAPE, 0, 1))
    seen: dict[int, set] = {}

    class Hooks:
        def before(self, node, stream):
            seen.setdefault(stream, set()).add(threading.get_ident())

        def after(self, node, stream):
            pass
    m.run(tp.block_inputs(SHAPE), hooks=Hooks())
    assert all(len(threads) == 1 for threads in seen.values())
    ar, mm = m.stream_of("AllReduce"), m.stream_of("RowParallel_MatMul")
    assert seen[ar] != seen[mm]


@pytest.mark.parametrize("op_type,attrs", [("AllGather", {"group_size": 2}), ("AllToAll", {"group_size": 3})])
def test_group_size_must_be_the_world_size(group, op_type, attrs):
    with pytest.raises(pyge.DistributedError, match=rf"node '{op_type}' \({op_type}\) has group_size="):
        pyge.compile(one_collective(op_type, **attrs))


def test_types_axis_and_chunks_are_checked(group2):
    with pytest.raises(pyge.GraphError, match="input 'x' is int64; AllReduce accepts float16"):
        pyge.compile(one_collective("AllReduce", dtype="int64"))
    with pytest.raises(pyge.GraphError, match="axis 2 is out of range for a rank-2 input"):
        pyge.compile(one_collective("AllGather", group_size=2, axis=2))
    with pytest.raises(pyge.GraphError, match="15 elements, which cannot be cut into 2 equal chunks"):
        pyge.compile(one_collective("AllToAll", shape=(3, 5), group_size=2))


def test_output_types_are_inferred_for_the_consumers(group2):
    b = pyge.GraphBuilder("gather_then_relu")
    x = b.input("x", "float32", (4, 6))
    g = b.op("AllGather", [b.op("Relu", [x], name="r")], name="ag", domain=MS, group_size=2, axis=-1)
    b.output(b.op("Sigmoid", [g], name="s"), "y")
    m = pyge.compile(b.build())
    v = {pv.name: pv for pv in m.plan.values}
    assert (v["ag_out"].dtype, v["ag_out"].shape) == ("float32", (4, 12))
    assert (v["y"].dtype, v["y"].shape) == ("float32", (4, 12))
    assert m.memory.peak_bytes > 0          # typed values are planned


def test_timeout_option(group):
    assert parse_options({})["pyge.collectiveTimeout"] == 60.0
    assert parse_options({"pyge.collectiveTimeout": "2.5"})["pyge.collectiveTimeout"] == 2.5
    for bad in ("0", "-1", "soon", "1e9"):
        with pytest.raises(pyge.OptionError, match="pyge.collectiveTimeout"):
            parse_options({"pyge.collectiveTimeout": bad})
    m = pyge.compile(one_collective(), options={"pyge.collectiveTimeout": "7"})
    assert m.graph.find_node("AllReduce").attrs[TIMEOUT_ATTR] == 7.0


def _two_collectives(labels=("a", "b"), chained=False) -> pyge.Graph:
    b = pyge.GraphBuilder("two")
    x = b.input("x", "float32", (4, 4))
    first = b.op("AllReduce", [b.op("Relu", [x], name="r")], name="A", domain=MS, _stream_label=labels[0])
    src = first if chained else b.op("Tanh", [x], name="t")
    b.output(first, "a")
    b.output(b.op("AllReduce", [src], name="B", domain=MS, _stream_label=labels[1]), "b")
    return b.build()


def test_collectives_on_two_streams_are_ordered_by_an_event(group):
    m = pyge.compile(_two_collectives())
    assert m.stream_of("A") != m.stream_of("B")
    assert [(e.src, e.dst, e.reason) for e in m.events if e.src == "A"] == [("A", "B", "control")]
    assert m.plan.meta["collectives"] == [m.plan.node_index()["A"], m.plan.node_index()["B"]]
    m.verify()
    x = feeds_for(m.graph)
    out = m.run(x)
    np.testing.assert_allclose(out["b"], np.tanh(x["x"]), rtol=1e-6)


def test_an_order_already_in_the_plan_costs_no_event(group):
    """B reads A's result: the data event orders them, the added control edge adds nothing."""
    m = pyge.compile(_two_collectives(chained=True))
    assert m.stream_of("A") != m.stream_of("B")
    assert [(e.src, e.dst, e.reason) for e in m.events if e.dst == "B"] == [("A", "B", "data")]


def test_one_stream_needs_no_edge(group):
    m = pyge.compile(_two_collectives(labels=("same", "same")))
    assert m.stream_of("A") == m.stream_of("B")
    b = m.plan.nodes[m.plan.node_index()["B"]]
    assert m.plan.node_index()["A"] not in b.control_preds


def test_a_custom_stream_pass_cannot_unorder_collectives(group, no_custom_passes):
    def split(graph, ctx):
        for n in graph.get_direct_nodes():
            if n.name == "B":
                ctx.set_stream_id(n, ctx.allocate_next_stream_id())
        return pyge.GRAPH_SUCCESS
    pyge.register_custom_pass("SplitB").custom_allocate_stream_pass_fn(split)
    m = pyge.compile(_two_collectives(labels=("", "")))
    assert m.stream_of("A") != m.stream_of("B")
    assert any(e.src == "A" and e.dst == "B" for e in m.events)
    m.verify()


def _no_order(plan, graph):
    """order_collectives doing nothing: its contract asks for the list, so an empty one."""
    plan.meta["collectives"] = []
    return 0


def _unordered_compiles(monkeypatch):
    """Compile plans whose collectives are left unordered, on purpose: without the invariant
    checks of the test suite, which would refuse such a plan before verify() is asked."""
    import pyge.passes.sync.collectives as pc
    monkeypatch.setattr(pc, "order_collectives", _no_order)
    monkeypatch.setenv("PYGE_CHECK_INVARIANTS", "0")


def test_verify_refuses_unordered_collectives(group, monkeypatch):
    _unordered_compiles(monkeypatch)
    m = pyge.compile(_two_collectives(), options={"pyge.verify": "false"})
    with pytest.raises(pyge.VerificationError, match="collectives 'A' .* and 'B' .* are not ordered"):
        m.verify()


def test_verify_refuses_a_corrupt_collective_list(group):
    m = pyge.compile(_two_collectives())
    m.plan.meta["collectives"] = [0, 99]
    with pytest.raises(pyge.VerificationError, match="not a list of node indices"):
        m.verify()


def test_verify_recognises_collectives_by_op_type_alone(group, monkeypatch):
    m = pyge.compile(_two_collectives())
    m.plan.meta.pop("collectives")
    m.verify()
    _unordered_compiles(monkeypatch)
    loose = pyge.compile(_two_collectives(), options={"pyge.verify": "false"})
    loose.plan.meta.pop("collectives", None)
    with pytest.raises(pyge.VerificationError, match="are not ordered"):
        loose.verify()


def test_offline_model_keeps_collectives_and_their_order(group, tmp_path):
    m = pyge.compile(_two_collectives(), options={"pyge.collectiveTimeout": "9"})
    m.save(tmp_path / "two.pgm")
    loaded = pyge.load_model(tmp_path / "two.pgm")
    assert loaded.plan.meta["collectives"] == m.plan.meta["collectives"]
    assert loaded.graph.find_node("B").attrs[TIMEOUT_ATTR] == 9.0
    x = feeds_for(m.graph)
    np.testing.assert_allclose(loaded.run(x)["b"], m.run(x)["b"])


def test_a_broken_group_fails_at_once(group):
    from pyge.kernels.collective_group import mark_broken
    m = pyge.compile(one_collective())
    m.run(feeds_for(m.graph))                 # kernels built on a healthy group
    mark_broken(group, "node 'X' (AllReduce) on rank 0 of 1: TimeoutError")
    with pytest.raises(pyge.ExecutionError, match="rank 0 of 1: DistributedError: the default process group is broken"):
        m.run(feeds_for(m.graph))
    with pytest.raises(pyge.DistributedError, match="broken by an earlier failure"):
        pyge.compile(one_collective())


def test_an_nccl_only_group_cannot_serve_a_cpu_model(group, monkeypatch):
    import torch.distributed as dist
    monkeypatch.setattr(dist, "get_backend", lambda group=None: "nccl")
    with pytest.raises(pyge.DistributedError, match=r"backend \(nccl\) cannot run collectives on cpu tensors"):
        pyge.compile(one_collective())


def test_from_torch_refuses_reductions_allreduce_cannot_express(group):
    import torch
    import torch.distributed as dist
    import torch.distributed._functional_collectives as fc

    class Max(torch.nn.Module):
        def forward(self, x):
            return fc.all_reduce(x, "max", dist.group.WORLD)
    with pytest.raises(pyge.UnsupportedOperatorError, match="reduce op 'max'"):
        pyge.from_torch(Max(), (torch.ones(2, 2),))


def test_from_torch_does_not_fold_collectives_of_constants(group):
    import torch
    import torch.distributed as dist
    import torch.distributed._functional_collectives as fc

    class OfWeight(torch.nn.Module):
        def __init__(self):
            super().__init__()
            self.register_buffer("w", torch.ones(3))

        def forward(self, x):
            return x + fc.all_reduce(self.w, "sum", dist.group.WORLD)
    g = pyge.from_torch(OfWeight(), (torch.zeros(3),))
    assert [n.op_type for n in g.nodes if n.domain == MS] == ["AllReduce"]
    np.testing.assert_allclose(pyge.compile(g).run({"x": np.zeros(3, np.float32)})["output_0"], np.ones(3))


def test_a_collective_inside_an_if_body_is_ordered_with_the_others(group):
    from onnx import TensorProto, helper
    vi = helper.make_tensor_value_info
    then = helper.make_graph([helper.make_node("AllReduce", ["x"], ["t"], name="InnerAllReduce",
                                               domain=MS)], "then", [], [vi("t", TensorProto.FLOAT, [4])])
    other = helper.make_graph([helper.make_node("Neg", ["x"], ["e"], name="Neg")], "else", [],
                              [vi("e", TensorProto.FLOAT, [4])])
    nodes = [helper.make_node("If", ["c"], ["y"], name="Branch", then_branch=then, else_branch=other),
             helper.make_node("AllReduce", ["x"], ["z"], name="Outer", domain=MS, _stream_label="own")]
    g = helper.make_graph(nodes, "if_collective", [vi("c", TensorProto.BOOL, []), vi("x", TensorProto.FLOAT, [4])],
                          [vi("y", TensorProto.FLOAT, [4]), vi("z", TensorProto.FLOAT, [4])])
    mp = helper.make_model(g, opset_imports=[helper.make_opsetid("", 17), helper.make_opsetid(MS, 1)])
    m = pyge.compile(pyge.load_onnx(mp))
    idx = m.plan.node_index()
    assert m.plan.meta["collectives"] == sorted([idx["Branch"], idx["Outer"]])
    assert m.stream_of("Branch") != m.stream_of("Outer")
    assert any({e.src, e.dst} == {"Branch", "Outer"} for e in m.events)
    x = np.arange(4, dtype=np.float32)
    out = m.run({"c": np.array(True), "x": x})
    np.testing.assert_allclose(out["y"], x)
    np.testing.assert_allclose(out["z"], x)


def test_a_group_pyge_made_is_destroyed_at_exit_and_a_callers_is_not(no_env, monkeypatch):
    """The group pyge initialised from torchrun's environment is pyge's to destroy, at exit;
    a group the caller initialised stays the caller's. (The abort at exit that torchrun once
    showed came from gloo's worker releasing tensors late: test_collective_release.py.)"""
    import torch.distributed as dist
    from pyge.kernels import collective_group as cg
    store = dist.TCPStore("127.0.0.1", 0, 1, is_master=True, wait_for_workers=False)
    for k, v in {"RANK": "0", "WORLD_SIZE": "1", "MASTER_ADDR": "127.0.0.1",
                 "MASTER_PORT": str(store.port), "TORCHELASTIC_USE_AGENT_STORE": "True"}.items():
        monkeypatch.setenv(k, v)
    registered: list = []
    monkeypatch.setattr(cg.atexit, "register", registered.append)
    pyge.compile(one_collective())
    assert registered == [cg._destroy_own_group] and cg.initialised_by_pyge(dist.group.WORLD)
    cg._destroy_own_group()
    assert not dist.is_initialized()
    dist.init_process_group("gloo", store=dist.HashStore(), rank=0, world_size=1)
    try:
        cg._destroy_own_group()
        assert dist.is_initialized()
    finally:
        dist.destroy_process_group()
