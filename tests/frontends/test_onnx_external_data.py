"""External data (issue 20, item 3): read from the model's folder only, never relative to the
working folder, and never from outside that folder."""
from __future__ import annotations

import os

import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper, numpy_helper

import pyge
from pyge.frontends.onnx_proto import model_from_proto

W = np.array([1.5, -2.0, 3.25], dtype=np.float32)
SECRET = np.array([42.0, 43.0, 44.0], dtype=np.float32)


def _external(name: str, location: str, **entries) -> TensorProto:
    t = TensorProto()
    t.name = name
    t.data_type = TensorProto.FLOAT
    t.dims.append(3)
    t.data_location = TensorProto.EXTERNAL
    for key, value in {"location": location, **entries}.items():
        e = t.external_data.add()
        e.key, e.value = key, str(value)
    return t


def _model(location: str = "w.bin", **entries) -> onnx.ModelProto:
    """y = Identity(w), w's three floats kept in an external file."""
    y = helper.make_tensor_value_info("y", TensorProto.FLOAT, [3])
    g = helper.make_graph([helper.make_node("Identity", ["w"], ["y"], name="id")], "g", [], [y],
                          initializer=[_external("w", location, **entries)])
    return helper.make_model(g, opset_imports=[helper.make_opsetid("", 17)])


def _constant_model(location: str) -> onnx.ModelProto:
    """y = Constant(value=<external tensor>)."""
    y = helper.make_tensor_value_info("y", TensorProto.FLOAT, [3])
    node = helper.make_node("Constant", [], ["y"], name="c", value=_external("cval", location))
    return helper.make_model(helper.make_graph([node], "g", [], [y]),
                             opset_imports=[helper.make_opsetid("", 17)])


@pytest.fixture
def folders(tmp_path, monkeypatch):
    """base/ holds the model's data (w.bin); the working folder holds a secret of the same name."""
    base = tmp_path / "base"
    base.mkdir()
    (base / "w.bin").write_bytes(W.tobytes())
    work = tmp_path / "work"
    work.mkdir()
    (work / "w.bin").write_bytes(SECRET.tobytes())
    (work / "secret.bin").write_bytes(SECRET.tobytes())
    monkeypatch.chdir(work)
    return base, work


def _w(g) -> np.ndarray:
    return g.initializers["w"].const


@pytest.mark.parametrize("kind", ["bytes", "proto"])
def test_without_base_dir_external_data_is_refused_not_read_from_the_working_folder(folders, kind):
    mp = _model("w.bin")
    src = mp.SerializeToString() if kind == "bytes" else mp
    with pytest.raises(pyge.ModelLoadError, match=r"tensor 'w' keeps its data in the external file 'w.bin'.*"
                                                  r"pass base_dir="):
        pyge.load_onnx(src)


@pytest.mark.parametrize("kind", ["bytes", "proto"])
def test_with_base_dir_external_data_is_read_from_there(folders, kind):
    base, _ = folders
    mp = _model("w.bin")
    g = pyge.load_onnx(mp.SerializeToString() if kind == "bytes" else mp, base_dir=base)
    np.testing.assert_array_equal(_w(g), W)
    assert mp.graph.initializer[0].data_location == TensorProto.EXTERNAL   # the caller's proto unchanged


def test_a_path_reads_from_its_own_folder_whatever_the_working_folder(folders):
    base, _ = folders
    onnx.save(_model("w.bin"), base / "m.onnx")
    np.testing.assert_array_equal(_w(pyge.load_onnx(base / "m.onnx")), W)


def test_an_attribute_tensor_is_covered_too(folders):
    base, _ = folders
    mp = _constant_model("w.bin")
    with pytest.raises(pyge.ModelLoadError, match="tensor 'cval' keeps its data in the external file"):
        pyge.load_onnx(mp)
    out = pyge.compile(pyge.load_onnx(mp, base_dir=base)).run({})
    np.testing.assert_array_equal(out["y"], W)


def _escapes(base, work) -> dict[str, str]:
    (base / "out.bin").symlink_to(work / "secret.bin")
    (base / "outdir").symlink_to(work)
    (base / "sub").mkdir()
    return {"dotdot": "../work/secret.bin", "deep dotdot": "sub/../../work/secret.bin",
            "absolute": str(work / "secret.bin"), "file link": "out.bin", "folder link": "outdir/secret.bin"}


@pytest.mark.parametrize("case", ["dotdot", "deep dotdot", "absolute", "file link", "folder link"])
@pytest.mark.parametrize("kind", ["path", "bytes"])
def test_locations_that_escape_the_base_folder_are_refused(folders, case, kind):
    base, work = folders
    loc = _escapes(base, work)[case]
    mp = _model(loc)
    with pytest.raises(pyge.ModelLoadError, match=r"tensor 'w': external data location .* "
                                                  r"(points outside the model's folder|is not a relative path)"):
        if kind == "path":
            onnx.save(mp, base / "m.onnx")
            pyge.load_onnx(base / "m.onnx")
        else:
            pyge.load_onnx(mp.SerializeToString(), base_dir=base)


@pytest.mark.parametrize("loc", ["sub/../w.bin", "./w.bin", "alias.bin", "linked/w.bin"])
def test_locations_that_stay_inside_load(folders, loc):
    base, _ = folders
    (base / "sub").mkdir()
    (base / "alias.bin").symlink_to(base / "w.bin")
    (base / "inner").mkdir()
    (base / "inner" / "w.bin").write_bytes(W.tobytes())
    (base / "linked").symlink_to(base / "inner")
    np.testing.assert_array_equal(_w(pyge.load_onnx(_model(loc), base_dir=base)), W)


def test_offset_and_length_are_checked_against_the_file(folders):
    base, _ = folders
    (base / "two.bin").write_bytes(SECRET.tobytes() + W.tobytes())
    g = pyge.load_onnx(_model("two.bin", offset=12, length=12), base_dir=base)
    np.testing.assert_array_equal(_w(g), W)
    with pytest.raises(pyge.ModelLoadError, match=r"offset 20 and length 12 do not fit in the file's 24 bytes"):
        pyge.load_onnx(_model("two.bin", offset=20, length=12), base_dir=base)
    with pytest.raises(pyge.ModelLoadError, match="offset and length must be integers"):
        pyge.load_onnx(_model("two.bin", offset="x"), base_dir=base)


def test_missing_file_and_missing_location_are_named(folders):
    base, _ = folders
    with pytest.raises(pyge.ModelLoadError, match=r"location 'nope.bin' cannot be read: No such file"):
        pyge.load_onnx(_model("nope.bin"), base_dir=base)
    mp = _model("w.bin")
    del mp.graph.initializer[0].external_data[:]
    with pytest.raises(pyge.ModelLoadError, match="tensor 'w' is marked external but names no location"):
        pyge.load_onnx(mp, base_dir=base)
    with pytest.raises(pyge.ModelLoadError, match="base_dir .* is not a folder"):
        pyge.load_onnx(_model("w.bin"), base_dir=base / "w.bin")


@pytest.mark.timeout(20)
def test_a_fifo_is_refused_not_read(folders):
    base, _ = folders
    os.mkfifo(base / "pipe.bin")
    with pytest.raises(pyge.ModelLoadError, match="'pipe.bin' is not a regular file"):
        pyge.load_onnx(_model("pipe.bin"), base_dir=base)


def test_the_ir_converter_never_reads_external_data_itself(folders):
    # Whatever reaches the converter with data still external is refused, not read from the cwd.
    with pytest.raises(pyge.ModelLoadError, match="tensor 'w' keeps its data in an external file that was not read"):
        model_from_proto(_model("w.bin"))


def test_inline_models_need_no_base_dir(folders):
    y = helper.make_tensor_value_info("y", TensorProto.FLOAT, [3])
    g = helper.make_graph([helper.make_node("Identity", ["w"], ["y"])], "g", [], [y],
                          initializer=[numpy_helper.from_array(W, "w")])
    mp = helper.make_model(g, opset_imports=[helper.make_opsetid("", 17)])
    np.testing.assert_array_equal(_w(pyge.load_onnx(mp.SerializeToString())), W)


@pytest.mark.timeout(20)
def test_a_fifo_named_like_a_model_is_refused_not_read(tmp_path):
    os.mkfifo(tmp_path / "m.onnx")
    with pytest.raises(pyge.ModelLoadError, match="model path is not a regular file: .*m.onnx"):
        pyge.load_onnx(tmp_path / "m.onnx")
