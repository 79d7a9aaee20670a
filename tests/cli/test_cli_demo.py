"""`pyge demo`: the reference custom stream pass end to end, with no arguments and no files."""
from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

import pyge
from pyge.demo import compare_runs, run_demo


def test_demo_in_process(tmp_path, capsys):
    from pyge.passes.custom import registered_passes
    before = [r.name for r in registered_passes()]
    env_before = {k: os.environ.get(k) for k in ("DUMP_GE_GRAPH", "DUMP_GRAPH_PATH", "DUMP_GRAPH_LEVEL")}
    assert run_demo(out=str(tmp_path), runs=3) == 0
    out = capsys.readouterr().out
    # the registry and the environment are as they were
    assert [r.name for r in registered_passes()] == before
    assert {k: os.environ.get(k) for k in env_before} == env_before
    # what changed: Abs_1 moved to a new stream, one Send/Recv pair appeared
    assert "Abs_1 and Relu_1 have no dependency, yet share stream 0" in out
    assert "Abs_1 moves from stream 0 to stream 1" in out
    assert re.search(r"event e0: Send after Abs_1 on stream 1 -> Recv before Add_1 on stream 0", out)
    assert "outputs identical" in out
    # the before/after comparison: interleaved rounds, one ratio with its spread, a verdict
    m = re.search(r"4\. both versions timed run for run: 3 interleaved round\(s\)", out)
    assert m, out
    m = re.search(r"speedup of graph 2 over graph 1: (\d+\.\d\d)x \(middle half of the rounds "
                  r"(\d+\.\d\d)x-(\d+\.\d\d)x\)", out)
    assert m and float(m.group(2)) <= float(m.group(1)) <= float(m.group(3)), out
    assert "graph 1's time / graph 2's time" in out and "verdict: " in out
    assert "both on the same time axis" in out
    dumps = sorted(p.name for p in (tmp_path / "dumps").iterdir())
    assert any(n.endswith("_graph_2_RunCustomPass_BeforeAssignLogicStreamSplitAbs.pbtxt") for n in dumps)
    assert any(n.endswith("_graph_2_RunCustomPass_AfterAssignLogicStreamSplitAbs.pbtxt") for n in dumps)
    assert any(n.endswith("_graph_2_PreRunAfterBuild.pbtxt") for n in dumps)
    assert not any("_graph_1_RunCustomPass" in n for n in dumps)   # graph 1 ran no custom pass
    for label in ("before", "after"):
        assert (tmp_path / f"timeline_{label}.png").read_bytes()[:4] == b"\x89PNG"
        assert (tmp_path / f"trace_{label}.json").exists()
    after_dump = next(tmp_path / "dumps" / n for n in dumps if n.endswith("AfterAssignLogicStreamSplitAbs.pbtxt"))
    text = after_dump.read_text()
    assert "Abs_1" in text and "stream_id" in text and "_stream_id" not in text


def test_demo_command_no_arguments(tmp_path):
    """`pyge demo` exactly as the README shows it: a new temporary folder, printed."""
    env = dict(os.environ, TMPDIR=str(tmp_path), PYGE_NO_PROGRESS="1")
    p = subprocess.run([sys.executable, "-m", "pyge", "demo", "--runs", "3"], capture_output=True,
                       text=True, timeout=180, env=env, cwd=tmp_path)
    assert p.returncode == 0, p.stderr
    m = re.search(r"files go to (\S+)", p.stdout)
    assert m, p.stdout
    folder = Path(m.group(1))
    assert folder.parent == tmp_path and (folder / "timeline_after.png").exists()
    assert "SplitAbs" in p.stdout and "concurrency" in p.stdout


def test_compare_runs_is_interleaved_and_counts_every_round(monkeypatch):
    from pyge.examples import reference_inputs
    from pyge.profiling import compare
    seen = {}
    real = compare.interleaved

    def spy(runners, rounds, **kw):
        seen["names"], seen["rounds"] = list(runners), rounds
        return real(runners, rounds, **kw)
    monkeypatch.setattr("pyge.demo.interleaved", spy)
    m = pyge.compile(pyge.examples.reference_graph())
    sp = compare_runs(m, m, reference_inputs(), 4)
    assert seen == {"names": ["before", "after"], "rounds": 4}
    assert sp.n == 4 and sp.low <= sp.median <= sp.high


def test_demo_refuses_a_bad_count():
    with pytest.raises(pyge.OptionError, match="runs"):
        run_demo(runs=0)
