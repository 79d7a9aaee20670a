"""No import cycles between pyge's modules, read from the source (ast), so the rule is kept.

An edge a -> b is a statement of module a that imports module b (`import pyge.b`,
`from .b import x`, `from . import b`; `from .pkg import name` is an edge to pkg's
__init__ unless name is a submodule). Two graphs are checked: the module-level imports
(what runs when a module is imported; `if TYPE_CHECKING:` blocks excluded), and all imports,
those inside functions too: an import deferred into a function may put off a heavy library
(torch) but must not hide a cycle.
"""
from __future__ import annotations

import ast
import functools
from pathlib import Path

import pyge

ROOT = Path(pyge.__file__).resolve().parent


def _modules() -> dict[str, tuple[Path, bool]]:
    out = {}
    for p in ROOT.rglob("*.py"):
        parts = list(p.relative_to(ROOT.parent).with_suffix("").parts)
        is_pkg = parts[-1] == "__init__"
        out[".".join(parts[:-1] if is_pkg else parts)] = (p, is_pkg)
    return out


def _type_checking(test: ast.expr) -> bool:
    return (isinstance(test, ast.Name) and test.id == "TYPE_CHECKING") or \
        (isinstance(test, ast.Attribute) and test.attr == "TYPE_CHECKING")


def _module_level(body: list[ast.stmt]):
    """Import statements that run when the module is imported."""
    for s in body:
        if isinstance(s, (ast.Import, ast.ImportFrom)):
            yield s
        elif isinstance(s, ast.If):
            if not _type_checking(s.test):
                yield from _module_level(s.body)
            yield from _module_level(s.orelse)
        elif isinstance(s, ast.Try):
            for block in (s.body, s.orelse, s.finalbody, *(h.body for h in s.handlers)):
                yield from _module_level(block)
        elif isinstance(s, (ast.With, ast.ClassDef)):
            yield from _module_level(s.body)


def _targets(node, name: str, is_pkg: bool, mods) -> set[str]:
    if isinstance(node, ast.Import):
        return {a.name for a in node.names if a.name in mods}
    if node.level:
        base = name.split(".") if is_pkg else name.split(".")[:-1]
        base = base[:len(base) - node.level + 1]
        mod = ".".join(base + ([node.module] if node.module else []))
    else:
        mod = node.module or ""
    out = set()
    for a in node.names:
        sub = f"{mod}.{a.name}"
        out.add(sub if sub in mods else mod)
    return {m for m in out if m in mods}


@functools.lru_cache(maxsize=None)
def import_graph(module_level_only: bool) -> dict[str, set[str]]:
    mods = _modules()
    graph = {}
    for name, (path, is_pkg) in mods.items():
        tree = ast.parse(path.read_text(encoding="utf-8"))
        stmts = _module_level(tree.body) if module_level_only else \
            (n for n in ast.walk(tree) if isinstance(n, (ast.Import, ast.ImportFrom)))
        graph[name] = {t for s in stmts for t in _targets(s, name, is_pkg, mods)} - {name}
    return graph


def cycles(graph: dict[str, set[str]]) -> list[list[str]]:
    """The strongly connected components with more than one module (Tarjan, iterative)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on: set[str] = set()
    found = []
    for root in sorted(graph):
        if root in index:
            continue
        work = [(root, iter(sorted(graph[root])))]
        index[root] = low[root] = len(index)
        stack.append(root)
        on.add(root)
        while work:
            v, it = work[-1]
            w = next(it, None)
            if w is not None:
                if w not in index:
                    index[w] = low[w] = len(index)
                    stack.append(w)
                    on.add(w)
                    work.append((w, iter(sorted(graph[w]))))
                elif w in on:
                    low[v] = min(low[v], index[w])
                continue
            work.pop()
            if work:
                low[work[-1][0]] = min(low[work[-1][0]], low[v])
            if low[v] == index[v]:
                comp = []
                while True:
                    w = stack.pop()
                    on.discard(w)
                    comp.append(w)
                    if w == v:
                        break
                if len(comp) > 1:
                    found.append(sorted(comp))
    return found


def _describe(graph, comps) -> str:
    return "; ".join(" ".join(f"{m} -> {sorted(graph[m] & set(c))}" for m in c) for c in comps)


def test_no_cycles_at_module_level():
    graph = import_graph(module_level_only=True)
    assert len(graph) > 100 and "pyge.ir.graph" in graph["pyge.compiler"]
    comps = cycles(graph)
    assert comps == [], _describe(graph, comps)


def test_no_cycles_hidden_in_functions():
    graph = import_graph(module_level_only=False)
    comps = cycles(graph)
    assert comps == [], _describe(graph, comps)


def test_the_checker_finds_a_cycle():
    graph = {"a": {"b"}, "b": {"c"}, "c": {"a"}, "d": {"a"}, "e": set()}
    assert cycles(graph) == [["a", "b", "c"]]


def test_analysis_imports_only_ir_and_plan():
    graph = import_graph(module_level_only=False)
    allowed = ("pyge.ir", "pyge.plan", "pyge.errors", "pyge.analysis")
    for m in (m for m in graph if m.startswith("pyge.analysis")):
        assert all(t.startswith(allowed) for t in graph[m]), (m, graph[m])
