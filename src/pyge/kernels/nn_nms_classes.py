"""NonMaxSuppression over many classes of one set of boxes (nn_nms.py): greedy selection in
every class at once, one bit per class.

ONNX's NonMaxSuppression scores each box of a batch once per class; the boxes, and so which
pairs of them overlap by more than the threshold, are the same in every class. A detector's
export (80 classes, a low score threshold) makes most boxes candidates in many classes, and
joining each (batch, class) group's candidates apart would find the same pairs once per
class. Here the pairs are found once per batch, among the boxes that are a candidate in some
class, and greedy selection runs over them with a bit per class: a box holds one 64-bit
word per 64 classes, and a pair the classes in which its first box ranks above the second.

Greedy selection goes in rounds, each deciding every undecided (box, class) whose
neighbours (the boxes it overlaps) ranked above it in that class are all decided. Two facts
make a round a few word operations over the pairs: a kept box's undecided neighbours are all
suppressed, whatever their rank (one ranked above it was decided before it, and not kept, or
it would have suppressed it); so no undecided box has a kept neighbour, and the kept boxes
of a round are the undecided ones with no undecided neighbour ranked above them. Where a
round decides little (chains of overlaps), the rest goes to nn_nms_graph.greedy_keep as
explicit (class, box, box) pairs. No sort of all scores: ranks are compared as keys, and
only the kept boxes are sorted, for the output's order and max_output_boxes_per_class.
"""
from __future__ import annotations

import numpy as np

from .nn_nms_graph import greedy_keep

# From this many rounds on, a round that decides less than an eighth of the undecided (box,
# class) bits hands the rest to greedy_keep.
SLOW_AFTER = 4
# Pairs below which the rounds do not drop the decided nodes' pairs.
_PRUNE_PAIRS = 4096
# Bytes of keys taken per chunk of pairs (_first).
_CHUNK = 1 << 18


def descending_keys(s: np.ndarray) -> np.ndarray:
    """Unsigned keys of float scores, ascending as the scores descend (0.0 and -0.0 equal,
    NaN last): equal keys are equal scores, ordered by box index."""
    ints, uints = (np.int32, np.uint32) if s.dtype == np.float32 else (np.int64, np.uint64)
    width = 8 * np.dtype(ints).itemsize
    bits = (s + s.dtype.type(0)).view(ints)                       # -0.0 + 0.0 is 0.0
    ordered = bits ^ ((bits >> (width - 1)) & np.iinfo(ints).max)  # signed, as the floats
    key = ~(ordered.view(uints) ^ uints(1 << (width - 1)))
    key[np.isnan(s)] = np.iinfo(uints).max
    return key


def _pack(bits: np.ndarray, words: int) -> np.ndarray:
    """[rows, classes] bool -> [rows, words] uint64, class c in bit c % 64 of word c // 64."""
    rows, classes = bits.shape
    if classes != 64 * words:
        padded = np.zeros((rows, 64 * words), bool)
        padded[:, :classes] = bits
        bits = padded
    return np.packbits(bits.reshape(-1), bitorder="little").view(np.uint64).reshape(rows, words)


def _unpack(words: np.ndarray, classes: int) -> np.ndarray:
    """The inverse of _pack: [rows, words] uint64 -> [rows, classes] bool."""
    bits = np.unpackbits(words.reshape(-1).view(np.uint8), bitorder="little").view(bool)
    return bits.reshape(words.shape[0], -1)[:, :classes]


def _popcount(words) -> int:
    return int(np.bitwise_count(words).sum())


def _rounds(cand, rank_ok, src, dst, starts, slow_after=SLOW_AFTER):
    """Greedy selection over the nodes in rounds. cand [m, W]: the classes each node is a
    candidate in; src / dst: the directed pairs (src -> dst) sorted by dst, node v's from
    starts[v]; rank_ok [pairs, W]: the classes in which src ranks above dst. Returns (kept,
    undecided) [m, W], undecided non-zero where the rounds stopped for being slow (no kept
    node overlaps an undecided one then). Once few bits are left undecided, the nodes and
    pairs without any are dropped, so that the last rounds are cheap."""
    undecided = cand.copy()
    kept = np.zeros_like(cand)
    nodes = None                # the nodes in play, where not all: sub / got are theirs
    sub, got = undecided, kept
    left = built = _popcount(sub)
    rounds = 0
    while left:
        ahead = sub.take(src, 0)
        ahead &= rank_ok
        new = sub & ~np.bitwise_or.reduceat(ahead, starts, axis=0)
        sub ^= new
        got |= new
        # a kept node's undecided neighbours are suppressed
        sub &= ~np.bitwise_or.reduceat(new.take(src, 0), starts, axis=0)
        now = _popcount(sub)
        rounds += 1
        if now and rounds >= slow_after and 8 * (left - now) < left:
            break
        left = now
        if left and 4 * left < built and src.size > _PRUNE_PAIRS:
            if nodes is not None:
                undecided[nodes], kept[nodes] = sub, got
            nodes, src, dst, starts, rank_ok = _prune(undecided, kept, nodes, src, dst,
                                                      rank_ok)
            sub, got = undecided.take(nodes, 0), kept.take(nodes, 0)
            left = built = _popcount(sub)
    if nodes is not None:
        undecided[nodes], kept[nodes] = sub, got
    return kept, undecided


def _prune(undecided, kept, nodes, src, dst, rank_ok):
    """The pairs between nodes in play that still hold undecided bits, renumbered over the
    nodes that have such a pair (returned as `nodes`, indices into `undecided`); a node with
    undecided bits and no such pair is kept in them."""
    base = np.arange(undecided.shape[0]) if nodes is None else nodes
    live = undecided.take(base, 0).any(1)
    keep = live[src] & live[dst]
    src, dst, rank_ok = src[keep], dst[keep], rank_ok.compress(keep, 0)
    paired = np.zeros(live.size, bool)
    paired[dst] = True
    alone = base[live & ~paired]
    kept[alone] |= undecided[alone]
    undecided[alone] = 0
    loc = np.cumsum(paired) - 1
    src, dst = loc[src], loc[dst]
    starts = np.flatnonzero(np.concatenate([[True], dst[1:] != dst[:-1]]))
    return base[paired], src, dst, starts, rank_ok


def _finish(undecided, key, batch, la, lb, classes):
    """Greedy selection among the undecided (node, class) bits alone (no kept node overlaps
    them): the kept ones, [m, classes] bool. key [m, classes]: the nodes' score keys;
    batch: each node's batch (nodes numbered by batch, then box)."""
    open_ = _unpack(undecided, classes)
    node, cls = np.nonzero(open_)
    order = np.lexsort((node, key[node, cls], cls, batch[node]))
    node, cls = node[order], cls[order]
    slot = np.full(open_.shape, -1, np.int64)
    slot[node, cls] = np.arange(node.size)
    p, c = np.nonzero(_unpack(undecided[la] & undecided[lb], classes))
    ea, eb = slot[la[p], c], slot[lb[p], c]
    keep = greedy_keep(node.size, np.minimum(ea, eb), np.maximum(ea, eb))
    out = np.zeros(open_.shape, bool)
    out[node[keep], cls[keep]] = True
    return out


def _graph(a, b, m):
    """The directed pairs both ways of the undirected (a, b) over nodes 0..m-1, each node
    in one at least, by target: (src, dst, starts, perm), node v's pairs from starts[v],
    perm the order that sorted them."""
    dst = np.concatenate([b, a])
    small = np.int16 if m < (1 << 15) else np.int32     # numpy's stable sort: radix on int16
    perm = dst.astype(small).argsort(kind="stable")
    count = np.bincount(dst, minlength=m)
    starts = count.cumsum() - count
    return np.concatenate([a, b]).take(perm), dst.take(perm), starts, perm


def _first(key, la, lb, words):
    """[pairs, W]: the classes in which node la ranks above node lb, by their keys (la < lb:
    the same batch and a lower box index, so equal keys rank la first). In chunks of some
    hundred kilobytes: whole, the keys taken per pair are megabytes, fresh pages each call."""
    step = max(_CHUNK // key.strides[0], 1)
    if la.size <= step:
        return _pack(key.take(la, 0) <= key.take(lb, 0), words)
    out = np.empty((la.size, words), np.uint64)
    for lo in range(0, la.size, step):
        hi = lo + step
        out[lo:hi] = _pack(key.take(la[lo:hi], 0) <= key.take(lb[lo:hi], 0), words)
    return out


def select_classes(scores, cand, at, nb, nc, n, max_out, pairs):
    """The [k, 3] (batch, class, box) indices NMS selects. scores / cand [nb * n, nc], box
    by box (batch * n + box): each class's score and whether the box is a candidate in that
    class; at: the boxes that are a candidate in some class, increasing. pairs(at) gives
    the suppressing pairs (a, b), a < b, among them, as positions in `at`."""
    a, b = pairs(at)
    keys = descending_keys(scores)
    kept = cand
    words = (nc + 63) // 64
    if a.size:
        bits = _pack(cand.take(at, 0), words)
        if 4 * np.count_nonzero(cand) < nc * at.size:
            # few classes a box: drop the pairs of boxes never candidates in one class
            # (they would change nothing, but cost as much as the others)
            common = (bits.take(a, 0) & bits.take(b, 0)).any(1)
            a, b = a.compress(common), b.compress(common)
    if a.size:
        mark = np.zeros(at.size, bool)
        mark[a] = True
        mark[b] = True
        local = mark.nonzero()[0]
        loc = mark.cumsum() - 1
        la, lb = loc[a], loc[b]
        nodes = at[local]
        key_n = keys.take(nodes, 0)
        first = _first(key_n, la, lb, words)
        src, dst, starts, perm = _graph(la, lb, nodes.size)
        k, undecided = _rounds(bits.take(local, 0),
                               np.concatenate([first, ~first]).take(perm, 0),
                               src, dst, starts)
        kept_n = _unpack(k, nc)
        if undecided.any():
            kept_n |= _finish(undecided, key_n, nodes // n, la, lb, nc)
        kept = cand.copy()
        kept[nodes] = kept_n
    f = kept.reshape(-1).nonzero()[0]
    key = keys.take(f)
    v, c = np.divmod(f, nc)
    if nb == 1:
        g, box = c, v
    else:
        batch, box = np.divmod(v, n)
        g = batch * nc + c
    kbits = 8 * key.itemsize
    gbits, bbits = int(nb * nc).bit_length(), int(n).bit_length()
    if gbits + kbits + bbits <= 64:
        packed = (g.astype(np.uint64) << np.uint64(kbits + bbits)) \
            | (key.astype(np.uint64) << np.uint64(bbits)) | box.astype(np.uint64)
        packed.sort()
        g = (packed >> np.uint64(kbits + bbits)).astype(np.int64)
        box = (packed & np.uint64((1 << bbits) - 1)).astype(np.int64)
    else:
        order = np.lexsort((box, key, g))
        g, box = g[order], box[order]
    kc = np.bincount(g, minlength=nb * nc)
    if kc.max(initial=0) > max_out:
        take = np.arange(g.size) - np.repeat(np.cumsum(kc) - kc, kc) < max_out
        g, box = g[take], box[take]
    return np.stack([*np.divmod(g, nc), box], 1)
