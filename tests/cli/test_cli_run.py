"""`pyge run`, `pyge compile`, `pyge streams`, `pyge profile` doing their work."""
from __future__ import annotations

import json

import numpy as np
import pytest

from pyge import cli
from pyge.builtin_models import inception_block, random_inputs



def run_cli(capsys, *argv):
    code = cli.main([str(a) for a in argv])
    out, err = capsys.readouterr()
    assert code == 0, err
    return out


def test_run_without_model_runs_the_builtin(capsys, tmp_path):
    out = run_cli(capsys, "run", "--runs", "2", "--save-outputs", tmp_path)
    assert "inception_block" in out and "logits" in out and "mean" in out
    got = np.load(tmp_path / "logits.npy")
    graph = inception_block()
    ort = pytest.importorskip("onnxruntime")   # a reference nobody here wrote
    from pyge.frontends.onnx_proto import graph_to_model
    sess = ort.InferenceSession(graph_to_model(graph).SerializeToString(), providers=["CPUExecutionProvider"])
    (want,) = sess.run(None, random_inputs(graph, seed=0))
    np.testing.assert_allclose(got, want, rtol=1e-4, atol=1e-5)


def test_builtin_is_branchy_and_seeded():
    g = inception_block()
    concat = g.node("Concat")
    assert len(concat.inputs) == 4 and sum(n.op_type == "Conv" for n in g.nodes) == 6
    a, b = inception_block(), inception_block()
    assert all(np.array_equal(a.initializers[k].const, b.initializers[k].const) for k in a.initializers)


def test_compile_then_run_pgm_gives_same_outputs(capsys, onnx_file, tmp_path):
    pgm = tmp_path / "m.pgm"
    out = run_cli(capsys, "compile", onnx_file, "-o", pgm, "-O", "ge.streamMaxParallelNum=2", "--graph-id", "5")
    assert pgm.exists() and "streams" in out and str(pgm) in out
    x = np.linspace(-1, 1, 8, dtype=np.float32).reshape(2, 4)
    np.save(tmp_path / "x.npy", x)
    run_cli(capsys, "run", onnx_file, "-O", "ge.streamMaxParallelNum=2", "-i", f"x={tmp_path / 'x.npy'}",
            "--save-outputs", tmp_path / "a")
    out = run_cli(capsys, "run", pgm, "-i", tmp_path / "x.npy", "--save-outputs", tmp_path / "b", "--runs", "3")
    assert "offline model" in out and "from files" in out and "3 run(s)" in out
    a, b = np.load(tmp_path / "a" / "y.npy"), np.load(tmp_path / "b" / "y.npy")
    np.testing.assert_array_equal(a, b)
    np.testing.assert_allclose(b, np.abs(x) + x @ (np.arange(16, dtype=np.float32).reshape(4, 4) / 8), rtol=1e-6)


def test_random_inputs_are_seeded(capsys, onnx_file, tmp_path):
    for seed, folder in ((1, "s1"), (1, "s1b"), (2, "s2")):
        run_cli(capsys, "run", onnx_file, "--seed", seed, "--save-outputs", tmp_path / folder)
    s1, s1b, s2 = (np.load(tmp_path / f / "y.npy") for f in ("s1", "s1b", "s2"))
    np.testing.assert_array_equal(s1, s1b)
    assert not np.array_equal(s1, s2)


def test_profile_writes_trace_and_timeline(capsys, tmp_path):
    trace, png = tmp_path / "t.json", tmp_path / "t.png"
    out = run_cli(capsys, "profile", "-O", "ge.autoMultistreamParallelMode=LoadBalance:4", "--runs", "2",
                  "--trace", trace, "--timeline", png)
    assert "stream 1" in out and "concurrency" in out
    events = json.loads(trace.read_text())
    events = events["traceEvents"] if isinstance(events, dict) else events
    assert any(e.get("ph") == "X" for e in events)
    assert png.read_bytes()[:4] == b"\x89PNG"
    out = run_cli(capsys, "profile", "--runs", "1", "--json")
    assert json.loads(out)["num_streams"] == 1


def test_run_with_timeline(capsys, onnx_file, tmp_path):
    out = run_cli(capsys, "run", onnx_file, "--runs", "2", "--timeline", tmp_path / "p.png")
    assert (tmp_path / "p.png").exists() and "wrote timeline" in out


def test_streams_table_and_json(capsys, onnx_file, tmp_path):
    out = run_cli(capsys, "streams", "-O", "ge.autoMultistreamParallelMode=LoadBalance:4", "--plan")
    assert "Concat" in out and "launch" in out
    pgm = tmp_path / "m.pgm"
    run_cli(capsys, "compile", onnx_file, "-o", pgm)
    out = run_cli(capsys, "streams", pgm, "--json")
    assert isinstance(json.loads(out), dict)
