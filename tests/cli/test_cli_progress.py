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
