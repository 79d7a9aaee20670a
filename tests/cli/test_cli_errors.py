"""Exit statuses and one-line errors of the `pyge` command."""
from __future__ import annotations

import subprocess
import sys

import numpy as np
import pytest

from pyge import cli
from pyge.cli import commands as cli_commands
from pyge.options import accepted_keys


def run_cli(capsys, *argv):
    code = cli.main(list(argv))
    out, err = capsys.readouterr()
    return code, out, err


def one_line(err: str) -> str:
    lines = err.strip().splitlines()
    assert len(lines) == 1, f"expected one line on stderr, got: {err!r}"
    assert lines[0].startswith("pyge"), lines[0]
    assert "Traceback" not in err
    return lines[0]


def test_missing_file(capsys, tmp_path):
    code, out, err = run_cli(capsys, "run", str(tmp_path / "nope.onnx"))
    assert code == 1 and out == ""
    assert "not found" in one_line(err) and "nope.onnx" in err


def test_corrupt_onnx(capsys, tmp_path):
    bad = tmp_path / "bad.onnx"
    bad.write_bytes(b"\x08\x07garbage\xff\xff\xff")
    code, _, err = run_cli(capsys, "compile", str(bad), "-o", str(tmp_path / "x.pgm"))
    assert code == 1
    assert "bad.onnx" in one_line(err) and "ONNX" in err
    assert not (tmp_path / "x.pgm").exists()


def test_unknown_option_key(capsys, onnx_file):
    code, _, err = run_cli(capsys, "run", str(onnx_file), "--option", "ge.bogus=1")
    line = one_line(err)
    assert code == 2 and "ge.bogus" in line and "ge.enableSingleStream" in line


def test_malformed_option_value(capsys, onnx_file):
    code, _, err = run_cli(capsys, "streams", str(onnx_file), "-O", "ge.enableSingleStream=maybe")
    line = one_line(err)
    assert code == 2 and "ge.enableSingleStream" in line and "true, false" in line
    code, _, err = run_cli(capsys, "run", str(onnx_file), "-O", "ge.autoMultistreamParallelMode=LoadBalance:99")
    assert code == 2 and "LoadBalance:N" in one_line(err)


@pytest.mark.parametrize("argv", [
    ["run", "--option", "no-equals-sign"],
    ["run", "--bogus-flag"],
    ["frobnicate"],
    [],
    ["compile"],                          # MODEL and -o are required
    ["run", "--runs", "zero"],
    ["run", "--runs", "0"],
    ["run", "--shape", "input=1,x"],
])
def test_usage_errors(capsys, argv):
    code, out, err = run_cli(capsys, *argv)
    assert code == 2, (argv, err)
    one_line(err)


def test_pgm_refuses_options_and_recompiling(capsys, onnx_file, tmp_path):
    pgm = tmp_path / "m.pgm"
    assert run_cli(capsys, "compile", str(onnx_file), "-o", str(pgm))[0] == 0
    code, _, err = run_cli(capsys, "run", str(pgm), "-O", "ge.enableSingleStream=true")
    assert code == 2 and "offline model" in one_line(err)
    code, _, err = run_cli(capsys, "compile", str(pgm), "-o", str(tmp_path / "again.pgm"))
    assert code == 2 and "already an offline model" in one_line(err)


def test_corrupt_pgm(capsys, tmp_path):
    bad = tmp_path / "bad.pgm"
    bad.write_bytes(b"PYGEMDL\0" + b"\x01\0\0\0" + b"\xff" * 8)
    code, _, err = run_cli(capsys, "run", str(bad))
    assert code == 1 and "truncated" in one_line(err)


def test_bad_input_file(capsys, onnx_file, tmp_path):
    # a missing file is a bad command line, refused before the model is compiled
    code, _, err = run_cli(capsys, "run", str(onnx_file), "--input", f"x={tmp_path / 'none.npy'}")
    assert code == 2 and "input file not found" in one_line(err) and "--input" in err
    np.save(tmp_path / "wrong.npy", np.zeros((3, 3), np.float32))
    code, _, err = run_cli(capsys, "run", str(onnx_file), "--input", f"x={tmp_path / 'wrong.npy'}")
    assert code == 1 and "shape" in one_line(err)
    code, _, err = run_cli(capsys, "run", str(onnx_file), "--input", f"nope={tmp_path / 'wrong.npy'}")
    assert code == 2 and "no such input" in one_line(err)


def test_random_feed_that_cannot_be_made_names_the_input(capsys, tmp_path):
    """A declared input shape too large for any array: the random feed cannot be made. The
    error names the input and the way out (--input), not an internal error."""
    import onnx
    from onnx import TensorProto, helper
    big = [1 << 40, 1 << 40]
    g = helper.make_graph([helper.make_node("Abs", ["x"], ["y"], name="a")], "huge",
                          [helper.make_tensor_value_info("x", TensorProto.FLOAT, big)],
                          [helper.make_tensor_value_info("y", TensorProto.FLOAT, big)])
    onnx.save(helper.make_model(g, opset_imports=[helper.make_opsetid("", 17)]), tmp_path / "huge.onnx")
    code, _, err = run_cli(capsys, "run", str(tmp_path / "huge.onnx"))
    line = one_line(err)
    assert code == 1 and "internal error" not in line
    assert "random feed for input 'x'" in line and "--input" in line


def test_internal_error_is_one_line_unless_debug(capsys, monkeypatch):
    def boom(args):
        raise RuntimeError("something\nbroke")
    monkeypatch.setattr(cli_commands, "cmd_run", boom)
    code, _, err = run_cli(capsys, "run")
    assert code == 1 and "internal error" in one_line(err) and "--debug" in err
    with pytest.raises(RuntimeError):
        cli.main(["run", "--debug"])


def test_help_lists_every_option_and_variable(capsys):
    code, out, _ = run_cli(capsys, "--help")
    assert code == 0
    for key in accepted_keys():
        assert key in out
    for var in ("DUMP_GE_GRAPH", "DUMP_GRAPH_LEVEL", "DUMP_GRAPH_PATH", "PYGE_OPP_PATH", "ASCEND_OPP_PATH"):
        assert var in out
    for cmd in ("compile", "run", "streams", "profile", "demo"):
        assert cmd in out
        code, sub, _ = run_cli(capsys, cmd, "--help")
        assert code == 0 and "usage: pyge " + cmd in sub
    code, out, _ = run_cli(capsys, "--version")
    assert code == 0 and out.startswith("pyge ")


def test_real_process_exit_status_and_stderr(tmp_path):
    """Through `python -m pyge`: the status the shell sees, one line on stderr."""
    p = subprocess.run([sys.executable, "-m", "pyge", "run", str(tmp_path / "missing.onnx")],
                       capture_output=True, text=True, timeout=120)
    assert p.returncode == 1 and p.stdout == ""
    assert p.stderr.strip().count("\n") == 0 and p.stderr.startswith("pyge: error: ")


def test_warnings_before_a_failure_leave_one_line(tmp_path, onnx_file):
    """A pass whose set_stream_id is refused (logged as a warning) and that then fails: the
    shell sees the one error line; the same warning is shown when the command succeeds."""
    import os
    folder = tmp_path / "opp" / "vendors" / "v" / "custom_fusion_passes"
    folder.mkdir(parents=True)
    (folder / "refused.py").write_text(
        "import os, pyge\n"
        "@pyge.custom_stream_pass('Refused')\n"
        "def refused(graph, ctx):\n"
        "    status = ctx.set_stream_id(graph.get_direct_nodes()[0], 99)\n"
        "    return status if os.environ.get('REFUSED_FAILS') else pyge.GRAPH_SUCCESS\n")
    for p in (tmp_path, *(tmp_path / "opp").rglob("*")):
        p.chmod(p.stat().st_mode & ~0o022)
    env = dict(os.environ, PYGE_OPP_PATH=str(tmp_path / "opp"), PYGE_NO_PROGRESS="1")
    cmd = [sys.executable, "-m", "pyge", "streams", str(onnx_file)]
    p = subprocess.run(cmd, capture_output=True, text=True, timeout=120, env=dict(env, REFUSED_FAILS="1"))
    assert p.returncode == 1 and "Refused" in one_line(p.stderr), p.stderr
    p = subprocess.run(cmd, capture_output=True, text=True, timeout=120, env=env)
    assert p.returncode == 0 and "outside 0..0" in p.stderr, p.stderr
