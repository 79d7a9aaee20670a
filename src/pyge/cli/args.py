"""Checked command-line values: argparse `type=` functions that refuse a bad value at once.

A path or count flag is checked when the command line is parsed, before any model is loaded,
so `--timeline /missing/t.png` or `--runs 0` fails in a fraction of a second with one line
naming the flag, not after minutes of work with an errno text. Writability is probed by
creating (and removing) a file, because os.access answers yes to root on a read-only mount.

Only the standard library is imported here: building the parser must stay cheap.
"""
from __future__ import annotations

import argparse
import math
import os
import re
import tempfile
from pathlib import Path
from typing import Callable

from ..errors import PygeError


class UsageError(PygeError):
    """The command line asks for something that cannot be done (exit status 2)."""


Check = Callable[[str], object]
_DEVICE = re.compile(r"cpu|cuda(:\d+)?")
_DIMS = re.compile(r"\s*\d+(\s*,\s*\d+)*\s*|\s*")


def _bad(message: str) -> argparse.ArgumentTypeError:
    return argparse.ArgumentTypeError(message)


def count(lowest: int) -> Check:
    """An integer >= `lowest` (runs, warm-up runs, seeds, ids)."""
    def check(text: str) -> int:
        try:
            n = int(text)
        except ValueError:
            raise _bad(f"expected an integer >= {lowest}, got {text!r}") from None
        if n < lowest:
            raise _bad(f"must be at least {lowest}, got {n}")
        return n
    check.__name__ = f"integer >= {lowest}"
    return check


def seconds(text: str) -> float:
    """A finite number of seconds >= 0 (nan would never end a budget)."""
    try:
        s = float(text)
    except ValueError:
        raise _bad(f"expected seconds >= 0, got {text!r}") from None
    if not (math.isfinite(s) and s >= 0):
        raise _bad(f"must be finite seconds >= 0, got {text!r}")
    return s


def stream_counts(text: str) -> list[int]:
    """K,K,...: stream counts 1..64."""
    try:
        ks = [int(x) for x in text.split(",") if x.strip()]
    except ValueError:
        ks = []
    if not ks or any(not 1 <= k <= 64 for k in ks):
        raise _bad(f"{text!r} is malformed; expected integers 1..64 separated by commas")
    return ks


def device(text: str) -> str:
    if not _DEVICE.fullmatch(text.strip().lower()):
        raise _bad(f"unknown device {text!r}; accepted values: cpu, cuda, cuda:N")
    return text.strip().lower()


def key_value(text: str) -> tuple[str, str]:
    """KEY=VALUE."""
    key, sep, value = text.partition("=")
    if not sep or not key.strip():
        raise _bad(f"expected KEY=VALUE, got {text!r}")
    return key.strip(), value.strip()


def shape(text: str) -> tuple[str, tuple[int, ...]]:
    """NAME=D0,D1,...: the shape of a random input."""
    name, dims = key_value(text)
    if not _DIMS.fullmatch(dims):
        raise _bad(f"{text!r}: expected NAME=D0,D1,... with sizes such as 1,3,224,224")
    return name, tuple(int(d) for d in dims.split(",") if d.strip())


def input_file(text: str) -> str:
    """[NAME=]FILE.npy: the file must be there and readable; the name is checked later,
    against the model's inputs."""
    _, sep, file = text.partition("=")
    path = Path(file if sep else text)
    if not path.is_file():
        raise _bad(f"input file {'is a folder' if path.is_dir() else 'not found'}: {path}")
    if not os.access(path, os.R_OK):
        raise _bad(f"input file cannot be read: {path}")
    return text


def _probe(target: Path, folder: Path) -> None:
    """Raise if `target` cannot be made because the existing folder `folder` takes no new file."""
    try:
        fd, name = tempfile.mkstemp(prefix=".pyge_probe_", dir=folder)
    except OSError as err:
        raise _bad(f"{target}: cannot create files in {folder} ({err.strerror or err})") from None
    os.close(fd)
    os.remove(name)


def _existing_parent(path: Path) -> Path:
    for folder in path.absolute().parents:
        if folder.exists():
            if not folder.is_dir():
                raise _bad(f"{folder} is a file, not a folder")
            return folder
    return Path(os.sep)


def output_file(suffixes: Callable[[], set[str]] | None = None) -> Check:
    """A file to write: its folder exists and takes a new file; an existing file may be
    replaced. `suffixes`, when given, lists the accepted extensions (a picture format)."""
    def check(text: str) -> str:
        path = Path(text)
        if path.is_dir():
            raise _bad(f"{path} is a folder, not a file")
        if not path.parent.absolute().is_dir():
            raise _bad(f"folder {path.parent} does not exist (for {path})")
        if suffixes is not None:
            ok = suffixes()
            ext = path.suffix.lower().lstrip(".")
            if ext not in ok:
                raise _bad(f"{path}: unknown picture format {ext or '(none)'!r}; use one of "
                           + ", ".join(sorted(ok)))
        if path.exists():
            try:
                os.close(os.open(path, os.O_WRONLY | os.O_APPEND))
            except OSError as err:
                raise _bad(f"cannot write {path}: {err.strerror or err}") from None
        else:
            _probe(path, path.parent.absolute())
        return text
    return check


def output_dir(text: str) -> str:
    """A folder to write into: an existing folder that takes new files, or a path whose
    nearest existing folder does (the folder itself is made when the work writes to it)."""
    path = Path(text)
    if path.exists():
        if not path.is_dir():
            raise _bad(f"{path} is a file, not a folder")
        _probe(path, path)
    else:
        _probe(path, _existing_parent(path))
    return text


def picture_formats() -> set[str]:
    """The file extensions matplotlib can write (imported here only when a picture is asked for)."""
    try:
        from matplotlib.backend_bases import FigureCanvasBase
    except ImportError:
        return {"png", "pdf", "svg"}
    return set(FigureCanvasBase.get_supported_filetypes())


def env_flag(name: str) -> bool:
    return os.environ.get(name, "").strip().lower() not in ("", "0", "false", "no")


__all__ = ["UsageError", "count", "seconds", "stream_counts", "device", "key_value", "shape",
           "input_file", "output_file", "output_dir", "picture_formats", "env_flag"]
