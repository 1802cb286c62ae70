"""Offset planning for an arena of intermediate buffers (pure Python, no xDSL).

A buffer is an interval `(size_bytes, start, end)`: it occupies `size_bytes` bytes and is
live over the inclusive schedule range `[start, end]`. Two buffers may share bytes only if
their live ranges are disjoint. A planner returns one byte offset per buffer (in input
order), each a multiple of the alignment.

- `plan_greedy_by_size`: the "greedy by size" offset planner of Pisarchyk & Lee, *Efficient
  Memory Management for Deep Neural Net Inference* (2020), also TFLite's arena planner
  (`ArenaPlanner` + `SimpleMemoryArena`): buffers sorted by size, largest first, each put in
  the smallest gap (best fit) between the already placed buffers it is live together with,
  or after the last of them when no gap fits.
- `plan_naive`: no reuse, every buffer after the previous one.
- `max_live_bytes`: the lower bound every plan meets, the most bytes live at one time.
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


def plan_naive(intervals: Sequence[tuple[int, int, int]], alignment: int = 64) -> list[int]:
    """No reuse: each buffer at the next aligned offset after the previous one (input order)."""
    offsets: list[int] = []
    top = 0
    for iv in _check(intervals, alignment):
        offsets.append(top)
        top = align_up(top + iv.size, alignment)
    return offsets


def plan_greedy_by_size(
    intervals: Sequence[tuple[int, int, int]], alignment: int = 64
) -> list[int]:
    """Greedy by size with best fit: largest buffer first (ties: earlier start, then input
    order), each at the aligned offset of the smallest gap among the placed buffers whose
    live ranges overlap its own, or above all of them when no gap is large enough."""
    ivs = _check(intervals, alignment)
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


def max_live_bytes(intervals: Sequence[tuple[int, int, int]]) -> int:
    """The most bytes live at one step of the schedule (a lower bound on any arena)."""
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
    intervals: Sequence[tuple[int, int, int]], offsets: Sequence[int], alignment: int
) -> None:
    """Raise ValueError unless every offset is aligned and no two buffers live together
    share a byte (what the `lir.arena` verifier proves on the IR)."""
    ivs = _check(intervals, alignment)
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
            ):
                raise ValueError(f"buffers {j} and {i} are live together and share bytes")


__all__ = [
    "Interval",
    "align_up",
    "arena_bytes",
    "check_plan",
    "max_live_bytes",
    "plan_greedy_by_size",
    "plan_naive",
]
