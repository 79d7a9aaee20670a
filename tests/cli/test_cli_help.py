"""Help that helps: short per-command help, the TensorFlow flags only where a .pb can be
given, one output-format convention documented alike, and -v naming the plugin files."""
from __future__ import annotations

import json
import re

import pytest

from pyge import cli

from ._proc import pyge

COMMANDS = ("compile", "run", "streams", "profile", "demo", "tune")
TAKE_A_MODEL_FILE = ("compile", "run", "streams", "profile", "tune")


def _help(capsys, *argv) -> str:
    assert cli.main([*argv, "--help"]) == 0
    return capsys.readouterr().out


def test_the_command_table_is_the_list_of_commands():
    assert tuple(cli.COMMANDS) == COMMANDS
    for name, (build, handler) in cli.COMMANDS.items():
        assert callable(build) and callable(handler), name


@pytest.mark.parametrize("cmd", COMMANDS)
def test_per_command_help_is_short_and_has_no_shared_epilogue(capsys, cmd):
    text = _help(capsys, cmd)
    assert text.startswith(f"usage: pyge {cmd}")
    assert "DUMP_GE_GRAPH" not in text and "ge.enableSingleStream" not in text   # listed once, by pyge --help
    assert len(text.splitlines()) <= 60, len(text.splitlines())
    assert ("--pb-inputs" in text) == (cmd in TAKE_A_MODEL_FILE)


def test_the_top_level_help_lists_options_and_environment_once(capsys):
    text = _help(capsys)
    assert text.count("DUMP_GE_GRAPH") == 1 and text.count("ge.enableSingleStream (default") == 1


def test_format_and_json_are_documented_alike_everywhere(capsys):
    seen = set()
    for cmd in COMMANDS:
        text = " ".join(_help(capsys, cmd).split())
        if cmd == "demo":
            assert "--format" not in text       # a narrative, not a report
            continue
        fmt = re.search(r"--format \{text,json\} (.*?) --json", text).group(1)
        js = re.search(r"--json (same as --format json)", text).group(1)
        seen.add((fmt, js))
    assert len(seen) == 1, seen


def test_trace_and_profile_are_one_flag_on_run(capsys):
    text = " ".join(_help(capsys, "run").split())
    assert "--trace TRACE.json, --profile TRACE.json" in text
    parser = cli.build_parser()
    a = parser.parse_args(["run", "--profile", "t.json"])
    b = parser.parse_args(["run", "--trace", "t.json"])
    assert a.trace == b.trace == "t.json"


def test_json_output_of_every_reporting_command(capsys, tmp_path, onnx_file):
    pgm = tmp_path / "m.pgm"
    docs = {}
    for argv in (["compile", onnx_file, "-o", pgm], ["run", onnx_file, "--runs", "2"],
                 ["streams", pgm, "--plan"], ["profile", pgm, "--runs", "2"],
                 ["tune", onnx_file, "--budget-s", "0", "--streams", "2", "--top", "1"]):
        assert cli.main([*map(str, argv), "--format", "json"]) == 0, argv
        docs[argv[0]] = json.loads(capsys.readouterr().out)
    assert docs["compile"]["output"] == str(pgm) and docs["compile"]["output_bytes"] > 0
    assert docs["run"]["run"]["runs"] == 2 and docs["run"]["outputs"][0]["shape"] == [2, 4]
    assert docs["streams"]["num_streams"] >= 1 and docs["streams"]["plan"]
    assert docs["profile"]["runs"] == 2 and docs["profile"]["op_types"]
    assert docs["tune"]["chosen"] and docs["tune"]["candidates"]
    assert cli.main(["streams", str(pgm), "--format", "table"]) == 0     # the old spelling of text
    assert "stream" in capsys.readouterr().out


def test_verbose_lists_the_plugin_files_loaded(tmp_path, onnx_file):
    folder = tmp_path / "opp" / "vendors" / "acme" / "custom_fusion_passes"
    folder.mkdir(parents=True)
    plugin = folder / "split.py"
    plugin.write_text("import pyge\n"
                      "@pyge.custom_stream_pass('AcmeSplit')\n"
                      "def split(graph, ctx):\n"
                      "    return pyge.GRAPH_SUCCESS\n")
    for p in (tmp_path, *(tmp_path / "opp").rglob("*")):
        p.chmod(p.stat().st_mode & ~0o022)
    p = pyge("-v", "streams", onnx_file, env={"PYGE_OPP_PATH": str(tmp_path / "opp")})
    assert p.returncode == 0, p.stderr
    assert f"plugin file loaded: {plugin}" in p.stderr
    assert "passes registered by plugins: AcmeSplit" in p.stderr
    p = pyge("streams", onnx_file, "-v", unset=("PYGE_OPP_PATH", "ASCEND_OPP_PATH"))
    assert p.returncode == 0 and "plugin folder: none" in p.stderr
    p = pyge("streams", onnx_file, env={"PYGE_OPP_PATH": str(tmp_path / "opp")})
    assert p.returncode == 0 and "plugin file" not in p.stderr          # only with -v
