"""The emulation of the q8 form of `lir.dequant_matmul` (`activations q8`, see
quant_dot.py): every q8 scheme at every width (the K-quants, targets without VNNI,
W = 4), the same numbers as the VNNI kernel (the reference's `quants.q8_matmul`) within
f32 rounding, without integer dot instructions.

x is quantized per ggml's vec_dot_type into a stack scratch of f32 integers (exact), then
per weight group (scheme.group values sharing scale and offset) an exact f32 integer dot
Σ q_w·q_x is scaled by scale_w·d_x, plus offset_w·t_x with t_x q8_1's s (q4_1, q5_1) or
d_x·Σq_x of the group's values (the mins of q4_k, q5_k: 32; q2_k: 16). A scratch row is
K quants, then one t per 32 values (q2_k: 16), then one d per x block. The rows are driven as the VNNI kernel's
(`quant_dot.chunked_rows`).
"""

from __future__ import annotations

import math
from dataclasses import dataclass

from xdsl.dialects import llvm
from xdsl.dialects.builtin import DenseIntOrFPElementsAttr, i8
from xdsl.ir import SSAValue

from rlx_mlir.core.quants import QK_K, VEC_DOT_TYPES
from rlx_mlir.dialects import lir
from rlx_mlir.dialects.common import shape_of
from rlx_mlir.passes.lir_to_llvm.builder import Index, KernelBuilder
from rlx_mlir.passes.lir_to_llvm.dynamic import is_dynamic, kernel_symbols, row_operands
from rlx_mlir.passes.lir_to_llvm.gguf import SCHEMES
from rlx_mlir.passes.lir_to_llvm.quant_dot import (
    BLOCK,
    CHUNK_ROWS,
    MAGIC,
    SCRATCH_BYTES,
    Edges,
    RowPlan,
    chunked_rows,
    product_buffers,
    q8_arguments,
    q8_products,
    q8_scale,
    round_half_away,
    round_to_f16,
    small_int,
    x_row_source,
)

EMULATED_TILES: dict[int, tuple[tuple[int, int], tuple[int, int]]] = {
    16: ((1, 4), (4, 2)), 8: ((1, 4), (4, 2)), 4: ((1, 2), (2, 2)),
}
"""Rows of x × weight rows per tile of the emulation, for one row of x and for more, per
vector width (W = 4: a 256-value K-quant block is 64 vectors, unrolled)."""


@dataclass(frozen=True)
class EmulatedScratch:
    """The quantized rows of x of the emulation (f32: q, t, d; see above)."""

    base: SSAValue
    k: int
    block: int
    """Values per x block (32 or 256)."""
    t_span: int = BLOCK
    """Values per t (q8_1's s per 32; q8_K: d·Σq per weight group, 16 for q2_k)."""

    @property
    def row_floats(self) -> int:
        return self.k + self.k // self.t_span + self.k // self.block

    def row(self, kb: KernelBuilder, r: Index) -> SSAValue:
        return kb.address(self.base, kb.fold_mul(r, self.row_floats))

    def t_at(self, kb: KernelBuilder, row: SSAValue, index: Index) -> SSAValue:
        return kb.address(row, kb.fold_add(index, self.k))

    def d_at(self, kb: KernelBuilder, row: SSAValue, index: Index) -> SSAValue:
        return kb.address(row, kb.fold_add(index, self.k + self.k // self.t_span))


def load_block(kb: KernelBuilder, src: SSAValue, count: int) -> tuple[list[SSAValue], SSAValue]:
    """The `count` values at src as vectors, and their largest magnitude."""
    values = [kb.load(src, t, vector=True) for t in range(0, count, kb.vector_width)]
    largest = kb.fabs(values[0])
    for v in values[1:]:
        largest = kb.fmax(largest, kb.fabs(v))
    return values, kb.hmax(largest)


def _emulate_q8_block(kb: KernelBuilder, src: SSAValue, dst: SSAValue, scratch: EmulatedScratch,
                      blk: Index, with_s: bool) -> None:
    """One q8_0 / q8_1 block of 32 values at src (quantize_row_q8_0_ref / q8_1_ref)."""
    w = kb.vector_width
    values, amax = load_block(kb, src, BLOCK)
    d, inverse = q8_scale(kb, amax)
    quants = kb.address(dst, kb.fold_mul(blk, BLOCK))
    total = None
    for t, v in enumerate(values):
        q = round_half_away(kb, kb.insert(llvm.FMulOp(v, kb.splat(inverse))))
        kb.store(q, quants, t * w)
        total = q if total is None else kb.insert(llvm.FAddOp(total, q))
    kb.store(round_to_f16(kb, d), scratch.d_at(kb, dst, blk))
    if with_s:
        s = round_to_f16(kb, kb.insert(llvm.FMulOp(kb.hsum(total), d)))
        kb.store(s, scratch.t_at(kb, dst, blk))


def _emulate_q8_k_block(kb: KernelBuilder, src: SSAValue, dst: SSAValue,
                        scratch: EmulatedScratch, blk: Index) -> None:
    """One q8_K block of 256 values at src (quantize_row_q8_K_ref), with d·Σq per
    scratch.t_span values."""
    w = kb.vector_width
    values, amax = load_block(kb, src, QK_K)
    iscale, d = q8_k_scale(kb, src, values, amax)
    quants = kb.address(dst, kb.fold_mul(blk, QK_K))
    qs = q8_k_quants(kb, iscale, values)
    per_sub = scratch.t_span // w
    for sub in range(QK_K // scratch.t_span):
        total = None
        for t in range(sub * per_sub, (sub + 1) * per_sub):
            kb.store(qs[t], quants, t * w)
            total = qs[t] if total is None else kb.insert(llvm.FAddOp(total, qs[t]))
        kb.store(kb.insert(llvm.FMulOp(d, kb.hsum(total))),
                 scratch.t_at(kb, dst, kb.fold_add(kb.fold_mul(blk, QK_K // scratch.t_span), sub)))
    kb.store(d, scratch.d_at(kb, dst, blk))


def q8_k_scale(kb: KernelBuilder, src: SSAValue, values: list[SSAValue], amax: SSAValue
               ) -> tuple[SSAValue, SSAValue]:
    """(iscale, d) of the q8_K block of 256 values at src (`values`, largest magnitude
    amax): iscale = −127/largest, largest the first value of magnitude amax (its sign
    matters), d = 1/iscale; both 0 for an all-zero block (quantize_row_q8_K_ref)."""
    w = kb.vector_width
    # the least index of a lane at amax
    lanes = kb.insert(llvm.ConstantOp(DenseIntOrFPElementsAttr.from_list(
        kb.vec, [float(t) for t in range(w)]), kb.vec))
    first = None
    for t, v in enumerate(values):
        at = kb.select(kb.fcmp("oeq", kb.fabs(v), kb.splat(amax)),
                       kb.insert(llvm.FAddOp(lanes, kb.vconst(float(t * w)))), kb.vconst(1e9))
        first = at if first is None else kb.fmin(first, at)
    index = kb.sext(small_int(kb, kb.fmin(kb.hmin(first), kb.fconst(QK_K - 1.0))))
    largest_value = kb.load(kb.gep(src, index))
    nonzero = kb.fcmp("ogt", amax, kb.fconst(0.0))
    zero = kb.fconst(0.0)
    iscale = kb.select(nonzero, kb.fdiv(kb.fconst(-127.0), largest_value), zero)
    d = kb.select(nonzero, kb.fdiv(kb.fconst(1.0), iscale), zero)
    return iscale, d


def q8_k_quants(kb: KernelBuilder, iscale: SSAValue, values: list[SSAValue]) -> list[SSAValue]:
    """min(127, nearest_int(iscale·x)) of each vector of a q8_K block (f32 integers;
    nearest_int rounds half to even: ggml adds 1.5·2^23 and reads the mantissa)."""
    magic, top = kb.vconst(MAGIC), kb.vconst(127.0)
    quants = []
    for v in values:
        scaled = kb.insert(llvm.FMulOp(kb.splat(iscale), v))
        q = kb.insert(llvm.FSubOp(kb.insert(llvm.FAddOp(scaled, magic)), magic))
        quants.append(kb.select(kb.fcmp("ogt", q, top), top, q))
    return quants


def build_q8_emulated(op: lir.DequantMatmulOp | lir.SharedInputMatmulOp, name: str,
                      vector_width: int, partitioned: bool) -> llvm.FuncOp:
    """The q8 form of any block scheme at any width, without integer dot instructions
    (see above); same ABI as the f32 path's: (x, w, out, [sizes...], [part, parts]); a
    shared_input_matmul's: (x, w_0..w_n-1, out_0..out_n-1, ...), x quantized once."""
    scheme_name = op.scheme.data.value
    scheme = SCHEMES[scheme_name]
    k_type = VEC_DOT_TYPES[scheme_name] == "Q8_K"
    with_s = VEC_DOT_TYPES[scheme_name] == "Q8_1"
    width = vector_width
    ns, k = q8_products(op)
    symbols = kernel_symbols(op) if is_dynamic(op) else ()
    dynamic = bool(symbols)
    xs = row_operands(op)[0] if dynamic else shape_of(op.x)
    blocks = k // scheme.values
    row_bytes = blocks * scheme.bytes
    kb = KernelBuilder(name, q8_arguments(op, len(symbols), partitioned), vector_width=width)
    x = kb.args[0]
    t_span = min(scheme.group, BLOCK) if k_type else BLOCK
    probe = EmulatedScratch(x, k, scheme.values, t_span)
    chunk = max(1, min(CHUNK_ROWS, SCRATCH_BYTES // (4 * probe.row_floats)))
    static_m = None if dynamic else math.prod(xs[:-1])
    if static_m is not None:
        chunk = min(chunk, static_m)
    scratch = EmulatedScratch(kb.alloca(chunk * probe.row_floats), k, scheme.values, t_span)

    plan = RowPlan(ns, chunk, static_m, len(symbols), partitioned, *EMULATED_TILES[width],
                   edges=Edges.of(op))
    source = x_row_source(kb, plan, k)

    def quantize(first: Index, rows: Index) -> None:
        def one_row(r: Index) -> None:
            src = source(kb.fold_add(first, r))
            dst = scratch.row(kb, r)
            with kb.loop(0, blocks) as loop:
                block_src = kb.gep(src, kb.mul(loop.iv, scheme.values))
                if k_type:
                    _emulate_q8_k_block(kb, block_src, dst, scratch, loop.iv)
                else:
                    _emulate_q8_block(kb, block_src, dst, scratch, loop.iv, with_s)

        kb.for_each(rows, one_row)


    def tile(first: Index, i: Index, j: Index, rows: int, cols: int, product: int) -> None:
        wq, out = product_buffers(kb, plan, product)
        n = ns[product]
        w_rows = [kb.address(wq, kb.fold_mul(kb.fold_add(j, c), row_bytes), i8) for c in range(cols)]
        x_rows = [scratch.row(kb, kb.fold_add(i, r)) for r in range(rows)]
        accs = [kb.vconst(0.0)] * (rows * cols) + [kb.fconst(0.0)] * (rows * cols)
        with kb.loop(0, blocks, carried=accs) as loop:
            blk = loop.iv
            w_blocks = [kb.gep(w_rows[c], kb.mul(blk, scheme.bytes), i8) for c in range(cols)]
            d_x = [kb.load(scratch.d_at(kb, x_rows[r], blk)) for r in range(rows)]
            vectors, scalars = list(loop.carried[:rows * cols]), list(loop.carried[rows * cols:])
            for g in range(scheme.values // scheme.group):
                affine = [scheme.affine(kb, w_blocks[c], g) for c in range(cols)]
                dots: list[SSAValue | None] = [None] * (rows * cols)
                for start in range(g * scheme.group, (g + 1) * scheme.group, width):
                    weights = [scheme.quants(kb, w_blocks[c], start) for c in range(cols)]
                    for r in range(rows):
                        xq = kb.load(x_rows[r], kb.fold_add(kb.mul(blk, scheme.values), start),
                                     vector=True)
                        for c in range(cols):
                            prev = dots[r * cols + c]
                            dots[r * cols + c] = (kb.insert(llvm.FMulOp(weights[c], xq))
                                                  if prev is None else kb.fma(weights[c], xq, prev))
                for r in range(rows):
                    for c in range(cols):
                        scale, offset = affine[c]
                        at = r * cols + c
                        vectors[at] = kb.fma(dots[at], kb.splat(kb.fmul(scale, d_x[r])), vectors[at])
                        if offset is not None:
                            t_index = kb.fold_add(kb.mul(blk, scheme.values // t_span), g)
                            t_x = kb.load(scratch.t_at(kb, x_rows[r], t_index))
                            scalars[at] = kb.fma(offset, t_x, scalars[at])
            loop.yield_(*vectors, *scalars)
        results = loop.results
        base = kb.address(out, kb.fold_add(kb.fold_mul(kb.fold_add(first, i), n), j))
        for r in range(rows):
            for c in range(cols):
                at = r * cols + c
                kb.store(kb.fadd(kb.hsum(results[at]), results[rows * cols + at]), base, r * n + c)

    chunked_rows(kb, op, plan, quantize, tile, source)
    kb.ret()
    return kb.finish()
