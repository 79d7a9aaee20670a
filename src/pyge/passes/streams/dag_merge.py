"""GE's DAG stream pass, part 2: merging the cover's paths onto at most N streams.

Both strategies walk the levels in order; the units (paths) that start at a level are
placed one by one, each on the best of a few candidate streams: the streams its neighbours
already sit on (most shared edges first), a few light or unconflicted streams, and a new
stream while fewer than N are open. The weights are GE's (StreamMergeOptions):

LoadBalance:N (even load). Candidates: neighbours' streams, then the three streams with the
  least load over the window of levels ahead. Score (lower wins)
      3 * events + 4 * (peak + variance of the streams' window loads) + stream size
      + 2 * (opens a stream)
  where "events" counts the unit's edges to placed units on other streams. Ties: events,
  balance, size, then the lower stream.
MainStream:N (keep the main chain). Levels holding one node only are the spine: a unit
  at such a level, or made only of such nodes, goes to stream 0. Otherwise candidates are
  stream 0, neighbours' streams, and the three streams least in conflict (nodes of the
  same levels) with it. Score
      3 * events + 4 * conflict + 2 * (opens a stream) - 4 * (spine nodes, on stream 0)
  Ties keep the first candidate.

At most six candidates are scored; GE's repair moves are off by default and are left out.
"""
from __future__ import annotations

from .dag_units import (WINDOW, Unit, adjacent_weights, by_earliest_level, compact, dedupe,
                        event_local)

CANDIDATES = 6
LIGHT = 3
LOW_CONFLICT = 3


def _window(load: dict[int, int], level: int) -> int:
    return sum(load.get(lv, 0) for lv in range(level, level + WINDOW))


def _apply(u: Unit, s: int, assignment: list[int], loads: list[dict[int, int]], sizes: list[int]) -> None:
    if s == len(loads):
        loads.append({})
        sizes.append(0)
    assignment[u.index] = s
    sizes[s] += u.size
    load = loads[s]
    for lv, k in u.hist.items():
        load[lv] = load.get(lv, 0) + k


def load_balance(units: list[Unit], limit: int) -> list[int]:
    """Stream (0..) per unit under LoadBalance:`limit`."""
    assignment = [-1] * len(units)
    loads: list[dict[int, int]] = []
    sizes: list[int] = []
    order = by_earliest_level(units, key=lambda u: (-u.size, -u.interaction, -u.peak, u.earliest, u.index))
    zeros = (0,) * WINDOW
    for level, group in order:
        ahead = range(level, level + WINDOW)
        for u in group:
            active = len(loads)
            window = [sum(map(load.get, ahead, zeros)) for load in loads]      # _window
            adj = adjacent_weights(u, assignment)
            placed = sum(adj.values())      # so event_local(u, s, assignment) = placed - adj[s]
            cands = sorted(adj, key=lambda s: (-adj[s], sizes[s], s))
            cands += sorted(range(active), key=lambda s: (window[s], sizes[s], s))[:LIGHT]
            cands = dedupe(cands, active, limit, CANDIDATES, True)
            mass = sum(map(u.hist.get, ahead, zeros))                           # window_mass
            base_sum = sum(window)
            base_sq = sum(w * w for w in window)
            base_peak = max(window, default=0)

            def score(s: int) -> tuple:
                opens = s == active
                n = active + opens
                old = 0 if opens else window[s]
                new = old + mass
                mean = (base_sum + mass) / n
                var = (base_sq - old * old + new * new) / n - mean * mean
                balance = max(base_peak, new) + var
                total_load = (0 if opens else sizes[s]) + u.size
                ev = placed - adj.get(s, 0)
                total = 3.0 * ev + 4.0 * balance + total_load + 2.0 * opens
                return round(total, 9), ev, round(balance, 9), total_load, s
            _apply(u, min(cands, key=score), assignment, loads, sizes)
    return compact(assignment)


def main_stream(units: list[Unit], limit: int, level_of: list[int]) -> list[int]:
    """Stream (0..) per unit under MainStream:`limit`; `level_of` is every node's level."""
    spine_levels: dict[int, int] = {}
    for lv in level_of:
        spine_levels[lv] = spine_levels.get(lv, 0) + 1
    solo = [sum(k for lv, k in u.hist.items() if spine_levels[lv] == 1) for u in units]
    assignment = [-1] * len(units)
    loads: list[dict[int, int]] = []
    sizes: list[int] = []
    order = by_earliest_level(units, key=lambda u: (-u.size, -u.interaction, -u.peak, u.earliest, u.index))
    for level, group in order:
        for u in group:
            active = len(loads)
            if spine_levels[level] == 1 or solo[u.index] == u.size:
                cands = [0]
            else:
                cands = [0]            # the main stream, or the first stream to open
                adj = adjacent_weights(u, assignment)
                cands += sorted(adj, key=lambda s: (-adj[s], s))
                conflict = [_conflict(u, loads[s], level) for s in range(active)]
                cands += sorted(range(active), key=lambda s: (conflict[s], s))[:LOW_CONFLICT]
                cands = dedupe(cands, active, limit, CANDIDATES, True)

            def score(item: tuple[int, int]) -> tuple:
                rank, s = item
                opens = s == active
                ev = event_local(u, s, assignment)
                conf = 0 if opens else _conflict(u, loads[s], level)
                bonus = solo[u.index] if s == 0 else 0
                total = 3.0 * ev + 4.0 * conf + 2.0 * opens - 4.0 * bonus
                return round(total, 9), ev, conf, opens, bonus, rank
            _, best = min(enumerate(cands), key=score)
            _apply(u, best, assignment, loads, sizes)
    return compact(assignment)


def _conflict(u: Unit, load: dict[int, int], level: int) -> int:
    """Nodes of u and of the stream at the same levels of the window (GE's parallel conflict)."""
    h = u.hist
    return sum(h.get(lv, 0) * load.get(lv, 0) for lv in range(level, level + WINDOW))
