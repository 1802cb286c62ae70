"""`lir-parallelize`: decide, in lir, which kernels split their work across threads and
where the threads of a call must wait for each other.

Every thread of a call runs the whole entry with its id `part` of `parts` (see
`rlx_mlir.core.abi`). A kernel is *parallel* when it has a partitioned builder
(`partitioned_builders()` of `rlx_mlir.passes.lir_to_llvm.kernels`; a checked kernel with
one checks all its data in every part, so thread 0's status stands) and does at least
`min-work` work
(`estimate_work`); the pass marks it with the discardable unit attribute `rlx.parallel`.
Every other kernel is *serial*: thread 0 runs it alone.

A `lir.barrier` goes between two consecutive kernels unless both are serial (thread 0
then wrote what it reads next), or both are parallel and the later one is independent of
every kernel since the last barrier (option `hazards-only`, on by default): it reads no
byte they write and writes no byte they read or write (`conflict`; a slot's bytes are its
planned range of the arena, a view's those of its source, and distinct function
arguments never alias). Such a kernel is split across the threads even below `min-work`
(it joins their region: no barrier either way). Two products of one input of different
schemes (q/k and a v of another quantization) then run one after the other in each
thread with no wait between. Its kind says who waits: between two parallel kernels a
full barrier (every thread); before a serial kernel a `gather` (only thread 0 runs next,
so only it waits for the others' shares; they go on to the next barrier); after a serial
kernel a `release` (only thread 0 wrote since the last barrier, so the others wait for it
and it waits for none). When the last kernel is parallel a `gather` ends the function, so
that when thread 0 returns every thread's share is written (after a serial last kernel,
the `gather` before it did that). For example, with `%x` large and `%s` small:

```mlir
lir.elementwise exp ins(%x : ...) outs(%t : ...) {rlx.parallel}
lir.barrier
lir.elementwise neg ins(%t : ...) outs(%out0 : ...) {rlx.parallel}
lir.barrier "gather"
lir.elementwise abs ins(%s : ...) outs(%out1 : ...)
func.return
```

Small kernels over `?` rows (`row_split_runs`): a run of kernels too small to split,
between two that split, is split too when each of its kernels splits the same `?` rows
the same way (`split_rows`) and any two of them touch common bytes only row for row
(`same_rows`: each thread then reads only rows it wrote itself). The run needs no barrier
inside and stands between two full barriers where a gather and a release stood: a decode
step's single row runs on one thread as before, a prefill's rows on every thread (Gemma
3's per-head q/k norms, ropes and k's cache insert). lir-plan-arena keeps the buffers
of such a run live to its end, so no kernel of it writes bytes another still reads.

In a one-sided barrier the threads that need not wait only announce their arrival (or,
for thread 0 in a release, only publish it) and go on: a decode step alternates parallel
matmuls with small serial kernels, so most of its barriers are one-sided.

`convert-lir-to-llvm` then lowers marked kernels with their partitioned builder, the
others through serial wrappers, and each `lir.barrier` to a call of `rlx_barrier`. The
pass runs on planned lir (after `lir-plan-arena`, `lir-pack-weights`); it is idempotent:
a function that already has barriers is left alone. Barriers touch no memory and the
kernels keep their order; the slots' live ranges (positions in the planned schedule,
which the `lir.arena` verifier reads) move with their ops to the new positions.
"""

from __future__ import annotations

from dataclasses import dataclass

from xdsl.context import Context
from xdsl.dialects import func
from xdsl.dialects.builtin import IntegerAttr, MemRefType, ModuleOp, UnitAttr, i64
from xdsl.ir import Block, Operation, SSAValue
from xdsl.passes import ModulePass
from xdsl.utils.exceptions import PassFailedException

from rlx_mlir.core.abi import PARALLEL
from rlx_mlir.core.dtypes import element_bytes
from rlx_mlir.core.shape_inference import UNKNOWN, Shape, numel
from rlx_mlir.dialects import lir
from rlx_mlir.dialects.common import shape_of
from rlx_mlir.passes.lir_to_llvm.dynamic import is_dynamic, leading_symbols, memref_operands
from rlx_mlir.passes.lir_to_llvm.kernels import partitioned_builders, reads_dims
from rlx_mlir.passes.utils import require_lowered

PARALLEL_MIN_WORK = 1 << 18
"""A kernel is split across threads only when it does at least this much work (about
25-50 µs on one core): waking another thread costs ~10 µs."""


def estimate_work(op: Operation) -> int:
    """Rough work of a kernel (multiply-adds or elements touched), to decide whether
    splitting it across threads pays. A `?` dim counts as 1 (one decoded token: a kernel
    is split when it pays there too), except the keys of an attention, which a decode
    step reads up to the cache's capacity (counted as 4096)."""
    outs = op.outs if isinstance(op, lir.KernelOp) else op.operands[-1:]
    ins = [v for v in op.operands if isinstance(v.type, MemRefType) and v not in outs]
    out = max(_numel(v) for v in outs)
    if isinstance(op, lir.MatmulOp | lir.FusedMatmulOp | lir.DequantMatmulOp):
        k = shape_of(op.operands[0])[-1]
        return out * (1 if k == UNKNOWN else k)  # a `?` K (a product over S) counts 1
    if isinstance(op, lir.SharedInputMatmulOp):  # every product, K each
        return sum(_numel(o) for o in outs) * shape_of(op.x)[-1]
    if isinstance(op, lir.AttentionOp):
        keys = shape_of(op.operands[1])[-2]
        keys = DECODE_KEYS if keys == UNKNOWN else keys
        # a sliding window reads at most `window` keys a row
        return out * (keys if op.window is None else min(keys, op.window.value.data))
    if isinstance(op, lir.SlotAttentionOp):  # a row reads up to a slot's capacity
        keys = shape_of(op.keys)[1]
        return out * (keys if op.window is None else min(keys, op.window.value.data))
    return max(out, *(_numel(v) for v in ins)) if ins else out


DECODE_KEYS = 4096
"""The keys an attention over a KV cache (`?` keys) is assumed to read."""


def _numel(value: SSAValue) -> int:
    return numel([1 if d == UNKNOWN else d for d in shape_of(value)])


def is_parallel(op: Operation) -> bool:
    """Whether `op` is a kernel marked by lir-parallelize to split its work across threads."""
    return PARALLEL in op.attributes


def splits(op: lir.KernelOp, min_work: int) -> bool:
    """Whether splitting `op` across threads is possible and pays."""
    return type(op) in partitioned_builders() and estimate_work(op) >= min_work


def parallelize(fn: func.FuncOp, min_work: int = PARALLEL_MIN_WORK,
                hazards_only: bool = True) -> None:
    """Mark the parallel kernels of `fn` and insert its barriers (see the module doc)."""
    block = fn.body.block
    if any(isinstance(op, lir.BarrierOp) for op in block.ops):
        return  # already parallelized
    schedule = list(block.ops)
    by_rows = row_split_runs(schedule, min_work) if hazards_only else set()
    previous_parallel: bool | None = None
    window: list[lir.KernelOp] = []  # the parallel kernels since the last barrier
    for op in schedule:
        if not isinstance(op, lir.KernelOp | lir.RegionOp):
            continue
        # A region op (scan) is serial: its body's kernels run on thread 0, in order.
        parallel = isinstance(op, lir.KernelOp) and (splits(op, min_work) or op in by_rows)
        free = bool(hazards_only and previous_parallel and isinstance(op, lir.KernelOp)
                    and type(op) in partitioned_builders()
                    and not any(conflict(earlier, op) for earlier in window))
        # a kernel independent of the parallel ones since the last barrier is split too,
        # however small: it joins their region, where it needs no barrier
        parallel = parallel or free
        if parallel:
            op.attributes[PARALLEL] = UnitAttr()
        if free:
            window.append(op)
        else:
            if previous_parallel is not None and (previous_parallel or parallel):
                block.insert_op_before(lir.BarrierOp(_barrier_kind(previous_parallel, parallel)),
                                       op)
            window = [op] if parallel and isinstance(op, lir.KernelOp) else []
        previous_parallel = parallel
    if previous_parallel:
        block.insert_op_before(lir.BarrierOp("gather"), block.last_op)
    _renumber_live_ranges(block, schedule)


@dataclass(frozen=True)
class Extent:
    """The bytes a buffer may cover: [start, stop) of `root` (a function argument or the
    arena; stop None: to its end). Distinct function arguments never alias (the kernels'
    pointers are `noalias` on that assumption too)."""

    root: SSAValue
    start: int = 0
    stop: int | None = None

    def overlaps(self, other: Extent) -> bool:
        return (self.root is other.root
                and (self.stop is None or other.start < self.stop)
                and (other.stop is None or self.start < other.stop))


def extent(buffer: SSAValue) -> Extent:
    """Where `buffer` lies: an arena slot's planned bytes (a `?` dim at its symbol's
    bound); a view, all of its source's; anything else, all of itself."""
    owner = buffer.owner
    if isinstance(owner, lir.ViewOp):
        return extent(owner.source)
    if not isinstance(owner, lir.SlotOp):
        return Extent(buffer)
    start = owner.offset.value.data
    arena, bounds = owner.arena.owner, {}
    if isinstance(arena, lir.ArenaOp) and arena.max_dims is not None:
        bounds = {name: attr.value.data for name, attr in arena.max_dims.data.items()
                  if isinstance(attr, IntegerAttr)}
    assert isinstance(buffer.type, MemRefType)
    try:
        size = lir.byte_size(buffer.type, lir.buffer_dims(buffer), bounds)
    except (ValueError, KeyError):  # no bound known: the rest of the arena
        return Extent(owner.arena, start)
    return Extent(owner.arena, start, start + size)


def conflict(earlier: lir.KernelOp, later: lir.KernelOp) -> bool:
    """Whether `later` may not start before every thread has finished `earlier`: it reads
    or writes bytes `earlier` writes, or writes bytes `earlier` reads, other than the rows
    each thread covers itself in both (`same_rows`)."""
    def footprint(op: lir.KernelOp) -> tuple[list[SSAValue], list[SSAValue]]:
        reads = [v for v in op.operands if isinstance(v.type, MemRefType) and v not in op.outs]
        return reads, list(op.outs)

    def crosses(a: SSAValue, b: SSAValue) -> bool:
        return extent(a).overlaps(extent(b)) and not same_rows(earlier, a, later, b)

    (reads_a, writes_a), (reads_b, writes_b) = footprint(earlier), footprint(later)
    return (any(crosses(w, x) for w in writes_a for x in reads_b + writes_b)
            or any(crosses(r, w) for r in reads_a for w in writes_b))


def split_rows(op: lir.KernelOp) -> tuple[str, ...] | None:
    """The symbols of the `?` rows that `op`'s partitioned kernel splits, part p of P
    taking rows [R·p/P, R·(p+1)/P) of their product R: a row-driven kernel
    (`dynamic.build_row_driver`), `lir.rope` (its rows of x) and `lir.insert_rows` (its
    rows). None for any other kernel, and where a static dim > 1 is among the rows."""
    if type(op) not in partitioned_builders() or not is_dynamic(op):
        return None
    if isinstance(op, lir.RopeOp):
        rows = lir.buffer_dims(op.out)[:-1]
    elif isinstance(op, lir.InsertRowsOp):
        rows = lir.buffer_dims(op.rows)[:1]
    elif not reads_dims(op):
        out = lir.buffer_dims(op.outs[0])
        rows = out[:leading_symbols(out)]
    else:
        return None
    if not rows or any(not isinstance(d, str) and d != 1 for d in rows):
        return None
    return tuple(d for d in rows if isinstance(d, str))


def _rows_of(op: lir.KernelOp, buffer: SSAValue) -> tuple[Extent, int] | None:
    """Where `op`'s parts access `buffer` by the rows `split_rows(op)` (its extent and the
    bytes of a row); None if not so: a buffer led by other dims, rope's cos/sin tables
    (read at a row's position), the cache insert_rows writes at an offset."""
    rows = split_rows(op)
    if rows is None or buffer not in memref_operands(op):
        return None
    if isinstance(op, lir.RopeOp) and buffer not in (op.x, op.out):
        return None
    if isinstance(op, lir.InsertRowsOp) and buffer is not op.rows:
        return None
    dims: Shape = lir.buffer_dims(buffer)
    lead = leading_symbols(dims)
    if lead <= 0 or any(not isinstance(d, str) and d != 1 for d in dims[:lead]):
        return None
    if tuple(d for d in dims[:lead] if isinstance(d, str)) != rows:
        return None
    assert isinstance(buffer.type, MemRefType)
    return extent(buffer), numel(dims[lead:]) * element_bytes(buffer.type.get_element_type())


def same_rows(first: lir.KernelOp, a: SSAValue, second: lir.KernelOp, b: SSAValue) -> bool:
    """Whether every thread's part of `second` touches in `b` only bytes its own part of
    `first` touches in `a`: both kernels split the same `?` rows, and the two buffers are
    the same bytes, row for row."""
    rows_a = _rows_of(first, a)
    return (rows_a is not None and rows_a == _rows_of(second, b)
            and split_rows(first) == split_rows(second))


def row_split_runs(schedule: list[Operation], min_work: int) -> set[lir.KernelOp]:
    """Small kernels over `?` rows to split across threads anyway: each run of kernels too
    small to split (`splits`) between two that split, when every kernel of the run splits
    the same rows (`split_rows`) and no two of them conflict (`same_rows` excepted). The
    run is then one region between two full barriers, where thread 0 alone ran it between
    a gather and a release: as many barriers, and a prefill's rows split across threads
    (Gemma 3's per-head q/k norms, ropes and cache insert)."""
    chosen: set[lir.KernelOp] = set()
    run: list[lir.KernelOp] = []
    bounded = False  # a splitting kernel comes before the run
    for op in schedule:
        if isinstance(op, lir.RegionOp):
            run, bounded = [], False
        elif isinstance(op, lir.KernelOp) and splits(op, min_work):
            if bounded and run and _splits_rows_alike(run):
                chosen.update(run)
            run, bounded = [], True
        elif isinstance(op, lir.KernelOp):
            run.append(op)
    return chosen


def _splits_rows_alike(run: list[lir.KernelOp]) -> bool:
    rows = {split_rows(op) for op in run}
    return (len(rows) == 1 and None not in rows
            and not any(conflict(a, b) for i, a in enumerate(run) for b in run[i + 1:]))


def _barrier_kind(before_parallel: bool, after_parallel: bool) -> str | None:
    """The barrier between a kernel and the next, not both serial (see the module doc)."""
    if before_parallel and after_parallel:
        return None
    return "gather" if before_parallel else "release"


def _renumber_live_ranges(block: Block, schedule: list[Operation]) -> None:
    """Move every arena slot's live range (positions counted from its `lir.arena`, see
    lir-plan-arena) from `schedule`, the ops before the barriers went in, to the same ops
    in `block` now, so the `lir.arena` verifier still finds each in-place kernel at the
    position where its two slots meet."""
    now = list(block.ops)
    for arena in (op for op in schedule if isinstance(op, lir.ArenaOp)):
        before = schedule[schedule.index(arena):]
        position = {op: i for i, op in enumerate(now[now.index(arena):])}
        for use in list(arena.result.uses):
            slot = use.operation
            if not isinstance(slot, lir.SlotOp):
                continue
            for field in ("live_start", "live_end"):
                old = slot.properties[field]
                assert isinstance(old, IntegerAttr)
                if 0 <= old.value.data < len(before):
                    slot.properties[field] = IntegerAttr(position[before[old.value.data]], i64)


@dataclass(frozen=True)
class LirParallelizePass(ModulePass):
    """Marks kernels split across threads (`rlx.parallel`) and inserts `lir.barrier`s."""

    name = "lir-parallelize"

    min_work: int = PARALLEL_MIN_WORK
    """The least work (`estimate_work`) for which a kernel is split across threads."""
    hazards_only: bool = True
    """Between two parallel kernels, a barrier only where the later one touches bytes an
    earlier one since the last barrier writes, or writes bytes it reads (`conflict`);
    false: a barrier between every two."""

    def apply(self, ctx: Context, op: ModuleOp) -> None:
        if self.min_work < 1:
            raise PassFailedException(f"lir-parallelize: min-work must be >= 1, got {self.min_work}")
        require_lowered(op, self.name, "hir", "mir", "lir.alloc")
        for fn in op.walk():
            if isinstance(fn, func.FuncOp) and not fn.is_declaration:
                parallelize(fn, self.min_work, self.hazards_only)
