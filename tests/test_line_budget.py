"""A line budget for the source, as tinygrad keeps one in CI: no Python file under src/ may
pass LIMIT lines. Files are meant to stay under about 400; the hard limit is where a file
must be split at its seams (by what it holds), not trimmed of its comments."""
from __future__ import annotations

from pathlib import Path

import pyge

LIMIT = 500
SRC = Path(pyge.__file__).resolve().parent.parent   # src/ in a checkout


def over_budget(root: Path, limit: int = LIMIT) -> list[tuple[str, int]]:
    """(path relative to root, line count) of every *.py file under root over `limit`."""
    out = []
    for path in sorted(root.rglob("*.py")):
        with path.open("rb") as f:
            n = sum(1 for _ in f)
        if n > limit:
            out.append((path.relative_to(root).as_posix(), n))
    return out


def test_no_source_file_over_the_budget():
    over = over_budget(SRC)
    assert not over, f"over {LIMIT} lines (split them by what they hold): " + ", ".join(
        f"{p} ({n})" for p, n in over)


def test_the_budget_counts_lines(tmp_path):
    (tmp_path / "pkg").mkdir()
    (tmp_path / "pkg" / "long.py").write_text("x = 1\n" * (LIMIT + 1))
    (tmp_path / "pkg" / "exact.py").write_text("x = 1\n" * LIMIT)
    (tmp_path / "notes.txt").write_text("x\n" * (LIMIT * 2))
    assert over_budget(tmp_path) == [("pkg/long.py", LIMIT + 1)]
