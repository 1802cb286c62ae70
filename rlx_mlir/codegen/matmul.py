"""Kernel builders of the matmul family: `lir.matmul`, `lir.fused_matmul`, `lir.dequant_matmul`.

**matmul / fused_matmul** (np.matmul semantics). The operands are promoted to
[batch..., M, K] @ [batch..., K, N]; each operand gets per-batch-dim element strides
(0 where it broadcasts). When the rhs is shared by the whole batch and the lhs is not
broadcast, the batch folds into M (x[B, S, K] @ w[K, N] is one [B·S, K] @ [K, N]).
Each [M, K] @ [K, N] is computed by register-blocked micro-kernels (`_gemm_tile`): an
MR × (NR·W) tile of C lives in MR·NR vector accumulators carried through the K loop,
which broadcasts A[i, k], loads NR vectors of B[k, j:j+NR·W] and issues MR·NR FMAs
(`llvm.fmuladd`: an FMA where the target has one, never a libm call). Edge tiles are
smaller static variants of the same micro-kernel (M % MR rows; N % (NR·W) columns as
1..NR-1 vectors, then scalar columns; N == 1 uses a dot-product kernel over the
contiguous K axis). K is cut into blocks of at most K_BLOCK by a run-time loop around
the tile sweep (`KBlock`: the first block starts from 0, later ones accumulate into C,
the last applies the epilogue), which keeps the B panel in cache; packing and N
blocking can wrap the same micro-kernel later. The epilogue adds the bias to the
accumulators in registers; relu too, while polynomial activations run as one loop over
the just-stored tile (still in L1) so code size does not grow per accumulator.

**dequant_matmul**: out[m, n] = Σ_k x[m, k]·dequant(w)[n, k] with w the raw GGUF blocks.
A tile of R rows of x × C rows of w keeps R·C vector accumulators; for every 32-element
block it loads the f16 scale (i16 → f16 → f32; an exact integer widening for W=4, as
SSE-only CPUs lack F16C) and the quantized bytes of each of the C
weight rows, converts them to f32 vectors in registers (q8_0: sitofp of i8; q4_0: low
/ high nibbles − 8), multiplies by the scale (the exact f32 product of the reference
dequantizer) and FMAs them with R rows of x. No dequantized weight matrix is stored.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass

from xdsl.dialects import llvm
from xdsl.dialects.builtin import VectorType, f16, f32, i8, i16, i32
from xdsl.ir import Attribute, Operation, SSAValue

from rlx_mlir import shape_inference as si
from rlx_mlir.codegen.builder import PTR, KernelBuilder, vector_type
from rlx_mlir.dialects import lir
from rlx_mlir.dialects.common import shape_of

Index = SSAValue | int
"""An i64 SSA value or a Python int folded at build time."""

GEMM_TILES: dict[int, tuple[int, int]] = {16: (6, 4), 8: (6, 2), 4: (6, 2)}
"""(MR, NR) per vector width: an MR × NR·W tile of C in MR·NR vector accumulators.
W=16 (32 zmm): 24 accumulators + 4 B vectors + 1 broadcast; W=8 (16 ymm): 12 + 2 + 1;
W=4: 12 xmm accumulators."""

K_UNROLL = 4
"""K steps per iteration of the micro-kernel's K loop (the K % K_UNROLL rest is unrolled)."""

K_BLOCK = 128
"""K rows of B per cache block (the micro-kernel accumulates into C across blocks)."""

SCALAR_COLS = 4
"""Scalar tail columns handled per micro-kernel tile."""

DOT_CHAINS = 4
"""Independent accumulation chains of the N == 1 dot-product kernel (split over its rows)."""

QK = 32
"""Elements per GGUF block."""

BLOCK_BYTES = {"q8_0": 34, "q4_0": 18}


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


def _ptr(kb: KernelBuilder, base: SSAValue, offset: Index, element: Attribute = f32) -> SSAValue:
    """&base[offset] (no GEP for a constant 0)."""
    if isinstance(offset, int) and offset == 0:
        return base
    return kb.gep(base, offset, element)


def _zero(kb: KernelBuilder, vector: bool) -> SSAValue:
    return kb.vconst(0.0) if vector else kb.fconst(0.0)


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
              vector: bool) -> SSAValue:
        """The register part of the epilogue for the accumulator of C[row, col:...]."""
        if self.bias is not None:
            if self.bias_mode == "col":
                b = kb.load(self.bias, col, vector=vector)
            else:
                b = kb.load(self.bias, row if self.bias_mode == "row" else 0)
                if vector:
                    b = kb.splat(b)
            value = kb.fadd(value, b)
        if self.activation is not None and self.inline:
            value = _activation(kb, self.activation, value)
        return value

    def finish_tile(self, kb: KernelBuilder, c_base: SSAValue, rows: int, cols: int,
                    width: int, ldc: int) -> None:
        """The activation of a stored tile C[rows, cols·width] (row stride `ldc`), unless
        it was applied in registers: loops, so one polynomial serves the whole tile."""
        if self.inline:
            return
        vector = width > 1

        def row(ptr: SSAValue) -> None:
            def element(col: Index) -> None:
                value = kb.load(ptr, col, vector=vector)
                kb.store(_activation(kb, self.activation, value), ptr, col)

            if cols == 1:
                element(0)
            else:
                with kb.loop(0, cols * width, width) as loop:
                    element(loop.iv)

        if rows == 1:
            row(c_base)
        else:
            with kb.loop(0, rows) as loop:
                row(kb.gep(c_base, _mul(kb, loop.iv, ldc)))


def _activation(kb: KernelBuilder, name: str, value: SSAValue) -> SSAValue:
    from rlx_mlir.codegen import vmath

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


@dataclass(frozen=True)
class KBlock:
    """The K range [start, start + length) a micro-kernel covers; `first` (start from 0,
    not from C) and `last` (apply the epilogue) are Python bools or run-time i1 values,
    `length` a Python int or a run-time i64."""

    start: Index = 0
    length: Index = 0
    first: SSAValue | bool = True
    last: SSAValue | bool = True


Span = tuple[Index, Index]
"""A half-open range [lo, hi) of rows or columns, bounds as Python ints or run-time i64."""


def _min(kb: KernelBuilder, a: Index, b: int) -> Index:
    if isinstance(a, int):
        return min(a, b)
    return kb.select(kb.icmp("slt", a, b), a, kb.index(b))


def _when(kb: KernelBuilder, hi: Index, bound: int, body) -> None:
    """body() if hi > bound (a static test for a Python int)."""
    if isinstance(hi, int):
        if hi > bound:
            body()
        return
    with kb.if_(kb.icmp("sgt", hi, bound)):
        body()


def _sweep(kb: KernelBuilder, span: Span, full: int, total: int, unit: int, tile) -> None:
    """tile(start, size) over the span [lo, hi) of an axis of `total` elements: whole
    `unit`s below `full` (= total // unit · unit) in a loop, then the static rest
    (total - full) when the span reaches past `full`. `lo` is a multiple of `unit`, `hi`
    a multiple of it or `total`."""
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
    if total > full:
        _when(kb, hi, full, lambda: tile(full, total - full))


def _micro_kernel(kb: KernelBuilder, a_rows: list[SSAValue], b: SSAValue, ldb: int,
                  c: SSAValue, ldc: int, cols: int, width: int, ks: KBlock,
                  epilogue: Epilogue, i: Index, j: Index) -> None:
    """The micro-kernel: C[i:i+rows, j:j+cols·width] (+)= A[i:i+rows, ks] @ B[ks, j:...]
    with `cols` vectors of `width` lanes (width 1: scalars) and the rows·cols accumulators
    in registers. `a_rows[r]` points at A[i + r, ks.start], `b` at B[ks.start, j] (row
    stride `ldb`: the matrix or a packed panel), `c` at C[i, j]. The accumulators start
    at 0; blocks after the first add them to C at the end; the last block applies the
    epilogue before its store."""
    rows = len(a_rows)
    vector = width > 1

    def step(k: Index, accs: list[SSAValue]) -> list[SSAValue]:
        row = _ptr(kb, b, _mul(kb, k, ldb))
        bs = [kb.load(row, col * width, vector=vector) for col in range(cols)]
        accs = list(accs)
        for r in range(rows):
            a = kb.load(a_rows[r], k)
            if vector:
                a = kb.splat(a)
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

    offsets = [r * ldc + col * width for r in range(rows) for col in range(cols)]
    if PREFETCH_C and width > 1:
        for r in range(rows):
            for off in range(0, cols * width, 16):
                _prefetch(kb, c, r * ldc + off)
    accs = [_zero(kb, vector)] * len(offsets)
    if isinstance(ks.length, int):
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
        summed = [kb.fadd(acc, kb.load(c, off, vector=vector)) for acc, off in zip(accs, offsets, strict=True)]
        accs = summed if ks.first is False else [
            kb.select(ks.first, acc, total) for acc, total in zip(accs, summed, strict=True)]

    def store(with_epilogue: bool) -> None:
        for r in range(rows):
            for col in range(cols):
                value = accs[r * cols + col]
                if with_epilogue:
                    value = epilogue.apply(kb, value, _add(kb, i, r), _add(kb, j, col * width),
                                           vector)
                kb.store(value, c, r * ldc + col * width)
        if with_epilogue:
            epilogue.finish_tile(kb, c, rows, cols, width, ldc)

    if ks.last is True or ks.last is False or epilogue.trivial:
        store(ks.last is True and not epilogue.trivial)
    else:  # run time: every block stores, the last one stores again after the epilogue
        store(False)
        with kb.if_(ks.last):
            store(True)


PREFETCH_C = True


def _prefetch(kb: KernelBuilder, base: SSAValue, offset: Index, write: bool = False) -> None:
    """Software prefetch of the cache line holding base[offset] into L1."""
    args = [_ptr(kb, base, offset), kb.constant(int(write), i32), kb.constant(3, i32),
            kb.constant(1, i32)]
    kb.insert(llvm.CallIntrinsicOp("llvm.prefetch.p0", args, []))


def _pack_panel(kb: KernelBuilder, src: SSAValue, ldb: int, length: Index, dst: SSAValue,
                cols: int) -> None:
    """dst[k, 0:cols·W] = B[k, 0:cols·W] for k < length (`src` at B[k0, j]): the panel
    of B the micro-kernels of one column block read, contiguous (no cache-set conflicts
    of a power-of-two row stride, no TLB miss per row)."""
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


def gemm_tiles(width: int) -> tuple[int, int]:
    """(MR, NR) of the micro-kernel for a vector width."""
    return GEMM_TILES.get(width, (4, 2))


def emit_gemm(kb: KernelBuilder, mats: Matrices, m: int, n: int, k: int,
              epilogue: Epilogue = NO_EPILOGUE, rows: Span | None = None,
              cols: Span | None = None) -> None:
    """C[rows, cols] = epilogue(A[rows, :] @ B[:, cols]) of C[M, N] = A[M, K] @ B[K, N]
    with the register-blocked micro-kernels; `rows` (default all) starts at a multiple of
    MR and ends at one or at M, `cols` starts at a multiple of NR·W and ends at one or N.

    Loop order: K blocks of at most K_BLOCK (a run-time loop; the first block writes C,
    later ones add to it, the last applies the epilogue) → column panels of NR·W → row
    tiles of MR. When the span has several row tiles, the panel B[kblock, panel] is first
    packed into a contiguous stack buffer (K_BLOCK·NR·W floats, L1-resident) that every
    row tile then streams. Columns past the last whole panel use narrower micro-kernels
    (1..NR-1 vectors, then scalar columns) reading B in place."""
    rows = rows if rows is not None else (0, m)
    cols = cols if cols is not None else (0, n)
    w = kb.vector_width
    mr, nr = gemm_tiles(w)
    m_full = m // mr * mr
    if n == 1 and w > 1 and mats.ldb == 1:
        _sweep(kb, rows, m_full, m, mr,
               lambda i, size: _dot_tile(kb, mats, i, size, k, epilogue))
        return
    nb = nr * w
    n_full = n // nb * nb
    blocks = -(-k // K_BLOCK)
    kc = -(-k // blocks)
    kc = -(-kc // K_UNROLL) * K_UNROLL  # near-equal blocks, whole unrolled steps
    pack = m > mr and n_full > 0
    buffer = kb.alloca(min(kc, k) * nb) if pack else None

    def tiles(j: Index, ncols: int, width: int, ks: KBlock, b: SSAValue, ldb: int) -> None:
        def tile(i: Index, size: int) -> None:
            a_rows = [_ptr(kb, mats.a, _add(kb, _mul(kb, _add(kb, i, r), mats.lda), ks.start))
                      for r in range(size)]
            c = _ptr(kb, mats.c, _add(kb, _mul(kb, i, mats.ldc), j))
            _micro_kernel(kb, a_rows, b, ldb, c, mats.ldc, ncols, width, ks, epilogue, i, j)

        _sweep(kb, rows, m_full, m, mr, tile)

    def b_at(ks: KBlock, j: Index) -> SSAValue:
        return _ptr(kb, mats.b, _add(kb, _mul(kb, ks.start, mats.ldb), j))

    def edge_columns(ks: KBlock) -> None:
        n_vec = (n - n_full) // w
        if n_vec:
            tiles(n_full, n_vec, w, ks, b_at(ks, n_full), mats.ldb)
        n_scalar = n_full + n_vec * w
        groups_end = n_scalar + (n - n_scalar) // SCALAR_COLS * SCALAR_COLS

        def group(j: Index, size: int) -> None:
            tiles(j, size, 1, ks, b_at(ks, j), mats.ldb)

        _sweep(kb, (n_scalar, n), groups_end, n, SCALAR_COLS, group)

    def k_blocks(body) -> None:
        if blocks == 1:
            body(KBlock(0, k))
            return
        with kb.loop(0, k, kc) as loop:
            k0 = loop.iv
            if k % kc:
                rest = kb.sub(k, k0)
                length = kb.select(kb.icmp("slt", rest, kc), rest, kb.index(kc))
            else:
                length = kc
            body(KBlock(k0, length, kb.icmp("eq", k0, 0), kb.icmp("sge", k0, k - kc)))

    def panel_block(j: Index, ks: KBlock) -> None:
        if pack:
            _pack_panel(kb, b_at(ks, j), mats.ldb, ks.length, buffer, nr)
            tiles(j, nr, w, ks, buffer, nb)
        else:
            tiles(j, nr, w, ks, b_at(ks, j), mats.ldb)

    if ORDER == "jk":
        _sweep(kb, cols, n_full, n_full, nb, lambda j, _: k_blocks(lambda ks: panel_block(j, ks)))
        if n > n_full:
            _when(kb, cols[1], n_full, lambda: k_blocks(edge_columns))
        return

    def column_sweep(ks: KBlock) -> None:
        _sweep(kb, cols, n_full, n_full, nb, lambda j, _: panel_block(j, ks))
        if n > n_full:
            _when(kb, cols[1], n_full, lambda: edge_columns(ks))

    k_blocks(column_sweep)


ORDER = "jk"


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


def _build_gemm(op: Operation, name: str, vector_width: int, bias: SSAValue | None,
                activation: str | None) -> llvm.FuncOp:
    lhs, rhs = shape_of(op.lhs), shape_of(op.rhs)
    has_bias = bias is not None
    pa = (1, *lhs) if len(lhs) == 1 else lhs
    mode = _bias_mode(lhs, rhs, shape_of(bias)[0], pa[-2]) if has_bias else "none"
    geom = gemm_geometry(lhs, rhs, fold_batch=mode != "row")
    kb = KernelBuilder(name, [PTR] * (4 if has_bias else 3), vector_width=vector_width)
    a, b, *rest = kb.args
    bias_ptr, c = (rest[0], rest[1]) if has_bias else (None, rest[0])
    epilogue = Epilogue(bias_ptr, mode, activation)

    def matrix(pa_: SSAValue, pb_: SSAValue, pc_: SSAValue) -> None:
        emit_gemm(kb, Matrices(pa_, pb_, pc_, geom.k, geom.n, geom.n), geom.m, geom.n, geom.k,
                  epilogue)

    _emit_batched(kb, geom, a, b, c, matrix)
    kb.ret()
    return kb.finish()


def build_matmul(op: lir.MatmulOp, name: str, vector_width: int) -> llvm.FuncOp:
    """out = lhs @ rhs (np.matmul)."""
    return _build_gemm(op, name, vector_width, None, None)


def build_fused_matmul(op: lir.FusedMatmulOp, name: str, vector_width: int) -> llvm.FuncOp:
    """out = activation(lhs @ rhs + bias), applied to the accumulators in registers."""
    activation = op.activation.data.value if op.activation is not None else None
    return _build_gemm(op, name, vector_width, op.bias, activation)


# ----------------------------------------------------------------------------- dequant_matmul


def _int_vector(kb: KernelBuilder, element: Attribute) -> VectorType:
    return vector_type(kb.vector_width, element)


def _and(kb: KernelBuilder, a: SSAValue, mask: int) -> SSAValue:
    return kb.insert(llvm.AndOp(a, kb.constant(mask, a.type)))


def _lshr(kb: KernelBuilder, a: SSAValue, bits: int) -> SSAValue:
    return kb.insert(llvm.LShrOp(a, kb.constant(bits, a.type)))


def _int_op(kb: KernelBuilder, op_type: type[Operation], a: SSAValue, b: int) -> SSAValue:
    return kb.insert(op_type(a, kb.constant(b, a.type)))


def _f16_to_f32(kb: KernelBuilder, raw: SSAValue) -> SSAValue:
    """An f16 (as its i16 bits) widened to f32 exactly, with integer ops and one exact
    multiply: (|h| << 13) read as f32 is h's magnitude scaled by 2^-112 (normal and
    subnormal alike), inf/NaN get the all-ones exponent, then the sign is or-ed in.
    SSE-only targets lack F16C, where `fpext half` would become a libcall MCJIT cannot
    resolve."""
    h = kb.insert(llvm.ZExtOp(raw, i32))
    magnitude = _int_op(kb, llvm.AndOp, h, 0x7FFF)
    shifted = _int_op(kb, llvm.ShlOp, magnitude, 13)
    scaled = kb.bitcast(kb.fmul(kb.bitcast(shifted, f32), kb.fconst(2.0**112)), i32)
    special = kb.icmp("uge", magnitude, kb.constant(0x7C00, i32))
    bits = kb.select(special, _int_op(kb, llvm.OrOp, shifted, 0x7F800000), scaled)
    sign = _int_op(kb, llvm.ShlOp, _int_op(kb, llvm.AndOp, h, 0x8000), 16)
    return kb.bitcast(kb.or_(bits, sign), f32)


def _f16_scale(kb: KernelBuilder, block: SSAValue) -> SSAValue:
    """The block's little-endian f16 scale as f32 (bytes 0-1, any alignment)."""
    raw = kb.load(block, 0, element=i16, align=1)
    if kb.vector_width >= 8:  # AVX targets: F16C's vcvtph2ps
        return kb.insert(llvm.FPExtOp(kb.bitcast(raw, f16), f32))
    return _f16_to_f32(kb, raw)


def _dequant_chunk(kb: KernelBuilder, scheme: str, block: SSAValue, chunk: int) -> SSAValue:
    """Elements [chunk·W, chunk·W + W) of a block as f32 integers (scale not applied)."""
    w = kb.vector_width
    first = chunk * w
    if scheme == "q8_0":
        q = kb.load(block, 2 + first, vector=True, element=i8)
    else:  # q4_0: byte t holds element t (low nibble) and t + 16 (high nibble)
        half = QK // 2
        raw = kb.load(block, 2 + first % half, vector=True, element=i8)
        nibble = _and(kb, raw, 0x0F) if first < half else _lshr(kb, raw, 4)
        q = kb.sub(nibble, 8)
    return kb.sitofp(q, kb.vec)


def _dequant_cols(rows: int, width: int) -> int:
    """Weight rows per tile: R·C accumulators + C weight vectors + 1 x vector fit the
    vector registers (32 with 16 lanes, else 16), at most 4."""
    registers = 32 if width >= 16 else 16
    return max(1, min(4, (registers - 1) // (rows + 1)))


DEQUANT_ROWS = 4
"""Rows of x per dequant_matmul tile."""


def build_dequant_matmul(op: lir.DequantMatmulOp, name: str, vector_width: int) -> llvm.FuncOp:
    """out[..., n] = Σ_k x[..., k]·dequant(w)[n, k], dequantized in registers."""
    scheme = op.scheme.data.value
    xs, ws = shape_of(op.x), shape_of(op.w)
    k, n = xs[-1], ws[0]
    m = math.prod(xs[:-1])
    block_bytes = BLOCK_BYTES[scheme]
    row_bytes = k // QK * block_bytes
    w_lanes = vector_width
    if QK % w_lanes or (scheme == "q4_0" and (QK // 2) % w_lanes):
        raise ValueError(f"dequant_matmul: vector width {w_lanes} does not divide a block")
    chunks = QK // w_lanes
    kb = KernelBuilder(name, [PTR] * 3, vector_width=vector_width)
    x, wq, out = kb.args

    def tile(i: Index, j: Index, rows: int, cols: int) -> None:
        x_rows = [_ptr(kb, x, _mul(kb, _add(kb, i, r), k)) for r in range(rows)]
        w_rows = [_ptr(kb, wq, _mul(kb, _add(kb, j, c), row_bytes), i8) for c in range(cols)]
        accs = [kb.vconst(0.0)] * (rows * cols)
        with kb.loop(0, k // QK, carried=accs) as loop:
            blk = loop.iv
            blocks = [kb.gep(w_rows[c], kb.mul(blk, block_bytes), i8) for c in range(cols)]
            scales = [kb.splat(_f16_scale(kb, blocks[c])) for c in range(cols)]
            x_off = kb.mul(blk, QK)
            cur = list(loop.carried)
            for chunk in range(chunks):
                weights = [kb.fmul(_dequant_chunk(kb, scheme, blocks[c], chunk), scales[c])
                           for c in range(cols)]
                for r in range(rows):
                    xv = kb.load(x_rows[r], _add(kb, x_off, chunk * w_lanes), vector=True)
                    for c in range(cols):
                        cur[r * cols + c] = _fma(kb, xv, weights[c], cur[r * cols + c])
            loop.yield_(*cur)
        c_base = _ptr(kb, out, _add(kb, _mul(kb, i, n), j))
        for r in range(rows):
            for c in range(cols):
                kb.store(kb.hsum(loop.results[r * cols + c]), c_base, r * n + c)

    def n_sweep(i: Index, rows: int) -> None:
        cols = _dequant_cols(rows, w_lanes)
        n_full = n // cols * cols
        if n_full == cols:
            tile(i, 0, rows, cols)
        elif n_full:
            with kb.loop(0, n_full, cols) as loop:
                tile(i, loop.iv, rows, cols)
        if n - n_full:
            tile(i, n_full, rows, n - n_full)

    _sweep(kb, (0, m), m // DEQUANT_ROWS * DEQUANT_ROWS, m, DEQUANT_ROWS, n_sweep)
    kb.ret()
    return kb.finish()


BUILDERS = {
    lir.MatmulOp: build_matmul,
    lir.FusedMatmulOp: build_fused_matmul,
    lir.DequantMatmulOp: build_dequant_matmul,
}
