"""Offset planning for an arena of intermediate buffers (pure Python, no xDSL).

A buffer is an interval `(size_bytes, start, end)`: it occupies `size_bytes` bytes and is
live over the inclusive schedule range `[start, end]`. Two buffers may share bytes only if
their live ranges are disjoint, or if they are an *in-place pair*. A planner returns one
byte offset per buffer (in input order), each a multiple of the alignment.

In-place pairs `(src, dst)` (indices into the intervals) say that `dst` may take the bytes
of `src` although both are live at step `k = src.end == dst.start`: the op at `k` reads
`src[i]` and then writes `dst[i]` with the same index map (an elementwise kernel whose
input dies there; the caller checks that). The pair then sits at ONE offset: the planner
unions each chain of pairs into one buffer (size the largest member, live from the first
member's start to the last one's end) and plans those.

- `plan_greedy_by_size`: the "greedy by size" offset planner of Pisarchyk & Lee, *Efficient
  Memory Management for Deep Neural Net Inference* (2020), also TFLite's arena planner
  (`ArenaPlanner` + `SimpleMemoryArena`): buffers sorted by size, largest first, each put in
  the smallest gap (best fit) between the already placed buffers it is live together with,
  or after the last of them when no gap fits.
- `plan_naive`: no reuse, every buffer after the previous one.
- `max_live_bytes`: the lower bound every plan meets, the most bytes live at one time
  (an in-place pair counted once).
- `merge_inplace`: the in-place chains as merged intervals.
- `arena_bytes`: the arena a plan needs (the end of its highest buffer).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import NamedTuple


class Interval(NamedTuple):
    """A buffer of `size` bytes live over the inclusive schedule range [start, end]."""

    size: int
    start: int
    end: int

    def overlaps(self, other: Interval) -> bool:
        """Whether both buffers are live at some step of the schedule."""
        return self.start <= other.end and other.start <= self.end


def align_up(value: int, alignment: int) -> int:
    """The smallest multiple of `alignment` that is >= `value`."""
    return -(-value // alignment) * alignment


def _check(intervals: Sequence[tuple[int, int, int]], alignment: int) -> list[Interval]:
    if alignment < 1 or alignment & (alignment - 1):
        raise ValueError(f"alignment: expected a power of two >= 1, got {alignment}")
    checked: list[Interval] = []
    for i, (size, start, end) in enumerate(intervals):
        if size < 0 or not 0 <= start <= end:
            raise ValueError(
                f"interval {i}: expected size >= 0 and 0 <= start <= end, got {(size, start, end)}"
            )
        checked.append(Interval(size, start, end))
    return checked


InplacePairs = Sequence[tuple[int, int]]
"""`(src, dst)`: buffer `dst` may take the bytes of buffer `src` (see the module doc)."""


def merge_inplace(
    intervals: Sequence[tuple[int, int, int]], inplace: InplacePairs = ()
) -> tuple[list[int], list[Interval]]:
    """(group of each buffer, the merged interval of each group): the buffers linked by
    in-place pairs form one group, sized as its largest member and live over the union of
    its members' ranges; every other buffer is a group of its own. Groups are numbered by
    their first buffer. A ValueError names a pair whose `src` does not end where its `dst`
    starts, a buffer that is `src` (or `dst`) of two pairs, or a chain whose middle buffer
    is live at one step only (the buffers on both sides would be live together there)."""
    ivs = [Interval(*iv) for iv in intervals]
    parent = list(range(len(ivs)))

    def find(i: int) -> int:
        while parent[i] != i:
            parent[i] = parent[parent[i]]
            i = parent[i]
        return i

    seen_src: set[int] = set()
    seen_dst: set[int] = set()
    for pair in inplace:
        src, dst = pair
        if not (0 <= src < len(ivs) and 0 <= dst < len(ivs)) or src == dst:
            raise ValueError(f"in-place pair {pair}: expected two distinct buffer indices")
        if ivs[src].end != ivs[dst].start:
            raise ValueError(
                f"in-place pair {pair}: buffer {src} must end where buffer {dst} starts, got "
                f"{tuple(ivs[src])} and {tuple(ivs[dst])}"
            )
        if src in seen_src or dst in seen_dst:
            raise ValueError(f"in-place pair {pair}: a buffer is in two pairs on the same side")
        seen_src.add(src)
        seen_dst.add(dst)
    for pair in inplace:
        src, dst = pair
        if src in seen_dst and ivs[src].start == ivs[src].end:
            # Its own src ends and its dst starts at that one step: those two would be
            # live together at one offset without being a pair.
            raise ValueError(
                f"in-place pair {pair}: buffer {src} is live at one step only, it cannot "
                "both take bytes and give them on"
            )
        a, b = find(src), find(dst)
        parent[max(a, b)] = min(a, b)
    roots: dict[int, int] = {}
    group_of: list[int] = []
    merged: list[Interval] = []
    for i, iv in enumerate(ivs):
        root = find(i)
        if root not in roots:
            roots[root] = len(merged)
            merged.append(iv)
        else:
            g = roots[root]
            m = merged[g]
            merged[g] = Interval(max(m.size, iv.size), min(m.start, iv.start), max(m.end, iv.end))
        group_of.append(roots[root])
    return group_of, merged


def plan_naive(intervals: Sequence[tuple[int, int, int]], alignment: int = 64) -> list[int]:
    """No reuse: each buffer at the next aligned offset after the previous one (input order)."""
    offsets: list[int] = []
    top = 0
    for iv in _check(intervals, alignment):
        offsets.append(top)
        top = align_up(top + iv.size, alignment)
    return offsets


def plan_greedy_by_size(
    intervals: Sequence[tuple[int, int, int]],
    alignment: int = 64,
    inplace: InplacePairs = (),
) -> list[int]:
    """Greedy by size with best fit: largest buffer first (ties: earlier start, then input
    order), each at the aligned offset of the smallest gap among the placed buffers whose
    live ranges overlap its own, or above all of them when no gap is large enough.

    With in-place pairs the chains are merged first (`merge_inplace`) and every member of a
    chain gets the chain's offset."""
    checked = _check(intervals, alignment)
    if inplace:
        group_of, merged = merge_inplace(checked, inplace)
        offsets = _greedy(merged, alignment)
        return [offsets[g] for g in group_of]
    return _greedy(checked, alignment)


def _greedy(ivs: Sequence[Interval], alignment: int) -> list[int]:
    order = sorted(range(len(ivs)), key=lambda i: (-ivs[i].size, ivs[i].start, i))
    offsets: list[int | None] = [None] * len(ivs)
    placed: list[int] = []
    for i in order:
        iv = ivs[i]
        # The byte ranges of the placed buffers live together with this one, by offset.
        busy = sorted(
            (offset, offset + ivs[j].size)
            for j in placed
            if ivs[j].overlaps(iv) and (offset := offsets[j]) is not None
        )
        best: int | None = None
        best_gap: int | None = None
        low = 0  # the lowest free aligned byte above the busy ranges seen so far
        for lo, hi in busy:
            gap = lo - low
            if gap >= iv.size and (best_gap is None or gap < best_gap):
                best, best_gap = low, gap
            low = max(low, align_up(hi, alignment))
        offsets[i] = low if best is None else best
        placed.append(i)
    return [offset for offset in offsets if offset is not None]


def arena_bytes(intervals: Sequence[tuple[int, int, int]], offsets: Sequence[int]) -> int:
    """The arena a plan needs: the highest end of a buffer (0 without buffers)."""
    return max(
        (offset + size for (size, _, _), offset in zip(intervals, offsets, strict=True)), default=0
    )


def max_live_bytes(intervals: Sequence[tuple[int, int, int]], inplace: InplacePairs = ()) -> int:
    """The most bytes live at one step of the schedule (a lower bound on any arena that
    gives each in-place chain one offset)."""
    if inplace:
        intervals = merge_inplace(intervals, inplace)[1]
    events: dict[int, int] = {}
    for size, start, end in intervals:
        events[start] = events.get(start, 0) + size
        events[end + 1] = events.get(end + 1, 0) - size
    peak = live = 0
    for step in sorted(events):
        live += events[step]
        peak = max(peak, live)
    return peak


def check_plan(
    intervals: Sequence[tuple[int, int, int]],
    offsets: Sequence[int],
    alignment: int,
    inplace: InplacePairs = (),
) -> None:
    """Raise ValueError unless every offset is aligned and no two buffers live together
    share a byte, except an in-place pair at one offset that overlaps only at the step
    where `src` ends and `dst` starts (what the `lir.arena` verifier proves on the IR)."""
    ivs = _check(intervals, alignment)
    allowed = {(src, dst) for src, dst in inplace}
    if len(offsets) != len(ivs):
        raise ValueError(f"expected {len(ivs)} offsets, got {len(offsets)}")
    for i, (iv, offset) in enumerate(zip(ivs, offsets, strict=True)):
        if offset < 0 or offset % alignment:
            raise ValueError(f"buffer {i}: offset {offset} is not a multiple of {alignment}")
        for j in range(i):
            other, other_offset = ivs[j], offsets[j]
            if (
                iv.overlaps(other)
                and offset < other_offset + other.size
                and other_offset < offset + iv.size
                and not _inplace_ok(ivs, offsets, allowed, j, i)
            ):
                raise ValueError(f"buffers {j} and {i} are live together and share bytes")


def _inplace_ok(
    ivs: Sequence[Interval],
    offsets: Sequence[int],
    allowed: set[tuple[int, int]],
    i: int,
    j: int,
) -> bool:
    """Buffers i and j are an in-place pair at one offset, live together only at the step
    where the pair's `src` ends and its `dst` starts."""
    if offsets[i] != offsets[j]:
        return False
    return any(
        (src, dst) in allowed and ivs[src].end == ivs[dst].start for src, dst in ((i, j), (j, i))
    )


__all__ = [
    "InplacePairs",
    "Interval",
    "align_up",
    "arena_bytes",
    "check_plan",
    "max_live_bytes",
    "merge_inplace",
    "plan_greedy_by_size",
    "plan_naive",
]
