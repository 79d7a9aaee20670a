"""Running `pyge` as the shell does: a subprocess, its exit status, stdout and stderr."""
from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path


def pyge_command() -> list[str]:
    """The installed `pyge` script next to this Python, else `python -m pyge`."""
    script = Path(sys.executable).with_name("pyge")
    if script.exists():
        return [str(script)]
    found = shutil.which("pyge")
    return [found] if found else [sys.executable, "-m", "pyge"]


def pyge(*argv, env: dict | None = None, unset: tuple[str, ...] = (), cwd=None,
         timeout: float = 180) -> subprocess.CompletedProcess:
    """`pyge ARGV...` with the environment of the tests, `env` added and `unset` removed."""
    full = {k: v for k, v in os.environ.items() if k not in unset}
    full.update({"PYGE_NO_PROGRESS": "1", **(env or {})})
    return subprocess.run([*pyge_command(), *map(str, argv)], capture_output=True, text=True,
                          timeout=timeout, env=full, cwd=cwd)


def error_line(p: subprocess.CompletedProcess) -> str:
    """The one line a failure prints on stderr (asserted to be one line, no traceback)."""
    lines = p.stderr.strip().splitlines()
    assert len(lines) == 1, f"expected one line on stderr, got: {p.stderr!r}"
    assert lines[0].startswith("pyge") and "Traceback" not in p.stderr, p.stderr
    return lines[0]
