"""`lir-plan-arena`: every `lir.alloc` of a function becomes a slot of one `lir.arena`.

The schedule is the order of the top-level ops of the function body, numbered as they
stand after the pass (the `lir.arena` inserted at the top is op 0, so a slot replacing the
alloc at op i - 1 of the input is op i). A buffer is live from its first use (its first
writer in destination-passing style; the alloc itself when it has no use) to its last
use, inclusive; the uses of `lir.view`s of the buffer (and views of those) count as uses
of the buffer, the views themselves do not (they touch no memory). A use inside a nested
region counts at the top-level op holding it.

Each buffer takes `byte_size` of its memref rounded up to the alignment; the offsets come
from `passes/arena_planner.py` (`greedy-by-size`, or `naive` without reuse). The arena
records the plan's size, alignment, strategy and the `max_live_bytes` lower bound; every
alloc becomes `lir.slot %arena[offset] live [start, end]` of the same type, and the
`lir.arena` verifier re-proves the plan (bounds, alignment, no overlap of slots live
together, in-place pairs aside). A function without allocs gets no arena (the dialect
has no empty arena).

In-place reuse (option `inplace`, default on, `greedy-by-size` only): an elementwise
kernel (`lir.elementwise`, `lir.fused_elementwise`) at position k whose `out` is an alloc
first used there may write into the bytes of one of its inputs when that input is an
alloc (not a function argument, not a view) of exactly `out`'s memref type whose last
use is k, and no other operand of the kernel is a view of it. Same shape and element
type mean the same index map, so the kernel reads `in[i]` before it writes `out[i]` over
it. The two buffers (and chains of them) get one offset; their slots overlap at k only,
which the `lir.arena` verifier accepts for exactly this pattern.

A buffer used inside a run of two or more kernels that split the same `?` rows
(`row_runs`; `lir_parallelize.split_rows`) stays live to the run's end
(`held_through_row_runs`): lir-parallelize may split such a run across threads with no
barrier inside, where a kernel must not write bytes another thread still reads.

`plan_function` exposes the plan (sizes, offsets, in-place pairs, `arena_bytes`,
`naive_bytes` = the sum of the aligned buffer sizes, `max_live_bytes`) for the Python API.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field

from xdsl.context import Context
from xdsl.dialects import func
from xdsl.dialects.builtin import DictionaryAttr, IntegerAttr, MemRefType, ModuleOp, i64
from xdsl.ir import Block, Operation, SSAValue
from xdsl.passes import ModulePass
from xdsl.pattern_rewriter import (
    PatternRewriter,
    PatternRewriteWalker,
    RewritePattern,
    op_type_rewrite_pattern,
)
from xdsl.rewriter import InsertPoint
from xdsl.utils.exceptions import PassFailedException

from rlx_mlir.core.abi import MAX_DIMS
from rlx_mlir.dialects import lir
from rlx_mlir.dialects.rlx import ArenaStrategy
from rlx_mlir.passes import arena_planner as planner
from rlx_mlir.passes.lir_parallelize import split_rows
from rlx_mlir.passes.utils import fn_symbols, parse_max_dims, require_lowered, symbol_bounds

PLANNERS = {
    ArenaStrategy.GREEDY_BY_SIZE: planner.plan_greedy_by_size,
    ArenaStrategy.NAIVE: planner.plan_naive,
}
"""The offset planner of each strategy."""


@dataclass(frozen=True)
class ArenaPlan:
    """The arena plan of one function: per alloc (in program order) its aligned size,
    live range and offset, and the totals."""

    allocs: tuple[lir.AllocOp, ...]
    """The planned buffers, in program order."""
    intervals: tuple[planner.Interval, ...]
    """(aligned size in bytes, live start, live end) of each alloc."""
    offsets: tuple[int, ...]
    """Byte offset of each alloc in the arena."""
    alignment: int
    strategy: ArenaStrategy
    inplace: tuple[tuple[int, int], ...]
    """In-place pairs `(src, dst)` (alloc indices): `dst` took the bytes of `src`."""
    arena_bytes: int
    """The arena the plan needs."""
    naive_bytes: int
    """The sum of the aligned buffer sizes (the arena without reuse)."""
    max_live_bytes: int
    """The most bytes live at once (an in-place pair counted once): no plan needs less."""
    bounds: Mapping[str, int] = field(default_factory=dict)
    """The symbol bounds the buffers with `?` dims are sized at (empty: all static)."""

    @property
    def sizes(self) -> tuple[int, ...]:
        return tuple(iv.size for iv in self.intervals)


def _top_level(block: Block, op: Operation) -> Operation:
    ancestor = block.find_ancestor_op_in_block(op)
    assert ancestor is not None, op
    return ancestor


def live_range(buffer: SSAValue, block: Block, index: dict[Operation, int]) -> tuple[int, int]:
    """[first, last] schedule index of the uses of `buffer`, through views; the index of
    its defining op when nothing uses it."""
    steps: list[int] = []
    pending = [buffer]
    while pending:
        value = pending.pop()
        for use in value.uses:
            user = _top_level(block, use.operation)
            if isinstance(user, lir.ViewOp) and user is use.operation:
                pending.append(user.result)
            else:
                steps.append(index[user])
    if not steps:
        owner = buffer.owner
        assert isinstance(owner, Operation)
        steps.append(index[owner])
    return min(steps), max(steps)


def _root(value: SSAValue) -> SSAValue:
    """The buffer a chain of `lir.view`s aliases (the value itself when not a view)."""
    while isinstance(owner := value.owner, lir.ViewOp):
        value = owner.source
    return value


INPLACE_KERNELS = (lir.ElementwiseOp, lir.FusedElementwiseOp)
"""Kernels that read `inputs[j][i]` before writing `out[i]` with one index map per input."""


def inplace_pairs(
    block: Block,
    allocs: list[lir.AllocOp],
    intervals: list[planner.Interval],
    index: dict[Operation, int],
) -> list[tuple[int, int]]:
    """`(src, dst)` alloc indices where an elementwise kernel may write `out` (alloc `dst`)
    over its input alloc `src` (see the module doc)."""
    buffers = {alloc.result: i for i, alloc in enumerate(allocs)}
    pairs: list[tuple[int, int]] = []
    for op in block.ops:
        if not isinstance(op, INPLACE_KERNELS):
            continue
        step = index[op]
        dst = buffers.get(op.out)
        if dst is None or intervals[dst].start != step or op.out in op.inputs:
            continue
        for value in op.inputs:
            src = buffers.get(value)
            if (
                src is not None
                and value.type == op.out.type
                and lir.buffer_dims(value) == lir.buffer_dims(op.out)
                and intervals[src].end == step
                and all(v is value or _root(v) is not value for v in op.operands)
            ):
                pairs.append((src, dst))
                break
    return pairs


def row_runs(block: Block, index: dict[Operation, int]) -> list[tuple[int, int]]:
    """[first, last] schedule positions of each run of two or more kernels in a row (other
    ops aside) that split the same `?` rows (`lir_parallelize.split_rows`)."""
    runs: list[tuple[int, int]] = []
    rows, first, last, count = None, 0, 0, 0
    for op in block.ops:
        if not isinstance(op, lir.KernelOp | lir.RegionOp):
            continue
        here = split_rows(op) if isinstance(op, lir.KernelOp) else None
        if here is not None and here == rows:
            last, count = index[op], count + 1
            continue
        if count >= 2:
            runs.append((first, last))
        rows, first, last, count = here, index[op], index[op], 1
    if count >= 2:
        runs.append((first, last))
    return runs


def held_through_row_runs(block: Block, allocs: list[lir.AllocOp],
                          intervals: list[planner.Interval], index: dict[Operation, int],
                          pairs: list[tuple[int, int]]) -> list[planner.Interval]:
    """The intervals with every buffer used inside a `row_runs` run live to its end: no
    later kernel of the run gets bytes an earlier one reads, so lir-parallelize can split
    the run's rows across threads without a barrier inside (each thread then touches the
    same rows of the same bytes in each kernel). An in-place pair's input keeps its end
    (its output holds the bytes on)."""
    runs = row_runs(block, index) if allocs else []
    sources = {src for src, _ in pairs}
    held = list(intervals)
    for i, interval in enumerate(intervals):
        for first, last in runs:
            if i not in sources and first <= interval.end < last:
                held[i] = interval._replace(end=last)
    return held


def check_options(alignment: int, strategy: ArenaStrategy | str) -> ArenaStrategy:
    """The strategy as an `ArenaStrategy`; a PassFailedException names a bad option."""
    if alignment < 1 or alignment & (alignment - 1):
        raise PassFailedException(
            f"lir-plan-arena: alignment: expected a power of two >= 1, got {alignment}"
        )
    try:
        return ArenaStrategy(strategy)
    except ValueError:
        known = ", ".join(s.value for s in ArenaStrategy)
        raise PassFailedException(
            f"lir-plan-arena: strategy: expected one of {known}, got {strategy!r}"
        ) from None


def plan_function(
    func_op: func.FuncOp,
    alignment: int = 64,
    strategy: ArenaStrategy | str = ArenaStrategy.GREEDY_BY_SIZE,
    inplace: bool = True,
    max_dims: Mapping[str, int] | None = None,
) -> ArenaPlan:
    """Plan the top-level `lir.alloc`s of `func_op` into one arena (see the module doc);
    `inplace` lets `greedy-by-size` give an elementwise kernel's out the bytes of an input
    that dies there. A buffer with `?` dims is sized at the bounds of its symbols
    (`symbol_bounds(func_op, max_dims)`), so the plan holds for every binding within them."""
    strategy = check_options(alignment, strategy)
    bounds = symbol_bounds(func_op, max_dims or {})
    allocs: list[lir.AllocOp] = []
    intervals: list[planner.Interval] = []
    pairs: list[tuple[int, int]] = []
    if not func_op.is_declaration:
        block = func_op.body.block
        # Schedule positions after the pass: the arena is op 0.
        index = {op: i + 1 for i, op in enumerate(block.ops)}
        for op in block.ops:
            if isinstance(op, lir.AllocOp):
                assert isinstance(op.result.type, MemRefType)
                size = planner.align_up(
                    lir.byte_size(op.result.type, lir.buffer_dims(op.result), bounds), alignment)
                allocs.append(op)
                intervals.append(planner.Interval(size, *live_range(op.result, block, index)))
            elif isinstance(op, lir.RegionOp):
                # The buffers of a scan body: live for the whole op (every step), so they
                # share no byte with each other nor with what the op reads or writes.
                for inner in op.walk():
                    if isinstance(inner, lir.AllocOp):
                        assert isinstance(inner.result.type, MemRefType)
                        size = planner.align_up(lir.byte_size(
                            inner.result.type, lir.buffer_dims(inner.result), bounds), alignment)
                        allocs.append(inner)
                        intervals.append(planner.Interval(size, index[op], index[op]))
        if inplace and strategy is ArenaStrategy.GREEDY_BY_SIZE:
            pairs = inplace_pairs(block, allocs, intervals, index)
        intervals = held_through_row_runs(block, allocs, intervals, index, pairs)
    if strategy is ArenaStrategy.GREEDY_BY_SIZE:
        offsets = planner.plan_greedy_by_size(intervals, alignment, pairs)
    else:
        offsets = PLANNERS[strategy](intervals, alignment)
    return ArenaPlan(
        allocs=tuple(allocs),
        intervals=tuple(intervals),
        offsets=tuple(offsets),
        alignment=alignment,
        strategy=strategy,
        inplace=tuple(pairs),
        arena_bytes=planner.arena_bytes(intervals, offsets),
        naive_bytes=sum(iv.size for iv in intervals),
        max_live_bytes=planner.max_live_bytes(intervals, pairs),
        bounds=bounds if any(not lir.is_static_buffer(a.result) for a in allocs) else {},
    )


def planned_bytes(func_op: func.FuncOp) -> tuple[int, int, int]:
    """(arena_bytes, naive_bytes, max_live_bytes) of a function the pass has planned, read
    back from its `lir.arena`s and slots; (0, 0, 0) without an arena."""
    arena_total = naive = peak = 0
    for op in func_op.walk():
        if isinstance(op, lir.ArenaOp):
            alignment = op.alignment.value.data
            arena_total += op.size.value.data
            if op.max_live_bytes is not None:
                peak += op.max_live_bytes.value.data
            for use in op.result.uses:
                slot = use.operation
                assert isinstance(slot, lir.SlotOp) and isinstance(slot.result.type, MemRefType)
                naive += planner.align_up(slot.bounded_bytes(), alignment)
    return arena_total, naive, peak


@dataclass
class PlanArena(RewritePattern):
    """A function with allocs -> one `lir.arena` at the top of its body, each alloc an
    `lir.slot` of it at the planned offset."""

    alignment: int
    strategy: str
    inplace: bool = True
    max_dims: Mapping[str, int] = field(default_factory=dict)

    @op_type_rewrite_pattern
    def match_and_rewrite(self, op: func.FuncOp, rewriter: PatternRewriter, /) -> None:
        plan = plan_function(op, self.alignment, self.strategy, self.inplace, self.max_dims)
        if fn_symbols(op):  # the bounds a call is checked against, with or without an arena
            bounds = symbol_bounds(op, self.max_dims)
            op.attributes[MAX_DIMS] = DictionaryAttr({k: IntegerAttr(v, i64) for k, v in sorted(bounds.items())})
        if not plan.allocs:
            return
        arena = lir.ArenaOp(plan.arena_bytes, plan.alignment, plan.strategy, plan.max_live_bytes,
                            plan.bounds)
        arena.result.name_hint = "arena"
        rewriter.insert(arena, InsertPoint.at_start(op.body.block))
        for alloc, iv, offset in zip(plan.allocs, plan.intervals, plan.offsets, strict=True):
            assert isinstance(alloc.result.type, MemRefType)
            slot = lir.SlotOp(arena, alloc.result.type, offset, iv.start, iv.end, alloc.dims and
                              lir.buffer_dims(alloc.result))
            rewriter.replace(alloc, slot)


@dataclass(frozen=True)
class LirPlanArenaPass(ModulePass):
    """Plan every function's allocs into one arena (docs/semantics.md "The pipeline's order")."""

    name = "lir-plan-arena"

    alignment: int = 64
    """Every slot offset (and every buffer size) is a multiple of it (a power of two)."""

    strategy: str = ArenaStrategy.GREEDY_BY_SIZE.value
    """`greedy-by-size` (reuse the bytes of dead buffers) or `naive` (no reuse)."""

    inplace: bool = True
    """With `greedy-by-size`: an elementwise kernel may write its out over an input of the
    same memref type that dies there (`naive` never reuses bytes)."""

    max_dims: str = ""
    """Bounds of the symbols, `S=2048,T=2048`: buffers with `?` dims are planned at them
    (a symbol not named: its KV-cache capacity, else 4096)."""

    def apply(self, ctx: Context, op: ModuleOp) -> None:
        require_lowered(op, self.name, "hir", "mir")
        check_options(self.alignment, self.strategy)
        bounds = parse_max_dims(self.max_dims, self.name)
        PatternRewriteWalker(
            PlanArena(self.alignment, self.strategy, self.inplace, bounds), apply_recursively=False
        ).rewrite_module(op)


__all__ = [
    "INPLACE_KERNELS",
    "PLANNERS",
    "ArenaPlan",
    "LirPlanArenaPass",
    "PlanArena",
    "check_options",
    "inplace_pairs",
    "live_range",
    "plan_function",
    "planned_bytes",
]
