"""Offset packing: place every planned value in one arena so that two values share bytes
only if they are ordered.

Values v and w are *compatible* (may overlap) when every use of one happens-before the
producer of the other; `after[v]` is the bitset of nodes that follow every use of v, so the
test is one bit lookup each way. A value is placed at the lowest offset that does not
overlap any incompatible value already placed (first fit).

Two visiting orders, as in TFLite's and TVM's planners: producers in happens-before order
(lets values that can never again conflict drop out of the active list), and largest value
first (packs big tensors tightly). plan_memory keeps whichever gives the smaller arena.
"""
from __future__ import annotations

ALIGN = 256   # CUDA kernels like 256-byte aligned operands; arena offsets are multiples of it


def align(n: int) -> int:
    return (n + ALIGN - 1) // ALIGN * ALIGN


class Item:
    """One value to place."""

    __slots__ = ("vi", "size", "producer", "pos", "after", "offset")

    def __init__(self, vi: int, size: int, producer: int, pos: int, after: int):
        self.vi, self.size, self.producer, self.pos, self.after = vi, size, producer, pos, after
        self.offset = -1


def _compatible(a: Item, b: Item) -> bool:
    # a entirely before b, or b entirely before a. Never true for two outputs of one node
    # (a node's own outputs are not after its uses) nor when a node reads one and writes the
    # other: kernels read inputs while writing outputs, so no in-place reuse.
    return (a.after >> b.producer) & 1 == 1 or (b.after >> a.producer) & 1 == 1


def _first_fit(item: Item, placed: list[Item]) -> int:
    spans = sorted((w.offset, w.offset + align(w.size)) for w in placed if not _compatible(item, w))
    need = align(item.size)
    off = 0
    for start, end in spans:
        if off + need <= start:
            break
        off = max(off, end)
    return off


def pack_in_order(items: list[Item], order: list[int]) -> int:
    """Visit producers in happens-before order; returns the arena size (sets offsets)."""
    by_node: dict[int, list[Item]] = {}
    for it in items:
        by_node.setdefault(it.producer, []).append(it)
    remaining = (1 << len(order)) - 1   # nodes whose outputs are still to be placed
    active: list[Item] = []
    peak = 0
    for ni in order:
        outs = by_node.get(ni)
        if outs:
            # Drop values that every remaining producer follows: they conflict with nothing.
            active = [w for w in active if w.after & remaining != remaining]
            for it in outs:
                it.offset = _first_fit(it, active)
                peak = max(peak, it.offset + align(it.size))
                active.append(it)
        remaining &= ~(1 << ni)
    return peak


def pack_by_size(items: list[Item]) -> int:
    """Largest value first (ties: earlier producer); returns the arena size (sets offsets)."""
    placed: list[Item] = []
    peak = 0
    for it in sorted(items, key=lambda i: (-i.size, i.pos, i.vi)):
        it.offset = _first_fit(it, placed)
        peak = max(peak, it.offset + align(it.size))
        placed.append(it)
    return peak


def pack_no_reuse(items: list[Item]) -> int:
    off = 0
    for it in sorted(items, key=lambda i: (i.pos, i.vi)):
        it.offset = off
        off += align(it.size)
    return off
