"""Boxes in N dimensions (spec components.md 2.4).

A box is (offset, shape), both tuples of ints.  boxes_overlap picks its
method by dimensionality: 1-D a sorted sweep; 2-D a sweep over x with a
range-add / range-max segment tree over compressed y (O(N log N)); 3-D and
up a sweep over the first axis with pairwise checks in the active set,
capped at OVERLAP_BUDGET comparisons, past which it raises rather than
run unbounded.
"""

import heapq
from math import prod

OVERLAP_BUDGET = 1_000_000


def box_contains(outer_offset, outer_shape, offset, shape):
    return all(o <= a and a + s <= o + n
               for o, n, a, s in zip(outer_offset, outer_shape, offset, shape))


def _pair_overlaps(a, b):
    (ao, as_), (bo, bs) = a, b
    return all(x < y + t and y < x + s for x, s, y, t in zip(ao, as_, bo, bs))


def _overlap_1d(boxes):
    iv = sorted((o[0], o[0] + s[0]) for o, s in boxes)
    return any(iv[i][0] < iv[i - 1][1] for i in range(1, len(iv)))


class _SegTree:
    def __init__(self, n):
        self.n = n
        self.mx = [0] * (4 * n)
        self.lz = [0] * (4 * n)

    def add(self, lo, hi, v, node=1, l=0, r=None):
        if r is None:
            r = self.n
        if hi <= l or r <= lo:
            return
        if lo <= l and r <= hi:
            self.mx[node] += v
            self.lz[node] += v
            return
        m = (l + r) // 2
        self.add(lo, hi, v, 2 * node, l, m)
        self.add(lo, hi, v, 2 * node + 1, m, r)
        self.mx[node] = self.lz[node] + max(self.mx[2 * node], self.mx[2 * node + 1])

    def top(self):
        return self.mx[1]


def _overlap_2d(boxes):
    ys = sorted({o[1] for o, _ in boxes} | {o[1] + s[1] for o, s in boxes})
    yi = {y: i for i, y in enumerate(ys)}
    ev = []
    for o, s in boxes:
        # at equal x, closings come first: touching boxes do not overlap
        ev.append((o[0] + s[0], 0, yi[o[1]], yi[o[1] + s[1]]))
        ev.append((o[0], 1, yi[o[1]], yi[o[1] + s[1]]))
    ev.sort()
    tree = _SegTree(max(1, len(ys) - 1))
    for _, kind, lo, hi in ev:
        if lo == hi:
            continue
        tree.add(lo, hi, 1 if kind else -1)
        if kind and tree.top() > 1:
            return True
    return False


def _overlap_nd(boxes):
    order = sorted(range(len(boxes)), key=lambda i: boxes[i][0][0])
    # the active sets depend on the sweep axis alone, so the comparisons the
    # sweep would make are counted first (a heap of ends), and a set past the
    # budget fails before any work
    ends, need = [], 0
    for i in order:
        start = boxes[i][0][0]
        while ends and ends[0] <= start:
            heapq.heappop(ends)
        need += len(ends)
        heapq.heappush(ends, start + boxes[i][1][0])
    if need > OVERLAP_BUDGET:
        raise ValueError(f"high-dimensional overlap budget exceeded: {need} comparisons for "
                         f"{len(boxes)} boxes, more than {OVERLAP_BUDGET}")
    active = []
    for i in order:
        o = boxes[i][0]
        active = [j for j in active if boxes[j][0][0] + boxes[j][1][0] > o[0]]
        if any(_pair_overlaps(boxes[j], boxes[i]) for j in active):
            return True
        active.append(i)
    return False


def boxes_overlap(boxes):
    boxes = [(tuple(o), tuple(s)) for o, s in boxes if prod(s) > 0]
    if len(boxes) < 2:
        return False
    ndim = len(boxes[0][0])
    if ndim == 1:
        return _overlap_1d(boxes)
    if ndim == 2:
        return _overlap_2d(boxes)
    return _overlap_nd(boxes)


def boxes_exactly_cover(offset, shape, boxes):
    """True iff boxes is non-empty, every box lies inside (offset, shape), the
    volumes add up to the container's, and no two overlap."""
    boxes = list(boxes)
    if not boxes:
        return False
    if not all(box_contains(offset, shape, o, s) for o, s in boxes):
        return False
    if sum(prod(s) for _, s in boxes) != prod(shape):
        return False
    return not boxes_overlap(boxes)


def regions_exactly_cover(offset, shape, regions):
    """The same for objects with overlap_offset / overlap_shape."""
    return boxes_exactly_cover(offset, shape, [(r.overlap_offset, r.overlap_shape) for r in regions])


def box_intersection(a_off, a_shape, b_off, b_shape):
    """(offset, shape) of the common part, or None."""
    lo = tuple(max(x, y) for x, y in zip(a_off, b_off))
    hi = tuple(min(x + s, y + t) for x, s, y, t in zip(a_off, a_shape, b_off, b_shape))
    if any(h <= l for l, h in zip(lo, hi)):
        return None
    return lo, tuple(h - l for l, h in zip(lo, hi))
