"""Collectives across two real ranks: gloo on 127.0.0.1, ranks spawned by the test.

Each scenario (rank_worker.py) runs once per module on two processes that find the group
through torchrun's environment variables; the tests below read what each rank recorded.
Every launch is bounded (ranks.launch kills what overruns), and so is every test.
"""
from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path

import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper, numpy_helper

from .ranks import launch

pytestmark = pytest.mark.timeout(120)


def _ok(run: dict, step: str) -> list[dict]:
    """Both ranks' records of `step`, after checking that the step succeeded on each."""
    recs = [r.get(step) for r in run["ranks"]]
    for rank, rec in enumerate(recs):
        assert rec is not None, f"rank {rank} never finished {step}:\n{run['output'][rank]}"
        assert rec["ok"], f"rank {rank} {step}: {rec.get('error')}\n{rec.get('trace', '')}"
    return recs


@pytest.fixture(scope="module")
def main_run(tmp_path_factory):
    run = launch("main", tmp_path_factory.mktemp("main"), timeout_s=100)
    assert run["codes"] == [0, 0], run["output"]
    return run


@pytest.fixture(scope="module")
def dead_run(tmp_path_factory):
    return launch("dead", tmp_path_factory.mktemp("dead"), timeout_s=60)


def test_tensor_parallel_block_equals_the_unsharded_model(main_run):
    for rec in _ok(main_run, "tp_block"):
        assert rec["err"] < 1e-5 and rec["single_err"] < 1e-5
        assert rec["init_by_pyge"] and rec["backend"] == "gloo"     # from RANK, WORLD_SIZE, ...
        assert rec["ar_stream"] != rec["mm_stream"] == rec["branch_stream"]
        assert rec["streams"][rec["ar_stream"]] == ["AllReduce"]


def test_allreduce_allgather_alltoall_follow_onnxruntime(main_run):
    for rec in _ok(main_run, "ops"):
        assert rec["bad"] == []
        assert rec["dtypes"] == {"s1": "float32", "s2": "float64", "g": "float32", "f": "bool", "x": "int64"}


def test_from_torch_maps_the_functional_collectives(main_run):
    for rec in _ok(main_run, "torch_export"):
        assert "com.microsoft:AllReduce" in rec["ops"]
        assert rec["ops2"] == [":Div", "com.microsoft:AllGather", "com.microsoft:AllReduce",
                               "com.microsoft:AllToAll"]
        assert rec["vs_eager"] < 1e-6 and rec["vs_ref"] < 1e-5 and rec["others"] < 1e-6


def test_collectives_on_two_streams_are_issued_in_one_order(main_run):
    recs = _ok(main_run, "order")
    for rec in recs:
        assert rec["streams"][0] != rec["streams"][1]
        assert len(rec["edge"]) == 1 and "A@" in rec["edge"][0] and "-> B@" in rec["edge"][0]
        assert rec["ok_runs"] == 5
        assert re.search(r"collectives '[AB]' .* and '[AB]' .* are not ordered", rec["loose_refused"])


def test_a_timed_out_collective_names_node_and_rank_in_time(main_run):
    rec = _ok(main_run, "timeout")[0]
    assert rec["first"].startswith("while executing node 'lonely_AllReduce' (AllReduce) on rank 0 of 2: "
                                   "TimeoutError: no answer within pyge.collectiveTimeout=2 s")
    assert 1.9 < rec["first_s"] < 2 + 5          # the timeout plus a bounded margin
    assert "broken by an earlier collective failure" in rec["again"] and rec["again_s"] < 1
    assert all(r["destroy_s"] < 10 for r in _ok(main_run, "timeout"))


def test_a_fresh_group_compiles_and_runs_after_a_failure(main_run):
    for rec in _ok(main_run, "fresh_group"):
        assert rec["err"] < 1e-5


def test_a_dead_rank_is_an_error_on_the_survivor(dead_run):
    assert dead_run["codes"] == [0, 17], dead_run["output"]
    rec = _ok(dead_run, "dead_rank")[0]
    assert rec["error_msg"].startswith("while executing node 'AllReduce' (AllReduce) on rank 0 of 2: ")
    assert rec["error_s"] < 10                    # the peer's sockets close: long before the timeout
    alone = dead_run["ranks"][0]["alone_afterwards"]
    assert alone["ok"] and alone["err"] < 1e-5, alone


def allreduce_model(path: Path) -> None:
    w = numpy_helper.from_array(np.eye(4, dtype=np.float32) * 2, "w")
    nodes = [helper.make_node("MatMul", ["x", "w"], ["m"], name="MatMul_1"),
             helper.make_node("AllReduce", ["m"], ["y"], name="AllReduce_1", domain="com.microsoft")]
    g = helper.make_graph(nodes, "allreduce", [helper.make_tensor_value_info("x", TensorProto.FLOAT, [2, 4])],
                          [helper.make_tensor_value_info("y", TensorProto.FLOAT, [2, 4])], [w])
    onnx.save(helper.make_model(g, opset_imports=[helper.make_opsetid("", 17),
                                                  helper.make_opsetid("com.microsoft", 1)]), path)


def test_pyge_run_under_torchrun(tmp_path):
    model = tmp_path / "allreduce.onnx"
    allreduce_model(model)
    torchrun = Path(sys.executable).with_name("torchrun")
    env = {**os.environ, "OMP_NUM_THREADS": "1"}
    # Each rank's output to a file of its own: two ranks writing one pipe interleave.
    done = subprocess.run([str(torchrun), "--standalone", "--nproc-per-node", "2", "--redirects", "3",
                           "--log-dir", str(tmp_path / "logs"), "-m", "pyge", "run", str(model)],
                          capture_output=True, text=True, timeout=100, env=env)
    outs = {p.parent.name: p.read_text() for p in (tmp_path / "logs").glob("*/attempt_0/*/stdout.log")}
    # each rank's stderr too: a rank seen dying in teardown (SIGABRT after its output) says why there
    errs = "".join(f"rank {p.parent.name} stderr:\n{p.read_text()[-1500:]}"
                   for p in sorted((tmp_path / "logs").glob("*/attempt_0/*/stderr.log")))
    assert done.returncode == 0, done.stderr[-2000:] + "".join(outs.values())[-2000:] + errs
    rows = [[line for line in outs[r].splitlines() if line.startswith("y ")] for r in ("0", "1")]
    assert len(rows[0]) == 1 and rows[0] == rows[1], outs      # two ranks, the same sums
