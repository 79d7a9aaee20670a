"""Happens-before of a finished plan, recomputed from its step lists alone.

Written independently of the passes that built the plan (it reads only `Plan.streams` and
`Plan.events`), so that a bug in event insertion cannot hide itself from the verifier. That
is why this is a second happens-before, on purpose: the events pass and the memory planner
share analysis/happens_before.py, and the verifier must not trust it. Its model differs in
the detail too: it replays the steps themselves (a RECORD also carries the WAITs before it on
its stream), where the shared module reduces events to launch-to-launch edges.

The model: each stream is a total order of its steps; a WAIT on event k happens after the
RECORD of event k; a RECORD captures everything launched before it on its stream. The
streams are replayed as a worklist (a stream runs until it reaches a WAIT whose RECORD has
not run yet, and is resumed by that RECORD): if every step runs, the replay itself is a
consistent global order in which each wait follows its record, so the plan cannot
deadlock; if some step never runs, no such order exists.

Along the replay every stream carries a vector clock, clock[s'] = position of the latest
launch of stream s' known to have happened; a launch snapshots its stream's clock. Then
"u happens before v" is one comparison: clock_of(v)[stream(u)] >= position(u).
"""
from __future__ import annotations

from collections import deque

from ...errors import VerificationError
from ...plan.plan import LAUNCH, RECORD, WAIT, Plan


class PlanClocks:
    """Vector clocks for every launch of a plan; raises VerificationError on deadlock."""

    def __init__(self, plan: Plan):
        n, ns = len(plan.nodes), len(plan.streams)
        self.plan = plan
        self.stream = [-1] * n        # stream of each node's launch
        self.pos = [-1] * n           # step position of each node's launch in its stream
        self.rank = [-1] * n          # position of each launch in the replayed global order
        self.clock: list[list[int] | None] = [None] * n
        self.record_pos: list[tuple[int, int] | None] = [None] * len(plan.events)
        self._replay(ns)

    def _replay(self, ns: int) -> None:
        plan = self.plan
        cur = [[-1] * ns for _ in range(ns)]
        at = [0] * ns
        record_clock: list[list[int] | None] = [None] * len(plan.events)
        blocked: dict[int, list[int]] = {}
        ready = deque(range(ns))
        launched = 0
        clock, stream, pos, rank = self.clock, self.stream, self.pos, self.rank
        while ready:
            s = ready.popleft()
            steps = plan.streams[s]
            i, end, c = at[s], len(steps), cur[s]    # (the stream's position and clock, local)
            while i < end:
                st = steps[i]
                kind, arg = st.kind, st.arg
                if kind == LAUNCH:
                    c = c[:]
                    c[s] = i
                    clock[arg], stream[arg], pos[arg], rank[arg] = c, s, i, launched
                    launched += 1
                elif kind == WAIT:
                    rc = record_clock[arg]
                    if rc is None:                      # its RECORD has not run yet
                        blocked.setdefault(arg, []).append(s)
                        break
                    # A new list, never an in-place update: clocks are shared by snapshots.
                    c = list(map(max, c, rc))
                elif kind == RECORD:
                    record_clock[arg] = c
                    self.record_pos[arg] = (s, i)
                    ready.extend(blocked.pop(arg, ()))
                i += 1
            at[s], cur[s] = i, c
        if blocked:
            e = min(blocked, key=lambda k: min(blocked[k]))
            s = min(blocked[e])
            raise VerificationError(
                f"plan {plan.graph_name!r} deadlocks: stream {s} waits on {plan.events[e]} "
                f"at step {at[s]}, and no consistent global order records it first")

    def before(self, u: int, v: int) -> bool:
        """u happens before v (strictly; a node does not happen before itself)."""
        return u != v and self.clock[v][self.stream[u]] >= self.pos[u]

    def before_or_same(self, u: int, v: int) -> bool:
        return u == v or self.clock[v][self.stream[u]] >= self.pos[u]

    def all_before(self, u: int, users: list[int], v: int) -> bool:
        """before(u, v) (u < 0: no such node, true) and before_or_same(r, v) for every r of
        `users`, with v's clock looked up once; u != v. The memory checks' common case."""
        cv, stream, pos = self.clock[v], self.stream, self.pos
        if u >= 0 and (u == v or cv[stream[u]] < pos[u]):
            return False
        for r in users:
            if r != v and cv[stream[r]] < pos[r]:
                return False
        return True

    def where(self, u: int) -> str:
        n = self.plan.nodes[u]
        return f"{n.name!r} (stream {self.stream[u]})"
