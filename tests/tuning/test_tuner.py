"""The tuner: candidates, pruning, never slower than single stream, policy files, `pyge tune`."""
from __future__ import annotations

import json

import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper, numpy_helper

import pyge
from pyge import cli
from pyge.tuning import OpCosts, measure_costs, random_feeds, static_costs, tune
from pyge.tuning.tuner import Candidate, _decide


def _branchy_onnx(branches: int = 4, n: int = 96) -> onnx.ModelProto:
    """x -> Relu -> `branches` independent MatMul->Tanh chains -> Sum."""
    rng = np.random.default_rng(0)
    nodes = [helper.make_node("Relu", ["x"], ["r"], name="root")]
    inits, outs = [], []
    for i in range(branches):
        w = numpy_helper.from_array(rng.standard_normal((n, n)).astype(np.float32) / n, f"w{i}")
        inits.append(w)
        nodes.append(helper.make_node("MatMul", ["r", f"w{i}"], [f"m{i}"], name=f"mm{i}"))
        nodes.append(helper.make_node("Tanh", [f"m{i}"], [f"t{i}"], name=f"tanh{i}"))
        outs.append(f"t{i}")
    nodes.append(helper.make_node("Sum", outs, ["y"], name="join"))
    g = helper.make_graph(nodes, "branchy", [helper.make_tensor_value_info("x", TensorProto.FLOAT, [n, n])],
                          [helper.make_tensor_value_info("y", TensorProto.FLOAT, [n, n])], inits)
    return helper.make_model(g, opset_imports=[helper.make_opsetid("", 17)])


def _chain_graph():
    b = pyge.GraphBuilder("chain")
    v = b.input("x", "float32", (8, 8))
    for i in range(5):
        v = b.op("Relu" if i % 2 else "Abs", [v], name=f"c{i}")
    b.graph.outputs.append(v)
    return b.build()


def test_simulated_tuning_tries_every_policy_and_writes_a_reproducible_file(tmp_path):
    g = pyge.load_onnx(_branchy_onnx())
    res = tune(g, "cpu", measure=False, stream_counts=[2, 4], top=2)
    names = [c.name for c in res.candidates]
    assert names[:3] == ["single", "single_again", "ge"]
    for p in ("critical_path", "min_streams", "list_schedule", "ge_LoadBalance", "ge_MainStream"):
        assert any(n.startswith(p) for n in names)
    assert res.best.name != "single" and res.best.sim_s < res.single.sim_s
    text = res.table()
    assert "chosen:" in text and all(n in text for n in names)
    path = tmp_path / "p.json"
    res.write(path)
    data = json.loads(path.read_text())
    assert data["version"] == 1 and data["tuned"]["choice"] == res.best.name
    m = pyge.compile(g, options={"pyge.policyFile": str(path)})
    assert [(pn.name, pn.stream) for pn in m.plan.nodes] == \
        [(pn.name, pn.stream) for pn in res.best.model.plan.nodes]


def test_duplicate_plans_are_listed_but_not_retried():
    res = tune(_chain_graph(), "cpu", measure=False, stream_counts=[2])
    dup = [c for c in res.candidates if c.same_as is not None]
    assert dup and all(c.note.startswith("same plan as") for c in dup)
    assert res.best is res.single                 # a chain: nothing to gain, single stream kept


def test_measured_tuning_is_never_slower_than_single_stream(tmp_path):
    g = pyge.load_onnx(_branchy_onnx())
    res = tune(g, "cpu", stream_counts=[2], top=2, budget_s=2.0, min_rounds=5, max_rounds=12)
    assert res.costs.source == "measured" and set(res.costs.times) == {n.name for n in res.single.model.graph.nodes}
    timed = [c for c in res.candidates if c.times]
    assert res.single in timed and len(timed) >= 3 and all(len(c.times) >= 5 for c in timed)
    assert res.best is res.single or res.best.spread.low > 1.02
    control = next(c for c in res.candidates if c.name == "single_again")
    assert control.times and control.same_as is None      # timed, though its plan is single's
    assert res.elapsed_s < 60


def test_a_candidate_must_beat_single_by_the_margin():
    g = pyge.load_onnx(_branchy_onnx())
    res = tune(g, "cpu", measure=False, stream_counts=[2], min_gain=0.99)
    assert res.best is res.single and "not beyond the spread" in " ".join(c.note for c in res.candidates)


def test_costs_round_trip_and_static_fallback(tmp_path):
    g = pyge.load_onnx(_branchy_onnx(branches=2, n=16))
    c = measure_costs(g, "cpu", runs=2, warmup=1)
    assert c.times and all(t > 0 for t in c.times.values())
    c.save(tmp_path / "c.json")
    back = OpCosts.load(tmp_path / "c.json")
    assert back.times == pytest.approx(c.times, rel=1e-3, abs=1e-9) and back.threads == c.threads
    compiled = pyge.compile(g).graph
    s = static_costs(compiled, "cuda")
    assert set(s.times) == {n.name for n in compiled.nodes} and s.source == "static"
    feeds = random_feeds(g)
    assert feeds["x"].shape == (16, 16) and feeds["x"].dtype == np.float32
    data = json.loads((tmp_path / "c.json").read_text())
    data["costs_1t"], data["threads"] = {"x": "slow"}, "many"
    (tmp_path / "c.json").write_text(json.dumps(data))
    with pytest.raises(pyge.PygeError, match="c.json.*threads is 'many'"):
        OpCosts.load(tmp_path / "c.json")


def test_pyge_tune_command(tmp_path, capsys):
    model = tmp_path / "branchy.onnx"
    onnx.save(_branchy_onnx(), model)
    code = cli.main(["tune", str(model), "--budget-s", "1", "--streams", "2", "--top", "1",
                     "--costs", str(tmp_path / "costs.json"), "-O", "pyge.verify=true"])
    out, err = capsys.readouterr()
    assert code == 0, err
    assert "chosen:" in out and "pyge.policyFile=" in out
    policy = json.loads((tmp_path / "branchy.policy.json").read_text())
    assert set(policy["streams"]) >= {"root", "join", "mm0"}
    assert policy["tuned"]["use_with"]["pyge.verify"] == "true"
    assert json.loads((tmp_path / "costs.json").read_text())["unit"] == "us"
    for bad in (["--streams", "0"], ["--budget-s", "nan"], ["--budget-s", "inf"], ["--budget-s", "-1"],
                ["--top", "0"]):       # nan ran all 200 rounds, whatever the machine
        assert cli.main(["tune", str(model), *bad]) == 2
        err = capsys.readouterr().err
        assert len(err.strip().splitlines()) == 1 and bad[0] in err, err


def test_pyge_tune_json_uses_the_table_s_ratio(tmp_path, capsys):
    """One ratio convention: the JSON, the table and the summary line give the same speedup."""
    model = tmp_path / "branchy.onnx"
    onnx.save(_branchy_onnx(branches=2, n=32), model)
    assert cli.main(["tune", str(model), "--budget-s", "0", "--streams", "2", "--top", "1", "--json"]) == 0
    doc = json.loads(capsys.readouterr().out)
    assert doc["ratio"].startswith("speedup_vs_single = single-stream time / candidate time")
    single = next(r for r in doc["candidates"] if r["name"] == "single")
    assert single["speedup_vs_single"] == 1.0 and single["rounds"] >= 5
    chosen = next(r for r in doc["candidates"] if r["name"] == doc["chosen"])
    assert chosen["speedup_vs_single"] == doc["speedup_vs_single"]
    assert doc["policy_file"].endswith("branchy.policy.json") and "chosen" in chosen["note"]


def _cand(name: str, speedups: list[float]) -> Candidate:
    return Candidate(name, {}, speedups=list(speedups), times=[1e-3] * len(speedups))


def test_a_plan_is_chosen_only_beyond_the_spread_of_the_rounds():
    single, noisy = _cand("single", [1.0] * 8), _cand("single_again", [0.9, 1.0, 1.1, 1.25, 0.95, 1.2, 1.0, 1.05])
    # faster in median (1.15x) but its lower quartile (1.05) is inside the noise control's spread
    maybe = _cand("min_streams:2", [1.3, 1.0, 1.2, 1.15, 1.05, 1.25, 1.1, 1.2])
    assert _decide([single, noisy, maybe], min_gain=0.02) is single
    assert "not beyond the spread" in maybe.note and "chosen" in single.note
    # clearly faster: the middle half of its rounds is above the control's
    single, noisy = _cand("single", [1.0] * 8), _cand("single_again", [0.98, 1.0, 1.01, 1.02, 0.99, 1.0, 1.0, 1.01])
    clear = _cand("min_streams:2", [1.3, 1.25, 1.35, 1.28, 1.31, 1.4, 1.27, 1.3])
    assert _decide([single, noisy, clear], min_gain=0.02) is clear
    # and by at least min_gain, however quiet the machine
    quiet = _cand("single_again", [1.0] * 8)
    tiny = _cand("min_streams:2", [1.01] * 8)
    assert _decide([_cand("single", [1.0] * 8), quiet, tiny], min_gain=0.02).name == "single"


def test_tune_reports_progress_to_its_callback():
    said = []
    tune(pyge.load_onnx(_branchy_onnx(branches=2, n=16)), "cpu", stream_counts=[2], top=1, budget_s=0.0,
         min_rounds=3, max_rounds=3, on_progress=said.append)
    assert said[0].startswith("measuring") and any(s.startswith("compiling candidate 1 of") for s in said)
    assert [s for s in said if s.startswith("timing")][-1].startswith("timing 4 plans: round 3")


def test_tune_on_cuda_without_a_gpu_is_an_option_error():
    # used to escape from torch as "AssertionError: Torch not compiled with CUDA enabled"
    import torch
    if torch.cuda.is_available():
        pytest.skip("a GPU is present")
    g = pyge.load_onnx(_branchy_onnx(branches=2, n=16))
    with pytest.raises(pyge.OptionError, match="CUDA is not available"):
        tune(g, "cuda", stream_counts=[2], top=1, budget_s=0.1)
    with pytest.raises(pyge.OptionError, match="CUDA is not available"):     # costs given: the timing
        tune(g, "cuda", costs=static_costs(pyge.compile(g).graph, "cuda"), stream_counts=[2], top=1,
             budget_s=0.1)


@pytest.mark.parametrize("flag", ["-o", "--costs"])
def test_pyge_tune_refuses_an_unwritable_output_before_tuning(tmp_path, monkeypatch, capsys, flag):
    # these used to fail with a bare OSError after the whole tuning (a minute by default)
    import pyge.tuning.tuner as tuner
    monkeypatch.setattr(tuner, "tune", lambda *a, **k: pytest.fail("tuned before checking the outputs"))
    model = tmp_path / "branchy.onnx"
    onnx.save(_branchy_onnx(branches=2, n=16), model)
    for bad, why in ((tmp_path / "missing" / "out.json", "does not exist"), (tmp_path, "is a folder")):
        assert cli.main(["tune", str(model), flag, str(bad)]) == 2
        err = capsys.readouterr().err
        assert len(err.strip().splitlines()) == 1 and flag in err and why in err, err


def test_pyge_tune_refuses_an_unwritable_default_policy_file(tmp_path, monkeypatch, capsys):
    import pyge.tuning.tuner as tuner
    monkeypatch.setattr(tuner, "tune", lambda *a, **k: pytest.fail("tuned before checking the outputs"))
    model = tmp_path / "branchy.onnx"
    onnx.save(_branchy_onnx(branches=2, n=16), model)
    (tmp_path / "branchy.policy.json").mkdir()          # the default output is taken by a folder
    assert cli.main(["tune", str(model)]) == 2
    err = capsys.readouterr().err
    assert "-o/--output (default" in err and "is a folder" in err
