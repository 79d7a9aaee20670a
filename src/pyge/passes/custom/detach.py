"""Handing the compiler's working graph to a custom graph pass, and taking it back detached.

The pass gets the graph itself (GE's passes edit the compute graph in place), so it may do
anything the IR allows. What it must not be able to do is change the compiled model after
it returned: keep the graph, or a node, or a weight array, and edit it later, or from a
thread it started. Three measures, chosen because each costs one walk over the graph per
pass call and together they leave the pass nothing that reaches the model:

1. Weights and tensor attributes are handed over as read-only views. They are shared with
   the caller's graph (the compiler's copy shares weights, never writes them), so a write
   in place would change what the user owns; a pass that wants other numbers sets new ones
   (`add_initializer`, `Value.const = ...`, `Node.set_attr`).
2. When the pass returns, its graph is sealed: the IR's editing methods refuse every later
   call on it, from any thread.
3. The compiler goes on with a copy of what the pass returned (`copy`), not with the
   graph the pass holds: a write that bypasses the methods (`node.attrs[...] = ...`) after
   the copy changes only the pass's own graph. In the copy the views give way to the
   original arrays again, and arrays the pass brought in are copied, so that no array the
   pass still holds is one the model reads.

What remains is a thread of the pass writing plain fields while the compiler copies (a
race within one copy's time): seal first, then copy, and the methods at least refuse.
"""
from __future__ import annotations

from typing import Any, Callable, Iterator

import numpy as np

from ...ir.clone import clone_graph
from ...ir.graph import Graph


def _arrays(graph: Graph) -> Iterator[tuple[Any, Callable[[Any], None]]]:
    """(array, setter) for every weight and tensor attribute of `graph` and its subgraphs."""
    for g in graph.all_graphs():
        for v in g.initializers.values():
            if isinstance(v.const, np.ndarray):
                yield v.const, lambda a, v=v: setattr(v, "const", a)
        for n in g._nodes:
            for k, a in n.attrs.items():
                if isinstance(a, np.ndarray):
                    yield a, lambda x, n=n, k=k: n.attrs.__setitem__(k, x)
                elif isinstance(a, list):                     # a TENSORS attribute
                    for i, t in enumerate(a):
                        if isinstance(t, np.ndarray):
                            yield t, lambda x, a=a, i=i: a.__setitem__(i, x)


class Handover:
    """One graph handed to one pass call (see the module doc)."""

    def __init__(self, graph: Graph):
        self.graph = graph
        self._views: dict[int, tuple[np.ndarray, np.ndarray]] = {}   # id(view) -> (view, original)
        self._kept: dict[int, np.ndarray] = {}                      # read-only already: as they are
        made: dict[int, np.ndarray] = {}                            # id(original) -> its view
        for a, put in list(_arrays(graph)):
            if not a.flags.writeable:
                self._kept[id(a)] = a
                continue
            ro = made.get(id(a))
            if ro is None:
                ro = made[id(a)] = a.view()
                ro.flags.writeable = False
                self._views[id(ro)] = (ro, a)
            put(ro)

    def copy(self) -> Graph:
        """The copy the compiler goes on with (call it once the handed graph is sealed)."""
        out = clone_graph(self.graph)
        copies: dict[int, np.ndarray] = {}
        for a, put in list(_arrays(out)):
            known = self._views.get(id(a))
            if known is not None and known[0] is a:
                put(known[1])
            elif self._kept.get(id(a)) is not a:   # the pass's own array: the model gets a copy
                if id(a) not in copies:
                    copies[id(a)] = np.array(a, copy=True)
                put(copies[id(a)])
        return out
