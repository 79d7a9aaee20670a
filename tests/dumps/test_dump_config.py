"""DUMP_GE_GRAPH / DUMP_GRAPH_LEVEL / DUMP_GRAPH_PATH parsing and the folder check."""
from __future__ import annotations

import pytest

from pyge.dumps.config import FULL, NO_WEIGHTS, STRUCTURE, config_from_env, parse_level, parse_mode
from pyge.errors import DumpError, OptionError


@pytest.mark.parametrize("raw,mode", [(None, None), ("", None), ("0", None), ("1", FULL),
                                      (" 2 ", NO_WEIGHTS), ("3", STRUCTURE)])
def test_mode_values(raw, mode):
    assert parse_mode(raw) == mode


@pytest.mark.parametrize("raw", ["4", "yes", "-1", "1.0"])
def test_bad_mode_names_variable_and_values(raw):
    with pytest.raises(OptionError, match=r"DUMP_GE_GRAPH.*accepted values: 1 \(full\), 2"):
        parse_mode(raw)


@pytest.mark.parametrize("raw,want", [(None, (2, ())), ("", (2, ())), ("1", (1, ())), ("3", (3, ())),
                                      ("PreRunAfterBuild", (None, ("PreRunAfterBuild",))),
                                      ("Before|Build", (None, ("Before", "Build")))])
def test_level_values(raw, want):
    assert parse_level(raw) == want


@pytest.mark.parametrize("raw", ["0", "4", "17", "|"])
def test_bad_level(raw):
    with pytest.raises(OptionError, match="DUMP_GRAPH_LEVEL"):
        parse_level(raw)


def test_unset_reads_nothing_else(tmp_path):
    # Malformed companions do not matter while dumping is off.
    assert config_from_env({"DUMP_GRAPH_LEVEL": "9", "DUMP_GRAPH_PATH": "/proc/nope"}) is None


def test_folder_created(tmp_path):
    target = tmp_path / "a" / "b"
    cfg = config_from_env({"DUMP_GE_GRAPH": "1", "DUMP_GRAPH_PATH": str(target)})
    assert target.is_dir() and cfg.folder == str(target)


def test_default_folder_is_cwd(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    assert config_from_env({"DUMP_GE_GRAPH": "1"}).folder == str(tmp_path)


def test_folder_that_is_a_file(tmp_path):
    f = tmp_path / "file"
    f.write_text("x")
    with pytest.raises(DumpError, match="DUMP_GRAPH_PATH"):
        config_from_env({"DUMP_GE_GRAPH": "1", "DUMP_GRAPH_PATH": str(f)})
    with pytest.raises(DumpError, match=str(f / "sub")):
        config_from_env({"DUMP_GE_GRAPH": "1", "DUMP_GRAPH_PATH": str(f / "sub")})


def test_read_only_folder(tmp_path):
    ro = tmp_path / "ro"
    ro.mkdir()
    ro.chmod(0o500)
    try:
        if _can_write(ro):
            pytest.skip("running as a user who can write anywhere (root)")
        with pytest.raises(DumpError, match="not writable"):
            config_from_env({"DUMP_GE_GRAPH": "1", "DUMP_GRAPH_PATH": str(ro)})
    finally:
        ro.chmod(0o700)


def _can_write(folder) -> bool:
    try:
        (folder / "probe").write_text("x")
        (folder / "probe").unlink()
        return True
    except OSError:
        return False


@pytest.mark.parametrize("level,stage,slevel,want", [
    ("1", "InferShapes", 1, True), ("2", "InferShapes", 1, False), ("2", "RunCustomPass_AfterX", 2, True),
    ("3", "RunCustomPass_AfterX", 2, False), ("3", "PreRunAfterBuild", 3, True),
    ("After", "RunCustomPass_AfterAssignLogicStreamX", 2, True), ("After", "InferShapes", 1, False)])
def test_wants(tmp_path, level, stage, slevel, want):
    cfg = config_from_env({"DUMP_GE_GRAPH": "1", "DUMP_GRAPH_LEVEL": level, "DUMP_GRAPH_PATH": str(tmp_path)})
    assert cfg.wants(stage, slevel) is want
