"""Kernels of the reduction family: `lir.reduce`, `lir.softmax`, `lir.rms_norm`, `lir.layer_norm`.

Each builder is `build_X(op, name, vector_width) -> llvm.FuncOp` over one pointer per memref
operand (the `out` buffer last). Static shapes are baked in. Every builder is also
`along_symbols` (record.py): where the op works along a `?` dim, or a symbol sits behind a
static dim, the kernel takes the symbols' sizes (dynamic.py's ABI) and the same building
blocks run over run-time sizes (loops with run-time bounds, all of their vector, remainder
and scalar-tail loops emitted; see `_build_dynamic_reduce`, `build_softmax`,
`_norm_setup`); elsewhere the row driver serves the `?` rows.

A `Reduction` is a fold of f32 values (scalars or vector<W x f32>) into one or more
accumulators. The building blocks, all over vectors with scalar tails:

- `_row_reduce`: reduce a contiguous run of elements with several independent sets of
  vector accumulators (ILP), merged as a tree, reduced across lanes with the builder's
  shuffle trees (`hsum`/`hmax`/`hmin`), then a scalar tail.
- `_outer_reduce`: out[j] = reduce_i x[i, j] over an outer axis, vectorized along the
  contiguous kept dim j, rows in blocks combined in registers (sequential streams, one
  update of `out` per block).
- `_row_map`: a vector loop plus scalar tail calling a body on each chunk.

Multiply-adds are `llvm.fmuladd` (`vmath.muladd`): an FMA where the target has one, never
a libcall on targets without.

max/min accumulate with a plain compare+select (one `maxps`/`minps`) and keep a NaN mask
(`fcmp uno`, or-ed), so the result is NaN whenever an input is, like numpy, at a third of
the cost of `llvm.maximum` (which also orders signed zeros).

`lir.reduce` first canonicalizes its iteration space: size-1 dims are dropped and adjacent
dims that are both reduced or both kept are merged, leaving alternating groups. The groups
`[R]` and `[K, R]` use `_row_reduce` per row, `[R, K]` and `[K, R, K]` use `_outer_reduce`
per batch, and every other pattern (e.g. axes (0, 2) of a rank-3 input) initializes `out`
with the identity and combines into it with the same two building blocks in nested loops.

Partitioned variants (`partitioned=True`, for multi-threaded graphs) take two more i64
arguments `(part, parts)` and run the serial code on part p's share
[count·p/parts, count·(p+1)/parts) of independent work items: whole rows for the norms,
softmax along the last axis and `[K, R]` reductions; (outer index, column chunk) items
for softmax along another axis and `[R, K]`/`[K, R, K]` reductions (chunks of whole
vectors, narrow enough to give every part work); units of W elements for a copy. A full
reduction `[R]` and the general patterns run serially on part 0.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass

from xdsl.dialects import llvm
from xdsl.dialects.builtin import IntegerType, VectorType, f32, i64
from xdsl.ir import Operation, SSAValue

from rlx_mlir.core import shape_inference as rules
from rlx_mlir.dialects import lir
from rlx_mlir.dialects.common import shape_of
from rlx_mlir.passes.lir_to_llvm import vmath
from rlx_mlir.passes.lir_to_llvm.builder import PTR, KernelBuilder, Value
from rlx_mlir.passes.lir_to_llvm.dynamic import (
    DynamicKernelError,
    RuntimeDims,
    is_dynamic,
    kernel_symbols,
    operand_shapes,
    runtime_rows,
)
from rlx_mlir.passes.lir_to_llvm.elementwise import Share
from rlx_mlir.passes.lir_to_llvm.record import kernel

UNROLL = 4
"""Independent sets of vector accumulators of a contiguous reduction (hide the latency)."""

Accs = list[SSAValue]
Chunk = Callable[[SSAValue, bool], SSAValue]
"""(element offset, vector?) -> the loaded (and transformed) value(s) at that offset."""


@dataclass(frozen=True)
class Reduction:
    """A fold of f32 scalars or vectors into accumulators.

    `init(vector)` gives the initial accumulators (vectors or scalars), `step(accs, x)`
    folds a value in, `lift(x)` = step(init, x) without the identity operation, `merge`
    combines two sets of accumulators, `horizontal` turns vector accumulators into scalar
    ones, and `final` gives the result (scalar or per lane).
    """

    init: Callable[[bool], Accs]
    step: Callable[[Accs, SSAValue], Accs]
    lift: Callable[[SSAValue], Accs]
    merge: Callable[[Accs, Accs], Accs]
    horizontal: Callable[[Accs], Accs]
    final: Callable[[Accs], SSAValue] = lambda accs: accs[0]


def _const(kb: KernelBuilder, value: float, vector: bool) -> SSAValue:
    return kb.vconst(value) if vector else kb.fconst(value)


def fold(kb: KernelBuilder, identity: float, step: Callable[[SSAValue, SSAValue], SSAValue],
         horizontal: Callable[[SSAValue], SSAValue],
         merge: Callable[[SSAValue, SSAValue], SSAValue] | None = None,
         lift: Callable[[SSAValue], SSAValue] | None = None) -> Reduction:
    """A single-accumulator reduction; `merge` defaults to `step` (right for sum, max, ...),
    `lift` (step from the identity) to step(identity, x)."""
    merge2 = merge or step

    def lift_default(x: SSAValue) -> SSAValue:
        return step(_const(kb, identity, isinstance(x.type, VectorType)), x)

    lift1 = lift or lift_default
    return Reduction(
        init=lambda vector: [_const(kb, identity, vector)],
        step=lambda accs, x: [step(accs[0], x)],
        lift=lambda x: [lift1(x)],
        merge=lambda a, b: [merge2(a[0], b[0])],
        horizontal=lambda accs: [horizontal(accs[0])],
    )


def extremum(kb: KernelBuilder, kind: str) -> Reduction:
    """max or min: a plain compare+select accumulator (x86 `maxps`/`minps`, which drop
    NaNs) plus a mask of the NaNs seen, so that any NaN makes the result NaN."""
    is_max = kind == "max"
    predicate = "ogt" if is_max else "olt"

    def plain(a: SSAValue, b: SSAValue) -> SSAValue:
        return vmath.select(kb, vmath.fcmp(kb, predicate, a, b), a, b)

    def any_lane(mask: SSAValue) -> SSAValue:
        width = mask.type.get_shape()[0]  # type: ignore[attr-defined]
        return kb.icmp("ne", kb.bitcast(mask, IntegerType(width)), 0)

    def init(vector: bool) -> Accs:
        mask = vmath.mask_type(kb.vec if vector else kb.fconst(0.0).type)
        return [_const(kb, -math.inf if is_max else math.inf, vector), kb.constant(0, mask)]

    def is_nan(x: SSAValue) -> SSAValue:
        return vmath.fcmp(kb, "uno", x, x)

    return Reduction(
        init=init,
        step=lambda accs, x: [plain(accs[0], x), vmath.or_(kb, accs[1], is_nan(x))],
        lift=lambda x: [x, is_nan(x)],
        merge=lambda a, b: [plain(a[0], b[0]), vmath.or_(kb, a[1], b[1])],
        horizontal=lambda accs: [(kb.hmax if is_max else kb.hmin)(accs[0]), any_lane(accs[1])],
        final=lambda accs: vmath.select(kb, accs[1], math.nan, accs[0]),
    )


def reduction(kb: KernelBuilder, kind: str) -> Reduction:
    """The reduction of a `lir.reduce` kind (mean: the sum; the caller divides)."""
    if kind in ("sum", "mean"):
        return fold(kb, 0.0, kb.fadd, kb.hsum, lift=lambda x: x)
    if kind in ("max", "min"):
        return extremum(kb, kind)
    raise ValueError(f"unknown reduce kind {kind!r}")


def combine(kb: KernelBuilder, kind: str) -> Callable[[SSAValue, SSAValue], SSAValue]:
    """Combine two partial results of a kind (NaN-propagating for max/min)."""
    return {"sum": kb.fadd, "mean": kb.fadd, "max": kb.fmax, "min": kb.fmin}[kind]


def _prod(dims: Sequence[int]) -> int:
    return math.prod(dims)


def _times(kb: KernelBuilder, a: Value, b: Value) -> Value:
    """a · b, folded when both are Python ints (a run-time size is an i64 value)."""
    if isinstance(a, int) and isinstance(b, int):
        return a * b
    if (isinstance(a, int) and a == 0) or (isinstance(b, int) and b == 0):
        return 0
    return kb.mul(a, b)


def _identity(kind: str) -> float:
    return {"max": -math.inf, "min": math.inf}.get(kind, 0.0)


def _offset(kb: KernelBuilder, base: Value, i: Value) -> Value:
    """base + i, skipping additions of a constant 0."""
    if isinstance(base, int) and base == 0:
        return i
    if isinstance(i, int) and i == 0:
        return base
    return kb.add(kb.index(base), i)


# ----------------------------------------------------------------------------- building blocks


def _row_reduce(kb: KernelBuilder, n: Value, chunk: Chunk, red: Reduction,
                unroll: int = UNROLL) -> SSAValue:
    """red over chunk(i) for i in range(n), as a scalar."""
    return red.final(_row_accumulate(kb, n, chunk, red, unroll))


def _row_accumulate(kb: KernelBuilder, n: Value, chunk: Chunk, red: Reduction,
                    unroll: int = UNROLL) -> Accs:
    """The scalar accumulators of red over chunk(i) for i in range(n).

    Full vectors go through `unroll` independent sets of vector accumulators (then one set
    for the leftover vectors), merged as a tree and reduced across lanes; the scalar tail
    continues from those scalars. A run-time `n` (an i64) emits every loop (each may run
    zero times).
    """
    w = kb.vector_width
    dynamic = not isinstance(n, int)
    nvec = kb.round_down(n, w)
    accs: Accs
    if dynamic or nvec:
        u = unroll if dynamic else max(1, min(unroll, nvec // w))
        nmain = kb.round_down(n, u * w)
        init = red.init(True)
        k = len(init)
        with kb.loop(0, nmain, u * w, carried=init * u) as loop:
            carried = loop.carried
            loop.yield_(*[a for t in range(u) for a in red.step(
                carried[t * k:(t + 1) * k], chunk(_offset(kb, loop.iv, t * w), True))])  # type: ignore[arg-type]
        sets = [list(loop.results[t * k:(t + 1) * k]) for t in range(u)]
        if dynamic or nmain < nvec:
            with kb.loop(nmain, nvec, w, carried=sets[0]) as loop:
                loop.yield_(*red.step(loop.carried, chunk(loop.iv, True)))
            sets[0] = list(loop.results)
        while len(sets) > 1:
            sets = [red.merge(sets[t], sets[t + 1]) if t + 1 < len(sets) else sets[t]
                    for t in range(0, len(sets), 2)]
        accs = red.horizontal(sets[0])
    else:
        accs = red.init(False)
    if dynamic or nvec < n:
        with kb.loop(nvec, n, 1, carried=accs) as loop:
            loop.yield_(*red.step(loop.carried, chunk(loop.iv, False)))
        accs = list(loop.results)
    return accs


def _row_map(kb: KernelBuilder, n: Value, body: Callable[[SSAValue, bool], None],
             lo: Value = 0, hi: Value | None = None) -> None:
    """body(i, vector) for every vector chunk of range(lo, hi) (default: range(n)), then
    every scalar of the tail (`n` may be a run-time size)."""
    kb.sweep(lo, n if hi is None else hi, body,
             vectors=not isinstance(n, int) or n >= kb.vector_width)


# ----------------------------------------------------------------------------- partitioning


PART_ITEMS = 32
"""Work items a partitioned kernel aims for when it cuts columns into chunks."""

MIN_CHUNK_VECTORS = 4
"""The narrowest column chunk, in vectors: narrower ones read each row of a tall input
in runs too short to stream (a column sum of [4096, 512] in 16-column chunks takes
three times as long as serially)."""


def _kernel(name: str, pointers: int, vector_width: int,
            partitioned: bool) -> tuple[KernelBuilder, list[SSAValue], Share | None]:
    """A kernel over `pointers` pointers; partitioned, also (part, parts)."""
    kb = KernelBuilder(name, [PTR] * pointers + [i64, i64] * partitioned,
                       vector_width=vector_width)
    args = list(kb.args)
    return kb, args[:pointers], (args[pointers], args[pointers + 1]) if partitioned else None


def _share(kb: KernelBuilder, count: Value, share: Share | None) -> tuple[Value, Value]:
    """The items [first, last) of `count` this call computes (all of them when serial)."""
    return (0, count) if share is None else kb.part_range(count, *share)


def chunk_width(k: int, outer: int, w: int, cap: int | None = None) -> int:
    """The width of the column chunks of a partitioned kernel over `outer` independent
    rows of `k` columns: whole vectors (at least MIN_CHUNK_VECTORS), as wide as gives
    ~PART_ITEMS items in all, at most `cap`."""
    wanted = -(-PART_ITEMS // outer)
    width = -(-k // wanted)
    width = max(MIN_CHUNK_VECTORS * w, -(-width // w) * w)
    return min(k, width, cap or k)


ROW_BLOCK = 8
"""Rows of an outer-axis reduction combined in registers before one update of `out`."""


def _outer_reduce(kb: KernelBuilder, x: SSAValue, out: SSAValue, in_base: Value,
                  out_base: Value, nred: Value, k: Value, kind: str, divisor: float | None,
                  accumulate: bool = False, stride: Value | None = None,
                  cols: tuple[Value, Value | None] = (0, None)) -> None:
    """out[out_base + j] = kind-reduce_i x[in_base + i*stride + j] over i < nred, for j < k
    (stride defaults to k; combined with the present out[out_base + j] when `accumulate`;
    only for j in range(*cols) when given). Every size may be a run-time one; a run-time
    `nred` takes no divisor.

    Rows go in blocks of ROW_BLOCK: each block reads its rows as parallel sequential
    streams, vectorized along j, combines them as a tree in registers and updates `out`
    once (the first block stores). `out` (k floats) stays in cache between blocks.
    """
    red, comb = reduction(kb, kind), combine(kb, kind)
    stride = k if stride is None else stride
    single = isinstance(nred, int) and nred <= ROW_BLOCK  # one block: store the finished value

    def block(i0: Value, count: int, first: bool) -> None:
        def body(j: SSAValue, vec: bool) -> None:
            start = _offset(kb, in_base, _offset(kb, _times(kb, i0, stride), j))
            sets = [red.lift(kb.load(x, _offset(kb, start, _times(kb, r, stride)), vector=vec))
                    for r in range(count)]
            while len(sets) > 1:
                sets = [red.merge(sets[t], sets[t + 1]) if t + 1 < len(sets) else sets[t]
                        for t in range(0, len(sets), 2)]
            value = red.final(sets[0])
            at = _offset(kb, out_base, j)
            if not first:
                value = comb(kb.load(out, at, vector=vec), value)
            if single and divisor is not None:
                value = kb.fdiv(value, divisor)
            kb.store(value, out, at)
        _row_map(kb, k, body, *cols)

    if not isinstance(nred, int):
        # run-time rows: whole blocks, then one row at a time, combined into out
        assert divisor is None, "a run-time reduced length divides in the caller"
        if not accumulate:
            _fill(kb, out, out_base, k, _identity(kind), cols)
        full = kb.round_down(nred, ROW_BLOCK)
        with kb.loop(0, full, ROW_BLOCK) as loop:
            block(loop.iv, ROW_BLOCK, False)
        with kb.loop(full, nred) as loop:
            block(loop.iv, 1, False)
        return
    rows = min(ROW_BLOCK, nred)
    nfull = nred // rows
    rest = nred - nfull * rows
    block(0, rows, not accumulate)
    if nfull > 1:
        with kb.loop(rows, nfull * rows, rows) as loop:
            block(loop.iv, rows, False)
    if rest:
        block(nfull * rows, rest, False)
    if divisor is not None and not single:
        def scale(j: SSAValue, vec: bool) -> None:
            at = _offset(kb, out_base, j)
            kb.store(kb.fdiv(kb.load(out, at, vector=vec), divisor), out, at)
        _row_map(kb, k, scale, *cols)


def _fill(kb: KernelBuilder, out: SSAValue, base: Value, n: Value, value: float,
          cols: tuple[Value, Value | None] = (0, None)) -> None:
    """out[base + j] = value for j < n (only for j in range(*cols) when given)."""
    def body(j: SSAValue, vec: bool) -> None:
        kb.store(_const(kb, value, vec), out, _offset(kb, base, j))
    _row_map(kb, n, body, *cols)


# ----------------------------------------------------------------------------- lir.reduce


def reduce_groups(shape: Sequence[Value], axes: Sequence[int],
                  kb: KernelBuilder | None = None) -> list[tuple[Value, bool]]:
    """The canonical iteration space of a reduction: (size, reduced) groups, size-1 dims
    dropped, adjacent dims with the same role merged (so roles alternate). With `kb`,
    sizes may be run-time i64 values (a merged group's size is then their product)."""
    groups: list[tuple[Value, bool]] = []
    for i, d in enumerate(shape):
        if isinstance(d, int) and d == 1:
            continue
        red = i in axes
        if groups and groups[-1][1] == red:
            size = groups[-1][0]
            merged = size * d if kb is None else runtime_rows(kb, [size, d])  # type: ignore[operator]
            groups[-1] = (merged, red)
        else:
            groups.append((d, red))
    return groups


def _sized_kernel(op: Operation, name: str, vector_width: int, partitioned: bool
                  ) -> tuple[KernelBuilder, SSAValue, SSAValue, tuple[Value, ...], Share | None]:
    """A kernel over (x, out) with `?` dims (dynamic.py's ABI: an i64 size per symbol, then
    (part, parts) when partitioned): the builder, x, out, x's dims (ints or run-time sizes)
    and the share."""
    symbols = kernel_symbols(op)
    kb = KernelBuilder(name, [PTR] * 2 + [i64] * len(symbols) + [i64, i64] * partitioned,
                       vector_width=vector_width)
    x, out = kb.args[:2]
    dims = RuntimeDims.of(op, kb.args[2:2 + len(symbols)])
    share = (kb.args[-2], kb.args[-1]) if partitioned else None
    return kb, x, out, dims.shape(0), share


def _build_dynamic_reduce(op: lir.ReduceOp, name: str, vector_width: int,
                          partitioned: bool) -> llvm.FuncOp:
    """lir.reduce along a `?` axis (the others are row-driven, dynamic.py), over run-time
    group sizes: `[K, R]` a row reduction per row (a partitioned kernel splits the rows),
    `[R, K]` an outer reduction (split in column chunks of whole vectors), every other
    pattern the general one, serial on part 0. mean divides by the run-time count."""
    kb, x, out, shape, share = _sized_kernel(op, name, vector_width, partitioned)
    axes = rules.normalize_axes("axes", op.axes.get_values(), len(shape))
    kind = str(op.kind.data)
    groups = reduce_groups(shape, axes, kb)
    sizes, roles = [s for s, _ in groups], tuple(r for _, r in groups)
    count = runtime_rows(kb, [shape[a] for a in axes])
    divisor: Value | None = None
    if kind == "mean" and not (isinstance(count, int) and count == 1):
        divisor = float(count) if isinstance(count, int) else kb.sitofp(count, f32)
    if roles == (False, True):
        m, n = sizes
        with kb.loop(*_share(kb, m, share)) as rows:
            value = _row_reduce(kb, n, lambda i, vec: kb.load(
                x, _offset(kb, kb.mul(rows.iv, n), i), vector=vec), reduction(kb, kind))
            kb.store(value if divisor is None else kb.fdiv(value, divisor), out, rows.iv)
    elif roles == (True, False):
        nred, k = sizes
        w = vector_width
        cols: tuple[Value, Value | None] = (0, None)
        if share is not None:
            first, last = kb.part_range(kb.ceil_div(k, w), *share)
            cols = (kb.mul(first, w), kb.fold_min(kb.mul(last, w), k))
        static = isinstance(nred, int)
        _outer_reduce(kb, x, out, 0, 0, nred, k, kind, divisor if static else None,  # type: ignore[arg-type]
                      cols=cols)
        if not static:
            _divide(kb, out, k, divisor, cols)
    else:
        with _on_part0(kb, share):
            _reduce_general_or_copy(kb, x, out, shape, groups, kind, divisor)
    kb.ret()
    return kb.finish()


def _reduce_general_or_copy(kb: KernelBuilder, x: SSAValue, out: SSAValue,
                            shape: Sequence[Value], groups: list[tuple[Value, bool]],
                            kind: str, divisor: Value | None) -> None:
    """The general pattern, or a copy where only size-1 axes reduce."""
    if any(reduced for _, reduced in groups):
        _general_reduce(kb, x, out, groups, kind, divisor)
        return

    def copy(i: SSAValue, vec: bool) -> None:
        kb.store(kb.load(x, i, vector=vec), out, i)
    _row_map(kb, runtime_rows(kb, shape), copy)


@kernel(lir.ReduceOp, partitioned=True, runtime_dims=True, along_symbols=True)
def build_reduce(op: Operation, name: str, vector_width: int,
                 partitioned: bool = False) -> llvm.FuncOp:
    """lir.reduce: (x, out) over the canonical groups (see the module docstring)."""
    assert isinstance(op, lir.ReduceOp)
    if is_dynamic(op):
        return _build_dynamic_reduce(op, name, vector_width, partitioned)
    shape = shape_of(op.input)
    axes = rules.normalize_axes("axes", op.axes.get_values(), len(shape))
    kind = str(op.kind.data)
    kb, (x, out), share = _kernel(name, 2, vector_width, partitioned)
    red = reduction(kb, kind)
    count = _prod([shape[a] for a in axes])
    divisor = float(count) if kind == "mean" and count != 1 else None
    groups = reduce_groups(shape, axes)
    sizes = [s for s, _ in groups]
    roles = tuple(r for _, r in groups)
    w = vector_width

    def finish(v: SSAValue) -> SSAValue:
        return v if divisor is None else kb.fdiv(v, divisor)

    def row(base: Value, n: int) -> SSAValue:
        return _row_reduce(kb, n, lambda i, vec: kb.load(x, _offset(kb, base, i), vector=vec), red)

    if True not in roles:
        # Nothing to combine (only size-1 axes reduce): a copy, split in units of W.
        def copy(i: SSAValue, vec: bool) -> None:
            kb.store(kb.load(x, i, vector=vec), out, i)
        n = _prod(shape)
        if share is None:
            _row_map(kb, n, copy)
        else:
            first, last = kb.part_range(-(-n // w), *share)
            _row_map(kb, n, copy, kb.mul(first, w), _clip(kb, kb.mul(last, w), n))
    elif roles == (False, True):
        m, n = sizes
        with kb.loop(*_share(kb, m, share)) as rows:
            kb.store(finish(row(kb.mul(rows.iv, n), n)), out, rows.iv)
    elif roles in ((True, False), (False, True, False)):
        b, nred, k = ([1] if len(sizes) == 2 else []) + sizes
        if share is not None:
            # items (batch, chunk of columns)
            width = chunk_width(k, b, w)
            chunks = -(-k // width)
            first, last = kb.part_range(b * chunks, *share)
            with kb.loop(first, last) as item:
                batch: Value = item.iv
                cols: tuple[Value, Value | None] = (0, None)
                if chunks > 1:
                    batch = kb.sdiv(item.iv, chunks) if b > 1 else 0
                    lo = kb.mul(kb.srem(item.iv, chunks) if b > 1 else item.iv, width)
                    cols = (lo, _clip(kb, kb.add(lo, width), k))
                _outer_reduce(kb, x, out, _scaled(kb, batch, nred * k), _scaled(kb, batch, k),
                              nred, k, kind, divisor, cols=cols)
        elif b == 1:
            _outer_reduce(kb, x, out, 0, 0, nred, k, kind, divisor)
        else:
            with kb.loop(0, b) as batch:
                _outer_reduce(kb, x, out, kb.mul(batch.iv, nred * k), kb.mul(batch.iv, k),
                              nred, k, kind, divisor)
    else:
        # a full reduction, or a general pattern: serial, on part 0
        with _on_part0(kb, share):
            if roles == (True,):
                kb.store(finish(row(0, sizes[0])), out)
            else:
                _general_reduce(kb, x, out, groups, kind, divisor)
    kb.ret()
    return kb.finish()


def _clip(kb: KernelBuilder, value: SSAValue, limit: int) -> SSAValue:
    """min(value, limit)."""
    return vmath.select(kb, kb.icmp("slt", value, limit), value, kb.index(limit))


def _scaled(kb: KernelBuilder, index: Value, stride: int) -> Value:
    return 0 if isinstance(index, int) and index == 0 else kb.mul(index, stride)


@contextmanager
def _on_part0(kb: KernelBuilder, share: Share | None) -> Iterator[None]:
    """Emit the body for part 0 only (unconditionally in a serial kernel)."""
    if share is None:
        yield
        return
    with kb.if_(kb.icmp("eq", share[0], 0)):
        yield


def _general_reduce(kb: KernelBuilder, x: SSAValue, out: SSAValue,
                    groups: list[tuple[Value, bool]], kind: str,
                    divisor: Value | None) -> None:
    """Any group pattern: out = identity, then nested loops over the outer groups whose
    body combines into `out` a contiguous row reduction (reduced last group) or an outer
    reduction of the last two groups (kept last group); then a pass dividing by
    `divisor` (mean). Sizes and the divisor may be run-time values."""
    red, comb = reduction(kb, kind), combine(kb, kind)
    n_out = runtime_rows(kb, [s for s, r in groups if not r])
    in_strides = [runtime_rows(kb, [s for s, _ in groups[g + 1:]]) for g in range(len(groups))]
    out_strides = [runtime_rows(kb, [s for s, r in groups[g + 1:] if not r])
                   for g in range(len(groups))]
    _fill(kb, out, 0, n_out, _identity(kind))

    # The innermost group is reduced (a row reduction per row), or kept after a reduced
    # one (an outer reduction of the last two groups, accumulated into out).
    inner_reduced = groups[-1][1]
    depth = len(groups) - (1 if inner_reduced else 2)

    def innermost(in_off: Value, out_off: Value) -> None:
        if inner_reduced:
            r = _row_reduce(kb, groups[-1][0],
                            lambda i, vec: kb.load(x, _offset(kb, in_off, i), vector=vec), red)
            kb.store(comb(kb.load(out, out_off), r), out, out_off)
        else:
            _outer_reduce(kb, x, out, in_off, out_off, groups[-2][0], groups[-1][0], kind, None,
                          accumulate=True)

    def nest(g: int, in_off: Value, out_off: Value) -> None:
        if g == depth:
            innermost(in_off, out_off)
            return
        size, reduced = groups[g]
        with kb.loop(0, size) as loop:
            nest(g + 1, _offset(kb, in_off, kb.mul(loop.iv, in_strides[g])),
                 out_off if reduced else _offset(kb, out_off, kb.mul(loop.iv, out_strides[g])))

    nest(0, 0, 0)

    _divide(kb, out, n_out, divisor)


def _divide(kb: KernelBuilder, out: SSAValue, n: Value, divisor: Value | None,
            cols: tuple[Value, Value | None] = (0, None)) -> None:
    """out[j] /= divisor for j < n (only j in range(*cols) when given); None: nothing."""
    if divisor is None:
        return
    lanes = kb.splat(divisor) if isinstance(divisor, SSAValue) else divisor

    def scale(i: SSAValue, vec: bool) -> None:
        kb.store(kb.fdiv(kb.load(out, i, vector=vec), lanes if vec else divisor), out, i)
    _row_map(kb, n, scale, *cols)


# ----------------------------------------------------------------------------- lir.softmax


SOFTMAX_TILE = 1024
"""Columns per tile of a softmax along a strided axis (stack scratch: 2 tiles of floats)."""


@kernel(lir.SoftmaxOp, partitioned=True, runtime_dims=True, along_symbols=True)
def build_softmax(op: Operation, name: str, vector_width: int,
                  partitioned: bool = False) -> llvm.FuncOp:
    """lir.softmax: (x, out); contiguous rows for the last axis (or any axis followed only
    by size-1 dims), column tiles with stack scratch otherwise. Along a `?` axis (the
    others are row-driven, dynamic.py) the sizes are read at run time and a partitioned
    kernel splits only the dims before the axis."""
    assert isinstance(op, lir.SoftmaxOp)
    shape: Sequence[Value]
    if is_dynamic(op):
        kb, x, out, shape, share = _sized_kernel(op, name, vector_width, partitioned)
    else:
        shape = shape_of(op.input)
        kb, (x, out), share = _kernel(name, 2, vector_width, partitioned)
    axis = rules.normalize_axis("axis", op.axis.value.data, len(shape))
    outer, n = runtime_rows(kb, shape[:axis]), shape[axis]
    inner = runtime_rows(kb, shape[axis + 1:])
    if isinstance(inner, int) and inner == 1:
        with kb.loop(*_share(kb, outer, share)) as rows:
            _softmax_row(kb, x, out, kb.mul(rows.iv, n), n)
    elif share is None or not all(isinstance(d, int) for d in shape):
        scratch = kb.alloca(2 * (min(inner, SOFTMAX_TILE) if isinstance(inner, int)
                                 else SOFTMAX_TILE))
        with kb.loop(*_share(kb, outer, share)) as rows:
            _softmax_columns(kb, x, out, kb.mul(rows.iv, runtime_rows(kb, [n, inner])), n,
                             inner, scratch)
    else:
        # items (outer index, column tile), tiles narrow enough to give every part work
        tile = chunk_width(inner, outer, vector_width, SOFTMAX_TILE)
        tiles = -(-inner // tile)
        scratch = kb.alloca(2 * tile)
        with kb.loop(*_share(kb, outer * tiles, share)) as item:
            base = kb.mul(kb.sdiv(item.iv, tiles), n * inner)
            _softmax_columns(kb, x, out, base, n, inner, scratch, tile, kb.srem(item.iv, tiles))
    kb.ret()
    return kb.finish()


def _softmax_row(kb: KernelBuilder, x: SSAValue, out: SSAValue, base: SSAValue, n: Value) -> None:
    """Softmax of the contiguous row x[base : base+n]: a max pass, an exp+sum pass that
    stores the exponentials, and a scaling pass."""
    m = _row_reduce(kb, n, lambda i, vec: kb.load(x, kb.add(base, i), vector=vec),
                    extremum(kb, "max"))
    m_vec = kb.splat(m)

    def exp_store(i: SSAValue, vec: bool) -> SSAValue:
        at = kb.add(base, i)
        e = vmath.exp(kb, kb.fsub(kb.load(x, at, vector=vec), m_vec if vec else m))
        kb.store(e, out, at)
        return e

    s = _row_reduce(kb, n, exp_store, fold(kb, 0.0, kb.fadd, kb.hsum), unroll=2)
    inv = kb.fdiv(1.0, s)
    inv_vec = kb.splat(inv)

    def scale(i: SSAValue, vec: bool) -> None:
        at = kb.add(base, i)
        kb.store(kb.fmul(kb.load(out, at, vector=vec), inv_vec if vec else inv), out, at)

    _row_map(kb, n, scale)


def _softmax_columns(kb: KernelBuilder, x: SSAValue, out: SSAValue, base: SSAValue,
                     n: Value, inner: Value, scratch: SSAValue, tile: int | None = None,
                     only: SSAValue | None = None) -> None:
    """Softmax along a strided axis: x[base + i*inner + j], i < n, for every column j
    (or only for the columns of tile number `only`).

    Columns go in tiles of up to `tile` (default SOFTMAX_TILE); per tile, the column
    maxima (an outer reduction, rows in register blocks) and sums live in `scratch`, and
    each of the three passes (max; exp, store and sum; scale) reads the tile's rows as
    contiguous runs, vectorized along j. `n` and `inner` may be run-time sizes (then every
    tile is SOFTMAX_TILE wide but the last, `only` unused).
    """
    dynamic = not isinstance(inner, int)
    tile = tile or (SOFTMAX_TILE if dynamic else min(inner, SOFTMAX_TILE))  # type: ignore[type-var]
    m_ptr, s_ptr = scratch, kb.gep(scratch, tile)

    def do_tile(j0: Value, width: Value) -> None:
        start = _offset(kb, base, j0)
        _outer_reduce(kb, x, m_ptr, start, 0, n, width, "max", None, stride=inner)
        _row_map(kb, width, lambda c, vec: kb.store(_const(kb, 0.0, vec), s_ptr, c))
        with kb.loop(0, n) as rows:
            row = _offset(kb, start, kb.mul(rows.iv, inner))

            def exp_sum(c: SSAValue, vec: bool) -> None:
                at = kb.add(row, c)
                e = vmath.exp(kb, kb.fsub(kb.load(x, at, vector=vec), kb.load(m_ptr, c, vector=vec)))
                kb.store(e, out, at)
                kb.store(kb.fadd(kb.load(s_ptr, c, vector=vec), e), s_ptr, c)
            _row_map(kb, width, exp_sum)
        _row_map(kb, width, lambda c, vec: kb.store(
            kb.fdiv(_const(kb, 1.0, vec), kb.load(s_ptr, c, vector=vec)), s_ptr, c))
        with kb.loop(0, n) as rows:
            row = _offset(kb, start, kb.mul(rows.iv, inner))

            def scale(c: SSAValue, vec: bool) -> None:
                at = kb.add(row, c)
                kb.store(kb.fmul(kb.load(out, at, vector=vec), kb.load(s_ptr, c, vector=vec)), out, at)
            _row_map(kb, width, scale)

    if dynamic:
        with kb.loop(0, inner, tile) as cols:
            do_tile(cols.iv, kb.fold_min(kb.index(tile), kb.sub(inner, cols.iv)))
        return
    ntiles = inner // tile
    if only is not None:
        if ntiles == 1 and inner == tile:
            do_tile(0, tile)
        else:
            with kb.if_(kb.icmp("slt", only, ntiles)):
                do_tile(kb.mul(only, tile), tile)
    elif ntiles > 1:
        with kb.loop(0, ntiles * tile, tile) as cols:
            do_tile(cols.iv, tile)
    else:
        do_tile(0, tile)
    if inner > ntiles * tile:
        if only is None:
            do_tile(ntiles * tile, inner - ntiles * tile)
        else:
            with kb.if_(kb.icmp("eq", only, ntiles)):
                do_tile(ntiles * tile, inner - ntiles * tile)


# ----------------------------------------------------------------------------- norms


def _norm_setup(op: Operation, name: str, vector_width: int, partitioned: bool):
    """The kernel, its x, gamma, beta (or None) and out, this call's rows [first, last),
    the row length and eps. With `?` dims (a symbol behind a static dim, e.g. x
    [2, S, 64]; dynamic.py's ABI) the row count is read at run time."""
    has_beta = getattr(op, "beta", None) is not None
    pointers = 4 if has_beta else 3
    if is_dynamic(op):
        symbols = kernel_symbols(op)
        kb = KernelBuilder(name, [PTR] * pointers + [i64] * len(symbols)
                           + [i64, i64] * partitioned, vector_width=vector_width)
        args = list(kb.args[:pointers])
        share = (kb.args[-2], kb.args[-1]) if partitioned else None
        shape = RuntimeDims.of(op, kb.args[pointers:pointers + len(symbols)]).shape(0)
    else:
        kb, args, share = _kernel(name, pointers, vector_width, partitioned)
        shape = shape_of(op.operands[0])
    n = shape[-1]
    if not isinstance(n, int):  # the row kernels take n (gamma's length) at compile time
        raise DynamicKernelError(f"{op.name}: the normalized (last) axis must be static, got "
                                 f"x {rules.fmt(operand_shapes(op)[0])}")
    rows = runtime_rows(kb, shape[:-1])
    x, gamma, *rest = args
    beta = rest[0] if has_beta else None
    eps = float(op.eps.value.data)  # type: ignore[attr-defined]
    return kb, x, gamma, beta, args[-1], _share(kb, rows, share), n, eps


def _sum_of_squares(kb: KernelBuilder, n: int, chunk: Chunk) -> SSAValue:
    return _row_reduce(kb, n, chunk, fold(kb, 0.0, lambda acc, v: vmath.muladd(kb, v, v, acc), kb.hsum,
                                          merge=kb.fadd))


def _normalize_row(kb: KernelBuilder, x: SSAValue, gamma: SSAValue, beta: SSAValue | None,
                   out: SSAValue, base: SSAValue, n: int, scale: SSAValue,
                   *shifts: SSAValue) -> None:
    """out[base+j] = (x[base+j] - shifts...) * scale * gamma[j] (+ beta[j])."""
    scale_vec = kb.splat(scale)
    shift_vecs = [kb.splat(s) for s in shifts]

    def body(j: SSAValue, vec: bool) -> None:
        at = kb.add(base, j)
        v = kb.load(x, at, vector=vec)
        for shift, shift_vec in zip(shifts, shift_vecs, strict=True):
            v = kb.fsub(v, shift_vec if vec else shift)
        v = kb.fmul(v, scale_vec if vec else scale)
        g = kb.load(gamma, j, vector=vec)
        y = vmath.muladd(kb, v, g, kb.load(beta, j, vector=vec)) if beta is not None else kb.fmul(v, g)
        kb.store(y, out, at)

    _row_map(kb, n, body)


def rms_norm_row(kb: KernelBuilder, x: SSAValue, gamma: SSAValue, beta: SSAValue | None,
                 out: SSAValue, base: Value, n: int, eps: float) -> None:
    """out[base + j] = x[base + j] · (1/sqrt(mean(x²) + eps)) · gamma[j] (+ beta[j]) for the
    row of n values at `base`: `lir.rms_norm`'s row, also the prologue of the q8 products
    that fuse it (quant_dot.py `x_row_source`), so both give the same bits."""
    ss = _sum_of_squares(kb, n, lambda i, vec: kb.load(x, kb.add(base, i), vector=vec))
    scale = kb.fdiv(1.0, kb.sqrt(kb.fadd(kb.fdiv(ss, float(n)), eps)))
    _normalize_row(kb, x, gamma, beta, out, base, n, scale)


@kernel(lir.RmsNormOp, partitioned=True, runtime_dims=True, along_symbols=True)
def build_rms_norm(op: Operation, name: str, vector_width: int,
                   partitioned: bool = False) -> llvm.FuncOp:
    """Per row: one pass for the sum of squares (FMAs into vector accumulators), one pass
    writing x · (1/sqrt(mean + eps)) · gamma (+ beta)."""
    assert isinstance(op, lir.RmsNormOp)
    kb, x, gamma, beta, out, row_range, n, eps = _norm_setup(op, name, vector_width, partitioned)
    with kb.loop(*row_range) as r:
        rms_norm_row(kb, x, gamma, beta, out, kb.mul(r.iv, n), n, eps)
    kb.ret()
    return kb.finish()


@kernel(lir.LayerNormOp, partitioned=True, runtime_dims=True, along_symbols=True)
def build_layer_norm(op: Operation, name: str, vector_width: int,
                     partitioned: bool = False) -> llvm.FuncOp:
    """Per row: a sum pass gives a first mean m0; a second pass sums d = x - m0 and d²
    (x - m0 is exact near the mean), so mean = m0 + c with c = Σd/n and
    var = Σd²/n - c² (the corrected two-pass algorithm, accurate also when |mean| >> std);
    the last pass writes ((x - m0) - c) · rstd · gamma + beta."""
    assert isinstance(op, lir.LayerNormOp)
    kb, x, gamma, beta, out, row_range, n, eps = _norm_setup(op, name, vector_width, partitioned)
    with kb.loop(*row_range) as r:
        base = kb.mul(r.iv, n)
        total = _row_reduce(kb, n, lambda i, vec: kb.load(x, kb.add(base, i), vector=vec),
                            fold(kb, 0.0, kb.fadd, kb.hsum))
        m0 = kb.fdiv(total, float(n))
        m0_vec = kb.splat(m0)

        def centered(i: SSAValue, vec: bool) -> SSAValue:
            return kb.fsub(kb.load(x, kb.add(base, i), vector=vec), m0_vec if vec else m0)

        moments = Reduction(  # Σd and Σd²
            init=lambda vec: [_const(kb, 0.0, vec)] * 2,
            step=lambda accs, d: [kb.fadd(accs[0], d), vmath.muladd(kb, d, d, accs[1])],
            lift=lambda d: [d, kb.fmul(d, d)],
            merge=lambda a, b: [kb.fadd(a[0], b[0]), kb.fadd(a[1], b[1])],
            horizontal=lambda accs: [kb.hsum(accs[0]), kb.hsum(accs[1])],
        )
        s1, s2 = _row_accumulate(kb, n, centered, moments)
        c = kb.fdiv(s1, float(n))
        var = kb.fmax(kb.fsub(kb.fdiv(s2, float(n)), kb.fmul(c, c)), 0.0)
        scale = kb.fdiv(1.0, kb.sqrt(kb.fadd(var, eps)))
        _normalize_row(kb, x, gamma, beta, out, base, n, scale, m0, c)
    kb.ret()
    return kb.finish()
