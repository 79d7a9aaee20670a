"""pyge's own last rule (pyge.streamAllocation=nodes): a node whose producers and consumers
all live on other streams is pulled onto a neighbour's stream. (The default, GE's rules on
clusters, ends with ineffective.py instead.)

Such a node costs a Send/Recv on each side. Moving it next to a neighbour saves at least one
pair, but it must not cost concurrency: the node is moved to stream `t` only when every node
already on `t` is an ancestor or a descendant of it. Those nodes cannot run at the same time
as it anyway, and the stream's launch order (topological) puts it between them, so nothing is
delayed. (x -> a -> z with `a` alone on its stream and only x and z on theirs: `a` joins them.
x -> a, x -> b, a & b -> z with `b` alone: not moved, `a` would serialise with it.)

Candidate streams are tried by how many neighbours they hold, then producers before
consumers. Labelled nodes, independent-engine nodes and the streams they own are exempt:
those streams were asked for. One sweep in topological order.

Cost. This used to build ancestor/descendant bitsets of every node (O(n^2) bits: ~1.25 GB and
seconds at 10^5 nodes) although the test only matters for the few nodes with no neighbour on
their own stream. Now only those candidates are tested, by searches bounded by topological
position (`_Search`): an ancestor of the node at position i sits below i and a descendant
above, so the members of `t` below i must all be ancestors and those above all descendants.
The search walks ancestors (descendants) through a heap in decreasing (increasing) position,
so it meets the members in position order: it fails at the first member it walks past
without reaching it and never looks beyond the farthest member. Transitivity cuts it short:
once it reaches a member m whose own lower members are all its ancestors ("closed" below),
they are all ancestors of i too. Closedness is worked out per stream on first use, member by
member upwards with the same search (so a chain-like stream costs one walk per gap between
members), and stays true as the sweep moves nodes: removing a member keeps it, and a node
only joins a stream when ordered with every member. The answers are exactly the bitset test's.
"""
from __future__ import annotations

import bisect
import heapq
import logging

from ...ir.graph import Graph, Node
from ..graph.engines import INDEPENDENT, kind_of
from ._graph import label_of
from .context import StreamContext

log = logging.getLogger(__name__)


def pull_isolated(graph: Graph, ctx: StreamContext) -> int:
    """Move isolated nodes of `graph` onto a neighbour's stream; returns how many moved."""
    order = graph.topological_sort()
    index = {id(n): i for i, n in enumerate(order)}
    # Node.predecessors order; successors in the graph's node order, as Node.successors
    # lists them (the candidate streams' tie-break depends on the neighbours' order)
    preds = [[index[id(p)] for p in m.predecessors if id(p) in index] for m in order]
    succs: list[list[int]] = [[] for _ in order]
    for m in graph.nodes:
        i = index[id(m)]
        for p in preds[i]:
            succs[p].append(i)
    pinned = ctx.pinned_streams()
    members: dict[int, list[int]] = {}   # stream -> sorted positions of its nodes (appended in order)
    for i, n in enumerate(order):
        members.setdefault(n.stream_id, []).append(i)
    search = _Search(preds, succs, members)
    moved = 0
    for i, n in enumerate(order):
        # cheap screen on the position lists first: most nodes share a stream with a neighbour
        own = n.stream_id
        if (not preds[i] and not succs[i]) or any(order[q].stream_id == own for q in preds[i]) \
                or any(order[q].stream_id == own for q in succs[i]):
            continue
        if label_of(n) is not None or kind_of(n) == INDEPENDENT:
            continue
        target = _target(order, i, preds[i] + succs[i], search, pinned)
        if target is None:
            continue
        old = members[n.stream_id]
        del old[bisect.bisect_left(old, i)]
        bisect.insort(members.setdefault(target, []), i)
        search.joined(target, i)
        log.debug("pulling %s (%s) from stream %d onto stream %d", n.name, n.op_type, n.stream_id, target)
        n.stream_id = target
        moved += 1
    return moved


def _target(order: list[Node], i: int, neighbours: list[int], search: "_Search",
            pinned: set[int]) -> int | None:
    """The first candidate stream of order[i] (which has no neighbour on its own stream)
    whose every member is ordered with it."""
    streams = [order[q].stream_id for q in neighbours]
    first_seen = {s: k for k, s in reversed(list(enumerate(streams)))}
    candidates = sorted(set(streams) - pinned, key=lambda s: (-streams.count(s), first_seen[s]))
    for s in candidates:
        if s < 0:
            continue
        if search.ordered_with(s, i):
            return s
    return None


class _Search:
    """Whether a node reaches / is reached from every member of a stream on one side of it.

    Keys are sign * position (sign -1 upwards, +1 downwards) so that both directions walk in
    increasing key order; `closed[sign][s]` holds the members of s known to reach (upwards:
    be reached from) every member of s before them in that order. Only true facts are kept:
    they survive the sweep's moves (see the module docstring), a false one might not.
    """

    def __init__(self, preds: list[list[int]], succs: list[list[int]], members: dict[int, list[int]]):
        self.edges = {-1: preds, 1: succs}
        self.members = members
        self.closed: dict[int, dict[int, set[int]]] = {-1: {}, 1: {}}

    def ordered_with(self, s: int, i: int) -> bool:
        """Whether i (not on s) is ordered with every member of s: those below it ancestors,
        those above it descendants."""
        pos = self.members.get(s, [])
        cut = bisect.bisect_left(pos, i)
        return ((cut == 0 or self._reaches_all(i, pos, cut, -1, self._closed(s, -1)))
                and (cut == len(pos) or self._reaches_all(i, pos, cut, 1, self._closed(s, 1))))

    def joined(self, s: int, i: int) -> None:
        """i joined s, ordered with every member: it is closed both ways, and stays so."""
        for sign in (-1, 1):
            if s in self.closed[sign]:
                self.closed[sign][s].add(i)

    def _closed(self, s: int, sign: int) -> set[int]:
        """Members of s closed in direction `sign`, worked out on first use from the far end
        inwards, each member's walk stopping at the first closed member it reaches."""
        done = self.closed[sign].get(s)
        if done is None:
            done = self.closed[sign][s] = set()
            pos = self.members.get(s, [])
            if sign < 0:   # upwards: lowest member first, each wants pos[t-1], ..., pos[0]
                walks = [(t, t) for t in range(len(pos))]
            else:          # downwards: highest member first, each wants pos[t+1:]
                walks = [(t, t + 1) for t in reversed(range(len(pos)))]
            for t, cut in walks:   # the first one has nobody beyond it: closed trivially
                if cut in (0, len(pos)) or self._reaches_all(pos[t], pos, cut, sign, done):
                    done.add(pos[t])
        return done

    def _reaches_all(self, start: int, pos: list[int], cut: int, sign: int, closed: set[int]) -> bool:
        """Whether the walk along `self.edges[sign]` from position `start` reaches every member
        on its `sign` side: pos[cut-1], pos[cut-2], ... pos[0] upwards, pos[cut:] downwards.

        Keys are sign * position: every edge increases the key, so popping the smallest key
        first visits the reached nodes in key order, meeting the wanted ones in order. When the
        smallest key passes a wanted one that was never pushed, that node is unreachable and
        the answer is no. Keys beyond the last wanted one are never pushed (nothing past it
        leads back to it), which bounds the walk.
        """
        edges = self.edges[sign]
        n_want = cut if sign < 0 else len(pos) - cut
        want = (lambda j: -pos[cut - 1 - j]) if sign < 0 else (lambda j: pos[cut + j])
        last = want(n_want - 1)
        heap = [k for k in (sign * q for q in edges[start]) if k <= last]
        heapq.heapify(heap)
        seen = set(heap)
        j, w = 0, want(0)
        while heap:
            k = heapq.heappop(heap)
            if w < k:
                return False                           # walked past w without reaching it
            if k == w:
                # every wanted key up to here is reached; a closed member vouches for the rest
                if j + 1 == n_want or sign * k in closed:
                    return True
                j += 1
                w = want(j)
            for q in edges[sign * k]:
                kq = sign * q
                if kq <= last and kq not in seen:
                    seen.add(kq)
                    heapq.heappush(heap, kq)
        return False
