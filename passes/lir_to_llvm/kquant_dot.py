"""The int8 kernel of the K-quants' q8 form (`activations q8`, quant_dot.py): q4_k, q5_k
and q6_k weights times x quantized to q8_K (ggml's vec_dot_type of the K-quants), where
convert-lir-to-llvm marked the op with `INT8_DOT`: `vpdpbusd` (VNNI) or `vpmaddubsw` +
`vpmaddwd` (MADDUBS: AVX2, AVX512BW; every u here is below 64, so its i16 pair sums never
saturate). Targets with neither run q8_emulated.py: the same numbers within f32 rounding.

**Activations.** Each row of x is quantized once per call into a stack scratch, per
256-value block as quantize_row_q8_K_ref: q = min(127, nearest_int(x·iscale)) as bytes,
d = 1/iscale in f32, and the 16 sums of 16 consecutive q as i16 (`KScratch`).

**Weights.** A 256-value superblock of W weight rows (one per lane, as quant_dot's
column-lane tiles) is transposed in registers 16 bytes at a time (`transpose_quads`): lane
c holds row c's 4 bytes, unpacked to unsigned quants u (q4_k: 0..15; q5_k: 0..31; q6_k:
q + 32, 0..63) of one sub-block (32 values for q4_k/q5_k, 16 for q6_k) with its integer
scale sc (6-bit unsigned; q6_k: int8) and, for q4_k/q5_k, its 6-bit min m.

**Dots.** Per row of x and sub-block j, `vpdpbusd` of the u quads with broadcast x
dwords gives the W exact dots Σ u·q_x; then per superblock, all in exact i32 lanes
(`vpdpwssd`: `vpmaddwd` + add under MADDUBS),

    q4_k, q5_k:  A = Σ_j sc_j·dot_j,   B = Σ_j m_j·Σq_x(j)       (`vpdpwssd` on i16 pairs)
                 acc += f32(A)·(d·d_x) − f32(B)·(dmin·d_x)
    q6_k:        A = Σ_j sc_j·dot_j − 32·Σ_j sc_j·Σq_x(j)        (w = d·sc·(u − 32))
                 acc += f32(A)·(d·d_x)

as ggml's vec_dot_q4_K_q8_K / q6_K (its integer sums, its two f32 scale products). The
lanes are W outputs: no sums across lanes. One row of x takes the same tiles as many
(quant_dot: a row's numbers must not depend on its call); weight rows past the last whole
W take a tile whose extra lanes repeat the last row and are not stored. A superblock's
sub-blocks run as a loop of GROUPS groups, not unrolled (compile time: a dynamic-rows
q6_k kernel 10 s → 3.6 s).
"""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass

from xdsl.dialects import llvm
from xdsl.dialects.builtin import f32, i8, i16, i32
from xdsl.ir import SSAValue

from rlx_mlir.core.quants import QK_K
from rlx_mlir.dialects import lir
from rlx_mlir.dialects.common import shape_of
from rlx_mlir.passes.lir_to_llvm.builder import Index, KernelBuilder, vector_type
from rlx_mlir.passes.lir_to_llvm.dynamic import is_dynamic, kernel_symbols, row_operands
from rlx_mlir.passes.lir_to_llvm.q8_emulated import load_block, q8_k_quants, q8_k_scale
from rlx_mlir.passes.lir_to_llvm.quant_dot import (
    CHUNK_ROWS,
    COLUMN_TILE_ROWS,
    K_INT8_SCHEMES,
    SCRATCH_BYTES,
    Edges,
    RowPlan,
    chunked_rows,
    column_f16,
    column_words,
    f16_as_f32,
    int8_dot,
    int8_isa_of,
    int16_dot,
    interleaved_scheme,
    load_at,
    product_buffers,
    q8_arguments,
    q8_products,
    small_int,
    store_at,
    transpose_quads,
    x_row_source,
)

SUMS_PER_BLOCK = QK_K // 16
"""i16 sums of 16 consecutive q per q8_K block (q6_k's sub-blocks; q4_k/q5_k add pairs)."""


KQUANT_PREFETCH_BYTES = 2048
"""How far ahead of its reads a K-quant tile prefetches its weight rows, in bytes: the
distance these kernels were measured with (benchmarks/results/issue19-kquant-int8.md);
quant_dot's PREFETCH_BYTES was retuned for its own kernels only."""

KQUANT_INTERLEAVED_PREFETCH_BLOCKS = 64
"""How far ahead of its reads a tile of interleaved K-quant weights prefetches, in
superblocks (64 · block bytes: 4 groups of 16 rows at W = 16, 8 of 8 at W = 8). A group
is read out of order (q6_k: its scales at the end first, then its nibbles and high bits
in four passes), which the hardware prefetchers do not follow: a one-row product
streaming from memory ran at 21 (q4_k) and 12 (q6_k) GB/s on one AVX-512 core without
it, 38-42 and 24-28 with it; AVX2 q6_k 5.6 → 35 (results/issue19-row-runs.md)."""


# ----------------------------------------------------------------------------- x quantization


@dataclass(frozen=True)
class KScratch:
    """Quantized rows of x: per row K bytes of q, then K/16 i16 sums of 16 q, then one
    f32 d per block (the row stride rounded to 64 bytes)."""

    base: SSAValue
    k: int
    scales: SSAValue
    """A stack buffer of 16 i32 vectors: a superblock's per-lane scales."""

    @staticmethod
    def row_bytes_of(k: int) -> int:
        return -(-(k + 2 * (k // 16) + 4 * (k // QK_K)) // 64) * 64

    def row(self, kb: KernelBuilder, r: Index) -> SSAValue:
        return kb.address(self.base, kb.fold_mul(r, self.row_bytes_of(self.k)), i8)

    def sums(self, kb: KernelBuilder, row: SSAValue, block: Index) -> SSAValue:
        """Address in `row` of the sums of `block`: 8 dwords of i16 pairs."""
        return kb.address(row, kb.fold_add(kb.fold_mul(block, 2 * SUMS_PER_BLOCK), self.k), i8)

    def d(self, kb: KernelBuilder, row: SSAValue, block: Index) -> SSAValue:
        """Address in `row` of the f32 d of `block`."""
        return kb.address(row, kb.fold_add(kb.fold_mul(block, 4), self.k + 2 * (self.k // 16)), i8)


def _quantize_block(kb: KernelBuilder, src: SSAValue, row: SSAValue, scratch: KScratch,
                    blk: SSAValue) -> None:
    """One q8_K block of 256 values at src into scratch row `row`."""
    w = kb.vector_width
    values, amax = load_block(kb, src, QK_K)
    iscale, d = q8_k_scale(kb, src, values, amax)
    quants = q8_k_quants(kb, iscale, values)
    q_base = kb.address(row, kb.fold_mul(blk, QK_K), i8)
    for t, q in enumerate(quants):
        as_bytes = kb.insert(llvm.TruncOp(small_int(kb, q), vector_type(w, i8)))
        store_at(kb, as_bytes, q_base, t * w, align=1)
    per_sum = 16 // w
    sums = kb.constant(0, vector_type(SUMS_PER_BLOCK, i16))
    for g in range(SUMS_PER_BLOCK):
        total = quants[g * per_sum]
        for t in range(1, per_sum):
            total = kb.fadd(total, quants[g * per_sum + t])
        exact = kb.insert(llvm.TruncOp(small_int(kb, kb.hsum(total)), i16))
        sums = kb.insert(llvm.InsertElementOp(sums, exact, kb.constant(g, i32)))
    store_at(kb, sums, scratch.sums(kb, row, blk), 0, align=2)
    store_at(kb, d, scratch.d(kb, row, blk), 0)


def _quantize_rows(kb: KernelBuilder, source: Callable[[Index], SSAValue], scratch: KScratch,
                   first: Index, rows: Index) -> None:
    """Quantize rows [first, first + rows) of x (`x_row_source`) into scratch rows [0, rows)."""
    k = scratch.k

    def one_row(r: Index) -> None:
        src = source(kb.fold_add(first, r))
        row = scratch.row(kb, r)
        with kb.loop(0, k // QK_K) as loop:
            _quantize_block(kb, kb.gep(src, kb.mul(loop.iv, QK_K)), row, scratch, loop.iv)

    kb.for_each(rows, one_row)


# ----------------------------------------------------------------------------- weights


def _int(kb: KernelBuilder, op_type: type, v: SSAValue, amount: int) -> SSAValue:
    """An i32-lane op of `v` and a splat constant."""
    return kb.insert(op_type(v, kb.constant(amount, v.type)))


def _bits(kb: KernelBuilder, v: SSAValue, shift: int, mask: int) -> SSAValue:
    """(v >> shift) & mask, lane by lane."""
    shifted = _int(kb, llvm.LShrOp, v, shift) if shift else v
    return _int(kb, llvm.AndOp, shifted, mask)


@dataclass(frozen=True)
class SubBlock:
    """One sub-block of W weight rows: unsigned quants as quads (vector q: each lane's
    values 4q..4q+3), the index of its first value in the superblock, sc per lane."""

    quads: list[SSAValue]
    first: SSAValue
    scale: SSAValue


@dataclass(frozen=True)
class Superblock:
    """One superblock of W weight rows: d per lane, −dmin per lane (q4_k/q5_k/q2_k; None:
    q6_k/q3_k), the 8 i16 pairs per lane that `vpdpwssd` takes with x's 8 dwords of sums
    (the mins, or the signed scales of the offset schemes), and its sub-blocks as GROUPS groups: `group(g)` decodes
    those of group g, a run-time index (a loop, not 8 or 16 unrolled sub-blocks: a
    fraction of the code and of its compile time, for the same speed)."""

    d: SSAValue
    neg_dmin: SSAValue | None
    pairs: list[SSAValue]
    group: Callable[[SSAValue], list[SubBlock]]
    offset_shift: int = 0
    """Without dmin: log2 of o in w = d·sc·(u − o) (q6_k: 32, q3_k: 4)."""


GROUPS = 4
"""Groups of sub-blocks per superblock (q4_k/q5_k: 2 of 32 values; q6_k: 4 of 16)."""


@dataclass(frozen=True)
class Columns:
    """Where a column tile reads one superblock of each of its W weight rows: each lane's
    superblock in a row-major row (`blocks`), or the group of the W superblocks of an
    interleaved weight (`group`: `rlx_mlir.core.packing.interleave_blocks`, every dword
    of a superblock as W consecutive dwords, the f16 d of q6_k/q3_k as W halves)."""

    kb: KernelBuilder
    blocks: list[SSAValue] | None = None
    group: SSAValue | None = None

    def quads(self, offset: Index) -> list[SSAValue]:
        """The 16 bytes at `offset` (a multiple of 4) of each lane's superblock, as 4
        vectors: vector q holds bytes 4q..4q+3 of each lane's row."""
        kb = self.kb
        if self.group is None:
            return transpose_quads(kb, [load_at(kb, b, offset, vector_type(4, i32)) for b in self.blocks])
        width = kb.vector_width
        at = kb.fold_mul(offset, width)
        return [load_at(kb, self.group, kb.fold_add(at, 4 * width * q), vector_type(width, i32))
                for q in range(4)]

    def halves(self, offset: int) -> SSAValue:
        """The f16 at `offset` of each lane's superblock as f32 lanes."""
        if self.group is None:
            return column_f16(self.kb, self.blocks, offset)
        width = self.kb.vector_width
        return f16_as_f32(self.kb, load_at(self.kb, self.group, width * offset, vector_type(width, i16)))

    def words(self, offset: int) -> SSAValue:
        """The i32 at `offset` (a multiple of 4) of each lane's superblock."""
        if self.group is None:
            return column_words(self.kb, self.blocks, offset)
        width = self.kb.vector_width
        return load_at(self.kb, self.group, width * offset, vector_type(width, i32))


def _spill_scales(kb: KernelBuilder, scales: list[SSAValue], buffer: SSAValue) -> Callable[[SSAValue], SSAValue]:
    """Store the per-lane scales of the sub-blocks; returns the load of scale `sub` (a
    run-time index)."""
    lanes = scales[0].type
    for j, scale in enumerate(scales):
        store_at(kb, scale, buffer, 4 * kb.vector_width * j, align=64)
    return lambda sub: load_at(kb, buffer, kb.mul(sub, 4 * kb.vector_width), lanes, align=64)


def _splat_i32(kb: KernelBuilder, value: SSAValue) -> SSAValue:
    """An i64 index as an i32 in every lane (a per-lane shift count)."""
    return kb.splat(kb.insert(llvm.TruncOp(value, i32)))


def _q4_k_style(kb: KernelBuilder, src: Columns, buffer: SSAValue,
                high_bits: bool) -> Superblock:
    """q4_k (d, dmin, 12 bytes of 6-bit scales and mins, 128 bytes of nibbles) and q5_k
    (the same, with 32 bytes of 5th bits before the nibbles). Group c: the 32 bytes of
    sub-blocks 2c (low nibbles) and 2c + 1 (high nibbles)."""
    width = kb.vector_width
    head = src.quads(0)  # (d, dmin), scales 0-3, mins 0-3, low nibbles 4-7
    halves = vector_type(width, i16)
    d = f16_as_f32(kb, kb.insert(llvm.TruncOp(head[0], halves)))
    dmin = f16_as_f32(kb, kb.insert(llvm.TruncOp(_int(kb, llvm.LShrOp, head[0], 16), halves)))

    def six_bits(low: SSAValue, nibble_shift: int) -> list[SSAValue]:
        """Sub-blocks 0-3 from `low`'s bytes; 4-7 from head[3]'s nibbles and `low`'s top bits."""
        first = [_bits(kb, low, 8 * j, 63) for j in range(4)]
        rest = [kb.or_(_bits(kb, head[3], 8 * j + nibble_shift, 0xF),
                       _int(kb, llvm.ShlOp, _bits(kb, low, 8 * j + 6, 3), 4)) for j in range(4)]
        return first + rest

    scale_of = _spill_scales(kb, six_bits(head[1], 0), buffer)
    pairs = [kb.or_(m, _int(kb, llvm.ShlOp, m, 16)) for m in six_bits(head[2], 4)]
    quants_at = 48 if high_bits else 16
    high = src.quads(16) + src.quads(32) if high_bits else []

    def group(c: SSAValue) -> list[SubBlock]:
        at = kb.add(kb.mul(c, 32), quants_at)
        packed = src.quads(at) + src.quads(kb.add(at, 16))
        subs = []
        for half in (0, 1):
            sub = kb.add(kb.mul(c, 2), half)
            quads = [_bits(kb, p, 4 * half, 0x0F0F0F0F) for p in packed]
            if high_bits:  # bit `sub` of byte l: value l's 16
                shift = _splat_i32(kb, sub)
                quads = [kb.or_(q, _int(kb, llvm.ShlOp, _int(kb, llvm.AndOp, kb.insert(
                    llvm.LShrOp(h, shift)), 0x01010101), 4)) for q, h in zip(quads, high, strict=True)]
            subs.append(SubBlock(quads, kb.mul(sub, 32), scale_of(sub)))
        return subs

    neg_dmin = kb.fmul(dmin, kb.vconst(-1.0))
    return Superblock(d, neg_dmin, pairs, group)


def _q6_k(kb: KernelBuilder, src: Columns, buffer: SSAValue) -> Superblock:
    """q6_k: 128 bytes of low nibbles, 64 of 2-bit highs, 16 int8 scales, f16 d. Per half
    h of 128 values, value 32g + l has the low nibble of byte 64h + 32·(g % 2) + l (high
    nibble for g ≥ 2) and bits 2g, 2g + 1 of byte 128 + 32h + l. Group t = 2h + s: the
    values l in [16s, 16s + 16) of each g of half h."""
    raw_scales = src.quads(192)
    scales = [_int(kb, llvm.AShrOp, _int(kb, llvm.ShlOp, raw_scales[j // 4], 24 - 8 * (j % 4)), 24)
              for j in range(16)]
    scale_of = _spill_scales(kb, scales, buffer)

    def group(t: SSAValue) -> list[SubBlock]:
        h, s = kb.sdiv(t, 2), kb.srem(t, 2)
        low_at = kb.add(kb.mul(h, 64), kb.mul(s, 16))
        even, odd = (src.quads(kb.add(low_at, 32 * g)) for g in (0, 1))
        high = src.quads(kb.add(kb.mul(h, 32), kb.add(kb.mul(s, 16), 128)))
        subs = []
        for g in range(4):
            low = even if g % 2 == 0 else odd
            quads = [kb.or_(_bits(kb, q, 4 * (g // 2), 0x0F0F0F0F),
                            _int(kb, llvm.ShlOp, _bits(kb, hb, 2 * g, 0x03030303), 4))
                     for q, hb in zip(low, high, strict=True)]
            sub = kb.add(kb.mul(h, 8), kb.add(s, 2 * g))
            subs.append(SubBlock(quads, kb.mul(sub, 16), scale_of(sub)))
        return subs

    return Superblock(src.halves(208), None, _i16_pairs(kb, scales), group, 5)


def _i16_pairs(kb: KernelBuilder, values: list[SSAValue]) -> list[SSAValue]:
    """Per lane, values 2p and 2p + 1 (16 small signed i32 vectors) as an i16 pair."""
    return [kb.or_(_int(kb, llvm.AndOp, values[2 * p], 0xFFFF),
                   _int(kb, llvm.ShlOp, values[2 * p + 1], 16)) for p in range(len(values) // 2)]


def _two_bit_groups(kb: KernelBuilder, src: Columns, quants_at: int,
                    high_at: int | None, scale_of: Callable[[SSAValue], SSAValue]
                    ) -> Callable[[SSAValue], list[SubBlock]]:
    """The groups of q2_k and q3_k: per half n of 128 values, value 32j + l has bits 2j,
    2j + 1 of quant byte 32n + l (and q3_k its third bit in bit 4n + j of byte l of the
    high bits). Group t = 2n + s: the values l in [16s, 16s + 16) of each j of half n."""

    def group(t: SSAValue) -> list[SubBlock]:
        n, s = kb.sdiv(t, 2), kb.srem(t, 2)
        low = src.quads(kb.add(kb.mul(n, 32), kb.add(kb.mul(s, 16), quants_at)))
        high = (src.quads(kb.add(kb.mul(s, 16), high_at))
                if high_at is not None else None)
        subs = []
        for j in range(4):
            quads = [_bits(kb, q, 2 * j, 0x03030303) for q in low]
            if high is not None:
                shift = _splat_i32(kb, kb.add(kb.mul(n, 4), j))
                quads = [kb.or_(q, _int(kb, llvm.ShlOp, _int(kb, llvm.AndOp, kb.insert(
                    llvm.LShrOp(h, shift)), 0x01010101), 2)) for q, h in zip(quads, high, strict=True)]
            sub = kb.add(kb.mul(n, 8), kb.add(s, 2 * j))
            subs.append(SubBlock(quads, kb.mul(sub, 16), scale_of(sub)))
        return subs

    return group


def _q2_k(kb: KernelBuilder, src: Columns, buffer: SSAValue) -> Superblock:
    """q2_k: 16 bytes of (4-bit scale, 4-bit min) per 16 values, 64 bytes of 2-bit quants,
    f16 d and dmin: w = d·sc·u − dmin·m."""
    packed = src.quads(0)
    scales = [_bits(kb, packed[j // 4], 8 * (j % 4), 0xF) for j in range(16)]
    mins = [_bits(kb, packed[j // 4], 8 * (j % 4) + 4, 0xF) for j in range(16)]
    scale_of = _spill_scales(kb, scales, buffer)
    words, halves = src.words(80), vector_type(kb.vector_width, i16)
    d = f16_as_f32(kb, kb.insert(llvm.TruncOp(words, halves)))
    dmin = f16_as_f32(kb, kb.insert(llvm.TruncOp(_int(kb, llvm.LShrOp, words, 16), halves)))
    return Superblock(d, kb.fmul(dmin, kb.vconst(-1.0)), _i16_pairs(kb, mins),
                      _two_bit_groups(kb, src, 16, None, scale_of))


def _q3_k(kb: KernelBuilder, src: Columns, buffer: SSAValue) -> Superblock:
    """q3_k: 32 bytes of third bits, 64 of 2-bit quants, 12 of 6-bit scales (low nibbles
    in bytes 0-7: scales 0-7, then 8-15 in the high nibbles; top 2 bits of scale j at
    shift 2·(j // 4) of byte 8 + j % 4), f16 d: w = d·(sc − 32)·(u − 4)."""
    packed = src.quads(92)[1:]  # bytes 96-107 (92-95: the last quants)
    scales = []
    for j in range(16):
        low = _bits(kb, packed[(j % 8) // 4], 8 * (j % 4) + 4 * (j // 8), 0xF)
        top = _bits(kb, packed[2], 8 * (j % 4) + 2 * (j // 4), 3)
        scales.append(_int(kb, llvm.SubOp, kb.or_(low, _int(kb, llvm.ShlOp, top, 4)), 32))
    scale_of = _spill_scales(kb, scales, buffer)
    return Superblock(src.halves(108), None, _i16_pairs(kb, scales),
                      _two_bit_groups(kb, src, 32, 0, scale_of), 2)


SUPERBLOCKS: dict[str, Callable[[KernelBuilder, Columns, SSAValue], Superblock]] = {
    "q4_k": lambda kb, src, buffer: _q4_k_style(kb, src, buffer, high_bits=False),
    "q5_k": lambda kb, src, buffer: _q4_k_style(kb, src, buffer, high_bits=True),
    "q6_k": _q6_k,
    "q2_k": _q2_k,
    "q3_k": _q3_k,
}
"""Each K-quant's superblock decoder: (builder, where the W superblocks are, a stack
buffer of 16 vectors for its scales)."""


# ----------------------------------------------------------------------------- kernel


def _column_tile(kb: KernelBuilder, isa: str, scheme: str, plan: RowPlan, scratch: KScratch,
                 where: tuple[Index, Index, Index], rows: int, cols: int, product: int) -> None:
    """out[first + i + r, j + c] for r < rows, c < cols ≤ W, weight row j + c in lane c
    (lanes past `cols` repeat the last row and are not stored)."""
    first, i, j = where
    width, k = kb.vector_width, scratch.k
    block_bytes = K_INT8_SCHEMES[scheme]
    wq, out = product_buffers(kb, plan, product)
    n = plan.ns[product]
    row_bytes = k // QK_K * block_bytes
    interleaved = bool(plan.interleaved) and cols == width  # a rest of rows stays row-major
    if interleaved:
        columns = [kb.address(wq, kb.fold_mul(j, row_bytes), i8)]
    else:
        columns = [kb.address(wq, kb.fold_mul(kb.fold_add(j, min(c, cols - 1)), row_bytes), i8)
                   for c in range(width)]
    x_rows = [scratch.row(kb, kb.fold_add(i, r)) for r in range(rows)]
    zero = kb.constant(0, vector_type(width, i32))
    with kb.loop(0, k // QK_K, carried=[kb.vconst(0.0)] * rows) as loop:
        blk = loop.iv
        if interleaved:
            group = kb.address(columns[0], kb.mul(blk, width * block_bytes), i8)
            ahead = KQUANT_INTERLEAVED_PREFETCH_BLOCKS * block_bytes
            for line in range(0, width * block_bytes, 64):
                kb.prefetch(group, ahead + line, i8)
            src = Columns(kb, group=group)
        else:
            at = kb.mul(blk, block_bytes)
            blocks = [kb.address(col, at, i8) for col in columns]
            if KQUANT_PREFETCH_BYTES:
                for b in blocks:
                    for line in range(0, block_bytes, 64):
                        kb.prefetch(kb.address(b, KQUANT_PREFETCH_BYTES + line, i8), 0)
            src = Columns(kb, blocks=blocks)
        superblock = SUPERBLOCKS[scheme](kb, src, scratch.scales)
        with kb.loop(0, GROUPS, carried=[zero] * rows) as groups:
            sums = list(groups.carried)
            for sub in superblock.group(groups.iv):
                for r, row in enumerate(x_rows):
                    xq = kb.address(row, kb.add(kb.mul(blk, QK_K), sub.first), i8)
                    dot = zero
                    for q, quad in enumerate(sub.quads):
                        x4 = kb.splat(load_at(kb, xq, 4 * q, i32, align=4))
                        dot = int8_dot(kb, isa, dot, quad, x4)
                    sums[r] = kb.add(sums[r], kb.mul(dot, sub.scale))
            groups.yield_(*sums)
        sums = groups.results
        accs = []
        for r, row in enumerate(x_rows):
            x_sums = scratch.sums(kb, row, blk)
            corr = None
            for p, pair in enumerate(superblock.pairs):
                corr = int16_dot(kb, isa, corr, pair, kb.splat(load_at(kb, x_sums, 4 * p, i32, align=4)))
            dx = kb.splat(load_at(kb, scratch.d(kb, row, blk), 0, f32, align=4))
            acc = loop.carried[r]
            if superblock.neg_dmin is None:  # u − o
                whole = kb.sub(sums[r], _int(kb, llvm.ShlOp, corr, superblock.offset_shift))
                acc = kb.fma(kb.sitofp(whole, kb.vec), kb.fmul(superblock.d, dx), acc)
            else:
                acc = kb.fma(kb.sitofp(sums[r], kb.vec), kb.fmul(superblock.d, dx), acc)
                acc = kb.fma(kb.sitofp(corr, kb.vec), kb.fmul(superblock.neg_dmin, dx), acc)
            accs.append(acc)
        loop.yield_(*accs)
    base = kb.address(out, kb.fold_add(kb.fold_mul(kb.fold_add(first, i), n), j))
    mask = None if cols == width else kb.lane_mask(cols)
    for r, acc in enumerate(loop.results):
        kb.vstore(acc, base, r * n, mask)


def build_kquant_int8(op: lir.DequantMatmulOp | lir.SharedInputMatmulOp, name: str,
                      vector_width: int, partitioned: bool) -> llvm.FuncOp:
    """The K-quant kernel of the int8 path (see the module docstring); the ABI of
    quant_dot's `build_int8_dequant`: (x, w_0..w_n-1, out_0..out_n-1, [sizes...],
    [part, parts])."""
    scheme = op.scheme.data.value
    width = vector_width
    ns, k = q8_products(op)
    symbols = kernel_symbols(op) if is_dynamic(op) else ()
    kb = KernelBuilder(name, q8_arguments(op, len(symbols), partitioned), vector_width=width)
    xs = row_operands(op)[0] if symbols else shape_of(op.x)
    row_bytes = KScratch.row_bytes_of(k)
    chunk = max(1, min(CHUNK_ROWS, SCRATCH_BYTES // row_bytes))
    static_m = None if symbols else math.prod(xs[:-1])
    if static_m is not None:
        chunk = max(1, min(chunk, static_m))
    scratch = KScratch(kb.alloca(chunk * row_bytes, i8), k, kb.alloca(16 * width, i32))
    plan = RowPlan(ns, chunk, static_m, len(symbols), partitioned, (1, width),
                   (COLUMN_TILE_ROWS[width], width), interleaved_scheme(op, width),
                   k // QK_K * K_INT8_SCHEMES[scheme], Edges.of(op))
    source = x_row_source(kb, plan, k)

    def tile(first: Index, i: Index, j: Index, rows: int, cols: int, product: int) -> None:
        _column_tile(kb, int8_isa_of(op), scheme, plan, scratch, (first, i, j), rows, cols, product)

    chunked_rows(kb, op, plan, lambda first, rows: _quantize_rows(kb, source, scratch, first, rows),
                 tile, source)
    kb.ret()
    return kb.finish()
