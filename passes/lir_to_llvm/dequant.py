"""Kernel builders of the dequantizing GGUF products and gathers: `lir.dequant_matmul`,
`lir.dequant_gather` (the block formats are in gguf.py).

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

**Partitioned dequant_matmul** splits the weight rows (whole tiles of them) unless they are
too few to share. `emit_dequant_product` (one weight, one out, a range of weight rows) also
builds the f32-activation form of `lir.shared_input_matmul` (shared_matmul.py). An op with `activations q8` (x quantized to q8 blocks first) is built
by quant_dot.py (VNNI) or q8_emulated.py.

**dequant_gather**: out[i, :] = dequant(table[ids[i], :]), decoding only the rows it reads.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass

from xdsl.dialects import llvm
from xdsl.dialects.builtin import i1, i8, i16, i32, i64
from xdsl.ir import Operation, SSAValue

from rlx_mlir.core import shape_inference as si
from rlx_mlir.core.abi import STATUS_INDEX_OUT_OF_RANGE, STATUS_OK
from rlx_mlir.core.dtypes import llvm_element
from rlx_mlir.core.packing import BLOCK_FIELDS
from rlx_mlir.dialects import lir
from rlx_mlir.dialects.common import shape_of
from rlx_mlir.dialects.mir import activations_of
from rlx_mlir.dialects.rlx import QuantActivations
from rlx_mlir.passes.lir_to_llvm.builder import PTR, Index, KernelBuilder, Span
from rlx_mlir.passes.lir_to_llvm.dynamic import (
    DynamicKernelError,
    RuntimeDims,
    is_dynamic,
    kernel_symbols,
    operand_shapes,
    part_spans,
    row_operands,
    rows_classes,
    runtime_rows,
)
from rlx_mlir.passes.lir_to_llvm.gguf import SCHEMES, DequantScheme, dequant_weights
from rlx_mlir.passes.lir_to_llvm.indexing import load_index
from rlx_mlir.passes.lir_to_llvm.kquant_dot import build_kquant_int8
from rlx_mlir.passes.lir_to_llvm.q8_emulated import build_q8_emulated
from rlx_mlir.passes.lir_to_llvm.quant_dot import (
    K_INT8_SCHEMES,
    build_int8_dequant,
    interleaved_scheme,
    uses_int8_dot,
)
from rlx_mlir.passes.lir_to_llvm.record import kernel


def dequant_cols(rows: int, width: int) -> int:
    """Weight rows per tile: R·C accumulators + C weight vectors + 1 x vector fit the
    vector registers (32 with 16 lanes, else 16), at most 4."""
    registers = 32 if width >= 16 else 16
    return max(1, min(4, (registers - 1) // (rows + 1)))


DEQUANT_ROWS = 4
"""Rows of x per dequant_matmul tile."""


@dataclass(frozen=True)
class F32Dequant:
    """How the f32-activation kernels read the weights of one scheme against x[..., K]:
    blocks of `values` values (`block_bytes` bytes; the float types: one vector, plus a
    scalar `tail` of K % W values), groups of `group` values sharing scale and offset,
    `row_bytes` per weight row."""

    scheme: DequantScheme
    k: int
    values: int
    group: int
    block_bytes: int
    row_bytes: int
    tail: int

    @classmethod
    def of(cls, name: str, scheme_name: str, k: int, width: int) -> F32Dequant:
        scheme = SCHEMES[scheme_name]
        # float types are read in "blocks" of one vector, plus a scalar tail of K % W values
        values = max(scheme.values, width)
        if scheme.group % width and scheme.values > 1:
            raise ValueError(f"{name}: vector width {width} does not divide a block")
        return cls(scheme, k, values, max(scheme.group, width),
                   values // scheme.values * scheme.bytes, k // scheme.values * scheme.bytes,
                   k % values)


def _dequant_tile(kb: KernelBuilder, layout: F32Dequant, x: SSAValue, wq: SSAValue,
                  out: SSAValue, n: int, i: Index, j: Index, rows: int, ncols: int) -> None:
    """out[i + r, j + c] = Σ_k x[i + r, k]·dequant(w)[j + c, k] for r < rows, c < ncols
    (out's row stride `n`), in rows·ncols vector accumulators."""
    scheme, k, values, group, w_lanes = (layout.scheme, layout.k, layout.values, layout.group,
                                         kb.vector_width)
    x_rows = [kb.address(x, kb.fold_mul(kb.fold_add(i, r), k)) for r in range(rows)]
    w_rows = [kb.address(wq, kb.fold_mul(kb.fold_add(j, c), layout.row_bytes), i8)
              for c in range(ncols)]
    accs = [kb.vconst(0.0)] * (rows * ncols)
    with kb.loop(0, k // values, carried=accs) as loop:
        blk = loop.iv
        blocks = [kb.gep(w_rows[c], kb.mul(blk, layout.block_bytes), i8) for c in range(ncols)]
        x_off = kb.mul(blk, values)
        cur = list(loop.carried)
        for g in range(values // group):
            firsts = range(g * group, (g + 1) * group, w_lanes)
            weights = [dequant_weights(kb, scheme, blocks[c], g, firsts) for c in range(ncols)]
            for chunk, first in enumerate(firsts):
                for r in range(rows):
                    xv = kb.load(x_rows[r], kb.fold_add(x_off, first), vector=True)
                    for c in range(ncols):
                        cur[r * ncols + c] = kb.fma(xv, weights[c][chunk], cur[r * ncols + c])
        loop.yield_(*cur)
    sums = [kb.hsum(acc) for acc in loop.results]
    for t in range(k - layout.tail, k):  # float types only: K % W values, one at a time
        weights = [scheme.scalar(kb, kb.gep(w_rows[c], t * scheme.bytes, i8)) for c in range(ncols)]
        for r in range(rows):
            xs_t = kb.load(x_rows[r], t)
            for c in range(ncols):
                sums[r * ncols + c] = kb.fma(xs_t, weights[c], sums[r * ncols + c])
    c_base = kb.address(out, kb.fold_add(kb.fold_mul(i, n), j))
    for r in range(rows):
        for c in range(ncols):
            kb.store(sums[r * ncols + c], c_base, r * n + c)


def emit_dequant_product(kb: KernelBuilder, layout: F32Dequant, x: SSAValue, wq: SSAValue,
                         out: SSAValue, n: int, m: Index, mr: int, rows: Span,
                         weight_rows: Span) -> None:
    """out[rows, weight_rows] of out[M, N] = x[M, K] @ dequant(w)[N, K]ᵀ: tiles of `mr`
    rows of x (the rest of `m`, static or run-time, as static tiles) × `dequant_cols(mr)`
    weight rows, weight rows innermost. `rows` and `weight_rows` start at a multiple of
    their tile and end at one or at the end."""
    cols = dequant_cols(mr, kb.vector_width)

    def row_tile(i: Index, size: int) -> None:
        kb.tile_sweep(weight_rows, n // cols * cols, n, cols,
                      lambda j, ncols: _dequant_tile(kb, layout, x, wq, out, n, i, j, size, ncols))

    kb.tile_sweep(rows, kb.round_down(m, mr), m, mr, row_tile)


def dequant_rows(kb: KernelBuilder, op: Operation, static_rows: int | None, pointers: int,
                 rows_case: Callable[[Index, int], None]) -> None:
    """rows_case(M, MR) for x's M rows in tiles of MR: a static M (`static_rows`), or the
    run-time M read from the size arguments after the `pointers` pointers: one row runs
    the static code of M = 1, more DEQUANT_ROWS-row tiles."""
    if static_rows is not None:
        rows_case(static_rows, min(DEQUANT_ROWS, static_rows))
        return
    sizes = RuntimeDims.of(op, kb.args[pointers:pointers + len(kernel_symbols(op))])
    rows_classes(kb, runtime_rows(kb, sizes.shape(0)[:-1]), lambda _: rows_case(1, 1),
                 None, lambda m: rows_case(m, DEQUANT_ROWS))


@kernel(lir.DequantMatmulOp, partitioned=True, runtime_dims=True)
def build_dequant_matmul(op: lir.DequantMatmulOp, name: str, vector_width: int,
                         partitioned: bool = False) -> llvm.FuncOp:
    """out[..., n] = Σ_k x[..., k]·dequant(w)[n, k], dequantized in registers (partitioned:
    plus trailing (part, parts), this part's share of out). Over a symbolic x (`?` rows, ABI of dynamic.py) the
    row count M is a run-time size: one row runs the static code of M = 1, more run
    DEQUANT_ROWS-row tiles in a loop and the rest as the static tile of its size. An op
    with `activations q8` (x quantized to q8 blocks first) goes to `build_q8_kernel`."""
    if activations_of(op) == QuantActivations.Q8:
        return build_q8_kernel(op, name, vector_width, partitioned)
    dynamic = is_dynamic(op)
    xs, ws = row_operands(op)[:2] if dynamic else (shape_of(op.x), shape_of(op.w))
    k, n = xs[-1], ws[0]
    symbols = kernel_symbols(op) if dynamic else ()
    layout = F32Dequant.of("dequant_matmul", op.scheme.data.value, k, vector_width)
    kb = KernelBuilder(name, [PTR] * 3 + [i64] * len(symbols) + ([i64, i64] if partitioned else []),
                       vector_width=vector_width)
    x, wq, out = kb.args[:3]

    def rows_case(m: Index, mr: int) -> None:
        """out for `m` rows of x (static, or run-time with `mr` = DEQUANT_ROWS) in tiles of
        `mr` rows × `cols` weight rows; partitioned: this part's share."""
        cols = dequant_cols(mr, vector_width)  # weight rows per tile, the same for every row tile

        def emit(rows: Span, weight_rows: Span) -> None:
            emit_dequant_product(kb, layout, x, wq, out, n, m, mr, rows, weight_rows)

        if not partitioned:
            emit((0, m), (0, n))
        elif isinstance(m, int):
            part, parts = kb.args[-2:]
            # weight rows unless they are too few to share: each part dequantizes only its
            # own weight rows (splitting x's rows would dequantize all of w in every part)
            by_weight_rows = -(-n // cols) >= min(16, -(-m // mr))
            unit, length = (cols, n) if by_weight_rows else (mr, m)
            lo, hi = kb.part_range(-(-length // unit), part, parts)
            with kb.if_(kb.icmp("slt", lo, hi)):
                span = (kb.mul(lo, unit), kb.fold_min(kb.mul(hi, unit), kb.index(length)))
                if by_weight_rows:
                    emit((0, m), span)
                else:
                    emit(span, (0, n))
        else:  # the same rule with the run-time row count
            panels = -(-n // cols)
            by_weight_rows = (True if panels >= 16
                              else kb.icmp("sge", kb.index(panels), kb.ceil_div(m, mr)))
            part_spans(kb, (mr, m), (cols, n), by_weight_rows, *kb.args[-2:], emit)

    dequant_rows(kb, op, None if dynamic else math.prod(xs[:-1]), 3, rows_case)
    kb.ret()
    return kb.finish()


def build_q8_kernel(op: lir.DequantMatmulOp | lir.SharedInputMatmulOp, name: str,
                    vector_width: int, partitioned: bool) -> llvm.FuncOp:
    """The kernel of a dequant_matmul (or shared_input_matmul) with `activations q8`: VNNI
    dot products where convert-lir-to-llvm marked it (quant_dot.py; the K-quants
    kquant_dot.py), else the emulation (q8_emulated.py: the same numbers within f32
    rounding). A kernel whose weights are interleaved must be int8 at their width."""
    interleaved_scheme(op, vector_width)
    if uses_int8_dot(op, vector_width):
        if op.scheme.data.value in K_INT8_SCHEMES:
            return build_kquant_int8(op, name, vector_width, partitioned)
        return build_int8_dequant(op, name, vector_width, partitioned)
    return build_q8_emulated(op, name, vector_width, partitioned)


# ----------------------------------------------------------------------------- dequant_gather


def _decode_row(kb: KernelBuilder, scheme: DequantScheme, src: SSAValue, dst: SSAValue,
                k: int, block_at: Callable[[SSAValue], SSAValue] | None = None) -> None:
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
            kb.store(scheme.scalar(kb, kb.address(src, t * scheme.bytes, i8)), dst, t)
        return
    if scheme.group % w:
        raise ValueError(f"dequant_gather: vector width {w} does not divide a block")
    with kb.loop(0, k // scheme.values) as loop:
        block = (kb.gep(src, kb.mul(loop.iv, scheme.bytes), i8) if block_at is None
                 else block_at(loop.iv))
        values = kb.gep(dst, kb.mul(loop.iv, scheme.values))
        for g in range(scheme.values // scheme.group):
            firsts = range(g * scheme.group, (g + 1) * scheme.group, w)
            for first, value in zip(firsts, dequant_weights(kb, scheme, block, g, firsts), strict=True):
                kb.store(value, values, first)


def _interleaved_block(kb: KernelBuilder, op: lir.DequantGatherOp, table: SSAValue, row: SSAValue,
                       shape: tuple[int, int]) -> Callable[[SSAValue], SSAValue]:
    """block_at(b) for `row` of a table interleaved W rows at a time
    (`rlx_mlir.core.packing.interleave_blocks`): block b's fields copied into a stack block
    of the row-major layout, read from the row's group (rows of a whole group) or the row
    itself (the row-major rest)."""
    name, width = op.scheme.data.value, op.interleaved.value.data
    fields = BLOCK_FIELDS[name]
    block_bytes = sum(size for _, size in fields)
    n_rows, row_bytes = shape
    grouped = kb.icmp("ult", row, kb.index(n_rows // width * width))
    lane = kb.select(grouped, kb.insert(llvm.URemOp(row, kb.index(width))), kb.index(0))
    row_start = kb.select(grouped, kb.sub(row, lane), row)  # a group's bytes start at its first row
    spread = kb.select(grouped, kb.index(width), kb.index(1))  # W copies of each field, or one
    base = kb.gep(table, kb.mul(row_start, row_bytes), i8)
    scratch = kb.alloca(block_bytes, i8, align=4)

    def block_at(b: SSAValue) -> SSAValue:
        group = kb.gep(base, kb.mul(kb.mul(b, block_bytes), spread), i8)
        for offset, size in fields:
            unit = min(4, size)
            element = i16 if unit == 2 else i32
            for u in range(size // unit):
                # interleaved_offset(name, W, offset, u, lane), or offset + u·unit row-major
                at = kb.add(kb.mul(spread, offset + u * unit), kb.mul(lane, unit))
                kb.store(kb.load(kb.gep(group, at, i8), element=element, align=1),
                         kb.gep(scratch, offset + u * unit, i8), element=element, align=1)
        return scratch

    return block_at


@kernel(lir.DequantGatherOp, runtime_dims=True, checked=True)
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
    count = runtime_rows(kb, sizes.shape(1) if sizes else ids_shape)
    id_element = llvm_element(op.ids.type.get_element_type())
    with kb.loop(0, count, carried=[kb.constant(0, i1)]) as check:
        bad = kb.icmp("uge", load_index(kb, ids, check.iv, id_element), n_rows)
        check.yield_(kb.or_(check.carried[0], bad))
    any_bad = check.results[0]
    with kb.loop(0, kb.select(any_bad, kb.index(0), kb.index(count))) as loop:
        row = load_index(kb, ids, loop.iv, id_element)
        block_at = None
        if op.interleaved is not None:
            block_at = _interleaved_block(kb, op, table, row, (n_rows, row_bytes))
        _decode_row(kb, scheme, kb.gep(table, kb.mul(row, row_bytes), i8),
                    kb.gep(out, kb.mul(loop.iv, k)), k, block_at)
    kb.ret(kb.select(any_bad, kb.constant(STATUS_INDEX_OUT_OF_RANGE, i32),
                     kb.constant(STATUS_OK, i32)))
    return kb.finish()


