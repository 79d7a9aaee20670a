"""Plain-text tables (ASCII only, no colours): the one table formatter, used by the command
line and by the profiling reports."""
from __future__ import annotations

from typing import Any, Iterable, Sequence


def table(headers: Sequence[str], rows: Iterable[Sequence[Any]], indent: str = "",
          numbers_right: bool = True) -> str:
    """Columns padded to their widest cell, a dashed rule under the headers; with
    `numbers_right`, columns of numbers right-aligned, everything else left-aligned."""
    rows = [[cell(c) for c in r] for r in rows]
    cols = len(headers)
    widths = [max([len(headers[i])] + [len(r[i]) for r in rows if i < len(r)]) for i in range(cols)]
    numeric = [numbers_right and bool(rows) and all(_is_number(r[i]) for r in rows if i < len(r) and r[i])
               for i in range(cols)]

    def line(cells: Sequence[str]) -> str:
        parts = []
        for i in range(cols):
            c = cells[i] if i < len(cells) else ""
            parts.append(c.rjust(widths[i]) if numeric[i] else c.ljust(widths[i]))
        return (indent + "  ".join(parts)).rstrip()

    out = [line(list(headers)), indent + "  ".join("-" * w for w in widths)]
    out.extend(line(r) for r in rows)
    return "\n".join(out)


def cell(c: Any) -> str:
    """A table cell: floats to four significant digits, anything else as str()."""
    if isinstance(c, float):
        return f"{c:.4g}"
    return str(c)


def _is_number(s: str) -> bool:
    try:
        float(s.replace(" ms", "").replace(" s", ""))
        return True
    except ValueError:
        return False
