"""The progress display: nothing unless stderr is a terminal; a bar or spinner that erases itself."""
from __future__ import annotations

import io
import time

from pyge import progress


class FakeTTY(io.StringIO):
    def isatty(self) -> bool:
        return True


def test_silent_when_not_a_terminal():
    s = io.StringIO()
    with progress.bar(3, "running", stream=s) as bar:
        for _ in range(3):
            bar.advance()
    with progress.task("compiling", stream=s):
        pass
    assert s.getvalue() == "" and not progress.enabled(s)


def test_bar_draws_then_erases(monkeypatch):
    monkeypatch.setattr(progress, "_DELAY", 0.0)
    monkeypatch.delenv("PYGE_NO_PROGRESS", raising=False)
    s = FakeTTY()
    with progress.bar(4, "running", stream=s) as bar:
        bar.advance(2)
        time.sleep(0.25)
    out = s.getvalue()
    assert "running [" in out and "2/4" in out
    assert out.endswith("\r")                    # the line is blanked at the end


def test_spinner_and_opt_out(monkeypatch):
    monkeypatch.setattr(progress, "_DELAY", 0.0)
    monkeypatch.delenv("PYGE_NO_PROGRESS", raising=False)
    s = FakeTTY()
    with progress.task("compiling big.onnx", stream=s):
        time.sleep(0.15)
    assert "compiling big.onnx (" in s.getvalue()
    monkeypatch.setenv("PYGE_NO_PROGRESS", "1")
    assert not progress.enabled(FakeTTY())


def test_quick_work_draws_nothing():
    s = FakeTTY()
    with progress.task("quick", stream=s):
        pass
    assert s.getvalue() == ""


def _tune_model(tmp_path):
    import numpy as np
    import onnx
    from onnx import TensorProto, helper, numpy_helper
    w = numpy_helper.from_array(np.eye(64, dtype=np.float32), "w")
    nodes = [helper.make_node("MatMul", ["x", "w"], [f"m{i}"], name=f"mm{i}") for i in range(2)]
    nodes.append(helper.make_node("Add", ["m0", "m1"], ["y"], name="join"))
    g = helper.make_graph(nodes, "pair", [helper.make_tensor_value_info("x", TensorProto.FLOAT, [64, 64])],
                          [helper.make_tensor_value_info("y", TensorProto.FLOAT, [64, 64])], [w])
    path = tmp_path / "pair.onnx"
    onnx.save(helper.make_model(g, opset_imports=[helper.make_opsetid("", 17)]), path)
    return path


def test_tune_shows_progress_on_a_terminal_only(tmp_path):
    """`pyge tune` used to print nothing for its whole budget. The budget leaves the timing rounds
    a few seconds even on a loaded machine: rounds that finish between two redraws (0.1 s) are
    never drawn."""
    import os
    import pty
    import subprocess
    import threading

    from ._proc import pyge, pyge_command
    model = _tune_model(tmp_path)
    argv = [*pyge_command(), "tune", str(model), "--budget-s", "6", "--streams", "2", "--top", "1"]
    env = {k: v for k, v in os.environ.items() if k != "PYGE_NO_PROGRESS"}
    master, slave = pty.openpty()
    got = bytearray()

    def drain():
        while True:
            try:
                chunk = os.read(master, 4096)
            except OSError:
                return
            if not chunk:
                return
            got.extend(chunk)
    reader = threading.Thread(target=drain, daemon=True)
    reader.start()
    p = subprocess.run(argv, stdout=subprocess.PIPE, stderr=slave, env=env, timeout=180, text=True)
    os.close(slave)
    reader.join(timeout=10)
    os.close(master)
    assert p.returncode == 0 and "chosen:" in p.stdout
    shown = got.decode(errors="replace")
    assert "tuning pair: " in shown and "round" in shown, shown[-500:]
    assert "chosen:" not in shown                      # the report stays on stdout
    quiet = subprocess.run(argv, capture_output=True, env=env, timeout=180, text=True)
    assert quiet.returncode == 0 and quiet.stderr == ""   # not a terminal: nothing drawn
