"""What the commands write must never be what they read, and saved outputs keep their names.

`check_outputs(args)` runs before a command does any work: an output flag (-o/--output,
--trace, --timeline, --costs) naming the same file as an input (the model, an --input file, a
file holding the model's external data) is refused with one line naming the flag. "The same
file" is asked of the file system (os.path.samefile), so links, hard links and relative
spellings are seen through.

`save_outputs` writes `pyge run --save-outputs DIR`: one DIR/<file>.npy per output, and
DIR/manifest.json mapping each output's real name to its file. A file name is the output name
with every byte outside `A-Z a-z 0-9 - _ .` (and a leading `.`) percent-encoded as %XX (UTF-8),
so `a/b`, `a_b` and `a:b` become `a%2Fb`, `a_b` and `a%3Ab`; decoding gives the name back
(`output_name`). Where two names differ only in case, the later one's letters are encoded too,
so the files stay distinct on case-insensitive file systems; a name too long for a file name
is cut and ends in `~` and a hash of the name, and only the manifest gives it back.

Only the standard library is imported at module level (onnx only when a model's external data
files must be known).
"""
from __future__ import annotations

import argparse
import hashlib
import json
import os
import tempfile
import urllib.parse
from pathlib import Path
from typing import Any, Iterable

from .args import UsageError

MANIFEST = "manifest.json"
SUFFIX = ".npy"

# argparse dest -> the flag as the user typed it, for every flag that names a file written
_OUTPUT_FLAGS = {"output": "-o/--output", "trace": "--trace", "timeline": "--timeline", "costs": "--costs"}
_SAFE = frozenset(b"ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789-_.")
_MAX_STEM = 255 - len(SUFFIX)         # NAME_MAX of the usual file systems, in bytes
_CUT = 200


# -- outputs that are inputs ---------------------------------------------------------------------

def input_files(args: argparse.Namespace, outputs: Iterable[str] = ()) -> list[tuple[str, str]]:
    """(what, path) of every file the command reads: the model, the --input files and, when
    one of `outputs` lies in the model's folder, the files of its external data."""
    found: list[tuple[str, str]] = []
    model = getattr(args, "model", None)
    if model is not None:
        found.append(("the model", str(model)))
    for item in getattr(args, "input", None) or []:
        _, sep, file = item.partition("=")
        found.append(("the --input file", file if sep else item))
    if model is not None and Path(model).suffix.lower() == ".onnx" and os.path.isfile(model):
        folder = os.path.realpath(os.path.dirname(os.path.abspath(model)))
        if any(_inside(os.path.realpath(o), folder) for o in outputs):
            found += [("an external data file of the model", f) for f in _external_files(str(model))]
    return found


def check_outputs(args: argparse.Namespace) -> None:
    """Refuse (UsageError) an output flag that names a file the command reads."""
    flags = _OUTPUT_FLAGS
    if getattr(args, "command", None) == "run":           # run spells --trace also --profile
        flags = dict(_OUTPUT_FLAGS, trace="--trace/--profile")
    outputs = {flag: str(getattr(args, dest)) for dest, flag in flags.items() if getattr(args, dest, None) is not None}
    if not outputs:
        return
    inputs = input_files(args, outputs.values())
    for flag, out in outputs.items():
        for what, path in inputs:
            if _same_file(out, path):
                raise UsageError(f"{flag} {out} is the same file as {what} {path}; writing it would "
                                 "destroy what is read: choose another output file")


def _same_file(a: str, b: str) -> bool:
    try:
        return os.path.samefile(a, b)
    except (OSError, ValueError):      # one of them does not exist (yet): not the same file
        return False


def _inside(path: str, folder: str) -> bool:
    try:
        return os.path.commonpath([path, folder]) == folder
    except ValueError:
        return False


def _external_files(model: str) -> list[str]:
    """The files the model's external-data tensors name (nothing when it cannot be parsed:
    loading it fails later with the loader's own message)."""
    try:
        import onnx
        from ..frontends.onnx_loader import external_locations
        mp = onnx.load_model(model, load_external_data=False)
    except Exception:  # noqa: BLE001 - any parse failure is the loader's to report
        return []
    base = os.path.dirname(os.path.abspath(model))
    return [os.path.join(base, loc) for loc in external_locations(mp)]


# -- --save-outputs --------------------------------------------------------------------------------

def file_stem(name: str, letters: bool = False) -> str:
    """`name` as a file name stem: unsafe bytes (and a leading '.') as %XX; letters too when asked."""
    out = []
    for i, b in enumerate(name.encode("utf-8", "surrogatepass")):
        keep = b in _SAFE and not (i == 0 and b == ord(".")) and not (letters and chr(b).isalpha())
        out.append(chr(b) if keep else f"%{b:02X}")
    stem = "".join(out)
    if len(stem) > _MAX_STEM:
        cut = stem[:_CUT]
        cut = cut[:cut.rfind("%")] if "%" in cut[-2:] else cut   # never half an escape
        stem = f"{cut}~{hashlib.sha256(name.encode('utf-8', 'surrogatepass')).hexdigest()[:16]}"
    return stem


def output_name(file_name: str) -> str:
    """The output name a saved file stands for (the inverse of the naming; not for cut names)."""
    stem = file_name[:-len(SUFFIX)] if file_name.endswith(SUFFIX) else file_name
    return urllib.parse.unquote(stem, errors="surrogatepass")


def file_names(names: Iterable[str]) -> dict[str, str]:
    """Output name -> file name, distinct even where the file system ignores case."""
    used: set[str] = set()
    out: dict[str, str] = {}
    for name in names:
        stem = file_stem(name)
        if stem.lower() in used:
            stem = file_stem(name, letters=True)
        used.add(stem.lower())
        out[name] = stem + SUFFIX
    return out


def save_outputs(folder: Path, outputs: dict[str, Any], protected: list[tuple[str, str]]) -> tuple[list[str], str]:
    """Write every output and the manifest; returns (the output files, the manifest file).

    Nothing is written when a file to write is one of `protected` (what the command read);
    each file is written under a temporary name and renamed, so a failure leaves no
    half-written file and the manifest, written last, lists only complete ones.
    """
    import numpy as np
    names = file_names(outputs)
    targets = [folder / f for f in names.values()] + [folder / MANIFEST]
    for target in targets:
        for what, path in protected:
            if _same_file(str(target), path):
                raise UsageError(f"--save-outputs {folder}: {target.name} would overwrite {what} {path}; "
                                 "choose another folder")
    folder.mkdir(parents=True, exist_ok=True)
    written = []
    for name, file in names.items():
        _write_atomic(folder / file, lambda f, a=np.asarray(outputs[name]): np.save(f, a, allow_pickle=False))
        written.append(str(folder / file))
    text = json.dumps(names, indent=2, ensure_ascii=False) + "\n"
    _write_atomic(folder / MANIFEST, lambda f: f.write(text.encode("utf-8")))
    return written, str(folder / MANIFEST)


def _write_atomic(path: Path, write) -> None:
    fd, tmp = tempfile.mkstemp(prefix=".pyge-", suffix=".tmp", dir=path.parent)
    try:
        with os.fdopen(fd, "wb") as f:
            write(f)
        os.chmod(tmp, 0o666 & ~_umask())           # as a plainly created file, not mkstemp's 0600
        os.replace(tmp, path)
    except BaseException:
        os.unlink(tmp)
        raise


def _umask() -> int:
    mask = os.umask(0o22)
    os.umask(mask)
    return mask


__all__ = ["check_outputs", "input_files", "save_outputs", "file_names", "file_stem", "output_name", "MANIFEST"]
