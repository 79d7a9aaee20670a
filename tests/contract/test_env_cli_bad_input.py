"""INTERFACE.md contract: dump environment variables, the command line and bad input (acceptance checks call these names as written)."""
from __future__ import annotations

import json
import os
import re
import stat
import sys
import textwrap

import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper

import pyge
from pyge import GRAPH_SUCCESS, register_custom_pass
from pyge.cli import main as cli_main
from pyge.passes.custom.plugins import reset_plugins


from .common import *  # noqa: F401,F403 - shared helpers and constants
from .common import PLUGIN, make_opp, DUMP_RE, SHAPE, one_line, onnx_model, ref_graph, split_abs, split_model, x_in  # noqa: F401


# -- environment: dumps ------------------------------------------------------------------------

def dumps(folder):
    found = [(DUMP_RE.match(p.name), p) for p in folder.iterdir() if DUMP_RE.match(p.name)]
    return [(m.group(3), p) for m, p in sorted(found, key=lambda mp: int(mp[0].group(1)))]


def test_dump_files_names_stream_ids_and_events(tmp_path, monkeypatch):
    monkeypatch.setenv("DUMP_GE_GRAPH", "1")
    monkeypatch.setenv("DUMP_GRAPH_PATH", str(tmp_path))
    split_model()
    files = dumps(tmp_path)
    stages = [s for s, _ in files]
    assert stages[:2] == ["RunCustomPass_BeforeAssignLogicStreamSplitAbs", "RunCustomPass_AfterAssignLogicStreamSplitAbs"]
    for stage, path in files:
        mp = onnx.load_model(str(path), format="textproto")
        attrs = {n.name: {a.name: helper.get_attribute_value(a) for a in n.attribute} | {"op": n.op_type}
                 for n in mp.graph.node}
        assert all("stream_id" in a for a in attrs.values()), stage            # GE's attribute name
        if stage.startswith("RunCustomPass_Before"):
            assert attrs["Abs_1"]["stream_id"] == attrs["Relu_1"]["stream_id"]
        if stage.startswith("RunCustomPass_After"):
            assert attrs["Abs_1"]["stream_id"] != attrs["Relu_1"]["stream_id"]
    built = {n["op"]: n for n in attrs.values() if n["op"] in ("Send", "Recv")}   # the last dump: built graph
    assert built["Send"]["event_id"] == built["Recv"]["event_id"] == 0
    assert built["Send"]["send_event_id_list"] == built["Recv"]["recv_event_id_list"] == [0]
    assert built["Send"]["stream_id"] == 1 and built["Recv"]["stream_id"] == 0


@pytest.mark.parametrize("level, expect", [("1", lambda s: "AssignLogicStream" in s and len(s) > 3),
                                           ("2", lambda s: len(s) == 3),
                                           ("3", lambda s: len(s) == 1),
                                           ("AfterAssignLogicStream", lambda s: s == ["RunCustomPass_AfterAssignLogicStreamSplitAbs"])])
def test_dump_levels(tmp_path, monkeypatch, level, expect):
    monkeypatch.setenv("DUMP_GE_GRAPH", "3")
    monkeypatch.setenv("DUMP_GRAPH_LEVEL", level)
    monkeypatch.chdir(tmp_path)                # DUMP_GRAPH_PATH defaults to the current folder
    split_model()
    assert expect([s for s, _ in dumps(tmp_path)])


@pytest.mark.parametrize("var, value", [("DUMP_GE_GRAPH", "7"), ("DUMP_GRAPH_LEVEL", "9")])
def test_bad_dump_environment(tmp_path, monkeypatch, var, value):
    monkeypatch.setenv("DUMP_GE_GRAPH", "2")
    monkeypatch.setenv("DUMP_GRAPH_PATH", str(tmp_path))
    monkeypatch.setenv(var, value)
    with pytest.raises(pyge.PygeError, match=var) as err:
        pyge.compile(ref_graph())
    one_line(err)


# -- command line ------------------------------------------------------------------------------

def cli(capsys, *argv):
    rc = cli_main([str(a) for a in argv])
    out, err = capsys.readouterr()
    return rc, out, err


@pytest.fixture()
def model_file(tmp_path):
    onnx.save(onnx_model(), tmp_path / "m.onnx")
    np.save(tmp_path / "x.npy", x_in())
    return tmp_path / "m.onnx"


def test_cli_commands(capsys, tmp_path, model_file):
    pgm = tmp_path / "m.pgm"
    rc, out, err = cli(capsys, "compile", model_file, "-o", pgm, "--device", "cpu",
                       "--option", "ge.streamMaxParallelNum=2", "--option", "ge.enableSingleStream=false",
                       "--option", "pyge.streamAllocation=nodes")
    assert rc == 0 and pgm.exists(), err
    assert pyge.load_model(pgm).num_streams == 2
    for target in (model_file, pgm):                                    # random inputs
        rc, out, err = cli(capsys, "run", target)
        assert rc == 0 and "random" in out and "output" in out, err
    rc, out, err = cli(capsys, "run", pgm, "--input", f"input={tmp_path / 'x.npy'}", "--device", "cpu",
                       "--profile", tmp_path / "t.json", "--timeline", tmp_path / "t.png", "--runs", "2")
    assert rc == 0, err
    ops = [e for e in json.loads((tmp_path / "t.json").read_text())["traceEvents"] if e.get("ph") == "X"]
    assert len(ops) == 2 * 3 and (tmp_path / "t.png").exists()
    rc, out, err = cli(capsys, "run", model_file, "--option", "ge.streamMaxParallelNum=2", "--runs", "2")
    assert rc == 0, err
    for target, opts in ((model_file, ["--option", "ge.streamMaxParallelNum=2", "--option",
                                       "pyge.streamAllocation=nodes"]), (pgm, [])):
        rc, out, err = cli(capsys, "streams", target, *opts)
        assert rc == 0 and "Abs_1" in out and "e0" in out, err


def test_cli_demo(capsys, tmp_path, monkeypatch):
    import tempfile
    monkeypatch.setattr(tempfile, "tempdir", str(tmp_path))
    rc, out, err = cli(capsys, "demo")
    assert rc == 0, err
    assert "Abs_1" in out and "Send" in out and "Recv" in out
    folder = next(tmp_path.glob("pyge-demo-*"))
    names = [p.name for p in folder.rglob("*")]
    assert any("RunCustomPass_BeforeAssignLogicStreamSplitAbs" in n for n in names)
    assert any("RunCustomPass_AfterAssignLogicStreamSplitAbs" in n for n in names)
    assert any(n.endswith(".json") for n in names) and any(n.endswith(".png") for n in names)


@pytest.mark.parametrize("argv", [
    ["compile", "{d}/missing.onnx", "-o", "{d}/o.pgm"], ["compile", "{d}/junk.onnx", "-o", "{d}/o.pgm"],
    ["compile", "{m}"], ["run", "{m}", "--input", "input={d}/bad.npy"], ["run", "{m}", "--input", "nope={d}/x.npy"],
    ["run", "{m}", "--option", "ge.bogus=1"], ["run", "{m}", "--option", "ge.enableSingleStream=maybe"],
    ["run", "{m}", "--device", "tpu"], ["streams", "{d}/junk.onnx"], ["run", "{d}/junk.pgm"], ["frobnicate"]])
def test_cli_errors_are_one_line_and_non_zero(capsys, tmp_path, model_file, argv):
    (tmp_path / "junk.onnx").write_bytes(b"not a model")
    (tmp_path / "junk.pgm").write_bytes(b"not a model either")
    np.save(tmp_path / "bad.npy", np.ones(5, np.float32))
    rc, out, err = cli(capsys, *[a.format(d=tmp_path, m=model_file) for a in argv])
    assert rc != 0 and len(err.strip().splitlines()) == 1 and err.startswith("pyge"), err


def test_cli_failing_plugin_and_pass(capsys, tmp_path, monkeypatch, model_file):
    opp = make_opp(tmp_path / "opp", {"vendors/v/custom_fusion_passes/a.py": "import pyge\n"
                                      "pyge.register_custom_pass('Bad').custom_allocate_stream_pass_fn(lambda g, c: 7)\n"})
    monkeypatch.setenv("PYGE_OPP_PATH", str(opp))
    rc, out, err = cli(capsys, "streams", model_file)
    assert rc == 1 and err.strip().splitlines() == ["pyge: error: custom stream pass 'Bad' failed with return code 7: (no message)"]


def test_console_script_is_installed():
    import shutil
    assert shutil.which("pyge") or any(ep.name == "pyge" for ep in
                                        __import__("importlib.metadata").metadata.entry_points(group="console_scripts"))


# -- bad input ---------------------------------------------------------------------------------

@pytest.mark.parametrize("data", [b"", b"\x08\x01garbage\xff" * 8, b"hello"])
def test_corrupt_model_files(tmp_path, data):
    (tmp_path / "bad.onnx").write_bytes(data)
    with pytest.raises(pyge.ModelLoadError, match="bad.onnx") as err:
        pyge.load_onnx(tmp_path / "bad.onnx")
    one_line(err)
    model = pyge.compile(ref_graph())
    model.save(tmp_path / "m.pgm")
    raw = (tmp_path / "m.pgm").read_bytes()
    for i, broken in enumerate((raw[: len(raw) // 2], raw[:-1] + bytes([raw[-1] ^ 0xFF]), data)):
        (tmp_path / f"bad{i}.pgm").write_bytes(broken)
        with pytest.raises(pyge.ModelFileError, match=f"bad{i}.pgm") as err:
            pyge.load_model(tmp_path / f"bad{i}.pgm")
        one_line(err)


def test_unsupported_operator_names_op_and_node():
    b = pyge.GraphBuilder("u")
    v = b.input("input", "float32", SHAPE)
    b.op("FooBar", [v], name="Foo_1", outputs=["output"])
    b.graph.outputs.append(b.graph.value("output"))
    with pytest.raises(pyge.UnsupportedOperatorError, match="FooBar.*Foo_1") as err:
        pyge.compile(b.build())
    one_line(err)


class _Unconvertible:
    """A feed whose conversion to an array fails (its own __array__ raises)."""

    def __array__(self, dtype=None, copy=None):
        raise RuntimeError("no array here")


@pytest.mark.parametrize("feeds, culprit", [({"input": np.ones((3, 4), np.float32)}, "shape"),
                                            ({"input": np.ones(SHAPE, np.float64)}, "dtype"),
                                            ({}, "input"), ({"input": np.ones(SHAPE, np.float32), "x": 1}, "'x'"),
                                            ({"input": "text"}, "input"),
                                            ({"input": _Unconvertible()}, "'input' cannot be converted")])
def test_wrong_inputs_leave_the_model_usable(feeds, culprit):
    model = split_model()
    with pytest.raises(pyge.InputError, match=culprit) as err:
        model.run(feeds)
    one_line(err)
    np.testing.assert_array_equal(model.run({"input": x_in()})["output"], np.maximum(x_in(), 0) + np.abs(x_in()))


def test_failed_run_names_the_node_and_the_model_stays_usable():
    b = pyge.GraphBuilder("gather")
    x, idx = b.input("x", "float32", (4, 3)), b.input("idx", "int64", (2,))
    g1 = b.op("Gather", [b.op("Abs", [x], name="Abs_1"), idx], name="Gather_1", axis=0)
    g2 = b.op("Gather", [b.op("Relu", [x], name="Relu_1"), idx], name="Gather_2", axis=0)
    b.op("Add", [g1, g2], name="Add_1", outputs=["y"])
    b.graph.outputs.append(b.graph.value("y"))
    model = pyge.compile(b.build(), options={"ge.autoMultistreamParallelMode": "LoadBalance:2"})
    assert model.num_streams == 2
    ones = np.ones((4, 3), np.float32)
    with pytest.raises(pyge.ExecutionError, match="Gather_[12]") as err:
        model.run({"x": ones, "idx": np.array([0, 9])})
    one_line(err)
    assert model.run({"x": ones, "idx": np.array([0, 1])})["y"].tolist() == [[2.0] * 3] * 2
