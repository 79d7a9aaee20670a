"""Import rules between layers that the folder names alone do not enforce.

Checked on the source with ast, so an import inside a function counts as much as one at
the top of a file; an import under ``if TYPE_CHECKING:`` (annotations only) does not.
"""
from __future__ import annotations

import ast
from pathlib import Path

import pyge

PKG = Path(pyge.__file__).resolve().parent


def _type_checking_lines(tree: ast.Module) -> set[int]:
    lines: set[int] = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.If) and "TYPE_CHECKING" in ast.unparse(node.test):
            for sub in node.body:
                lines.update(range(sub.lineno, (sub.end_lineno or sub.lineno) + 1))
    return lines


def run_time_imports(source: str, package: str) -> list[tuple[int, str]]:
    """(line, absolute module) of every import in `source`, a module of `package`, that runs
    when it is imported or called; ``from X import y`` counts as X.y (y may be a module)."""
    tree = ast.parse(source)
    skip = _type_checking_lines(tree)
    found = []
    for node in ast.walk(tree):
        if getattr(node, "lineno", None) in skip:
            continue
        if isinstance(node, ast.Import):
            found += [(node.lineno, a.name) for a in node.names]
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                parent = package.rsplit(".", node.level - 1)[0] if node.level > 1 else package
                base = f"{parent}.{base}" if base else parent
            found += [(node.lineno, f"{base}.{a.name}") for a in node.names]
    return found


def _pyge_imports(path: Path) -> list[str]:
    package = ".".join(path.relative_to(PKG.parent).parts[:-1])
    return [f"{path.name}:{line}: {mod}" for line, mod in run_time_imports(path.read_text(), package)
            if mod == "pyge" or mod.startswith("pyge.")]


def test_kernels_import_only_errors_ir_and_kernels():
    """Kernels sit below passes, plans and executors: executors may import kernels, never
    the reverse (a control-flow kernel gets its body runner through KernelContext)."""
    allowed = ("pyge.errors.", "pyge.ir.", "pyge.kernels.")
    bad = [imp for f in sorted((PKG / "kernels").glob("*.py")) for imp in _pyge_imports(f)
           if not imp.split(": ", 1)[1].startswith(allowed)]
    assert not bad, "kernels import other layers:\n" + "\n".join(bad)


def test_registry_imports_nothing_of_pyge():
    """The registry is imported by the compiler, the kernels and the executors; reaching
    nothing of pyge at run time keeps it out of every import cycle."""
    bad = _pyge_imports(PKG / "kernels" / "registry.py")
    assert not bad, "kernels/registry.py imports pyge modules:\n" + "\n".join(bad)


def test_the_checker_sees_relative_and_function_level_imports():
    src = ("from typing import TYPE_CHECKING\nif TYPE_CHECKING:\n    from ..ir import graph\n"
           "from .. import kernels\nfrom .registry import register\n\n"
           "def f():\n    from ..executors import cpu\n")
    mods = [m for _, m in run_time_imports(src, "pyge.kernels")]
    assert mods == ["typing.TYPE_CHECKING", "pyge.kernels", "pyge.kernels.registry.register",
                    "pyge.executors.cpu"]
