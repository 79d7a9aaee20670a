"""What the CLI writes (issue 20, items 4-5): never a file it reads; saved outputs keep their names."""
from __future__ import annotations

import json
import os

import numpy as np
import onnx
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from onnx import TensorProto, helper

from pyge import cli
from pyge.cli.outputs import MANIFEST, file_names, output_name

from ._proc import error_line, pyge
from .conftest import two_branch_model


def _refused(capsys, argv, flag):
    code = cli.main([str(a) for a in argv])
    out, err = capsys.readouterr()
    lines = err.strip().splitlines()
    assert code == 2 and out == "" and len(lines) == 1, (code, out, err)
    assert f"{flag} " in lines[0] and "same file as" in lines[0], lines[0]
    return lines[0]


@pytest.fixture
def no_compiling(monkeypatch):
    import pyge.compiler
    monkeypatch.setattr(pyge.compiler, "compile_graph", lambda *a, **k: pytest.fail("compiled"))


# -- 4: an output that is an input is refused before anything is written ---------------------------

@pytest.mark.parametrize("spelling", ["same", "relative", "symlink", "hardlink"])
def test_compile_onto_its_own_model_is_refused(capsys, tmp_path, monkeypatch, no_compiling, spelling):
    model = tmp_path / "m.onnx"
    onnx.save(two_branch_model(), model)
    before = model.read_bytes(), os.stat(model).st_mtime_ns
    monkeypatch.chdir(tmp_path)
    out = {"same": model, "relative": "./sub/../m.onnx", "symlink": tmp_path / "out.pgm",
           "hardlink": tmp_path / "hard.pgm"}[spelling]
    (tmp_path / "sub").mkdir()
    if spelling == "symlink":
        (tmp_path / "out.pgm").symlink_to(model)
    if spelling == "hardlink":
        os.link(model, tmp_path / "hard.pgm")
    line = _refused(capsys, ["compile", "m.onnx" if spelling == "relative" else model, "-o", out], "-o/--output")
    assert "the model" in line
    assert (model.read_bytes(), os.stat(model).st_mtime_ns) == before


def test_compile_onto_the_models_external_data_is_refused(capsys, tmp_path, no_compiling):
    model = tmp_path / "m.onnx"
    onnx.save(two_branch_model(), model, save_as_external_data=True, location="w.bin", size_threshold=0)
    data = (tmp_path / "w.bin").read_bytes()
    line = _refused(capsys, ["compile", model, "-o", tmp_path / "w.bin"], "-o/--output")
    assert "an external data file of the model" in line and (tmp_path / "w.bin").read_bytes() == data


@pytest.mark.parametrize("flag", ["--trace", "--profile"])
def test_run_trace_onto_the_model_or_an_input_file_is_refused(capsys, onnx_file, tmp_path, no_compiling, flag):
    _refused(capsys, ["run", onnx_file, flag, onnx_file], "--trace/--profile")
    x = tmp_path / "x.npy"
    np.save(x, np.zeros((2, 4), np.float32))
    line = _refused(capsys, ["run", onnx_file, "-i", f"x={x}", flag, x], "--trace/--profile")
    assert "the --input file" in line and np.load(x).shape == (2, 4)


def test_profile_timeline_onto_an_input_is_refused(capsys, onnx_file, tmp_path, no_compiling):
    png = tmp_path / "x.png"
    png.write_bytes(b"not really")
    line = _refused(capsys, ["profile", onnx_file, "-i", f"x={png}", "--timeline", png], "--timeline")
    assert png.read_bytes() == b"not really" and "the --input file" in line


def test_tune_onto_its_model_is_refused(capsys, onnx_file, monkeypatch):
    import pyge.tuning.tuner
    monkeypatch.setattr(pyge.tuning.tuner, "tune", lambda *a, **k: pytest.fail("tuned"))
    before = onnx_file.read_bytes()
    _refused(capsys, ["tune", onnx_file, "-o", onnx_file], "-o/--output")
    _refused(capsys, ["tune", onnx_file, "--costs", onnx_file], "--costs")
    assert onnx_file.read_bytes() == before


def test_refusal_through_the_shell_is_one_line_and_status_2(onnx_file):
    before = onnx_file.read_bytes()
    p = pyge("compile", onnx_file, "-o", onnx_file)
    assert p.returncode == 2 and p.stdout == ""
    assert "-o/--output" in error_line(p) and onnx_file.read_bytes() == before


def test_other_outputs_next_to_the_model_are_fine(capsys, onnx_file, tmp_path):
    assert cli.main(["compile", str(onnx_file), "-o", str(tmp_path / "m.pgm")]) == 0
    assert (tmp_path / "m.pgm").exists() and capsys.readouterr().err == ""


def test_save_outputs_onto_an_input_file_writes_nothing(capsys, onnx_file, tmp_path):
    folder = tmp_path / "outs"
    folder.mkdir()
    x = folder / "y.npy"                         # the input file where output y would go
    np.save(x, np.ones((2, 4), np.float32))
    code = cli.main(["run", str(onnx_file), "-i", f"x={x}", "--save-outputs", str(folder)])
    err = capsys.readouterr().err
    assert code == 2 and "--save-outputs" in err and "would overwrite the --input file" in err
    assert sorted(os.listdir(folder)) == ["y.npy"] and np.array_equal(np.load(x), np.ones((2, 4)))


# -- 5: unique, reversible output file names and a manifest -----------------------------------------

NAMES = ["a/b", "a_b", "a:b", "Y", "y", ".hidden", "..", "ünï/cødé", "%41", "x" * 300]


def _many_outputs_model(names) -> onnx.ModelProto:
    """Output i = x * (i + 1), each under one of `names`."""
    x = helper.make_tensor_value_info("x", TensorProto.FLOAT, [2])
    nodes, outs, inits = [], [], []
    for i, name in enumerate(names):
        inits.append(helper.make_tensor(f"k{i}", TensorProto.FLOAT, [], [float(i + 1)]))
        nodes.append(helper.make_node("Mul", ["x", f"k{i}"], [name], name=f"mul{i}"))
        outs.append(helper.make_tensor_value_info(name, TensorProto.FLOAT, [2]))
    return helper.make_model(helper.make_graph(nodes, "many", [x], outs, inits),
                             opset_imports=[helper.make_opsetid("", 17)])


def test_save_outputs_keeps_every_name_apart_and_writes_a_manifest(capsys, tmp_path):
    model = tmp_path / "m.onnx"
    onnx.save(_many_outputs_model(NAMES), model)
    x = tmp_path / "x.npy"
    np.save(x, np.array([1.0, -2.0], np.float32))
    folder = tmp_path / "outs"
    assert cli.main(["run", str(model), "-i", f"x={x}", "--save-outputs", str(folder)]) == 0
    out = capsys.readouterr().out
    manifest = json.loads((folder / MANIFEST).read_text(encoding="utf-8"))
    assert list(manifest) == NAMES                                       # real names, in output order
    files = list(manifest.values())
    assert len({f.lower() for f in files}) == len(NAMES)                 # distinct, even ignoring case
    assert sorted(os.listdir(folder)) == sorted(files + [MANIFEST])      # nothing else, no temp file
    assert manifest["a/b"] == "a%2Fb.npy" and manifest["a_b"] == "a_b.npy" and manifest["a:b"] == "a%3Ab.npy"
    assert manifest["Y"] == "Y.npy" and manifest["y"] == "%79.npy" and manifest[".hidden"] == "%2Ehidden.npy"
    for i, (name, file) in enumerate(manifest.items()):
        np.testing.assert_array_equal(np.load(folder / file), np.array([1.0, -2.0], np.float32) * (i + 1))
        if len(name) < 100:
            assert output_name(file) == name                              # the file name decodes back
        assert f"wrote {folder / file}" in out
    assert f"wrote {folder / MANIFEST}" in out
    assert len(manifest["x" * 300].encode()) <= 255


def test_save_outputs_json_names_the_manifest(capsys, onnx_file, tmp_path):
    assert cli.main(["run", str(onnx_file), "--json", "--save-outputs", str(tmp_path / "o")]) == 0
    files = json.loads(capsys.readouterr().out)["files"]
    assert files["outputs"] == [str(tmp_path / "o" / "y.npy")]
    assert files["outputs_manifest"] == str(tmp_path / "o" / MANIFEST)
    assert json.loads((tmp_path / "o" / MANIFEST).read_text()) == {"y": "y.npy"}


@settings(max_examples=150, deadline=None)
@given(st.lists(st.text(min_size=0, max_size=90), min_size=1, max_size=12, unique=True))
def test_file_names_are_distinct_safe_and_reversible(names):
    files = file_names(names)
    assert list(files) == names
    assert len({f.lower() for f in files.values()}) == len(names)
    for name, file in files.items():
        assert file.endswith(".npy") and not file.startswith(".") or name == ""
        assert len(file.encode()) <= 255 and all(c.isascii() and (c.isalnum() or c in "-_.%~") for c in file)
        if "~" not in file:
            assert output_name(file) == name
