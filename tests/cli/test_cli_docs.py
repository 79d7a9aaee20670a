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
    # step 7: the graph pass fuses both MatMul+Add pairs and writes its three dumps
    assert [n.op_type for n in scope["fused"].graph.nodes] == ["Gemm", "Relu", "Gemm", "Identity"]
    for stage in ("RunCustomPassBegin_AfterInferShapeFuseMatMulAdd",
                  "RunCustomPass_AfterInferShapeFuseMatMulAdd", "RunCustomPass_AfterInferShape"):
        assert len(list((tmp_path / "dumps").glob(f"*_graph_3_{stage}.pbtxt"))) == 1, stage
    # step 8: the pass chose LoadBalance:4 from the graph's width, one chain per stream
    assert scope["tuned"].options["ge.autoMultistreamParallelMode"] == ("LoadBalance", 4)
    assert scope["tuned"].num_streams == 4
    # step 9: a dynamic-shape model is one dynamic root and one static sub-model
    assert [(p.name, p.kind) for p in scope["dyn"].submodels] == [("dyn", "dynamic"), ("dyn_static_0", "static")]


ROOT = DOCS.parent
README = ROOT / "README.md"
SETUP_LINES = [
    "./scripts/setup.sh && .venv/bin/pyge demo              # set up, then run the reference example",
    "./scripts/setup.sh && .venv/bin/python -m pytest -q    # set up, then run the tests (what CI runs)",
]


def _without_code(text: str) -> str:
    return re.sub(r"```.*?```", "", text, flags=re.S)


def _anchors(path: Path) -> set[str]:
    """The anchors GitHub makes of a page's headings: lower case, punctuation dropped, - for space."""
    heads = re.findall(r"^#+ (.+)$", _without_code(path.read_text()), flags=re.M)
    return {re.sub(r"[^\w\- ]", "", h.strip().lower()).replace(" ", "-") for h in heads}


def _block(text: str, heading: str, lang: str) -> str:
    """The first fenced block of `lang` under the level-2 heading `heading`."""
    section = text[text.index(f"\n## {heading}\n"):]
    return re.search(rf"```{lang}\n(.*?)```", section, flags=re.S).group(1)


@pytest.mark.parametrize("doc", ["README.md", *sorted(f"docs/{p.name}" for p in DOCS.glob("*.md"))])
def test_links_resolve(doc):
    """Every relative link of the README and the docs names a file that exists, and a #anchor
    into a page names one of its headings."""
    page = ROOT / doc
    for target in re.findall(r"\]\(([^)\s]+)\)", _without_code(page.read_text())):
        if re.match(r"[a-z]+:", target):
            continue
        path, _, anchor = target.partition("#")
        dest = (page.parent / path).resolve() if path else page
        assert dest.exists(), f"{doc} links to missing {target}"
        if anchor and dest.suffix == ".md":
            assert anchor in _anchors(dest), f"{doc} links to {target}: no such heading"


def test_readme_starts_with_the_two_setup_commands_and_stays_short():
    lines = README.read_text().splitlines()
    assert lines[0] == "# pyge" and lines[2:6] == ["```bash", *SETUP_LINES, "```"]
    assert len(lines) <= 200


def test_readme_gives_the_newcomer_everything_before_any_figure():
    """Figures live in docs/performance.md; the README's last section points there, with at
    most one line of figures."""
    head, tail = README.read_text().split("\n## Figures\n")
    figure = r"\d+(\.\d+)?x\b|\d+(\.\d+)? ?(ms|us|MB|GiB|s)\b"
    assert not [m.group(0) for m in re.finditer(figure, head)]
    assert len([line for line in tail.splitlines() if re.search(figure, line)]) <= 1
    assert "(docs/performance.md)" in tail and "\n## " not in tail


def test_readme_python_snippet_runs_as_written(tmp_path, monkeypatch, capsys):
    """README "A first program": runs in an empty folder and prints what its comments say."""
    import pyge
    code = _block(README.read_text(), "A first program", "python")
    monkeypatch.chdir(tmp_path)
    monkeypatch.delenv("DUMP_GE_GRAPH", raising=False)
    scope: dict = {}
    with pyge.custom_passes_scope():
        exec(compile(code, "README.md", "exec"), scope)  # noqa: S102 - our own docs
    printed = capsys.readouterr().out.splitlines()
    claims = re.findall(r"^print\((model\.streams|\*model\.events)\)\s+# (.+)$", code, flags=re.M)
    assert len(claims) == 2
    for expr, comment in claims:
        assert comment.strip() in printed, (expr, comment, printed)
    assert scope["model"].stream_of("Abs_1") == 1 and (tmp_path / "trace.json").exists()


def test_readme_commands_run_as_written(tmp_path, monkeypatch, capsys):
    """README "Command line", each line through pyge's main, on a model.onnx and x.npy made here.
    `pyge demo` has its own tests (test_cli_demo.py); `pyge tune` gets a short budget."""
    import numpy as np
    import onnx
    import pyge
    from pyge import cli
    from pyge.frontends.onnx_proto import graph_to_model
    monkeypatch.chdir(tmp_path)
    for var in ("DUMP_GE_GRAPH", "PYGE_OPP_PATH", "ASCEND_OPP_PATH"):
        monkeypatch.delenv(var, raising=False)
    onnx.save(graph_to_model(pyge.examples.reference_graph((64, 64))), "model.onnx")
    np.save("x.npy", pyge.examples.reference_inputs((64, 64))["input"])
    block = _block(README.read_text(), "Command line", "bash")
    lines = [line.split("#")[0].split() for line in block.splitlines() if line.strip()]
    assert {argv[1] for argv in lines} >= {"demo", "run", "streams", "profile", "compile", "tune"}
    for argv in lines:
        assert argv[0] == "pyge", argv
        if argv[1] == "demo":
            continue
        extra = ["--budget-s", "1"] if argv[1] == "tune" else []
        assert cli.main(argv[1:] + extra) == 0, (argv, capsys.readouterr().err)
    for written in ("trace.json", "timeline.png", "model.pgm", "model.policy.json"):
        assert (tmp_path / written).exists(), written


def test_every_command_is_in_the_command_line_section():
    # `pyge tune` was missing from docs/options.md's list of commands
    from pyge.cli import build_parser
    text = (DOCS / "options.md").read_text()
    block = text[text.index("## Command line"):]
    sub = next(a for a in build_parser()._actions if a.__class__.__name__ == "_SubParsersAction")
    missing = [c for c in sub.choices if not re.search(rf"^pyge {c}\b", block, re.M)]
    assert not missing, f"docs/options.md's command line section lacks {missing}"
