"""Names for a torch module's outputs, from the structure torch.export records for them.

    return x                         output_0
    return a, b                      output_0, output_1 (positions are all torch.export knows)
    return {"logits": a, "aux": b}   logits, aux
    return Out(logits=a, aux=b)      logits, aux (a namedtuple's fields)
    return {"aux": (a, b)}           aux.0, aux.1
    return a, {"x": b}               output_0, output_1.x

A dict key or field name is kept as the user wrote it; a position gets a name only where no
key names the output at all, or at the top level (output_<i>).
"""
from __future__ import annotations

from typing import Any


def output_names(ep: Any, count: int) -> list[str]:
    """One name per user output of the ExportedProgram `ep` (`count` of them), in order."""
    from torch.utils import _pytree as pytree
    positional = [f"output_{i}" for i in range(count)]
    spec = getattr(getattr(ep, "call_spec", None), "out_spec", None)
    if spec is None or spec.num_leaves != count:
        return positional        # nothing recorded, or not one leaf per output: keep positions
    leaves = pytree.tree_flatten_with_path(pytree.tree_unflatten(list(range(count)), spec))[0]
    return [_name(path, pytree) or positional[i] for i, (path, _) in enumerate(leaves)]


def _name(path: tuple, pytree: Any) -> str | None:
    """The dotted name of one leaf's key path; None when no key in it is a name."""
    parts: list[str] = []
    named = False
    for depth, key in enumerate(path):
        if isinstance(key, pytree.MappingKey):
            parts.append(str(key.key))
            named = True
        elif isinstance(key, pytree.GetAttrKey):
            parts.append(key.name)
            named = True
        elif isinstance(key, pytree.SequenceKey):
            parts.append(f"output_{key.idx}" if depth == 0 else str(key.idx))
        else:
            return None          # a key kind torch may add later: fall back to the position
    return ".".join(parts) if named else None


__all__ = ["output_names"]
