"""Plain-text tables and number formatting for the command line (ASCII only, no colours)."""
from __future__ import annotations

from typing import Any, Iterable

import numpy as np

from ..formatting import cell, table


def key_values(pairs: Iterable[tuple[str, Any]], indent: str = "") -> str:
    """`key   value` lines with the keys padded to one width."""
    pairs = [(k, cell(v)) for k, v in pairs]
    w = max((len(k) for k, _ in pairs), default=0)
    return "\n".join(f"{indent}{k.ljust(w)}  {v}" for k, v in pairs)


def human_bytes(n: int | float) -> str:
    n = float(n)
    for unit in ("B", "KiB", "MiB", "GiB"):
        if abs(n) < 1024 or unit == "GiB":
            return f"{n:.0f} {unit}" if unit == "B" else f"{n:.1f} {unit}"
        n /= 1024
    return f"{n:.1f} GiB"


def ms(seconds: float) -> str:
    return f"{seconds * 1e3:.2f} ms"


def shape_str(shape: Any) -> str:
    if shape is None:
        return "?"
    return "[" + ",".join("?" if d is None else str(d) for d in shape) + "]"


def array_row(name: str, a: Any, preview: int = 4) -> list[str]:
    """name, dtype, shape, min, max, mean, first values: one row of the outputs table."""
    a = np.asarray(a)
    flat = a.ravel()
    head = ", ".join(_scalar(x) for x in flat[:preview]) + (", ..." if flat.size > preview else "")
    if flat.size and a.dtype.kind in "fiub":
        x = flat.astype(np.float64)
        stats = [f"{np.nanmin(x):.4g}", f"{np.nanmax(x):.4g}", f"{np.nanmean(x):.4g}"] \
            if np.isfinite(x).any() else ["nan"] * 3
    else:
        stats = ["", "", ""]
    return [name, str(a.dtype), shape_str(a.shape), *stats, f"[{head}]"]


def _scalar(x: Any) -> str:
    if isinstance(x, (float, np.floating)):
        return f"{float(x):.4g}"
    return str(x)


__all__ = ["table", "key_values", "human_bytes", "ms", "shape_str", "array_row"]
