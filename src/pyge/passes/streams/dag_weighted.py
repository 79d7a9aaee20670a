"""GE's DAG stream pass, part 2 for WeightedLoadBalance:N: merging by measured time.

LoadBalance counts nodes; the weighted mode counts microseconds. Each unit (path of the
cover) carries its nodes' durations per level; each stream the durations placed on it,
per level and in total. Units are placed level by level, longest total duration first,
each on the best of at most eight candidates: its neighbours' streams (most shared edges,
then the least loaded), the three streams least loaded over the window of levels ahead,
and a new stream while fewer than N are open. Score (GE's WeightedStreamMergeOptions):

    3 * events + 4 * time conflict + 2 * stream time + 2 * (opens a stream)

with "time conflict" the sum, over the levels of the window where the unit has work, of the
unit's time there times the stream's time there, and "stream time" the stream's total with
the unit added. Ties: time conflict, events, stream time, then the lower stream.

GE then re-simulates the schedule for the three best candidates and keeps the shortest.
Its simulation starts one operator and jumps to that operator's end before starting the
next, so every candidate's makespan is the sum of all durations and the step never changes
the choice; pyge leaves it out.
"""
from __future__ import annotations

from .dag_units import WINDOW, Unit, adjacent_weights, by_earliest_level, compact, event_local

CANDIDATES = 8
LIGHT = 3
EPS = 1e-9


def weighted_load_balance(units: list[Unit], limit: int, level_of: list[int], duration_us: list[float]) -> list[int]:
    """Stream (0..) per unit under WeightedLoadBalance:`limit`; `duration_us` per node."""
    hists: list[dict[int, float]] = []
    totals: list[float] = []
    for u in units:
        h: dict[int, float] = {}
        for i in u.nodes:
            h[level_of[i]] = h.get(level_of[i], 0.0) + duration_us[i]
        hists.append(h)
        totals.append(sum(h.values()))
    active_levels = [sorted(lv for lv, d in h.items() if d > EPS) for h in hists]
    assignment = [-1] * len(units)
    loads: list[dict[int, float]] = []
    stream_time: list[float] = []
    order = by_earliest_level(units, key=lambda u: (-round(totals[u.index], 9), -u.interaction,
                                                    u.earliest, u.index))
    for level, group in order:
        for u in group:
            active = len(loads)
            window = [sum(load.get(lv, 0.0) for lv in range(level, level + WINDOW)) for load in loads]
            adj = adjacent_weights(u, assignment)
            cands = sorted(adj, key=lambda s: (-adj[s], round(stream_time[s], 9), s))
            cands += sorted(range(active), key=lambda s: (round(window[s], 9), round(stream_time[s], 9), s))[:LIGHT]
            if active < limit:
                cands.append(active)
            cands = list(dict.fromkeys(cands))[:CANDIDATES] or list(range(min(active, CANDIDATES)))
            levels = [lv for lv in active_levels[u.index] if level <= lv < level + WINDOW] or active_levels[u.index]
            h = hists[u.index]

            def score(s: int) -> tuple:
                opens = s == active
                load = {} if opens else loads[s]
                conflict = sum(h[lv] * load.get(lv, 0.0) for lv in levels)
                time_load = (0.0 if opens else stream_time[s]) + totals[u.index]
                ev = event_local(u, s, assignment)
                total = 3.0 * ev + 4.0 * conflict + 2.0 * time_load + 2.0 * opens
                return round(total, 9), round(conflict, 9), ev, round(time_load, 9), s
            best = min(cands, key=score)
            if best == active:
                loads.append({})
                stream_time.append(0.0)
            assignment[u.index] = best
            stream_time[best] += totals[u.index]
            load = loads[best]
            for lv, d in h.items():
                load[lv] = load.get(lv, 0.0) + d
    return compact(assignment)
