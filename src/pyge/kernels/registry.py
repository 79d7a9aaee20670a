"""Kernel registry, keyed by (domain, op type) and opset range.

A kernel is registered as a *factory*: called once per node at compile time with a
:class:`KernelContext` (attributes parsed once, static shapes and constants known), it
returns the run-time function ``fn(inputs: list) -> list``.

Run-time value conventions (one code path for CPU and CUDA tensors):
- a tensor is a ``torch.Tensor`` on the model's device; a string tensor is a numpy
  ``object`` array (strings never leave the host);
- a sequence is a Python ``list`` of such tensors;
- an optional is ``None`` (empty) or its value; an absent optional input is ``None``;
- ``inputs`` holds the node's explicit inputs in order, then its implicit (outer-scope)
  inputs in the order of ``ctx.implicit_names`` (only nodes with subgraphs have them);
- the function returns one value per node output, in order.
"""
from __future__ import annotations

import importlib
import os
import pkgutil
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Callable

if TYPE_CHECKING:   # annotations only: the registry imports nothing of pyge at run time
    import numpy as np

    from ..ir.graph import Graph, Node

KernelFn = Callable[[list], list]
Factory = Callable[["KernelContext"], KernelFn]


@dataclass
class KernelContext:
    node: Node
    opset: int
    device: Any                      # torch.device
    # compile_subgraph(graph) -> runner(inputs: list, outer: dict[name, value]) -> list
    compile_subgraph: Callable[[Graph], Callable[[list, dict], list]] | None = None
    implicit_names: list[str] = field(default_factory=list)

    # -- helpers for factories -----------------------------------------------------------
    def attr(self, name: str, default: Any = None) -> Any:
        return self.node.attrs.get(name, default)

    @property
    def num_inputs(self) -> int:
        return len(self.node.inputs)

    @property
    def num_outputs(self) -> int:
        return len(self.node.outputs)

    def has_input(self, i: int) -> bool:
        ins = self.node.inputs
        return i < len(ins) and ins[i] is not None

    def const_input(self, i: int) -> np.ndarray | None:
        """The value of input i if it is an initializer (known at compile time), else None."""
        ins = self.node.inputs
        if i < len(ins) and ins[i] is not None and ins[i].const is not None:
            return ins[i].const
        return None

    def input_dtype(self, i: int) -> str | None:
        ins = self.node.inputs
        return ins[i].dtype if i < len(ins) and ins[i] is not None else None

    def output_dtype(self, i: int = 0) -> str | None:
        return self.node.outputs[i].dtype


@dataclass
class _Entry:
    since: int
    until: int | None
    factory: Factory


_REGISTRY: dict[tuple[str, str], list[_Entry]] = {}


def register(op_type: str, since: int = 1, until: int | None = None, domain: str = ""):
    """Decorator: register `factory` for opsets since..until (inclusive; None = open)."""
    def deco(factory: Factory) -> Factory:
        key = (_norm_domain(domain), op_type)
        _REGISTRY.setdefault(key, []).append(_Entry(since, until, factory))
        _REGISTRY[key].sort(key=lambda e: e.since)
        return factory
    return deco


def _norm_domain(domain: str) -> str:
    return "" if domain in ("", "ai.onnx") else domain


def lookup(op_type: str, domain: str = "", opset: int = 17) -> Factory | None:
    _ensure_loaded()
    entries = _REGISTRY.get((_norm_domain(domain), op_type))
    if not entries:
        return None
    best = None
    for e in entries:
        if e.since <= opset and (e.until is None or opset <= e.until):
            best = e
    if best is None:
        # An opset below every registration: fall back to the oldest registered version.
        if opset < entries[0].since:
            best = entries[0]
    return best.factory if best else None


def is_supported(op_type: str, domain: str = "", opset: int = 17) -> bool:
    return lookup(op_type, domain, opset) is not None


def registered_ops() -> list[tuple[str, str]]:
    _ensure_loaded()
    return sorted(_REGISTRY)


def opset_of(node: Node) -> int:
    g = node.graph
    while g is not None and g.parent is not None and g.parent.graph is not None:
        g = g.parent.graph
    imports = g.opset_imports if g is not None else {"": 17}
    return imports.get(_norm_domain(node.domain), imports.get("", 17))


_LOADED = False


def _ensure_loaded() -> None:
    """Import every module of this package once (the kernel modules register themselves).

    Found by this file's own folder, not through the package object: the registry reaches
    nothing of pyge by import, so it cannot take part in an import cycle.
    """
    global _LOADED
    if _LOADED:
        return
    _LOADED = True
    for mod in pkgutil.iter_modules([os.path.dirname(__file__)]):
        importlib.import_module(f"{__package__}.{mod.name}")
