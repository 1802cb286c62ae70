"""Kernel builders of the matmul family: `lir.matmul`, `lir.fused_matmul`, `lir.dequant_matmul`.

**matmul / fused_matmul** (np.matmul semantics). The operands are promoted to
[batch..., M, K] @ [batch..., K, N]; each operand gets per-batch-dim element strides
(0 where it broadcasts). When the rhs is shared by the whole batch and the lhs is not
broadcast, the batch folds into M (x[B, S, K] @ w[K, N] is one [B·S, K] @ [K, N]).

Each [M, K] @ [K, N] is computed by one register-blocked micro-kernel
(`_micro_kernel`): an MR × (NR·W) tile of C lives in MR·NR vector accumulators carried
through a block of K, which broadcasts A[i, k], loads NR vectors of B[k, j:j+NR·W] and
issues MR·NR FMAs (`llvm.fmuladd`: an FMA where the target has one, never a libm call).
Edge tiles are static variants of the same micro-kernel: M % MR rows, and the columns
past the last whole panel as ⌈rest / W⌉ vectors whose last one is masked (masked
loads and stores, no scalar columns). N == 1 uses a dot-product kernel over the
contiguous K axis. `gemm_plan` picks the loop nest (`emit_gemm`, Goto/BLIS order:
K blocks → column panels → row tiles):

- large M (> SMALL_M rows): K blocks of up to K_BLOCK rows; each K_BLOCK × NR·W panel of
  B is packed into a contiguous stack buffer (no cache-set conflicts or TLB misses of a
  power-of-two row stride) that all row tiles then read from L1/L2; A rows stream
  through, C tiles are prefetched at the start of their micro-kernel. The first block
  writes C, later ones add to it, the last applies the epilogue.
- decode shapes (M <= SMALL_M): short K blocks (16-32 rows) swept across all columns, B
  read in place: each block streams a few whole rows of B at memory speed (a GEMV-style
  pass over the weight matrix, once), while the small C stays in L1/L2.
- a prepacked B (`pack_rhs`, a weight reordered once at bind time into contiguous
  K × NR·W panels; the op's `packed_rhs` property): column panels → K blocks of up to
  PACKED_K_BLOCK → row tiles, nothing packed per call, each panel one contiguous
  stream (several panels per tile when it has few rows), C written once.

The epilogue adds the bias to the accumulators in registers; relu too, while polynomial
activations run as one loop over the just-stored tile (still in L1) so code size does
not grow per accumulator.

**dequant_matmul**: out[m, n] = Σ_k x[m, k]·dequant(w)[n, k] with w the raw GGUF data.
Each scheme is one `DequantScheme` in `SCHEMES` (values and bytes per block, the group of
values sharing a scale, how to read a W-lane chunk of quants and a group's scale/offset),
and one generic builder reads them all. A tile of R rows of x × C rows of w keeps R·C
vector accumulators; for every block and every group in it, it reads each weight row's
scale (and offset: q4_1/q5_1's m, the K-quants' −dmin·min) as f32 (f16 bits → f32 with
F16C, or an exact integer widening for W=4, as SSE-only CPUs lack F16C), converts the
group's quants to f32 vectors in registers (q8_0: sitofp of i8; nibbles − 8; 5th bits from
qh; Q6_K's 2-bit highs), computes q·scale + offset (the operations of the reference
dequantizer) and FMAs them with R rows of x. f16/bf16 rows are blocks of W values
widened in registers plus a scalar tail of K % W values. No dequantized weight matrix is
stored.

**Partitioned kernels** (`PARTITIONED`): the same code with two trailing i64 arguments
(part, parts); part p computes the units [U·p/parts, U·(p+1)/parts) of U work units
spread over the (flattened) batch: whole column panels of NR·W columns for decode
shapes (each thread streams its share of the weight matrix) and wherever there are at
least as many panels as row tiles, else whole MR-row tiles (N == 1: always rows);
dequant_matmul splits the weight rows (whole tiles of them).
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from dataclasses import dataclass

from xdsl.dialects import llvm
from xdsl.dialects.builtin import (
    DenseIntOrFPElementsAttr,
    VectorType,
    f16,
    f32,
    i1,
    i8,
    i16,
    i32,
    i64,
)
from xdsl.ir import Attribute, Operation, SSAValue

from rlx_mlir.core import shape_inference as si
from rlx_mlir.core.abi import STATUS_INDEX_OUT_OF_RANGE, STATUS_OK
from rlx_mlir.core.packing import GEMM_TILES
from rlx_mlir.dialects import lir
from rlx_mlir.dialects.common import shape_of
from rlx_mlir.dialects.mir import activations_of
from rlx_mlir.dialects.rlx import QuantActivations
from rlx_mlir.passes.lir_to_llvm.builder import PTR, KernelBuilder, vector_type
from rlx_mlir.passes.lir_to_llvm.dynamic import (
    DynamicKernelError,
    RuntimeDims,
    is_dynamic,
    kernel_symbols,
    operand_shapes,
)
from rlx_mlir.passes.lir_to_llvm.indexing import llvm_element, load_index

Index = SSAValue | int
"""An i64 SSA value or a Python int folded at build time."""

DECODE_TILES: dict[int, tuple[int, int]] = {16: (8, 3)}
"""(MR, NR) of the decode plan for 7..SMALL_M rows: 8 × 3·W tiles (24 zmm accumulators;
16 rows are two tiles instead of 6 + 6 + 4)."""

SMALL_M = 16
"""Up to this many rows, the decode plan: short K blocks streaming B in place (above it,
the packed plan is as fast on one thread and scales better on two)."""

K_UNROLL = 4
"""K steps per iteration of the micro-kernel's K loop (the K % K_UNROLL rest is unrolled)."""

K_BLOCK = 256
"""K rows per block of the large-M plan: the packed B panel is K_BLOCK·NR·W floats on the
stack (64 KB for W=16). Larger is faster (C is read and written once per block, A rows
stream in longer runs: 1024 is ~12% faster at 1024³ and 2048³) but needs a 256 KB buffer."""

PACKED_K_BLOCK = 2048
"""K rows per block with a prepacked B: a K × NR·W panel (up to 512 KB at W=16) stays in
L2 while every row tile of the panel reads it, and C is written once."""

PACKED_STREAMS = 4
"""Concurrent streams of a prepacked B per decode tile (panels side by side, or K
segments): one sequential stream per core does not reach the memory bandwidth."""

STREAM_K_BLOCK = (16, 32)
"""K rows per block of the decode plan for one row and for more rows."""

DOT_CHAINS = 4
"""Independent accumulation chains of the N == 1 dot-product kernel (split over its rows)."""

PREFETCH_C = True
"""Prefetch a tile of C into L1 when its micro-kernel starts (the large-M plan: C is
not in cache and its loads come after the K loop, too late for out-of-order execution)."""


# ----------------------------------------------------------------------------- index helpers


def _add(kb: KernelBuilder, a: Index, b: Index) -> Index:
    if isinstance(a, int) and isinstance(b, int):
        return a + b
    if isinstance(b, int) and b == 0:
        return a
    if isinstance(a, int) and a == 0:
        return b
    return kb.add(a, b)


def _mul(kb: KernelBuilder, a: Index, b: int) -> Index:
    if isinstance(a, int):
        return a * b
    if b == 1:
        return a
    return kb.mul(a, b)


def _min(kb: KernelBuilder, a: Index, b: Index) -> Index:
    if isinstance(a, int) and isinstance(b, int):
        return min(a, b)
    return kb.select(kb.icmp("slt", a, b), a, b)


def _max(kb: KernelBuilder, a: Index, b: Index) -> Index:
    if isinstance(a, int) and isinstance(b, int):
        return max(a, b)
    return kb.select(kb.icmp("sgt", a, b), a, b)


def _ptr(kb: KernelBuilder, base: SSAValue, offset: Index, element: Attribute = f32) -> SSAValue:
    """&base[offset] (no GEP for a constant 0)."""
    if isinstance(offset, int) and offset == 0:
        return base
    return kb.gep(base, offset, element)


# ----------------------------------------------------------------------------- memory helpers


def _lane_mask(kb: KernelBuilder, lanes: int) -> SSAValue:
    """vector<W x i1> with the first `lanes` lanes set (constant-folded by LLVM)."""
    iota = kb.insert(llvm.UndefOp(kb.vec))
    for t in range(kb.vector_width):
        iota = kb.insert(llvm.InsertElementOp(iota, kb.fconst(float(t)), kb.constant(t, i32)))
    return kb.fcmp("olt", iota, kb.vconst(lanes - 0.5))


def _vload(kb: KernelBuilder, base: SSAValue, offset: Index,
           mask: SSAValue | None = None) -> SSAValue:
    """W floats at base[offset]; with a mask only its lanes are read (the others are 0)."""
    if mask is None:
        return kb.load(base, offset, vector=True)
    args = [_ptr(kb, base, offset), kb.constant(4, i32), mask, kb.vconst(0.0)]
    return kb.insert(llvm.CallIntrinsicOp(f"llvm.masked.load.v{kb.vector_width}f32.p0", args,
                                          [kb.vec]))


def _vstore(kb: KernelBuilder, value: SSAValue, base: SSAValue, offset: Index,
            mask: SSAValue | None = None) -> None:
    if mask is None:
        kb.store(value, base, offset)
        return
    args = [value, _ptr(kb, base, offset), kb.constant(4, i32), mask]
    kb.insert(llvm.CallIntrinsicOp(f"llvm.masked.store.v{kb.vector_width}f32.p0", args, []))


def _prefetch(kb: KernelBuilder, base: SSAValue, offset: Index) -> None:
    """Software prefetch (for reading, into L1) of the cache line holding base[offset]."""
    args = [_ptr(kb, base, offset), kb.constant(0, i32), kb.constant(3, i32),
            kb.constant(1, i32)]
    kb.insert(llvm.CallIntrinsicOp("llvm.prefetch.p0", args, []))


# ----------------------------------------------------------------------------- epilogue


INLINE_ACTIVATIONS = ("relu",)
"""Activations cheap enough to apply to every accumulator in registers; the others
(polynomials of ~40-80 ops) run as one loop over the just-stored, L1-resident tile, so
the code does not grow by one polynomial per accumulator (compile time)."""


@dataclass(frozen=True)
class Epilogue:
    """What happens to the accumulators of a tile: `bias` (a pointer) indexed per column
    ("col"), per row ("row") or a single value ("scalar") is added in registers, then
    `activation` (in registers for INLINE_ACTIVATIONS, else over the stored tile)."""

    bias: SSAValue | None = None
    bias_mode: str = "none"
    activation: str | None = None

    @property
    def trivial(self) -> bool:
        return self.bias is None and self.activation is None

    @property
    def inline(self) -> bool:
        return self.activation is None or self.activation in INLINE_ACTIVATIONS

    def apply(self, kb: KernelBuilder, value: SSAValue, row: Index, col: Index,
              vector: bool, mask: SSAValue | None = None) -> SSAValue:
        """The register part of the epilogue for the accumulator of C[row, col:...]
        (`mask`: the lanes of a partial vector)."""
        if self.bias is not None:
            if self.bias_mode == "col":
                b = _vload(kb, self.bias, col, mask) if vector else kb.load(self.bias, col)
            else:
                b = kb.load(self.bias, row if self.bias_mode == "row" else 0)
                if vector:
                    b = kb.splat(b)
            value = kb.fadd(value, b)
        if self.activation is not None and self.inline:
            value = _activation(kb, self.activation, value)
        return value

    def finish_tile(self, kb: KernelBuilder, c_base: SSAValue, rows: int, cols: int,
                    width: int, ldc: int, mask: SSAValue | None = None) -> None:
        """The activation of a stored tile C[rows, cols·width] (row stride `ldc`; with
        `mask`, the last vector is partial), unless it was applied in registers: loops,
        so one polynomial serves the whole tile."""
        if self.inline:
            return
        vector = width > 1
        full = cols - (mask is not None)

        def row(ptr: SSAValue) -> None:
            def element(col: Index, lanes: SSAValue | None = None) -> None:
                value = _vload(kb, ptr, col, lanes) if vector else kb.load(ptr, col)
                _vstore(kb, _activation(kb, self.activation, value), ptr, col, lanes)

            if full == 1:
                element(0)
            elif full > 1:
                with kb.loop(0, full * width, width) as loop:
                    element(loop.iv)
            if mask is not None:
                element(full * width, mask)

        if rows == 1:
            row(c_base)
        else:
            with kb.loop(0, rows) as loop:
                row(kb.gep(c_base, _mul(kb, loop.iv, ldc)))


def _activation(kb: KernelBuilder, name: str, value: SSAValue) -> SSAValue:
    from rlx_mlir.passes.lir_to_llvm import vmath

    return vmath.activation(kb, name, value)


def _fma(kb: KernelBuilder, a: SSAValue, b: SSAValue, c: SSAValue) -> SSAValue:
    """a·b + c as `llvm.fmuladd`: one FMA instruction where the target has FMA, a multiply
    and an add on SSE-only targets (where `llvm.fma` would be a libm call per lane)."""
    return kb.intrinsic("llvm.fmuladd", [a, b, c], a.type)


NO_EPILOGUE = Epilogue()


# ----------------------------------------------------------------------------- geometry


@dataclass(frozen=True)
class GemmGeometry:
    """out[b..., M, N] = lhs[b..., M, K] @ rhs[b..., K, N] over the broadcast batch dims
    `batch`, with the element stride of each batch dim in every operand (0: broadcast)."""

    batch: tuple[int, ...]
    a_strides: tuple[int, ...]
    b_strides: tuple[int, ...]
    c_strides: tuple[int, ...]
    m: int
    n: int
    k: int


def gemm_geometry(lhs: Sequence[int], rhs: Sequence[int], fold_batch: bool = True) -> GemmGeometry:
    """The geometry of np.matmul(lhs, rhs): 1-D operands promoted, batch dims broadcast,
    size-1 batch dims dropped, and (with `fold_batch`) a batch that only the lhs has
    folded into M."""
    lhs, rhs = tuple(lhs), tuple(rhs)
    pa = (1, *lhs) if len(lhs) == 1 else lhs
    pb = (*rhs, 1) if len(rhs) == 1 else rhs
    m, k = pa[-2:]
    n = pb[-1]
    batch = si.broadcast(pa[:-2], pb[:-2], ("lhs batch", "rhs batch"))

    def strides(dims: tuple[int, ...], matrix: int) -> list[int]:
        dims = (1,) * (len(batch) - len(dims)) + dims
        out, step = [], matrix
        for d in reversed(dims):
            out.append(0 if d == 1 else step)
            step *= d
        return out[::-1]

    sa, sb, sc = strides(pa[:-2], m * k), strides(pb[:-2], k * n), strides(batch, m * n)
    keep = [i for i, d in enumerate(batch) if d != 1]
    batch = tuple(batch[i] for i in keep)
    sa, sb, sc = ([s[i] for i in keep] for s in (sa, sb, sc))
    if fold_batch and batch and all(s == 0 for s in sb) and all(s != 0 for s in sa):
        m *= math.prod(batch)
        batch, sa, sb, sc = (), [], [], []
    return GemmGeometry(batch, tuple(sa), tuple(sb), tuple(sc), m, n, k)


def _bias_mode(lhs: Sequence[int], rhs: Sequence[int], bias_len: int, m: int) -> str:
    """How bias[L] broadcasts against the product (numpy rules on the real out shape)."""
    if bias_len == 1:
        return "scalar"
    if len(rhs) >= 2:
        return "col"  # L == N (the lir verifier)
    if len(lhs) >= 2 and bias_len == m:
        return "row"  # rhs 1-D: the last out axis is M
    raise ValueError(f"fused_matmul: bias [{bias_len}] does not broadcast against "
                     f"matmul({list(lhs)}, {list(rhs)})")


# ----------------------------------------------------------------------------- gemm


@dataclass(frozen=True)
class Matrices:
    """Base pointers and leading dimensions of one C[M, N] = A[M, K] @ B[K, N]."""

    a: SSAValue
    b: SSAValue
    c: SSAValue
    lda: int
    ldb: int
    ldc: int
    packed: bool = False
    """B is a prepacked weight (`pack_rhs`): its NR·W-column panels are contiguous."""


@dataclass(frozen=True)
class KBlock:
    """The K range [start, start + length) a micro-kernel covers; `first` (start from 0,
    not from C) and `last` (apply the epilogue) are Python bools or run-time i1 values,
    `length` a Python int or a run-time i64."""

    start: Index = 0
    length: Index = 0
    first: SSAValue | bool = True
    last: SSAValue | bool = True


@dataclass(frozen=True)
class GemmPlan:
    """How one [M, K] @ [K, N] is computed: MR × NR·W micro-kernel tiles, K blocks of at
    most `kc` rows, B panels packed (large M) or read in place (decode shapes)."""

    mr: int
    nr: int
    kc: int
    pack: bool
    group: int = 1
    """Whole panels per tile with a prepacked B (few rows: more streams of B at once)."""
    streams: int = 1
    """K segments a tile reads at once (decode shapes with a prepacked B)."""


def gemm_plan(m: int, n: int, k: int, width: int, packed: bool = False) -> GemmPlan:
    """The decode plan for M <= SMALL_M (the tiles of DECODE_TILES above MR rows), else
    the packed one (when N has a whole panel); with a prepacked B, the GEMM_TILES in
    long K blocks (its panels are contiguous and stay in L2 across the row tiles)."""
    mr, nr = GEMM_TILES.get(width, (4, 2))
    if packed:
        accumulators = 16 if width >= 16 else 8  # of 32 / 16 vector registers
        group = max(1, min(PACKED_STREAMS, accumulators // (min(m, mr) * nr)))
        streams = PACKED_STREAMS // group if m <= SMALL_M else 1
        return GemmPlan(mr, nr, PACKED_K_BLOCK, False, group, streams)
    if m <= SMALL_M:
        if m > mr and width in DECODE_TILES:
            mr, nr = DECODE_TILES[width]
        return GemmPlan(mr, nr, STREAM_K_BLOCK[0] if m == 1 else STREAM_K_BLOCK[1], False)
    return GemmPlan(mr, nr, K_BLOCK, n >= nr * width)


Span = tuple[Index, Index]
"""A half-open range [lo, hi) of rows or columns, bounds as Python ints or run-time i64."""


def _when(kb: KernelBuilder, hi: Index, bound: int, body: Callable[[], None]) -> None:
    """body() if hi > bound (a static test for a Python int)."""
    if isinstance(hi, int):
        if hi > bound:
            body()
        return
    with kb.if_(kb.icmp("sgt", hi, bound)):
        body()


def _sweep(kb: KernelBuilder, span: Span, full: Index, total: Index, unit: int,
           tile: Callable[[Index, int], None]) -> None:
    """tile(start, size) over a non-empty span [lo, hi) of an axis of `total` elements:
    whole `unit`s below `full` (= total // unit · unit) in a loop, then the rest
    (total - full) when the span reaches past `full`: one static tile, or for a run-time
    `total` static tiles of its binary digits (`_binary_tail`).
    `lo` is a multiple of `unit`, `hi` a multiple of it or `total`."""
    lo, hi = span
    stop = _min(kb, hi, full)
    if isinstance(lo, int) and isinstance(stop, int):
        if stop - lo == unit:
            tile(lo, unit)
        elif stop > lo:
            with kb.loop(lo, stop, unit) as loop:
                tile(loop.iv, unit)
    else:
        with kb.loop(lo, stop, unit) as loop:
            tile(loop.iv, unit)
    if isinstance(total, int):
        if total > full:
            _when(kb, hi, full, lambda: tile(full, total - full))
    elif unit > 1:
        with kb.if_(kb.icmp("sgt", hi, full)):
            _binary_tail(kb, full, kb.sub(total, full), unit, tile)


def _binary_tail(kb: KernelBuilder, start: Index, rest: SSAValue, unit: int,
                 tile: Callable[[Index, int], None]) -> None:
    """tile(...) over the run-time `rest` (< unit) elements from `start` as static tiles
    of the powers of two in its binary form, largest first (5 rows: 4 + 1): log2(unit)
    tile variants instead of unit - 1, so a kernel over a run-time M compiles a few tile
    sizes more than the static one, not one per possible rest."""
    sizes = [1 << bit for bit in reversed(range((unit - 1).bit_length()))]
    for size in sizes:
        with kb.if_(kb.icmp("ne", kb.insert(llvm.AndOp(rest, kb.index(size))), 0)):
            above = kb.insert(llvm.AndOp(rest, kb.index(-2 * size)))  # rows of larger tiles
            tile(_add(kb, start, above), size)


def _round_down(kb: KernelBuilder, value: Index, unit: int) -> Index:
    """value // unit · unit (value ≥ 0)."""
    if isinstance(value, int):
        return value // unit * unit
    return value if unit == 1 else kb.sub(value, kb.srem(value, unit))


def _ceil_div(kb: KernelBuilder, value: Index, unit: int) -> Index:
    if isinstance(value, int):
        return -(-value // unit)
    return value if unit == 1 else kb.sdiv(kb.add(value, unit - 1), unit)


def _micro_kernel(kb: KernelBuilder, a_rows: list[SSAValue], b: SSAValue, ldb: int,
                  c: SSAValue, ldc: int, cols: int, ks: KBlock, epilogue: Epilogue,
                  i: Index, j: Index, lanes: int = 0, prefetch: bool = False,
                  b_offsets: Sequence[int] | None = None, streams: int = 1) -> None:
    """C[i:i+rows, j:j+cols·W] (+)= A[i:i+rows, ks] @ B[ks, j:...] with the rows·cols
    vector accumulators in registers. `a_rows[r]` points at A[i + r, ks.start], `b` at
    B[ks.start, j] (row stride `ldb`: the matrix or a packed panel; vector `col` of a B
    row at b_offsets[col], default col·W), `c` at C[i, j]; `lanes` > 0: only that many
    columns of the last vector exist (masked loads and stores); `streams` > 1: a static
    K range is read as that many segments at once. The accumulators start at 0; blocks
    after the first add C to them at the end; the last block applies the epilogue
    before its store."""
    w = kb.vector_width
    rows = len(a_rows)
    mask = _lane_mask(kb, lanes) if lanes else None

    def col_mask(col: int) -> SSAValue | None:
        return mask if col == cols - 1 else None

    offsets = list(b_offsets) if b_offsets is not None else [col * w for col in range(cols)]

    def step(k: Index, accs: list[SSAValue]) -> list[SSAValue]:
        row = _ptr(kb, b, _mul(kb, k, ldb))
        bs = [_vload(kb, row, offsets[col], col_mask(col)) for col in range(cols)]
        accs = list(accs)
        for r in range(rows):
            a = kb.splat(kb.load(a_rows[r], k))
            for col in range(cols):
                accs[r * cols + col] = _fma(kb, a, bs[col], accs[r * cols + col])
        return accs

    def k_loop(start: Index, stop: Index, step_: int, accs: list[SSAValue]) -> list[SSAValue]:
        with kb.loop(start, stop, step_, carried=accs) as loop:
            cur = loop.carried
            for u in range(step_):
                cur = step(_add(kb, loop.iv, u), cur)
            loop.yield_(*cur)
        return loop.results

    if prefetch:
        for r in range(rows):
            for off in range(0, cols * w, 16):
                _prefetch(kb, c, r * ldc + off)
    accs = [kb.vconst(0.0)] * (rows * cols)
    if isinstance(ks.length, int) and streams > 1 and ks.length >= streams * K_UNROLL:
        # `streams` K segments at once into the same accumulators: as many concurrent
        # streams of B (memory-level parallelism for a tile that reads B only once)
        seg = ks.length // streams
        with kb.loop(0, seg, carried=accs) as loop:
            cur = loop.carried
            for t in range(streams):
                cur = step(_add(kb, loop.iv, t * seg), cur)
            loop.yield_(*cur)
        accs = loop.results
        for t in range(streams * seg, ks.length):
            accs = step(t, accs)
    elif isinstance(ks.length, int):
        k_main = ks.length // K_UNROLL * K_UNROLL
        if k_main:
            accs = k_loop(0, k_main, K_UNROLL, accs)
        for t in range(k_main, ks.length):
            accs = step(t, accs)
    else:
        main = kb.insert(llvm.AndOp(ks.length, kb.index(-K_UNROLL)))
        accs = k_loop(0, main, K_UNROLL, accs)
        accs = k_loop(main, ks.length, 1, accs)
    if ks.first is not True:
        summed = [kb.fadd(accs[r * cols + col], _vload(kb, c, r * ldc + col * w, col_mask(col)))
                  for r in range(rows) for col in range(cols)]
        accs = summed if ks.first is False else [
            kb.select(ks.first, acc, total) for acc, total in zip(accs, summed, strict=True)]

    def store(with_epilogue: bool) -> None:
        for r in range(rows):
            for col in range(cols):
                value = accs[r * cols + col]
                if with_epilogue:
                    value = epilogue.apply(kb, value, _add(kb, i, r), _add(kb, j, col * w),
                                           True, col_mask(col))
                _vstore(kb, value, c, r * ldc + col * w, col_mask(col))
        if with_epilogue:
            epilogue.finish_tile(kb, c, rows, cols, w, ldc, mask)

    if ks.last is True or ks.last is False or epilogue.trivial:
        store(ks.last is True and not epilogue.trivial)
    else:  # run time: every block stores, the last one stores again after the epilogue
        store(False)
        with kb.if_(ks.last):
            store(True)


def _pack_panel(kb: KernelBuilder, src: SSAValue, ldb: int, length: Index, dst: SSAValue,
                cols: int) -> None:
    """dst[k, 0:cols·W] = B[k0 + k, j:j + cols·W] for k < length (`src` at B[k0, j])."""
    w = kb.vector_width
    with kb.loop(0, length) as loop:
        row = kb.gep(src, kb.mul(loop.iv, ldb))
        out = kb.gep(dst, kb.mul(loop.iv, cols * w))
        for col in range(cols):
            kb.store(kb.load(row, col * w, vector=True), out, col * w)


def _dot_tile(kb: KernelBuilder, mats: Matrices, i: Index, rows: int, k: int,
              epilogue: Epilogue) -> None:
    """N == 1: C[i + r] = dot(A[i + r, :], B[:]) over the contiguous K axis, vectorized
    with several accumulation chains per row, then a horizontal sum and a scalar tail."""
    w = kb.vector_width
    chains = max(1, DOT_CHAINS // rows)
    a_rows = [_ptr(kb, mats.a, _mul(kb, _add(kb, i, r), mats.lda)) for r in range(rows)]

    def step(kk: Index, accs: list[SSAValue], chain_of: int) -> list[SSAValue]:
        b = kb.load(mats.b, kk, vector=True)
        accs = list(accs)
        for r in range(rows):
            slot = r * chains + chain_of
            accs[slot] = _fma(kb, kb.load(a_rows[r], kk, vector=True), b, accs[slot])
        return accs

    accs = [kb.vconst(0.0)] * (rows * chains)
    span = w * chains
    k_main = k // span * span
    if k_main:
        with kb.loop(0, k_main, span, carried=accs) as loop:
            cur = loop.carried
            for u in range(chains):
                cur = step(_add(kb, loop.iv, u * w), cur, u)
            loop.yield_(*cur)
        accs = loop.results
    k_vec = k // w * w
    for u, kk in enumerate(range(k_main, k_vec, w)):
        accs = step(kk, accs, u % chains)
    for r in range(rows):
        if k_vec:
            acc = accs[r * chains]
            for u in range(1, chains):
                acc = kb.fadd(acc, accs[r * chains + u])
            total = kb.hsum(acc)
        else:
            total = kb.fconst(0.0)
        for kk in range(k_vec, k):
            total = _fma(kb, kb.load(a_rows[r], kk), kb.load(mats.b, kk), total)
        row = _add(kb, i, r)
        kb.store(epilogue.apply(kb, total, row, 0, False), mats.c, row)
    epilogue.finish_tile(kb, _ptr(kb, mats.c, i), rows, 1, 1, 1)


def _is_dot(mats: Matrices, n: int) -> bool:
    return n == 1 and mats.ldb == 1


def emit_gemm(kb: KernelBuilder, mats: Matrices, m: Index, n: int, k: int,
              epilogue: Epilogue = NO_EPILOGUE, plan: GemmPlan | None = None,
              rows: Span | None = None, cols: Span | None = None) -> None:
    """C[rows, cols] = epilogue(A[rows, :] @ B[:, cols]) of C[M, N] = A[M, K] @ B[K, N].

    `rows` (default: all) is non-empty, starts at a multiple of MR and ends at one or at
    M; `cols` likewise in whole panels of NR·W columns. Loop order: K blocks (the first
    block writes C, later ones add to it, the last applies the epilogue) → column panels
    of NR·W (packed into a stack buffer first with `plan.pack`) → row tiles of MR; the
    columns past the last whole panel as one narrower tile whose last vector is masked.
    With a prepacked B (`mats.packed`, see `pack_rhs`) every panel is already contiguous:
    column panels → K blocks → row tiles, nothing packed at run time. A run-time `m`
    (an i64; `plan` then given) loops over its whole row tiles and gives the rest the
    static tile of its size."""
    w = kb.vector_width
    plan = plan or gemm_plan(m, n, k, w, mats.packed)
    rows = rows if rows is not None else (0, m)
    cols = cols if cols is not None else (0, n)
    mr = plan.mr
    m_full = _round_down(kb, m, mr)
    if _is_dot(mats, n):
        _sweep(kb, rows, m_full, m, mr,
               lambda i, size: _dot_tile(kb, mats, i, size, k, epilogue))
        return
    nb = plan.nr * w
    n_full = n // nb * nb
    rest = n - n_full
    blocks = -(-k // plan.kc)
    kc = -(-k // blocks)
    kc = -(-kc // K_UNROLL) * K_UNROLL  # near-equal blocks, whole unrolled steps
    buffer = kb.alloca(min(kc, k) * nb) if plan.pack and n_full else None
    prefetch = PREFETCH_C and (plan.pack or (mats.packed and blocks > 1))

    def k_blocks(body: Callable[[KBlock], None]) -> None:
        if blocks == 1:
            body(KBlock(0, k))
            return
        with kb.loop(0, k, kc) as loop:
            k0 = loop.iv
            if k % kc:
                left = kb.sub(k, k0)
                length = kb.select(kb.icmp("slt", left, kc), left, kb.index(kc))
            else:
                length = kc
            body(KBlock(k0, length, kb.icmp("eq", k0, 0), kb.icmp("sge", k0, k - kc)))

    def tiles(j: Index, ncols: int, ks: KBlock, b: SSAValue, ldb: int, lanes: int = 0,
              b_offsets: Sequence[int] | None = None) -> None:
        def tile(i: Index, size: int) -> None:
            a_rows = [_ptr(kb, mats.a, _add(kb, _mul(kb, _add(kb, i, r), mats.lda), ks.start))
                      for r in range(size)]
            c = _ptr(kb, mats.c, _add(kb, _mul(kb, i, mats.ldc), j))
            _micro_kernel(kb, a_rows, b, ldb, c, mats.ldc, ncols, ks, epilogue, i, j, lanes,
                          prefetch, b_offsets, plan.streams)

        _sweep(kb, rows, m_full, m, mr, tile)

    def edge_tiles(ks: KBlock, b: SSAValue, ldb: int) -> None:
        tiles(n_full, -(-rest // w), ks, b, ldb, rest % w)

    if mats.packed:  # panel j/NB is the contiguous [K, NB] block at B + j·K
        def panels(j: Index, count: int) -> None:
            """`count` consecutive whole panels from column j in one tile (several
            concurrent streams of B when a tile has few rows)."""
            base = _ptr(kb, mats.b, _mul(kb, j, k))
            offsets = [p * k * nb + q * w for p in range(count) for q in range(plan.nr)]
            k_blocks(lambda ks: tiles(j, plan.nr * count, ks,
                                      _ptr(kb, base, _mul(kb, ks.start, nb)), nb,
                                      b_offsets=offsets))

        if n_full:
            lo, stop = cols[0], _min(kb, cols[1], n_full)
            span = plan.group * nb
            if plan.group > 1:
                if isinstance(lo, int) and isinstance(stop, int):
                    groups_end: Index = lo + (stop - lo) // span * span
                else:
                    groups_end = kb.add(lo, kb.mul(kb.sdiv(kb.sub(stop, lo), span), span))
                with kb.loop(lo, groups_end, span) as loop:
                    panels(loop.iv, plan.group)
                lo = groups_end
            with kb.loop(lo, stop, nb) as loop:
                panels(loop.iv, 1)
        if rest:  # the last, narrower panel: [K, rest] at B + n_full·K
            _when(kb, cols[1], n_full, lambda: k_blocks(lambda ks: edge_tiles(
                ks, _ptr(kb, mats.b, _add(kb, n_full * k, _mul(kb, ks.start, rest))), rest)))
        return

    def b_at(ks: KBlock, j: Index) -> SSAValue:
        return _ptr(kb, mats.b, _add(kb, _mul(kb, ks.start, mats.ldb), j))

    def column_sweep(ks: KBlock) -> None:
        def panel(j: Index, _size: int) -> None:
            if buffer is not None:
                _pack_panel(kb, b_at(ks, j), mats.ldb, ks.length, buffer, plan.nr)
                tiles(j, plan.nr, ks, buffer, nb)
            else:
                tiles(j, plan.nr, ks, b_at(ks, j), mats.ldb)

        if n_full:
            _sweep(kb, cols, n_full, n_full, nb, panel)
        if rest:
            _when(kb, cols[1], n_full, lambda: edge_tiles(ks, b_at(ks, n_full), mats.ldb))

    k_blocks(column_sweep)


# ----------------------------------------------------------------------------- batches and parts


def _batch_offsets(kb: KernelBuilder, geom: GemmGeometry, flat: SSAValue) -> list[Index]:
    """Element offsets of matrix number `flat` (row-major over geom.batch) in A, B, C."""
    offsets: list[Index] = [0, 0, 0]
    rest = flat
    for d in reversed(range(len(geom.batch))):
        index = kb.srem(rest, geom.batch[d]) if d else rest
        if d:
            rest = kb.sdiv(rest, geom.batch[d])
        for t, strides in enumerate((geom.a_strides, geom.b_strides, geom.c_strides)):
            if strides[d]:
                offsets[t] = _add(kb, offsets[t], _mul(kb, index, strides[d]))
    return offsets


def _emit_batched(kb: KernelBuilder, geom: GemmGeometry, a: SSAValue, b: SSAValue,
                  c: SSAValue, body) -> None:
    """Loop over the batch dims of `geom`, calling body(a_ptr, b_ptr, c_ptr) per matrix."""

    def level(d: int, offsets: tuple[Index, Index, Index]) -> None:
        if d == len(geom.batch):
            body(*(_ptr(kb, p, off) for p, off in zip((a, b, c), offsets, strict=True)))
            return
        with kb.loop(0, geom.batch[d]) as loop:
            strides = (geom.a_strides[d], geom.b_strides[d], geom.c_strides[d])
            level(d + 1, tuple(_add(kb, off, _mul(kb, loop.iv, s)) if s else off
                               for off, s in zip(offsets, strides, strict=True)))

    level(0, (0, 0, 0))


def part_range(kb: KernelBuilder, total: Index, part: SSAValue,
               parts: SSAValue) -> tuple[SSAValue, SSAValue]:
    """[total·part / parts, total·(part + 1) / parts): a balanced share of `total` units."""
    lo = kb.sdiv(kb.mul(part, total), parts)
    hi = kb.sdiv(kb.mul(kb.add(part, 1), total), parts)
    return lo, hi


def _emit_parts(kb: KernelBuilder, geom: GemmGeometry, a: SSAValue, b: SSAValue, c: SSAValue,
                unit: int, length: int, part: SSAValue, parts: SSAValue, body) -> None:
    """The share of part `part` of the work units: the matrices of the batch cut into
    ⌈length / unit⌉ units of `unit` rows or columns each, flattened, split evenly;
    body(a_ptr, b_ptr, c_ptr, span) per matrix with the span of rows or columns it owns
    there. A part without units does nothing."""
    per = -(-length // unit)
    count = math.prod(geom.batch)
    lo, hi = part_range(kb, count * per, part, parts)

    def span(u0: Index, u1: Index) -> Span:
        return _mul(kb, u0, unit), _min(kb, _mul(kb, u1, unit), kb.index(length))

    with kb.if_(kb.icmp("slt", lo, hi)):
        if count == 1:
            body(a, b, c, span(lo, hi))
        else:
            first = kb.sdiv(lo, per)
            stop = kb.add(kb.sdiv(kb.sub(hi, 1), per), 1)
            with kb.loop(first, stop) as loop:
                base = kb.mul(loop.iv, per)
                u0 = _max(kb, kb.sub(lo, base), kb.index(0))
                u1 = _min(kb, kb.sub(hi, base), kb.index(per))
                ptrs = [_ptr(kb, p, off) for p, off in
                        zip((a, b, c), _batch_offsets(kb, geom, loop.iv), strict=True)]
                body(*ptrs, span(u0, u1))


def split_columns(geom: GemmGeometry, plan: GemmPlan, width: int) -> bool:
    """Whether parts split the columns (whole NR·W panels) rather than the rows (whole
    MR tiles): decode shapes, where each part then streams its share of B, and shapes
    with at least as many column panels as row tiles (each part packs only its own
    panels of B; a row split packs all of B in every part)."""
    if geom.n == 1:
        return False
    if geom.m <= SMALL_M:
        return True
    return -(-geom.n // (plan.nr * width)) >= -(-geom.m // plan.mr)


def rhs_packed(op: Operation) -> bool:
    """Whether the op's rhs holds a weight in the prepacked layout of `pack_rhs`: the op
    has a (unit) property `packed_rhs`, set when the weight is packed at bind time."""
    return getattr(op, "packed_rhs", None) is not None


def _build_gemm(op: Operation, name: str, vector_width: int, bias: SSAValue | None,
                activation: str | None, partitioned: bool = False,
                packed_rhs: bool | None = None) -> llvm.FuncOp:
    if is_dynamic(op):
        return _build_dynamic_gemm(op, name, vector_width, bias, activation, partitioned,
                                   rhs_packed(op) if packed_rhs is None else packed_rhs)
    lhs, rhs = shape_of(op.lhs), shape_of(op.rhs)
    has_bias = bias is not None
    pa = (1, *lhs) if len(lhs) == 1 else lhs
    mode = _bias_mode(lhs, rhs, shape_of(bias)[0], pa[-2]) if has_bias else "none"
    geom = gemm_geometry(lhs, rhs, fold_batch=mode != "row")
    packed = rhs_packed(op) if packed_rhs is None else packed_rhs
    if packed and (len(rhs) != 2 or geom.batch):
        raise ValueError(f"{op.name}: a prepacked rhs must be a 2-D weight, got {list(rhs)} "
                         f"against lhs {list(lhs)}")
    plan = gemm_plan(geom.m, geom.n, geom.k, vector_width, packed)
    pointers = 4 if has_bias else 3
    kb = KernelBuilder(name, [PTR] * pointers + ([i64, i64] if partitioned else []),
                       vector_width=vector_width)
    a, b, *rest = kb.args[:pointers]
    bias_ptr, c = (rest[0], rest[1]) if has_bias else (None, rest[0])
    epilogue = Epilogue(bias_ptr, mode, activation)
    _emit_static_gemm(kb, geom, plan, (a, b, c), epilogue, packed, partitioned)
    kb.ret()
    return kb.finish()


def _emit_static_gemm(kb: KernelBuilder, geom: GemmGeometry, plan: GemmPlan,
                      pointers: tuple[SSAValue, SSAValue, SSAValue], epilogue: Epilogue,
                      packed: bool, partitioned: bool) -> None:
    """The whole (or, `partitioned`, this part's share of the) product of a static
    geometry: a loop over its batch, each matrix by `emit_gemm`."""
    a, b, c = pointers

    def matrix(pa_: SSAValue, pb_: SSAValue, pc_: SSAValue, rows: Span | None = None,
               cols: Span | None = None) -> None:
        mats = Matrices(pa_, pb_, pc_, geom.k, geom.n, geom.n, packed)
        emit_gemm(kb, mats, geom.m, geom.n, geom.k, epilogue, plan, rows, cols)

    if not partitioned:
        _emit_batched(kb, geom, a, b, c, matrix)
    elif split_columns(geom, plan, kb.vector_width):
        _emit_parts(kb, geom, a, b, c, plan.nr * kb.vector_width, geom.n, *kb.args[-2:],
                    lambda pa_, pb_, pc_, span: matrix(pa_, pb_, pc_, cols=span))
    else:
        _emit_parts(kb, geom, a, b, c, plan.mr, geom.m, *kb.args[-2:],
                    lambda pa_, pb_, pc_, span: matrix(pa_, pb_, pc_, rows=span))


# ----------------------------------------------------------------------------- run-time rows


RowsCase = Callable[[Index], None]
"""Emits the kernel's work for a row count (a run-time i64, or the static 1)."""


def _runtime_rows(kb: KernelBuilder, shape: Sequence[Index]) -> Index:
    """The product of `shape` (ints and run-time i64 sizes): a kernel's M, an i64 when a
    dim is a run-time size."""
    static = math.prod(d for d in shape if isinstance(d, int))
    dynamic = [d for d in shape if not isinstance(d, int)]
    if not dynamic:
        return static
    total = dynamic[0]
    for d in dynamic[1:]:
        total = kb.mul(total, d)
    return total if static == 1 else kb.mul(total, static)


def _rows_classes(kb: KernelBuilder, m: SSAValue, single: RowsCase, few: RowsCase | None,
                  many: RowsCase) -> None:
    """Branch on the run-time row count: m == 1 → single(1) (the static code of one row),
    1 < m ≤ SMALL_M → few(m) (the decode plan; `few` None: `many` takes them), m >
    SMALL_M → many(m)."""
    with kb.if_(kb.icmp("eq", m, 1)):
        single(1)
    if few is None:
        with kb.if_(kb.icmp("sgt", m, 1)):
            many(m)
        return
    with kb.if_(kb.insert(llvm.AndOp(kb.icmp("sgt", m, 1), kb.icmp("sle", m, SMALL_M)))):
        few(m)
    with kb.if_(kb.icmp("sgt", m, SMALL_M)):
        many(m)


def _part_spans(kb: KernelBuilder, rows: tuple[int, Index], cols: tuple[int, Index],
                by_cols: bool | SSAValue, part: SSAValue, parts: SSAValue,
                body: Callable[[Span, Span], None]) -> None:
    """body(row span, column span) of part `part` of `parts`: the whole units of one axis
    (`rows` and `cols` are (unit, length) pairs) split evenly, the other axis whole; the
    split axis is the columns when `by_cols` holds (decided at build or run time). A part
    without units does nothing."""
    (row_unit, m), (col_unit, n) = rows, cols
    if isinstance(by_cols, bool):
        unit, length = cols if by_cols else rows
        lo, hi = part_range(kb, _ceil_div(kb, length, unit), part, parts)
        with kb.if_(kb.icmp("slt", lo, hi)):
            span = (kb.mul(lo, unit), _min(kb, kb.mul(hi, unit), kb.index(length)))
            body((0, m), span) if by_cols else body(span, (0, n))
        return
    total = kb.select(by_cols, kb.index(_ceil_div(kb, n, col_unit)),
                      kb.index(_ceil_div(kb, m, row_unit)))
    unit = kb.select(by_cols, kb.index(col_unit), kb.index(row_unit))
    length = kb.select(by_cols, kb.index(n), kb.index(m))
    lo, hi = part_range(kb, total, part, parts)
    with kb.if_(kb.icmp("slt", lo, hi)):
        start, stop = kb.mul(lo, unit), _min(kb, kb.mul(hi, unit), length)
        zero = kb.index(0)
        body((kb.select(by_cols, zero, start), kb.select(by_cols, kb.index(m), stop)),
             (kb.select(by_cols, start, zero), kb.select(by_cols, stop, kb.index(n))))


def _dynamic_operands(op: Operation) -> list[si.Shape]:
    """The symbolic operand shapes of a matmul-family op whose `?` dims may only be the
    leading (row) dims of its first operand: M is read at run time, K, N and the
    weights stay static. Anything else is a DynamicKernelError naming the op."""
    shapes = operand_shapes(op)
    lhs, *others = shapes
    where = f"{op.name} {[si.fmt(s) for s in shapes]}"
    if any(not si.is_static(d) and not isinstance(d, str) for s in shapes for d in s):
        raise DynamicKernelError(f"{where}: a `?` dim without its symbol "
                                 f"(the op needs rlx.operand_dims)")
    if len(lhs) < 2 or not si.is_static(lhs[-1]):
        raise DynamicKernelError(f"{where}: only the rows of the lhs may be symbolic "
                                 f"(K = {lhs[-1]} must be static)")
    for shape in others[:-1]:
        if not si.is_static_shape(shape):
            raise DynamicKernelError(f"{where}: the weight operands must be static, got "
                                     f"{si.fmt(shape)}")
    return shapes


def _build_dynamic_gemm(op: Operation, name: str, vector_width: int, bias: SSAValue | None,
                        activation: str | None, partitioned: bool,
                        packed: bool) -> llvm.FuncOp:
    """lhs[..., M, K] @ rhs[K, N] (+ bias, activation) with M, the product of the lhs's
    leading dims, read from the kernel's size arguments. One row: the static code of
    M = 1; up to SMALL_M rows: the decode plan; more: the large-M plan; each with a loop
    over whole row tiles and the rest dispatched to the static tile of its size. Parts
    split the columns, or (large M, fewer panels than row tiles at run time) the rows."""
    shapes = _dynamic_operands(op)
    lhs, rhs = shapes[0], shapes[1]
    if len(rhs) > 2:
        raise DynamicKernelError(
            f"{op.name}: a batched rhs {si.fmt(rhs)} against the symbolic lhs {si.fmt(lhs)}: "
            f"the batch cannot fold into the rows (make the rhs 2-D or the lhs static)")
    k = lhs[-1]
    n = rhs[-1] if len(rhs) == 2 else 1
    mode = "none"
    if bias is not None:
        mode = "scalar" if shapes[2][0] == 1 else "col"
        if len(rhs) == 1 and mode == "col":
            raise DynamicKernelError(f"{op.name}: a bias over the symbolic rows of "
                                     f"{si.fmt(lhs)} @ {si.fmt(rhs)}")
    pointers = 4 if bias is not None else 3
    symbols = kernel_symbols(op)
    kb = KernelBuilder(name, [PTR] * pointers + [i64] * len(symbols)
                       + ([i64, i64] if partitioned else []), vector_width=vector_width)
    a, b, *rest = kb.args[:pointers]
    bias_ptr, c = (rest[0], rest[1]) if bias is not None else (None, rest[0])
    epilogue = Epilogue(bias_ptr, mode, activation)
    sizes = RuntimeDims.of(op, kb.args[pointers:pointers + len(symbols)])
    m = _runtime_rows(kb, sizes.shape(0)[:-1])
    mats = Matrices(a, b, c, k, n, n, packed)
    width = vector_width

    def single(_rows: Index) -> None:
        geom = GemmGeometry((), (), (), (), 1, n, k)
        _emit_static_gemm(kb, geom, gemm_plan(1, n, k, width, packed), (a, b, c), epilogue,
                          packed, partitioned)

    def rows_of(plan: GemmPlan, split_by_columns: Callable[[SSAValue], bool | SSAValue]) -> RowsCase:
        def emit(rows: Index) -> None:
            if not partitioned:
                emit_gemm(kb, mats, rows, n, k, epilogue, plan)
                return
            _part_spans(kb, (plan.mr, rows), (plan.nr * width, n), split_by_columns(rows),
                        *kb.args[-2:],
                        lambda rs, cs: emit_gemm(kb, mats, rows, n, k, epilogue, plan, rs, cs))
        return emit

    def more_panels(rows: SSAValue) -> bool | SSAValue:
        """split_columns at run time: at least as many column panels as row tiles."""
        if n == 1:
            return False
        large = gemm_plan(SMALL_M + 1, n, k, width, packed)
        panels = _ceil_div(kb, n, large.nr * width)
        return kb.icmp("sge", kb.index(panels), _ceil_div(kb, rows, large.mr))

    few = rows_of(gemm_plan(SMALL_M, n, k, width, packed), lambda rows: n != 1)
    many = rows_of(gemm_plan(SMALL_M + 1, n, k, width, packed), more_panels)
    _rows_classes(kb, m, single, few, many)
    kb.ret()
    return kb.finish()


def _activation_of(op: lir.FusedMatmulOp) -> str | None:
    return op.activation.data.value if op.activation is not None else None


def build_matmul(op: lir.MatmulOp, name: str, vector_width: int, *,
                 packed_rhs: bool | None = None) -> llvm.FuncOp:
    """out = lhs @ rhs (np.matmul); `packed_rhs` (default: `rhs_packed(op)`): the rhs is
    a weight in the layout of `pack_rhs`."""
    return _build_gemm(op, name, vector_width, None, None, packed_rhs=packed_rhs)


def build_fused_matmul(op: lir.FusedMatmulOp, name: str, vector_width: int, *,
                       packed_rhs: bool | None = None) -> llvm.FuncOp:
    """out = activation(lhs @ rhs + bias), applied to the accumulators in registers."""
    return _build_gemm(op, name, vector_width, op.bias, _activation_of(op),
                       packed_rhs=packed_rhs)


def build_matmul_partitioned(op: lir.MatmulOp, name: str, vector_width: int, *,
                             packed_rhs: bool | None = None) -> llvm.FuncOp:
    """build_matmul plus trailing (part, parts): this part's share of out."""
    return _build_gemm(op, name, vector_width, None, None, partitioned=True,
                       packed_rhs=packed_rhs)


def build_fused_matmul_partitioned(op: lir.FusedMatmulOp, name: str, vector_width: int, *,
                                   packed_rhs: bool | None = None) -> llvm.FuncOp:
    """build_fused_matmul plus trailing (part, parts): this part's share of out."""
    return _build_gemm(op, name, vector_width, op.bias, _activation_of(op), partitioned=True,
                       packed_rhs=packed_rhs)


# ----------------------------------------------------------------------------- dequant_matmul


def _and(kb: KernelBuilder, a: SSAValue, mask: int) -> SSAValue:
    return kb.insert(llvm.AndOp(a, kb.constant(mask, a.type)))


def _lshr(kb: KernelBuilder, a: SSAValue, bits: int) -> SSAValue:
    return kb.insert(llvm.LShrOp(a, kb.constant(bits, a.type)))


def _int_op(kb: KernelBuilder, op_type: type[Operation], a: SSAValue, b: int) -> SSAValue:
    return kb.insert(op_type(a, kb.constant(b, a.type)))


def _retyped(value: SSAValue, element: Attribute) -> Attribute:
    """`element`, or a vector of it as long as `value` when `value` is a vector."""
    ty = value.type
    return vector_type(ty.get_shape()[0], element) if isinstance(ty, VectorType) else element


def _f16_to_f32(kb: KernelBuilder, raw: SSAValue) -> SSAValue:
    """f16s (as their i16 bits, a scalar or a vector) widened to f32 exactly, with integer
    ops and one exact multiply: (|h| << 13) read as f32 is h's magnitude scaled by 2^-112
    (normal and subnormal alike), inf/NaN get the all-ones exponent, then the sign is
    or-ed in. SSE-only targets lack F16C, where `fpext half` would become a libcall MCJIT
    cannot resolve."""
    h = kb.insert(llvm.ZExtOp(raw, _retyped(raw, i32)))
    magnitude = _int_op(kb, llvm.AndOp, h, 0x7FFF)
    shifted = _int_op(kb, llvm.ShlOp, magnitude, 13)
    as_float = _retyped(raw, f32)
    scaled = kb.bitcast(kb.fmul(kb.bitcast(shifted, as_float), 2.0**112), h.type)
    special = kb.icmp("uge", magnitude, kb.constant(0x7C00, h.type))
    bits = kb.select(special, _int_op(kb, llvm.OrOp, shifted, 0x7F800000), scaled)
    sign = _int_op(kb, llvm.ShlOp, _int_op(kb, llvm.AndOp, h, 0x8000), 16)
    return kb.bitcast(kb.or_(bits, sign), as_float)


def _half_to_f32(kb: KernelBuilder, raw: SSAValue) -> SSAValue:
    """i16 bits of f16s (scalar or vector) as f32: F16C's vcvtph2ps on AVX targets."""
    if kb.vector_width >= 8:
        return kb.insert(llvm.FPExtOp(kb.bitcast(raw, _retyped(raw, f16)), _retyped(raw, f32)))
    return _f16_to_f32(kb, raw)


def _bf16_to_f32(kb: KernelBuilder, raw: SSAValue) -> SSAValue:
    """i16 bits of bf16s (scalar or vector) as f32: the top half of an f32's bits."""
    wide = kb.insert(llvm.ZExtOp(raw, _retyped(raw, i32)))
    return kb.bitcast(_int_op(kb, llvm.ShlOp, wide, 16), _retyped(raw, f32))


def _f16_at(kb: KernelBuilder, block: SSAValue, offset: int) -> SSAValue:
    """The little-endian f16 at byte `offset` of a block as f32 (any alignment)."""
    return _half_to_f32(kb, kb.load(_ptr(kb, block, offset, i8), element=i16, align=1))


def _f16_scale(kb: KernelBuilder, block: SSAValue) -> SSAValue:
    """The block's little-endian f16 scale as f32 (bytes 0-1, any alignment)."""
    return _f16_at(kb, block, 0)


def _byte(kb: KernelBuilder, block: SSAValue, offset: int, signed: bool = False) -> SSAValue:
    """Byte `offset` of a block widened to i32 (zero- or sign-extended)."""
    raw = kb.load(block, offset, element=i8)
    return kb.insert((llvm.SExtOp if signed else llvm.ZExtOp)(raw, i32))


def _bytes(kb: KernelBuilder, block: SSAValue, offset: int) -> SSAValue:
    """W consecutive bytes of a block from `offset`, a vector of i8."""
    return kb.load(block, offset, vector=True, element=i8, align=1)


def _nibbles(kb: KernelBuilder, block: SSAValue, offset: int, first: int, span: int) -> SSAValue:
    """Nibbles of W values from `first` (i8 vector), where each group of 2·span values
    is span bytes from `offset` on: low nibbles first, then the high ones."""
    group, within = divmod(first, 2 * span)
    raw = _bytes(kb, block, offset + group * span + within % span)
    return _and(kb, raw, 0x0F) if within < span else _lshr(kb, raw, 4)


def _lane_bits(kb: KernelBuilder, block: SSAValue, offset: int, first: int) -> SSAValue:
    """Bits first..first+W of the little-endian u32 at `offset`, each as 0 or 16 (i32
    vector): the 5th bits of q5_0/q5_1."""
    word = kb.load(kb.gep(block, offset, i8), element=i32, align=1)
    lanes = kb.bitcast(kb.splat(kb.bitcast(word, f32)), vector_type(kb.vector_width, i32))
    shifts = kb.insert(llvm.ConstantOp(DenseIntOrFPElementsAttr.from_list(
        lanes.type, [first + lane for lane in range(kb.vector_width)]), lanes.type))
    bits = _and(kb, kb.insert(llvm.LShrOp(lanes, shifts)), 1)
    return _int_op(kb, llvm.ShlOp, bits, 4)


def _k_scale_min(kb: KernelBuilder, block: SSAValue, sub: int) -> tuple[SSAValue, SSAValue]:
    """(d·scale, −dmin·min) of sub-block `sub` of a q4_K/q5_K block: 6-bit scale and min
    packed in bytes 4-15 (sub-blocks 0-3 in the low 6 bits of bytes 0-3 / 4-7, sub-blocks 4-7
    as nibbles of bytes 8-11 plus the top 2 bits of bytes 0-3 / 4-7)."""
    def packed(i: int) -> SSAValue:
        return _byte(kb, block, 4 + i)

    if sub < 4:
        scale, low_min = _and(kb, packed(sub), 63), _and(kb, packed(sub + 4), 63)
    else:
        both = packed(sub + 4)
        scale = kb.or_(_and(kb, both, 0x0F), _int_op(kb, llvm.ShlOp, _lshr(kb, packed(sub - 4), 6), 4))
        low_min = kb.or_(_lshr(kb, both, 4), _int_op(kb, llvm.ShlOp, _lshr(kb, packed(sub), 6), 4))
    d = kb.fmul(_f16_at(kb, block, 0), kb.sitofp(scale, f32))
    dmin = kb.fmul(_f16_at(kb, block, 2), kb.sitofp(low_min, f32))
    return d, kb.fneg(dmin)


Affine = tuple[SSAValue | None, SSAValue | None]
"""(scale, offset) scalars of a group of values: value = q·scale + offset (None: absent)."""


@dataclass(frozen=True)
class DequantScheme:
    """How a kernel reads one GGUF block type, in registers.

    A block of `values` values is `bytes` bytes; every `group` consecutive values share an
    affine map value = q·scale + offset (`affine(kb, block, group_index)`, scalars);
    `quants(kb, block, first)` gives the W lanes of q from value `first` as an f32 vector
    (a W-lane chunk never crosses a group). Float types (`values` == 1) have no affine map:
    `quants` gives the values themselves, `scalar(kb, pointer)` reads one for the K tail."""

    values: int
    bytes: int
    group: int
    quants: Callable[[KernelBuilder, SSAValue, int], SSAValue]
    affine: Callable[[KernelBuilder, SSAValue, int], Affine] = lambda kb, block, g: (None, None)
    scalar: Callable[[KernelBuilder, SSAValue], SSAValue] | None = None


def _q8_0(kb: KernelBuilder, block: SSAValue, first: int) -> SSAValue:
    return kb.sitofp(_bytes(kb, block, 2 + first), kb.vec)


def _q4_0(kb: KernelBuilder, block: SSAValue, first: int) -> SSAValue:
    return kb.sitofp(kb.sub(_nibbles(kb, block, 2, first, 16), 8), kb.vec)


def _q4_1(kb: KernelBuilder, block: SSAValue, first: int) -> SSAValue:
    return kb.sitofp(_nibbles(kb, block, 4, first, 16), kb.vec)


def _q5(qh: int, qs: int, bias: int) -> Callable[[KernelBuilder, SSAValue, int], SSAValue]:
    def quants(kb: KernelBuilder, block: SSAValue, first: int) -> SSAValue:
        low = _nibbles(kb, block, qs, first, 16)
        q = kb.or_(kb.insert(llvm.ZExtOp(low, vector_type(kb.vector_width, i32))),
                   _lane_bits(kb, block, qh, first))
        return kb.sitofp(kb.sub(q, bias) if bias else q, kb.vec)
    return quants


def _q4_k(kb: KernelBuilder, block: SSAValue, first: int) -> SSAValue:
    return kb.sitofp(_nibbles(kb, block, 16, first, 32), kb.vec)


def _q5_k(kb: KernelBuilder, block: SSAValue, first: int) -> SSAValue:
    # bit (first // 32) of qh[first % 32 ...] is the 5th bit
    high = _and(kb, _lshr(kb, _bytes(kb, block, 16 + first % 32), first // 32), 1)
    q = kb.or_(_nibbles(kb, block, 48, first, 32), _int_op(kb, llvm.ShlOp, high, 4))
    return kb.sitofp(q, kb.vec)


def _q6_k(kb: KernelBuilder, block: SSAValue, first: int) -> SSAValue:
    # per half of 128 values: 64 ql bytes (nibbles) and 32 qh bytes of 4 2-bit fields
    half, within = divmod(first, 128)
    high = _and(kb, _lshr(kb, _bytes(kb, block, 128 + half * 32 + within % 32), 2 * (within // 32)), 3)
    q = kb.or_(_nibbles(kb, block, 0, first, 64), _int_op(kb, llvm.ShlOp, high, 4))
    return kb.sitofp(kb.sub(q, 32), kb.vec)


def _d_only(kb: KernelBuilder, block: SSAValue, g: int) -> Affine:
    return _f16_scale(kb, block), None


def _d_and_m(kb: KernelBuilder, block: SSAValue, g: int) -> Affine:
    return _f16_scale(kb, block), _f16_at(kb, block, 2)


def _q6_k_affine(kb: KernelBuilder, block: SSAValue, g: int) -> Affine:
    return kb.fmul(_f16_at(kb, block, 208), kb.sitofp(_byte(kb, block, 192 + g, signed=True), f32)), None


def _f16_values(kb: KernelBuilder, block: SSAValue, first: int) -> SSAValue:
    return _half_to_f32(kb, kb.load(block, first, vector=True, element=i16, align=2))


def _bf16_values(kb: KernelBuilder, block: SSAValue, first: int) -> SSAValue:
    return _bf16_to_f32(kb, kb.load(block, first, vector=True, element=i16, align=2))


SCHEMES: dict[str, DequantScheme] = {
    "f16": DequantScheme(1, 2, 1, _f16_values,
                         scalar=lambda kb, p: _half_to_f32(kb, kb.load(p, element=i16, align=2))),
    "bf16": DequantScheme(1, 2, 1, _bf16_values,
                          scalar=lambda kb, p: _bf16_to_f32(kb, kb.load(p, element=i16, align=2))),
    "q8_0": DequantScheme(32, 34, 32, _q8_0, _d_only),
    "q4_0": DequantScheme(32, 18, 32, _q4_0, _d_only),
    "q4_1": DequantScheme(32, 20, 32, _q4_1, _d_and_m),
    "q5_0": DequantScheme(32, 22, 32, _q5(2, 6, 16), _d_only),
    "q5_1": DequantScheme(32, 24, 32, _q5(4, 8, 0), _d_and_m),
    "q4_k": DequantScheme(256, 144, 32, _q4_k, _k_scale_min),
    "q5_k": DequantScheme(256, 176, 32, _q5_k, _k_scale_min),
    "q6_k": DequantScheme(256, 210, 16, _q6_k, _q6_k_affine),
}
"""Every scheme `lir.dequant_matmul` compiles, described once (see DequantScheme)."""


def _dequant_cols(rows: int, width: int) -> int:
    """Weight rows per tile: R·C accumulators + C weight vectors + 1 x vector fit the
    vector registers (32 with 16 lanes, else 16), at most 4."""
    registers = 32 if width >= 16 else 16
    return max(1, min(4, (registers - 1) // (rows + 1)))


DEQUANT_ROWS = 4
"""Rows of x per dequant_matmul tile."""


def _weights(kb: KernelBuilder, scheme: DequantScheme, block: SSAValue, group: int,
             firsts: Sequence[int]) -> list[SSAValue]:
    """The f32 weight vectors of a group of a block: its chunks from `firsts`, q·scale + offset."""
    scale, offset = scheme.affine(kb, block, group)
    scale = None if scale is None else kb.splat(scale)
    offset = None if offset is None else kb.splat(offset)
    weights = []
    for first in firsts:
        w = scheme.quants(kb, block, first)
        w = w if scale is None else kb.fmul(w, scale)
        weights.append(w if offset is None else kb.fadd(w, offset))
    return weights


def _build_dequant(op: lir.DequantMatmulOp, name: str, vector_width: int,
                   partitioned: bool) -> llvm.FuncOp:
    """The dequant_matmul kernel; over a symbolic x (`?` rows, ABI of dynamic.py) the
    row count M is a run-time size: one row runs the static code of M = 1, more run
    DEQUANT_ROWS-row tiles in a loop and the rest as the static tile of its size. An op
    with `activations q8` (x quantized to q8 blocks first) goes to quant_dot.py."""
    from rlx_mlir.passes.lir_to_llvm import quant_dot  # it builds on this module's helpers

    if activations_of(op) == QuantActivations.Q8:
        return quant_dot.build_q8_dequant(op, name, vector_width, partitioned)
    scheme = SCHEMES[op.scheme.data.value]
    dynamic = is_dynamic(op)
    xs, ws = _dynamic_operands(op)[:2] if dynamic else (shape_of(op.x), shape_of(op.w))
    k, n = xs[-1], ws[0]
    symbols = kernel_symbols(op) if dynamic else ()
    w_lanes = vector_width
    # float types are read in "blocks" of one vector, plus a scalar tail of K % W values
    values = max(scheme.values, w_lanes)
    group = max(scheme.group, w_lanes)
    block_bytes = values // scheme.values * scheme.bytes
    row_bytes = k // scheme.values * scheme.bytes
    if scheme.group % w_lanes and scheme.values > 1:
        raise ValueError(f"dequant_matmul: vector width {w_lanes} does not divide a block")
    tail = k % values
    kb = KernelBuilder(name, [PTR] * 3 + [i64] * len(symbols) + ([i64, i64] if partitioned else []),
                       vector_width=vector_width)
    x, wq, out = kb.args[:3]

    def tile(i: Index, j: Index, rows: int, ncols: int) -> None:
        x_rows = [_ptr(kb, x, _mul(kb, _add(kb, i, r), k)) for r in range(rows)]
        w_rows = [_ptr(kb, wq, _mul(kb, _add(kb, j, c), row_bytes), i8) for c in range(ncols)]
        accs = [kb.vconst(0.0)] * (rows * ncols)
        with kb.loop(0, k // values, carried=accs) as loop:
            blk = loop.iv
            blocks = [kb.gep(w_rows[c], kb.mul(blk, block_bytes), i8) for c in range(ncols)]
            x_off = kb.mul(blk, values)
            cur = list(loop.carried)
            for g in range(values // group):
                firsts = range(g * group, (g + 1) * group, w_lanes)
                weights = [_weights(kb, scheme, blocks[c], g, firsts) for c in range(ncols)]
                for chunk, first in enumerate(firsts):
                    for r in range(rows):
                        xv = kb.load(x_rows[r], _add(kb, x_off, first), vector=True)
                        for c in range(ncols):
                            cur[r * ncols + c] = _fma(kb, xv, weights[c][chunk], cur[r * ncols + c])
            loop.yield_(*cur)
        sums = [kb.hsum(acc) for acc in loop.results]
        for t in range(k - tail, k):  # float types only: K % W values, one at a time
            weights = [scheme.scalar(kb, kb.gep(w_rows[c], t * scheme.bytes, i8)) for c in range(ncols)]
            for r in range(rows):
                xs_t = kb.load(x_rows[r], t)
                for c in range(ncols):
                    sums[r * ncols + c] = kb.fma(xs_t, weights[c], sums[r * ncols + c])
        c_base = _ptr(kb, out, _add(kb, _mul(kb, i, n), j))
        for r in range(rows):
            for c in range(ncols):
                kb.store(sums[r * ncols + c], c_base, r * n + c)

    def rows_case(m: Index, mr: int) -> None:
        """out for `m` rows of x (static, or run-time with `mr` = DEQUANT_ROWS) in tiles of
        `mr` rows × `cols` weight rows; partitioned: this part's share."""
        cols = _dequant_cols(mr, w_lanes)  # weight rows per tile, the same for every row tile

        def emit(rows: Span, weight_rows: Span) -> None:
            def row_tile(i: Index, size: int) -> None:
                _sweep(kb, weight_rows, n // cols * cols, n, cols,
                       lambda j, ncols: tile(i, j, size, ncols))

            _sweep(kb, rows, _round_down(kb, m, mr), m, mr, row_tile)

        if not partitioned:
            emit((0, m), (0, n))
        elif isinstance(m, int):
            part, parts = kb.args[-2:]
            # weight rows unless they are too few to share: each part dequantizes only its
            # own weight rows (splitting x's rows would dequantize all of w in every part)
            by_weight_rows = -(-n // cols) >= min(16, -(-m // mr))
            unit, length = (cols, n) if by_weight_rows else (mr, m)
            lo, hi = part_range(kb, -(-length // unit), part, parts)
            with kb.if_(kb.icmp("slt", lo, hi)):
                span = (kb.mul(lo, unit), _min(kb, kb.mul(hi, unit), kb.index(length)))
                if by_weight_rows:
                    emit((0, m), span)
                else:
                    emit(span, (0, n))
        else:  # the same rule with the run-time row count
            panels = -(-n // cols)
            by_weight_rows = (True if panels >= 16
                              else kb.icmp("sge", kb.index(panels), _ceil_div(kb, m, mr)))
            _part_spans(kb, (mr, m), (cols, n), by_weight_rows, *kb.args[-2:], emit)

    if not dynamic:
        rows_case(math.prod(xs[:-1]), min(DEQUANT_ROWS, math.prod(xs[:-1])))
    else:
        sizes = RuntimeDims.of(op, kb.args[3:3 + len(symbols)])
        _rows_classes(kb, _runtime_rows(kb, sizes.shape(0)[:-1]), lambda _: rows_case(1, 1),
                      None, lambda m: rows_case(m, DEQUANT_ROWS))
    kb.ret()
    return kb.finish()


def build_dequant_matmul(op: lir.DequantMatmulOp, name: str, vector_width: int) -> llvm.FuncOp:
    """out[..., n] = Σ_k x[..., k]·dequant(w)[n, k], dequantized in registers."""
    return _build_dequant(op, name, vector_width, partitioned=False)


def build_dequant_matmul_partitioned(op: lir.DequantMatmulOp, name: str,
                                     vector_width: int) -> llvm.FuncOp:
    """build_dequant_matmul plus trailing (part, parts): this part's share of out."""
    return _build_dequant(op, name, vector_width, partitioned=True)


# ----------------------------------------------------------------------------- dequant_gather


def _decode_row(kb: KernelBuilder, scheme: DequantScheme, src: SSAValue, dst: SSAValue,
                k: int) -> None:
    """dst[0:k] = the k values of the GGUF row at `src` (bytes), block by block with the
    scheme's `quants` and `affine` (as dequant_matmul reads them; every q·scale is exact
    in f32, so the values equal rlx_mlir.core.quants' bit for bit); float types: vectors
    of W values, then a scalar tail."""
    w = kb.vector_width
    if scheme.values == 1:
        chunks = k // w
        if chunks:
            with kb.loop(0, chunks) as loop:
                chunk = kb.gep(src, kb.mul(loop.iv, w * scheme.bytes), i8)
                kb.store(scheme.quants(kb, chunk, 0), dst, kb.mul(loop.iv, w))
        for t in range(chunks * w, k):
            kb.store(scheme.scalar(kb, _ptr(kb, src, t * scheme.bytes, i8)), dst, t)
        return
    if scheme.group % w:
        raise ValueError(f"dequant_gather: vector width {w} does not divide a block")
    with kb.loop(0, k // scheme.values) as loop:
        block = kb.gep(src, kb.mul(loop.iv, scheme.bytes), i8)
        values = kb.gep(dst, kb.mul(loop.iv, scheme.values))
        for g in range(scheme.values // scheme.group):
            firsts = range(g * scheme.group, (g + 1) * scheme.group, w)
            for first, value in zip(firsts, _weights(kb, scheme, block, g, firsts), strict=True):
                kb.store(value, values, first)


def build_dequant_gather(op: lir.DequantGatherOp, name: str, vector_width: int) -> llvm.FuncOp:
    """out[i, :] = dequant(table[ids[i], :]): only the rows it reads are decoded. Returns an
    i32 status: STATUS_INDEX_OUT_OF_RANGE as soon as an id is outside [0, V) (checked
    first, unsigned, so negatives fail: nothing is read or written then), else STATUS_OK.
    `?` dims of ids (and out): the id count is the product of the run-time sizes."""
    scheme = SCHEMES[op.scheme.data.value]
    table_shape, ids_shape = operand_shapes(op)[:2]
    if not si.is_static_shape(table_shape):
        raise DynamicKernelError(f"{op.name}: the table must be static, got {si.fmt(table_shape)}")
    n_rows, row_bytes = table_shape
    k = row_bytes // scheme.bytes * scheme.values
    symbols = kernel_symbols(op) if is_dynamic(op) else ()
    kb = KernelBuilder(name, [PTR] * 3 + [i64] * len(symbols), vector_width=vector_width,
                       result_type=i32)
    table, ids, out = kb.args[:3]
    sizes = RuntimeDims.of(op, kb.args[3:]) if symbols else None
    count = _runtime_rows(kb, sizes.shape(1) if sizes else ids_shape)
    id_element = llvm_element(op.ids.type)
    with kb.loop(0, count, carried=[kb.constant(0, i1)]) as check:
        bad = kb.icmp("uge", load_index(kb, ids, check.iv, id_element), n_rows)
        check.yield_(kb.or_(check.carried[0], bad))
    any_bad = check.results[0]
    with kb.loop(0, kb.select(any_bad, kb.index(0), kb.index(count))) as loop:
        row = load_index(kb, ids, loop.iv, id_element)
        _decode_row(kb, scheme, kb.gep(table, kb.mul(row, row_bytes), i8),
                    kb.gep(out, kb.mul(loop.iv, k)), k)
    kb.ret(kb.select(any_bad, kb.constant(STATUS_INDEX_OUT_OF_RANGE, i32),
                     kb.constant(STATUS_OK, i32)))
    return kb.finish()


BUILDERS = {
    lir.MatmulOp: build_matmul,
    lir.FusedMatmulOp: build_fused_matmul,
    lir.DequantMatmulOp: build_dequant_matmul,
    lir.DequantGatherOp: build_dequant_gather,
}

PARTITIONED = {
    lir.MatmulOp: build_matmul_partitioned,
    lir.FusedMatmulOp: build_fused_matmul_partitioned,
    lir.DequantMatmulOp: build_dequant_matmul_partitioned,
}

RUNTIME_DIMS = {lir.MatmulOp, lir.FusedMatmulOp, lir.DequantMatmulOp, lir.DequantGatherOp}
"""Ops whose builders read `?` dims natively (dynamic.py): M, or the id count, from the
size arguments."""
