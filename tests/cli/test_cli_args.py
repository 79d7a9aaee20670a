"""Arguments and paths are checked before the work: a bad path or count flag fails at once,
with exit status 2 and one line on stderr naming the flag, and no model is loaded."""
from __future__ import annotations

import time

import numpy as np
import pytest

from pyge import cli

from ._proc import error_line, pyge


def _bad(tmp):
    """(argv, the flag the error must name, a word of the reason) for every path and count flag."""
    m = str(tmp / "m.onnx")
    f = str(tmp / "a_file")
    return [
        (["run", "--timeline", "/missing/t.png"], "--timeline", "does not exist"),
        (["run", "--timeline", str(tmp / "t.nopicture")], "--timeline", "picture format"),
        (["run", "--profile", "/missing/t.json"], "--profile", "does not exist"),
        (["run", "--trace", "/proc/t.json"], "--trace", "cannot create"),
        (["run", "--save-outputs", "/proc/x"], "--save-outputs", "cannot create"),
        (["run", "--save-outputs", f], "--save-outputs", "not a folder"),
        (["run", "--runs", "0"], "--runs", "at least 1"),
        (["run", "--warmup", "-1"], "--warmup", "at least 0"),
        (["run", "--seed", "-3"], "--seed", "at least 0"),
        (["run", "--graph-id", "x"], "--graph-id", "integer"),
        (["run", "--input", f"x={tmp / 'none.npy'}"], "--input", "not found"),
        (["run", "--shape", "x=1,a"], "--shape", "D0,D1"),
        (["run", "--device", "tpu"], "--device", "cpu, cuda"),
        (["profile", "--runs", "0"], "--runs", "at least 1"),
        (["profile", "--trace", str(tmp)], "--trace", "is a folder"),
        (["profile", "--timeline", "/missing/p.png"], "--timeline", "does not exist"),
        (["compile", m, "-o", "/missing/o.pgm"], "--output", "does not exist"),
        (["demo", "--out", "/proc/nope"], "--out", "cannot create"),
        (["demo", "--out", f + "/sub"], "--out", "not a folder"),
        (["demo", "--runs", "0"], "--runs", "at least 1"),
        (["tune", m, "-o", "/missing/p.json"], "--output", "does not exist"),
        (["tune", m, "--costs", "/proc/c.json"], "--costs", "cannot create"),
        (["tune", m, "--budget-s", "nan"], "--budget-s", "finite"),
        (["tune", m, "--top", "0"], "--top", "at least 1"),
        (["tune", m, "--streams", "2,99"], "--streams", "1..64"),
    ]


@pytest.fixture()
def tmp(tmp_path, onnx_file):
    (tmp_path / "a_file").write_text("x")
    onnx_file.rename(tmp_path / "m.onnx")
    return tmp_path


def test_every_bad_flag_fails_at_once_naming_the_flag(tmp, capsys, monkeypatch):
    """In process (fast): each case is refused by the parser, before any handler runs."""
    for name, (build, _) in list(cli.COMMANDS.items()):
        monkeypatch.setitem(cli.COMMANDS, name, (build, lambda args: pytest.fail("the work started")))
    for argv, flag, why in _bad(tmp):
        assert cli.main(argv) == 2, argv
        out, err = capsys.readouterr()
        lines = err.strip().splitlines()
        assert out == "" and len(lines) == 1, (argv, err)
        assert flag in lines[0] and why in lines[0], (argv, lines[0])


def test_bad_flags_through_the_shell(tmp):
    """The four the issue names, as the shell sees them: status 2, one line, well under the
    time a model load would take."""
    for argv, flag in ((["run", "--timeline", "/missing/t.png"], "--timeline"),
                       (["run", "--save-outputs", "/proc/x"], "--save-outputs"),
                       (["demo", "--out", "/proc/nope"], "--out"),
                       (["demo", "--runs", "0"], "--runs")):
        t0 = time.perf_counter()
        p = pyge(*argv)
        assert p.returncode == 2 and p.stdout == "", (argv, p.stderr)
        assert flag in error_line(p)
        assert time.perf_counter() - t0 < 30


def test_good_paths_pass_and_nothing_is_left_behind(tmp, capsys):
    out_dir = tmp / "new" / "outs"                # made when the outputs are written, not before
    code = cli.main(["run", str(tmp / "m.onnx"), "--save-outputs", str(out_dir),
                     "--trace", str(tmp / "t.json"), "--timeline", str(tmp / "t.svg")])
    assert code == 0, capsys.readouterr().err
    assert (out_dir / "y.npy").exists() and (tmp / "t.json").exists() and (tmp / "t.svg").exists()
    assert not list(tmp.rglob(".pyge_probe_*"))


def test_input_name_and_pb_flags_are_checked_before_compiling(tmp, capsys, monkeypatch):
    import pyge.compiler
    np.save(tmp / "x.npy", np.zeros((2, 4), np.float32))
    code = cli.main(["run", str(tmp / "m.onnx"), "--pb-inputs", "x:0"])
    assert code == 2 and "--pb-inputs applies only to a TensorFlow .pb model" in capsys.readouterr().err
    monkeypatch.setattr(pyge.compiler, "compile_graph", lambda *a, **k: pytest.fail("compiled"))
    code = cli.main(["run", str(tmp / "m.onnx"), "-O", "ge.bogus=1"])
    assert code == 2 and "ge.bogus" in capsys.readouterr().err
