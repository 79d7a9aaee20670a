"""The feeds of a dynamic-shape model, checked before anything runs.

Static feeds. A model input that a static sub-model reads must have the shape the
sub-model was compiled for; a feed that contradicts it is refused naming the input, the
sub-model and the node that reads it (`StaticFeeds`).

Symbolic dims. An input dim named by a symbol (ONNX `dim_param`, a torch.export symbol) takes its size
from the feed; one symbol names one size, so feeds that give one symbol two sizes do not
resolve it. Nothing in the dynamic part depends on that (its kernels take their shapes from
the values), and onnxruntime runs such feeds, so pyge does too: the documented fallback is a
warning, once per symbol, naming the symbol, both feeds and the node of the dynamic part that
reads the second (`SymbolBinder`). (ONNX inference's own "unk__<n>" names are no user's
symbols: they only say a dim is unknown.)
"""
from __future__ import annotations

import re
import logging
from typing import Any, Mapping

from ..errors import InputError

log = logging.getLogger(__name__)

_UNNAMED = re.compile(r"unk__\d+")


def describe_shape(shape) -> str:
    return "[" + ",".join("?" if d is None else str(d) for d in shape) + "]"


class SymbolBinder:
    """The symbolic dims of a plan's inputs: (input name, axis, symbol) each."""

    def __init__(self, graph, plan):
        self.part = plan.graph_name
        self.dims: list[tuple[str, int, str]] = []
        for vi in plan.inputs:
            v = plan.values[vi]
            if v.kind != "tensor" or v.shape is None:
                continue
            self.dims += [(v.name, axis, d) for axis, d in enumerate(v.shape)
                          if isinstance(d, str) and not _UNNAMED.fullmatch(d)]
        self.rank = {plan.values[vi].name: len(plan.values[vi].shape or ()) for vi in plan.inputs}
        self._warned: set[str] = set()
        self.readers: dict[str, str] = {}
        for n in graph.nodes:
            for v in n.all_inputs():
                self.readers.setdefault(v.name, n.name)

    def check(self, feeds: Mapping[str, Any]) -> list[str]:
        """A warning (logged once per symbol) for each symbol the feeds give two sizes; the
        messages of this call are returned (other faults: check_feeds')."""
        said: list[str] = []
        if not self.dims or not isinstance(feeds, Mapping):
            return said
        seen: dict[str, tuple[int, str]] = {}
        for name, axis, sym in self.dims:
            shape = getattr(feeds.get(name), "shape", None)
            if shape is None or len(shape) != self.rank[name]:
                continue
            size = int(shape[axis])
            first = seen.setdefault(sym, (size, name))
            if first[0] != size:
                msg = (f"symbolic dim {sym!r} is not resolved: it is {first[0]} in feed {first[1]!r} "
                       f"but {size} in feed {name!r} (axis {axis}), read by node "
                       f"{self.readers.get(name, '?')!r} of the dynamic part {self.part!r}; running "
                       "on, each kernel takes its sizes from the values")
                said.append(msg)
                if sym not in self._warned:
                    self._warned.add(sym)
                    log.warning("%s", msg)
        return said


class StaticFeeds:
    """The model inputs that static sub-models read: (input, shape, sub-model, reader) each."""

    def __init__(self, entries: list[tuple[str, tuple, str, str]]):
        self.entries = [e for e in entries if e[1] is not None]

    def check(self, feeds: Mapping[str, Any]) -> None:
        if not isinstance(feeds, Mapping):
            return
        for name, want, part, reader in self.entries:
            shape = getattr(feeds.get(name), "shape", None)
            if shape is not None and tuple(shape) != tuple(want):
                raise InputError(f"feed {name!r} has shape {list(shape)}, but static sub-model {part!r} "
                                 f"(node {reader!r} reads it) was compiled for {describe_shape(want)}")


__all__ = ["SymbolBinder", "StaticFeeds", "describe_shape"]
