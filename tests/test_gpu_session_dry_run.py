"""benchmarks/gpu_session.sh, the one call a session with a GPU makes, dry-run on the CPU.

A GPU is lent rarely and briefly, so its run must not be spent on a broken script: the same
steps run here with `--device cpu --quick`, and what comes back must fit the device tool's
limits (at most 8 files in $OUT)."""
from __future__ import annotations

import json
import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]


@pytest.mark.timeout(300)
def test_gpu_session_script_dry_run(tmp_path):
    out = tmp_path / "out"
    env = {**os.environ, "OUT": str(out), "PYGE_SESSION_ARGS": "--device cpu --quick",
           "PATH": os.path.dirname(sys.executable) + os.pathsep + os.environ.get("PATH", "")}
    done = subprocess.run(["bash", str(ROOT / "benchmarks" / "gpu_session.sh")], env=env,
                          capture_output=True, text=True, timeout=280)
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    files = sorted(p.name for p in out.iterdir())
    assert len(files) <= 8, files
    assert {"session.txt", "gpu_check.txt", "gpu_check.json", "gpu_bench.txt", "gpu_bench.json",
            "gpu_bench_extra.tar.gz"} <= set(files), files
    assert (out / "gpu_check.txt").read_text().strip().endswith("ALL OK")
    bench = json.loads((out / "gpu_bench.json").read_text())
    assert bench["cases"] and not bench["meta"]["skipped"]
    log = (out / "session.txt").read_text()
    assert "torch" in log and "ALL OK" in log          # the whole output of every step is kept


def test_gpu_session_steps_fit_one_device_call():
    """The device tool stops a call at 600 s: the steps' own timeouts must add up to less, with
    room for the start and the copy back, or the last step's figures are lost."""
    script = (ROOT / "benchmarks" / "gpu_session.sh").read_text()
    limits = [int(n) for n in re.findall(r"^\s*timeout (\d+) ", script, flags=re.M)]
    assert len(limits) >= 4, limits
    assert sum(limits) <= 570, limits
