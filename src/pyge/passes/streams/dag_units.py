"""GE's DAG stream pass, part 2 (shared): the paths of the cover as "units" to merge.

Every path of the minimum cover is a unit. A unit knows its nodes' levels (the longest
edge count from a source of the residual DAG), as a sparse histogram, its earliest level,
its size and the edges it shares with each other unit. The mergers (dag_merge.py,
dag_weighted.py) walk the levels in order and put each unit that starts there on one of at
most N physical streams, scoring the candidates; the streams then carry per-level loads so
that a candidate's load can be read over a window of levels around where the unit starts.
"""
from __future__ import annotations

from dataclasses import dataclass, field

WINDOW = 6   # levels a score looks ahead from the unit's earliest level (GE's window_width)


@dataclass
class Unit:
    index: int
    nodes: list[int]
    hist: dict[int, int]                    # level -> how many of its nodes
    earliest: int
    peak: int                               # the largest count of one level
    preds: dict[int, int] = field(default_factory=dict)   # unit -> edges from it into this one
    succs: dict[int, int] = field(default_factory=dict)   # unit -> edges from this one into it
    interaction: int = 0                    # edges shared with other units

    @property
    def size(self) -> int:
        return len(self.nodes)

    def window_mass(self, level: int) -> int:
        h = self.hist
        return sum(h.get(lv, 0) for lv in range(level, level + WINDOW))


def build_units(paths: list[list[int]], preds: list[list[int]], level: list[int]) -> list[Unit]:
    """One Unit per path, with its histogram and its edges to the other units."""
    unit_of = [0] * len(preds)
    units = []
    for k, path in enumerate(paths):
        hist: dict[int, int] = {}
        for i in path:
            unit_of[i] = k
            hist[level[i]] = hist.get(level[i], 0) + 1
        units.append(Unit(k, sorted(path), hist, min(hist), max(hist.values())))
    for v, ps in enumerate(preds):
        b = unit_of[v]
        for p in ps:
            a = unit_of[p]
            if a != b:
                units[a].succs[b] = units[a].succs.get(b, 0) + 1
                units[b].preds[a] = units[b].preds.get(a, 0) + 1
                units[a].interaction += 1
                units[b].interaction += 1
    return units


def by_earliest_level(units: list[Unit], key) -> list[tuple[int, list[Unit]]]:
    """Units grouped by earliest level (ascending), each group sorted by `key`."""
    groups: dict[int, list[Unit]] = {}
    for u in units:
        groups.setdefault(u.earliest, []).append(u)
    return [(lv, sorted(groups[lv], key=key)) for lv in sorted(groups)]


def adjacent_weights(u: Unit, assignment: list[int]) -> dict[int, int]:
    """Stream -> number of u's edges to units already on it."""
    out: dict[int, int] = {}
    for other, w in u.preds.items():
        s = assignment[other]
        if s >= 0:
            out[s] = out.get(s, 0) + w
    for other, w in u.succs.items():
        s = assignment[other]
        if s >= 0:
            out[s] = out.get(s, 0) + w
    return out


def event_local(u: Unit, stream: int, assignment: list[int]) -> int:
    """Edges of u to already placed units on streams other than `stream` (each an event)."""
    n = 0
    for other, w in u.preds.items():
        s = assignment[other]
        if s >= 0 and s != stream:
            n += w
    for other, w in u.succs.items():
        s = assignment[other]
        if s >= 0 and s != stream:
            n += w
    return n


def dedupe(candidates: list[int], active: int, limit: int, cap: int, with_new: bool) -> list[int]:
    """GE's DeduplicateCandidates: the new stream (if allowed) appended, duplicates dropped,
    at most `cap` kept; falls back to the new stream, then to the first streams."""
    if with_new and active < limit:
        candidates = candidates + [active]
    out: list[int] = []
    for c in candidates:
        if c not in out:
            out.append(c)
        if len(out) >= cap:
            break
    if out:
        return out
    if with_new and active < limit:
        return [active]
    return list(range(min(active, cap)))


def compact(assignment: list[int]) -> list[int]:
    """Used streams renumbered 0.. in increasing order (GE's CompactAssignment)."""
    remap = {s: i for i, s in enumerate(sorted(set(assignment)))}
    return [remap[s] for s in assignment]
