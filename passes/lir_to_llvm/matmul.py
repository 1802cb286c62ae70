"""Kernel builders of the f32 GEMMs: `lir.matmul`, `lir.fused_matmul` (the GGUF products
are in dequant.py, their block formats in gguf.py).

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

**Partitioned kernels** (`@kernel(..., partitioned=True)`): the same code with two trailing i64 arguments
(part, parts); part p computes the units [U·p/parts, U·(p+1)/parts) of U work units
spread over the (flattened) batch: whole column panels of NR·W columns for decode
shapes (each thread streams its share of the weight matrix) and wherever there are at
least as many panels as row tiles, else whole MR-row tiles (N == 1: always rows).
`emit_gemm` (one weight, one out, a range of rows and of columns) also builds the f32 form
of `lir.shared_input_matmul` (shared_matmul.py), one call per weight.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from dataclasses import dataclass

from xdsl.dialects import llvm
from xdsl.dialects.builtin import i64
from xdsl.ir import Operation, SSAValue

from rlx_mlir.core import shape_inference as si
from rlx_mlir.core.packing import GEMM_TILES
from rlx_mlir.dialects import lir
from rlx_mlir.dialects.common import shape_of
from rlx_mlir.passes.lir_to_llvm import vmath
from rlx_mlir.passes.lir_to_llvm.builder import PTR, Index, KernelBuilder, Span
from rlx_mlir.passes.lir_to_llvm.dynamic import (
    DynamicKernelError,
    RowsCase,
    RuntimeDims,
    is_dynamic,
    kernel_symbols,
    part_spans,
    row_operands,
    rows_classes,
    runtime_rows,
)
from rlx_mlir.passes.lir_to_llvm.record import kernel

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
                b = kb.vload(self.bias, col, mask) if vector else kb.load(self.bias, col)
            else:
                b = kb.load(self.bias, row if self.bias_mode == "row" else 0)
                if vector:
                    b = kb.splat(b)
            value = kb.fadd(value, b)
        if self.activation is not None and self.inline:
            value = vmath.activation(kb, self.activation, value)
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
                value = kb.vload(ptr, col, lanes) if vector else kb.load(ptr, col)
                kb.vstore(vmath.activation(kb, self.activation, value), ptr, col, lanes)

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
                row(kb.gep(c_base, kb.fold_mul(loop.iv, ldc)))


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
    mask = kb.lane_mask(lanes) if lanes else None

    def col_mask(col: int) -> SSAValue | None:
        return mask if col == cols - 1 else None

    offsets = list(b_offsets) if b_offsets is not None else [col * w for col in range(cols)]

    def step(k: Index, accs: list[SSAValue]) -> list[SSAValue]:
        row = kb.address(b, kb.fold_mul(k, ldb))
        bs = [kb.vload(row, offsets[col], col_mask(col)) for col in range(cols)]
        accs = list(accs)
        for r in range(rows):
            a = kb.splat(kb.load(a_rows[r], k))
            for col in range(cols):
                accs[r * cols + col] = kb.fma(a, bs[col], accs[r * cols + col])
        return accs

    def k_loop(start: Index, stop: Index, step_: int, accs: list[SSAValue]) -> list[SSAValue]:
        with kb.loop(start, stop, step_, carried=accs) as loop:
            cur = loop.carried
            for u in range(step_):
                cur = step(kb.fold_add(loop.iv, u), cur)
            loop.yield_(*cur)
        return loop.results

    if prefetch:
        for r in range(rows):
            for off in range(0, cols * w, 16):
                kb.prefetch(c, r * ldc + off)
    accs = [kb.vconst(0.0)] * (rows * cols)
    if isinstance(ks.length, int) and streams > 1 and ks.length >= streams * K_UNROLL:
        # `streams` K segments at once into the same accumulators: as many concurrent
        # streams of B (memory-level parallelism for a tile that reads B only once)
        seg = ks.length // streams
        with kb.loop(0, seg, carried=accs) as loop:
            cur = loop.carried
            for t in range(streams):
                cur = step(kb.fold_add(loop.iv, t * seg), cur)
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
        summed = [kb.fadd(accs[r * cols + col], kb.vload(c, r * ldc + col * w, col_mask(col)))
                  for r in range(rows) for col in range(cols)]
        accs = summed if ks.first is False else [
            kb.select(ks.first, acc, total) for acc, total in zip(accs, summed, strict=True)]

    def store(with_epilogue: bool) -> None:
        for r in range(rows):
            for col in range(cols):
                value = accs[r * cols + col]
                if with_epilogue:
                    value = epilogue.apply(kb, value, kb.fold_add(i, r), kb.fold_add(j, col * w),
                                           True, col_mask(col))
                kb.vstore(value, c, r * ldc + col * w, col_mask(col))
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
    a_rows = [kb.address(mats.a, kb.fold_mul(kb.fold_add(i, r), mats.lda)) for r in range(rows)]

    def step(kk: Index, accs: list[SSAValue], chain_of: int) -> list[SSAValue]:
        b = kb.load(mats.b, kk, vector=True)
        accs = list(accs)
        for r in range(rows):
            slot = r * chains + chain_of
            accs[slot] = kb.fma(kb.load(a_rows[r], kk, vector=True), b, accs[slot])
        return accs

    accs = [kb.vconst(0.0)] * (rows * chains)
    span = w * chains
    k_main = k // span * span
    if k_main:
        with kb.loop(0, k_main, span, carried=accs) as loop:
            cur = loop.carried
            for u in range(chains):
                cur = step(kb.fold_add(loop.iv, u * w), cur, u)
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
            total = kb.fma(kb.load(a_rows[r], kk), kb.load(mats.b, kk), total)
        row = kb.fold_add(i, r)
        kb.store(epilogue.apply(kb, total, row, 0, False), mats.c, row)
    epilogue.finish_tile(kb, kb.address(mats.c, i), rows, 1, 1, 1)


def _is_dot(mats: Matrices, n: int) -> bool:
    return n == 1 and mats.ldb == 1


def _k_block(k: int, plan: GemmPlan) -> int:
    """K rows per block: near-equal blocks of at most plan.kc, whole unrolled steps."""
    kc = -(-k // -(-k // plan.kc))
    return -(-kc // K_UNROLL) * K_UNROLL


def pack_buffer_floats(k: int, plan: GemmPlan, width: int) -> int:
    """Floats of the stack buffer a packing plan (`plan.pack`) packs a B panel into."""
    return min(_k_block(k, plan), k) * plan.nr * width


def emit_gemm(kb: KernelBuilder, mats: Matrices, m: Index, n: int, k: int,
              epilogue: Epilogue = NO_EPILOGUE, plan: GemmPlan | None = None,
              rows: Span | None = None, cols: Span | None = None,
              pack_buffer: SSAValue | None = None) -> None:
    """C[rows, cols] = epilogue(A[rows, :] @ B[:, cols]) of C[M, N] = A[M, K] @ B[K, N].

    `rows` (default: all) is non-empty, starts at a multiple of MR and ends at one or at
    M; `cols` likewise in whole panels of NR·W columns. Loop order: K blocks (the first
    block writes C, later ones add to it, the last applies the epilogue) → column panels
    of NR·W (packed into a stack buffer first with `plan.pack`) → row tiles of MR; the
    columns past the last whole panel as one narrower tile whose last vector is masked.
    With a prepacked B (`mats.packed`, see `pack_rhs`) every panel is already contiguous:
    column panels → K blocks → row tiles, nothing packed at run time. A run-time `m`
    (an i64; `plan` then given) loops over its whole row tiles and gives the rest the
    static tile of its size. `pack_buffer`: the stack buffer of `plan.pack` (at least
    `pack_buffer_floats` floats; default: one of its own), for products sharing one."""
    w = kb.vector_width
    plan = plan or gemm_plan(m, n, k, w, mats.packed)
    rows = rows if rows is not None else (0, m)
    cols = cols if cols is not None else (0, n)
    mr = plan.mr
    m_full = kb.round_down(m, mr)
    if _is_dot(mats, n):
        kb.tile_sweep(rows, m_full, m, mr,
               lambda i, size: _dot_tile(kb, mats, i, size, k, epilogue))
        return
    nb = plan.nr * w
    n_full = n // nb * nb
    rest = n - n_full
    blocks = -(-k // plan.kc)
    kc = _k_block(k, plan)
    buffer = None
    if plan.pack and n_full:
        buffer = pack_buffer if pack_buffer is not None else kb.alloca(pack_buffer_floats(k, plan, w))
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
            a_rows = [kb.address(mats.a, kb.fold_add(kb.fold_mul(kb.fold_add(i, r), mats.lda), ks.start))
                      for r in range(size)]
            c = kb.address(mats.c, kb.fold_add(kb.fold_mul(i, mats.ldc), j))
            _micro_kernel(kb, a_rows, b, ldb, c, mats.ldc, ncols, ks, epilogue, i, j, lanes,
                          prefetch, b_offsets, plan.streams)

        kb.tile_sweep(rows, m_full, m, mr, tile)

    def edge_tiles(ks: KBlock, b: SSAValue, ldb: int) -> None:
        tiles(n_full, -(-rest // w), ks, b, ldb, rest % w)

    if mats.packed:  # panel j/NB is the contiguous [K, NB] block at B + j·K
        def panels(j: Index, count: int) -> None:
            """`count` consecutive whole panels from column j in one tile (several
            concurrent streams of B when a tile has few rows)."""
            base = kb.address(mats.b, kb.fold_mul(j, k))
            offsets = [p * k * nb + q * w for p in range(count) for q in range(plan.nr)]
            k_blocks(lambda ks: tiles(j, plan.nr * count, ks,
                                      kb.address(base, kb.fold_mul(ks.start, nb)), nb,
                                      b_offsets=offsets))

        if n_full:
            lo, stop = cols[0], kb.fold_min(cols[1], n_full)
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
            kb.when(cols[1], n_full, lambda: k_blocks(lambda ks: edge_tiles(
                ks, kb.address(mats.b, kb.fold_add(n_full * k, kb.fold_mul(ks.start, rest))), rest)))
        return

    def b_at(ks: KBlock, j: Index) -> SSAValue:
        return kb.address(mats.b, kb.fold_add(kb.fold_mul(ks.start, mats.ldb), j))

    def column_sweep(ks: KBlock) -> None:
        def panel(j: Index, _size: int) -> None:
            if buffer is not None:
                _pack_panel(kb, b_at(ks, j), mats.ldb, ks.length, buffer, plan.nr)
                tiles(j, plan.nr, ks, buffer, nb)
            else:
                tiles(j, plan.nr, ks, b_at(ks, j), mats.ldb)

        if n_full:
            kb.tile_sweep(cols, n_full, n_full, nb, panel)
        if rest:
            kb.when(cols[1], n_full, lambda: edge_tiles(ks, b_at(ks, n_full), mats.ldb))

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
                offsets[t] = kb.fold_add(offsets[t], kb.fold_mul(index, strides[d]))
    return offsets


def _emit_batched(kb: KernelBuilder, geom: GemmGeometry, a: SSAValue, b: SSAValue,
                  c: SSAValue, body) -> None:
    """Loop over the batch dims of `geom`, calling body(a_ptr, b_ptr, c_ptr) per matrix."""

    def level(d: int, offsets: tuple[Index, Index, Index]) -> None:
        if d == len(geom.batch):
            body(*(kb.address(p, off) for p, off in zip((a, b, c), offsets, strict=True)))
            return
        with kb.loop(0, geom.batch[d]) as loop:
            strides = (geom.a_strides[d], geom.b_strides[d], geom.c_strides[d])
            level(d + 1, tuple(kb.fold_add(off, kb.fold_mul(loop.iv, s)) if s else off
                               for off, s in zip(offsets, strides, strict=True)))

    level(0, (0, 0, 0))


def _emit_parts(kb: KernelBuilder, geom: GemmGeometry, a: SSAValue, b: SSAValue, c: SSAValue,
                unit: int, length: int, part: SSAValue, parts: SSAValue, body) -> None:
    """The share of part `part` of the work units: the matrices of the batch cut into
    ⌈length / unit⌉ units of `unit` rows or columns each, flattened, split evenly;
    body(a_ptr, b_ptr, c_ptr, span) per matrix with the span of rows or columns it owns
    there. A part without units does nothing."""
    per = -(-length // unit)
    count = math.prod(geom.batch)
    lo, hi = kb.part_range(count * per, part, parts)

    def span(u0: Index, u1: Index) -> Span:
        return kb.fold_mul(u0, unit), kb.fold_min(kb.fold_mul(u1, unit), kb.index(length))

    with kb.if_(kb.icmp("slt", lo, hi)):
        if count == 1:
            body(a, b, c, span(lo, hi))
        else:
            first = kb.sdiv(lo, per)
            stop = kb.add(kb.sdiv(kb.sub(hi, 1), per), 1)
            with kb.loop(first, stop) as loop:
                base = kb.mul(loop.iv, per)
                u0 = kb.fold_max(kb.sub(lo, base), kb.index(0))
                u1 = kb.fold_min(kb.sub(hi, base), kb.index(per))
                ptrs = [kb.address(p, off) for p, off in
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


def _build_dynamic_gemm(op: Operation, name: str, vector_width: int, bias: SSAValue | None,
                        activation: str | None, partitioned: bool,
                        packed: bool) -> llvm.FuncOp:
    """lhs[..., M, K] @ rhs[K, N] (+ bias, activation) with M, the product of the lhs's
    leading dims, read from the kernel's size arguments. One row: the static code of
    M = 1; up to SMALL_M rows: the decode plan; more: the large-M plan; each with a loop
    over whole row tiles and the rest dispatched to the static tile of its size. Parts
    split the columns, or (large M, fewer panels than row tiles at run time) the rows."""
    shapes = row_operands(op)
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
    m = runtime_rows(kb, sizes.shape(0)[:-1])
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
            part_spans(kb, (plan.mr, rows), (plan.nr * width, n), split_by_columns(rows),
                       *kb.args[-2:],
                       lambda rs, cs: emit_gemm(kb, mats, rows, n, k, epilogue, plan, rs, cs))
        return emit

    def more_panels(rows: SSAValue) -> bool | SSAValue:
        """split_columns at run time: at least as many column panels as row tiles."""
        if n == 1:
            return False
        large = gemm_plan(SMALL_M + 1, n, k, width, packed)
        panels = kb.ceil_div(n, large.nr * width)
        return kb.icmp("sge", kb.index(panels), kb.ceil_div(rows, large.mr))

    few = rows_of(gemm_plan(SMALL_M, n, k, width, packed), lambda rows: n != 1)
    many = rows_of(gemm_plan(SMALL_M + 1, n, k, width, packed), more_panels)
    rows_classes(kb, m, single, few, many, SMALL_M)
    kb.ret()
    return kb.finish()


def _activation_of(op: lir.FusedMatmulOp) -> str | None:
    return op.activation.data.value if op.activation is not None else None


@kernel(lir.MatmulOp, partitioned=True, runtime_dims=True)
def build_matmul(op: lir.MatmulOp, name: str, vector_width: int, *, partitioned: bool = False,
                 packed_rhs: bool | None = None) -> llvm.FuncOp:
    """out = lhs @ rhs (np.matmul); `packed_rhs` (default: `rhs_packed(op)`): the rhs is
    a weight in the layout of `pack_rhs`. Partitioned: plus trailing (part, parts), this
    part's share of out."""
    return _build_gemm(op, name, vector_width, None, None, partitioned, packed_rhs)


@kernel(lir.FusedMatmulOp, partitioned=True, runtime_dims=True)
def build_fused_matmul(op: lir.FusedMatmulOp, name: str, vector_width: int, *,
                       partitioned: bool = False, packed_rhs: bool | None = None) -> llvm.FuncOp:
    """out = activation(lhs @ rhs + bias), applied to the accumulators in registers."""
    return _build_gemm(op, name, vector_width, op.bias, _activation_of(op), partitioned,
                       packed_rhs)
