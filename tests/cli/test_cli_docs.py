"""The documentation says what the code does: every option documented, the tutorial runs."""
from __future__ import annotations

import itertools
import re
from pathlib import Path

import pytest

from pyge.options import accepted_keys

DOCS = Path(__file__).resolve().parents[2] / "docs"


def test_every_option_key_is_documented():
    text = (DOCS / "options.md").read_text()
    missing = [k for k in accepted_keys() if f"`{k}`" not in text]
    assert not missing, f"docs/options.md lacks {missing}"


def test_tutorial_code_runs_and_shows_what_it_says(tmp_path, monkeypatch):
    import pyge
    text = (DOCS / "tutorial.md").read_text()
    blocks = re.findall(r"```python\n(.*?)```", text, flags=re.S)
    assert len(blocks) >= 5
    monkeypatch.chdir(tmp_path)
    monkeypatch.delenv("DUMP_GE_GRAPH", raising=False)
    monkeypatch.setenv("DUMP_GRAPH_PATH", str(tmp_path / "dumps"))
    monkeypatch.delenv("DUMP_GRAPH_LEVEL", raising=False)
    import pyge.dumps
    monkeypatch.setattr(pyge.dumps, "_seq", itertools.count())   # as in a fresh process
    scope: dict = {}
    with pyge.custom_passes_scope():
        for code in blocks:
            if "graph_id=2" in code:              # step 4 switches the dumps on, as the text says
                monkeypatch.setenv("DUMP_GE_GRAPH", "2")
            exec(compile(code, "docs/tutorial.md", "exec"), scope)  # noqa: S102 - our own docs
            if "graph_id=2" in code:
                names = sorted(p.name for p in (tmp_path / "dumps").iterdir())
    after = scope["after"]
    assert after.stream_of("Abs_1") == 1 and after.streams == [["Relu_1", "Add_1"], ["Abs_1"]]
    assert [str(e) for e in after.events] == ["e0: Abs_1@s1 -> Add_1@s0"]
    for suffix in ("_graph_2_RunCustomPass_BeforeAssignLogicStreamSplitAbs.pbtxt",
                   "_graph_2_RunCustomPass_AfterAssignLogicStreamSplitAbs.pbtxt",
                   "_graph_2_PreRunAfterBuild.pbtxt"):
        assert any(n.endswith(suffix) for n in names), (suffix, names)
        assert suffix in text                     # the tutorial names the same files
    assert all(n in text for n in names), names   # sequence numbers included (from 0, as in GE)
    assert (tmp_path / "timeline.png").exists() and (tmp_path / "trace.json").exists()


@pytest.mark.parametrize("doc", ["tutorial.md", "options.md", "plugins.md"])
def test_links_between_docs_resolve(doc):
    for target in re.findall(r"\]\(([\w.-]+\.md)\)", (DOCS / doc).read_text()):
        assert (DOCS / target).exists(), f"{doc} links to missing {target}"


def test_readme_python_snippet_runs_as_written(tmp_path, monkeypatch):
    """README "Using it": the snippet runs on a model.onnx with an input named "input"."""
    import onnx
    import pyge
    from pyge.frontends.onnx_proto import graph_to_model
    text = (DOCS.parent / "README.md").read_text()
    code = re.search(r"## Using it\s*```python\n(.*?)```", text, flags=re.S).group(1)
    monkeypatch.chdir(tmp_path)
    onnx.save(graph_to_model(pyge.examples.reference_graph((64, 64))), "model.onnx")
    scope: dict = {}
    with pyge.custom_passes_scope():
        exec(compile(code, "README.md", "exec"), scope)  # noqa: S102 - our own docs
    assert scope["model"].stream_of("Abs_1") == 1 and (tmp_path / "trace.json").exists()


def test_every_command_is_in_the_command_line_section():
    # `pyge tune` was missing from docs/options.md's list of commands
    from pyge.cli import build_parser
    text = (DOCS / "options.md").read_text()
    block = text[text.index("## Command line"):]
    sub = next(a for a in build_parser()._actions if a.__class__.__name__ == "_SubParsersAction")
    missing = [c for c in sub.choices if not re.search(rf"^pyge {c}\b", block, re.M)]
    assert not missing, f"docs/options.md's command line section lacks {missing}"
