"""The q8 form of `lir.dequant_matmul` (`activations q8`): x quantized as ggml does
(the scheme's `vec_dot_type`, docs/semantics.md), then block dot products. Two kernels
give the same numbers (the reference's `quants.q8_matmul`) within f32 rounding:

- **VNNI** (`build_int8_dequant`) for q4_0/q4_1/q5_0/q5_1/q8_0 where convert-lir-to-llvm
  marked the op with `INT8_DOT` (AVX512-VNNI for W = 16, AVX-VNNI or AVX512-VNNI+VL for
  W = 8): integer dot products with `vpdpbusd`; on CPUs without VNNI that have AVX2
  (W = 8) or AVX512BW (W = 16) the same kernel with `vpmaddubsw` + `vpmaddwd` for each
  `vpdpbusd` (`MADDUBS`: `int8_dot`; q8_0 there keeps its quants signed, `weight_dot`);
- **the K-quants' int8 kernel** (kquant_dot.py `build_kquant_int8`) for q4_k/q5_k/q6_k/
  q2_k/q3_k, marked the same way, with this module's column-lane tiles and row driver;
- **the emulation** (q8_emulated.py `build_q8_emulated`) for every other case
  (iq4_nl/iq4_xs, AVX1/SSE targets): x quantized into a scratch of f32
  integers, exact f32 integer dots per weight group.

dequant.py `build_q8_kernel` picks the kernel. This module also holds what both
share: ggml's rounding (`round_half_away`, `round_to_f16`, `q8_scale`) and the row driver
(`RowPlan`, `chunked_rows`).

The f32 path (dequant.py `build_dequant_matmul`) widens every weight to f32 and issues one f32
FMA per weight and row: 6-9 GB/s per core for 4-bit weights, far below the memory
bandwidth a decode GEMV could stream at. The VNNI kernel:

1. **Activations.** Each row of x is quantized once per call, per block of 32 values, as
   quantize_row_q8_0_ref: d = max|x|/127, x_q = roundf(x·(1/d)) in [-127, 127] (all
   zeros for an all-zero block), and the block sum Σx_q (exact, an integer). They go to a
   stack scratch of `chunk` rows: the bytes x_q, and per block 8 f32 lanes of d_x (d
   rounded to f16, as the q8 block stores it) and 8 lanes of the correction (below), so
   that the kernel reads one vector of each per step. More rows than the scratch holds
   are processed chunk by chunk.
2. **Weights.** A block's quants are read as *unsigned* bytes u: q4 nibbles (0..15),
   q5 nibbles plus the 5th bit (0..31), q8_0 bytes with the sign bit flipped (q + 128).
   A weight is w = d·(u − o) (o = 8, 16, 128 for q4_0, q5_0, q8_0) or w = d·u + m
   (q4_1, q5_1).
3. **Dots.** `vpdpbusd` multiplies 4 u8 × s8 pairs per i32 lane and adds them to the
   lane, exactly (no saturation): a 32-value block is 8 lanes (W = 8: one ymm per block,
   W = 16: two blocks per zmm). Per block and row of x the kernel accumulates, in f32
   lanes,

       acc += f32(Σ u·x_q − o·Σx_q) · (d_w·d_x)      (offset schemes: −o·Σx_q is the
                                                       initial value of lane 0)
       acc += m_w · s_x                               (q4_1 / q5_1, lane 0 only: q8_1's
                                                       s = f16(Σx_q·d), d in f32)

   and the lanes are summed at the end. The integer parts are exact (|Σ| < 2^24, so
   their f32 conversion too).

**Tiles.** Every row count uses *column-lane* tiles (`column_tile`): W weight rows, one
per lane, × up to COLUMN_TILE_ROWS rows of x. Per block, the W rows' quants are
transposed in registers (lane c: row c's 4 bytes) and each row of x adds 8 `vpdpbusd`
of its broadcast 4-byte groups: the lanes are W whole block dots, so the f32
conversion and the scales cost one vector op per W outputs instead of one per output
(a decode step of 8 sequences of SmolLM2 Q4_1, 2 threads: 17.9 → 9.4 ms). One row of x
takes the same tiles as many, so a row's numbers never depend on how many rows share
the call: a prefill, the decode steps after it and a batched step of several sequences
give a row the same bits (q8 rounding of the next activations would turn f32 rounding
differences into visible ones: 0.5 of SmolLM2's logits after a few steps). Weight rows
past the last whole W go to row tiles (MULTI_ROW_TILES, per-output lanes of partial
sums, summed at the end). The weight tiles are outermost, so a tile's weight rows stay
in L1 while every row tile of the chunk reads them. Partitioned kernels split the
weight rows (whole tiles) between parts; each part quantizes the rows of x it needs
itself (K values per row: cheap next to its share of the weights). Over a symbolic x
(`?` rows, ABI of dynamic.py), M == 1 runs the one-row code, more rows the chunked code
with a run-time count (the rest of R rows as static tiles of its binary digits).

**Interleaved weights** (`interleaved W`, lir-pack-weights; the layout of
`rlx_mlir.core.packing.interleave_blocks`). A bound weight's blocks come W rows at a
time, each field of the W blocks one contiguous run (the d's, the m's, the 5th-bit words,
then the quants dword by dword). A column tile then loads each field as one vector:
4 (8 for q8_0) vectors of quants, one of d, one of m, instead of W row loads, the
transposes and W scalar inserts per field. The arithmetic is unchanged, so the bits
are those of row-major rows. SmolLM2 Q4_1's decode step at 1 thread on a 2-core EPYC:
14.8 → 5.8 ms, its Q8_0 output projection 4.2 → 1.2 ms (25 GB/s). Rows past the last
whole W stay row-major, so the row tiles read them as before.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass

from xdsl.dialects import llvm
from xdsl.dialects.builtin import (
    ModuleOp,
    StringAttr,
    VectorType,
    f16,
    f32,
    i1,
    i8,
    i16,
    i32,
    i64,
)
from xdsl.ir import Attribute, SSAValue
from xdsl.utils.exceptions import PassFailedException

from rlx_mlir.core.packing import interleaved_offset
from rlx_mlir.core.target import Target, has_avx2, has_avx512bw
from rlx_mlir.dialects import lir
from rlx_mlir.dialects.common import shape_of
from rlx_mlir.dialects.elementwise_fns import ElementwiseFn
from rlx_mlir.dialects.mir import activations_of, indices_of
from rlx_mlir.dialects.rlx import QuantActivations
from rlx_mlir.passes.lir_to_llvm.attention import rotate_pair
from rlx_mlir.passes.lir_to_llvm.builder import PTR, Index, KernelBuilder, Span, vector_type
from rlx_mlir.passes.lir_to_llvm.dynamic import (
    RuntimeDims,
    is_dynamic,
    kernel_symbols,
    product_spans,
    row_operands,
    rows_classes,
    runtime_rows,
)
from rlx_mlir.passes.lir_to_llvm.elementwise import glu_function
from rlx_mlir.passes.lir_to_llvm.reductions import rms_norm_row
from rlx_mlir.passes.lir_to_llvm.vmath import copysign

INT8_DOT = "rlx.int8_dot"
"""Attribute of a lir.dequant_matmul whose kernel takes the int8 path: the instruction
set of its dot products (`VNNI` or `MADDUBS`)."""

VNNI = "vnni"
"""`vpdpbusd` on zmm (W = 16) or ymm (W = 8) registers."""

MADDUBS = "maddubs"
"""`vpmaddubsw`, then `vpmaddwd` by ones (AVX512BW at W = 16, AVX2 at W = 8): the int8 path
of CPUs without VNNI, three instructions per `vpdpbusd`. Its i16 sums of two u8 × s8
products saturate past 32767: q8_0 keeps its quants signed there (`SIGNED_Q8_0`)."""

BLOCK = 32
"""Values per block of x (and of every weight scheme of this path)."""

MULTI_ROW_TILES: dict[int, tuple[int, int]] = {16: (8, 2), 8: (4, 2)}
"""Rows of x × weight rows per row tile (lanes of partial sums), per vector width: the
weight rows past the last column-lane tile (16 accumulators of 32 zmm, 8 of 16 ymm)."""

COLUMN_TILE_ROWS: dict[int, int] = {16: 8, 8: 4}
"""Rows of x per column-lane tile (W weight rows, one per lane), per vector width: the 8
weight vectors, d, m and one accumulator per row in the 32 zmm (16 ymm)."""

CHUNK_ROWS = 16
"""At most this many rows of x are quantized into the scratch at a time."""

SCRATCH_BYTES = 96 * 1024
"""Stack bytes of the quantized-x scratch (fewer rows per chunk for a long K)."""

PREFETCH_BYTES = 8192
"""Tiles prefetch each weight row this many bytes ahead of where they read (into the
next tiles' rows: more DRAM requests in flight than the hardware prefetcher keeps);
0: no software prefetch. Until 2026-11-27 the offset was counted in f32 elements (4×
the bytes); measured side by side, 8192 bytes beats 2048 bytes and no prefetch
(SmolLM2 Q4_1, 2 threads)."""

ROW_SPLIT_SHARE_BYTES = 256 * 1024
"""The most weight bytes a part of a q8 kernel takes when the parts split x's rows
(`row_groups`): its share stays in a core's L2 across the chunks of its rows. Where the
split would need a larger share (SmolLM2's matrices at 2 threads), the parts split the
weights only, as before."""

INTERLEAVED_PREFETCH_BYTES = 4096
"""Column tiles of interleaved weights over more than one row of x (prefill) prefetch
every line of a step's groups this many bytes ahead; 0: none. One-row tiles (decode)
never do: there the groups of a tile are one sequential run the hardware prefetchers
follow at the core's stream rate, and the prefetches made decode slower (SmolLM2 Q4_1,
2 threads, tg128 162/185/159 against 182/217/177 tok/s), where prefill read faster
(benchmarks/results/issue19-work-split.md)."""

ONE_ROW_PREFETCH_BYTES: dict[str, int] = {"q5_1": 8192}
"""The schemes whose one-row tiles of interleaved weights (decode) prefetch every line of
a step's groups, and how many bytes ahead. q5_1's one-row product from memory (K 576,
N 163840, AVX-512, 1 thread) read 31-34 GB/s without, 38-43 with; SmolLM2 Q5_K_M's decode
step at 1 thread, its q/k/v and gate/up products 2936 / 2666 -> 2485 / 2484 µs (AVX2
2927 / 2898 -> 2755 / 2703). The same prefetch made Q4_1's products slower (2046 -> 2298
µs) and left Q5_0's level: the others stay without (`INTERLEAVED_PREFETCH_BYTES`)."""

MAGIC = 12582912.0
"""1.5·2^23: x + MAGIC rounds x (|x| < 2^22) to an integer, half to even, in the low
mantissa bits."""


@dataclass(frozen=True)
class Int8Scheme:
    """Where a 32-value block of a weight scheme keeps its parts (byte offsets)."""

    bytes: int
    quants: int
    """The quants: 16 bytes of nibbles (values j and j + 16 share byte j), or 32 bytes."""
    bits: int
    offset: int = 0
    """o of w = d·(u − o) (0: the affine schemes)."""
    min_at: int | None = None
    """The f16 m of w = d·u + m."""
    high_at: int | None = None
    """The little-endian u32 of 5th bits (bit j: value j)."""
    signed: bool = False
    """The quants stay signed bytes (q8_0 under MADDUBS): each dot takes |q| and x with
    q's sign (`weight_dot`)."""


INT8_SCHEMES: dict[str, Int8Scheme] = {
    "q4_0": Int8Scheme(18, 2, 4, offset=8),
    "q4_1": Int8Scheme(20, 4, 4, min_at=2),
    "q5_0": Int8Scheme(22, 6, 5, offset=16, high_at=2),
    "q5_1": Int8Scheme(24, 8, 5, min_at=2, high_at=4),
    "q8_0": Int8Scheme(34, 2, 8, offset=128),
}
"""The weight schemes of the VNNI kernel of this module (the float types have no q8 form)."""

SIGNED_Q8_0 = Int8Scheme(34, 2, 8, signed=True)
"""q8_0 under MADDUBS: q + 128 would reach 255, and two such products saturate
`vpmaddubsw`'s i16 sums; |q| ≤ 128 times x_q with q's sign stays below 32767."""


def int8_scheme(scheme: str, isa: str) -> Int8Scheme:
    """The layout the int8 kernel of `isa` reads `scheme` with."""
    return SIGNED_Q8_0 if isa == MADDUBS and scheme == "q8_0" else INT8_SCHEMES[scheme]

K_INT8_SCHEMES: dict[str, int] = {"q4_k": 144, "q5_k": 176, "q6_k": 210, "q2_k": 84, "q3_k": 110}
"""The K-quants of the int8 path (kquant_dot.py): bytes per 256-value superblock (iq4_xs
takes the emulation)."""

_VNNI_CPUS = {
    16: ("cascadelake", "cooperlake", "icelake-client", "icelake-server", "tigerlake",
         "rocketlake", "sapphirerapids", "emeraldrapids", "graniterapids", "graniterapids-d",
         "diamondrapids", "znver4", "znver5"),
    8: ("alderlake", "raptorlake", "meteorlake", "arrowlake", "lunarlake", "sierraforest",
        "grandridge", "gracemont"),
}
"""CPUs named without a feature string that have AVX512-VNNI (W = 16) or AVX-VNNI."""


def int8_dot_isa(target: Target, width: int) -> str | None:
    """VNNI when `target` runs `vpdpbusd` at vector width `width`, else MADDUBS where it
    has AVX512BW (W = 16) or AVX2 (W = 8), else None."""
    flags = set(target.features.split(","))
    avx512_vnni = ("+avx512vnni" in flags or (not target.features and target.cpu in _VNNI_CPUS[16])
                   ) and "-avx512vnni" not in flags
    if width == 16:
        return VNNI if avx512_vnni else MADDUBS if has_avx512bw(target) else None
    if width == 8:
        avx_vnni = "+avxvnni" in flags or (not target.features and target.cpu in _VNNI_CPUS[8])
        avx512_vl = avx512_vnni and ("+avx512vl" in flags or not target.features)
        return VNNI if avx_vnni or avx512_vl else MADDUBS if has_avx2(target) else None
    return None


def mark_int8_dots(module: ModuleOp, target: Target, width: int) -> int:
    """Mark every lir.dequant_matmul (and shared_input_matmul) with `activations q8` of an
    int8 scheme with INT8_DOT
    when the target has the instructions (the others with q8 run the emulation of
    q8_emulated.py: the same numbers); returns how many were marked."""
    isa = int8_dot_isa(target, width)
    if isa is None:
        return 0
    marked = 0
    for op in module.walk():
        if (isinstance(op, lir.DequantMatmulOp | lir.SharedInputMatmulOp)
                and activations_of(op) == QuantActivations.Q8
                and has_int8_kernel(op.scheme.data.value)):
            op.attributes[INT8_DOT] = StringAttr(isa)
            marked += 1
    return marked


def uses_int8_dot(op: lir.DequantMatmulOp | lir.SharedInputMatmulOp, width: int) -> bool:
    """Whether the kernel of `op` takes the int8 path (q8 activations, marked, a scheme
    with a kernel for the marked instruction set, W 16 or 8)."""
    return (INT8_DOT in op.attributes and activations_of(op) == QuantActivations.Q8
            and has_int8_kernel(op.scheme.data.value) and width in (8, 16))


def interleaved_scheme(op: lir.DequantMatmulOp | lir.SharedInputMatmulOp, width: int) -> str:
    """The scheme of `op`'s weights when lir-pack-weights interleaved them ("" if not);
    refuses a kernel of another width than the layout's, or one that is not int8."""
    if op.interleaved is None:
        return ""
    rows = op.interleaved.value.data
    if rows != width or not uses_int8_dot(op, width):
        has_int8 = "with" if uses_int8_dot(op, width) else "without"
        raise PassFailedException(
            f"convert-lir-to-llvm: '{op.name}': its weights are interleaved {rows} rows at a "
            f"time for the int8 kernels of that vector width, but it is lowered at width "
            f"{width} {has_int8} an int8 kernel (run lir-pack-weights with the target and "
            "vector-width of convert-lir-to-llvm)")
    return op.scheme.data.value


def int8_isa_of(op: lir.DequantMatmulOp | lir.SharedInputMatmulOp) -> str:
    """The instruction set convert-lir-to-llvm marked `op` with."""
    return op.attributes[INT8_DOT].data


def has_int8_kernel(scheme: str) -> bool:
    """Whether `scheme` has an int8 kernel (the same ones under VNNI and MADDUBS)."""
    return scheme in INT8_SCHEMES or scheme in K_INT8_SCHEMES


# ----------------------------------------------------------------------------- helpers



def _concat(kb: KernelBuilder, a: SSAValue, b: SSAValue) -> SSAValue:
    """The lanes of a then those of b (vectors of one type)."""
    return kb.shuffle(a, b, range(2 * a.type.get_shape()[0]))  # pyright: ignore[reportAttributeAccessIssue]


def load_at(kb: KernelBuilder, base: SSAValue, byte_offset: Index, ty: Attribute, align: int = 1) -> SSAValue:
    return kb.insert(llvm.LoadOp(kb.address(base, byte_offset, i8), ty, alignment=align))


def store_at(kb: KernelBuilder, value: SSAValue, base: SSAValue, byte_offset: Index, align: int = 4) -> None:
    kb.insert(llvm.StoreOp(value, kb.address(base, byte_offset, i8), alignment=align))


def f16_as_f32(kb: KernelBuilder, raw: SSAValue) -> SSAValue:
    """i16 bits of f16s (scalar or vector) as f32 (F16C: every VNNI CPU has it)."""
    if isinstance(raw.type, VectorType):
        lanes = raw.type.get_shape()[0]
        return kb.insert(llvm.FPExtOp(kb.bitcast(raw, vector_type(lanes, f16)), vector_type(lanes, f32)))
    return kb.insert(llvm.FPExtOp(kb.bitcast(raw, f16), f32))


def round_half_away(kb: KernelBuilder, v: SSAValue) -> SSAValue:
    """roundf(v) lane by lane (half away from zero, as ggml's reference quantizers), |v| <
    2^22, with plain SSE arithmetic: a + 1.5·2^23 − 1.5·2^23 rounds |v| half to even,
    and an exact tie that went down goes up."""
    magnitude = kb.fabs(v)
    magic = kb.constant(MAGIC, v.type)
    even = kb.insert(llvm.FSubOp(kb.insert(llvm.FAddOp(magnitude, magic)), magic))
    below = kb.insert(llvm.FSubOp(even, magnitude))  # exact: |even − |v|| ≤ 0.5
    tie = kb.fcmp("oeq", below, kb.constant(-0.5, v.type))
    up = kb.insert(llvm.FAddOp(even, kb.constant(1.0, v.type)))
    return copysign(kb, kb.select(tie, up, even), v)


def small_int(kb: KernelBuilder, value: SSAValue) -> SSAValue:
    """An f32 (scalar or vector) holding an integer of magnitude < 2^22 as i32: its low
    mantissa bits after adding 1.5·2^23."""
    shifted = kb.insert(llvm.FAddOp(value, kb.constant(MAGIC, value.type)))
    ty = vector_type(value.type.get_shape()[0], i32) if isinstance(value.type, VectorType) else i32
    return kb.sub(kb.bitcast(shifted, ty), kb.constant(0x4B400000, ty))


def round_to_f16(kb: KernelBuilder, value: SSAValue) -> SSAValue:
    """An f32 scalar rounded to the nearest f16 (ties to even), as f32: ggml's
    GGML_FP32_TO_FP16 then back, with integer ops (no F16C, so every target gives the
    same). Normal f16 range: drop 13 mantissa bits; below 2^-14 (f16 subnormals): round
    to a multiple of 2^-24; from 65520 on: inf."""
    magnitude = kb.fabs(value)
    bits = kb.bitcast(magnitude, i32)
    odd = kb.insert(llvm.AndOp(kb.insert(llvm.LShrOp(bits, kb.constant(13, i32))),
                               kb.constant(1, i32)))
    rounded = kb.add(bits, kb.add(odd, kb.constant(0x0FFF, i32)))
    normal = kb.bitcast(kb.insert(llvm.AndOp(rounded, kb.constant(~0x1FFF, i32))), f32)
    quarter = kb.fconst(0.75)  # its ulp is 2^-24, an f16 subnormal's step
    tiny = kb.insert(llvm.FSubOp(kb.insert(llvm.FAddOp(magnitude, quarter)), quarter))
    result = kb.select(kb.fcmp("olt", magnitude, kb.fconst(2.0**-14)), tiny, normal)
    result = kb.select(kb.fcmp("oge", magnitude, kb.fconst(65520.0)), kb.fconst(math.inf), result)
    return copysign(kb, result, value)


# ----------------------------------------------------------------------------- layout
#
# A step is the blocks of one vector: 1 at W = 8, 2 at W = 16. Its 32·W/8 bytes of x_q
# (and of the weights' unsigned quants) are in the order the weight bytes unpack most
# cheaply: at W = 16, [b0[0:16], b1[0:16], b0[16:32], b1[16:32]] (one ymm of both
# blocks' nibble bytes, its low nibbles then its high ones); at W = 8 the natural order.


def _position(width: int, block: int, first: int) -> int:
    """Byte position within a step of value `first` (a multiple of 16) of `block`."""
    if width == 8:
        return first
    return first // 16 * 32 + block * 16 + first % 16


def _lane_blocks(width: int) -> list[int]:
    """The block of each i32 lane of a step (4 bytes per lane)."""
    return [(4 * lane % 32) // 16 if width == 16 else 0 for lane in range(width)]


def _first_lane(width: int, block: int) -> int:
    return _lane_blocks(width).index(block)


# ----------------------------------------------------------------------------- x quantization


@dataclass(frozen=True)
class Scratch:
    """The quantized rows of x on the stack, per step: `quants` (i8, 4·W bytes),
    `scales` (W f32 lanes: each lane's block's d_x) and `corrections` (W lanes: i32
    −o·Σx_q or f32 d_x·Σx_q in each block's first lane, zeros elsewhere)."""

    quants: SSAValue
    scales: SSAValue
    corrections: SSAValue
    steps: int
    """Steps per row (the blocks padded to whole vectors; padding blocks are zeros)."""
    width: int

    @property
    def step_bytes(self) -> int:
        return 4 * self.width

    def row(self, kb: KernelBuilder, r: Index) -> tuple[SSAValue, SSAValue, SSAValue]:
        """Byte pointers to row r's quants, scales and corrections."""
        row_bytes = self.steps * self.step_bytes
        return tuple(kb.address(base, kb.fold_mul(r, row_bytes), i8)
                     for base in (self.quants, self.scales, self.corrections))


def _quantize_step(kb: KernelBuilder, scheme: Int8Scheme, src: SSAValue,
                   dst: tuple[SSAValue, SSAValue, SSAValue], step: Index, present: int) -> None:
    """x_q, d_x and the corrections of the `present` blocks of 32 floats at src (the
    blocks of step `step`; the others of the step are zeros)."""
    w = kb.vector_width
    per_step = w // 8
    lanes = 16 if w == 16 else 8  # values per x vector: a half block or a quarter
    quants, scales, corrections = (kb.address(p, kb.fold_mul(step, 4 * w), i8) for p in dst)
    magic_scalar = kb.fconst(MAGIC)
    zero = kb.fconst(0.0)
    d_lanes, c_lanes = [zero] * per_step, [None] * per_step
    for b in range(per_step):
        if b >= present:
            for first in range(0, BLOCK, lanes):
                store_at(kb, kb.constant(0, vector_type(lanes, i8)), quants, _position(w, b, first), align=1)
            continue
        values = [kb.load(src, b * BLOCK + first, vector=True) for first in range(0, BLOCK, w)]
        largest = kb.fabs(values[0])
        for v in values[1:]:
            largest = kb.fmax(largest, kb.fabs(v))
        d, inverse = q8_scale(kb, kb.hmax(largest))
        total = None
        for t, v in enumerate(values):
            # no contraction: x·id rounds to f32 first, then to an integer
            q = round_half_away(kb, kb.insert(llvm.FMulOp(v, kb.splat(inverse))))
            as_int = small_int(kb, q)
            store_at(kb, kb.insert(llvm.TruncOp(as_int, vector_type(w, i8))), quants,
                   _position(w, b, t * w), align=1)
            total = q if total is None else kb.insert(llvm.FAddOp(total, q))
        sums = kb.hsum(total)  # an exact integer (|Σ| ≤ 32·127)
        d_lanes[b] = round_to_f16(kb, d)  # the dot products read q8's f16 d
        if scheme.offset:
            shifted = kb.insert(llvm.FAddOp(kb.insert(llvm.FMulOp(sums, kb.fconst(-scheme.offset))),
                                            magic_scalar))
            c_lanes[b] = kb.sub(kb.bitcast(shifted, i32), kb.constant(0x4B400000, i32))
        else:  # q8_1's s = f16(Σq·d), d in f32
            c_lanes[b] = round_to_f16(kb, kb.insert(llvm.FMulOp(sums, d)))
    blocks_of = _lane_blocks(w)
    scale = kb.insert(llvm.UndefOp(kb.vec))
    for lane, block in enumerate(blocks_of):
        scale = kb.insert(llvm.InsertElementOp(scale, d_lanes[block], kb.constant(lane, i32)))
    store_at(kb, scale, scales, 0)
    corr = kb.constant(0, vector_type(w, i32)) if scheme.offset else kb.vconst(0.0)
    for b in range(present):
        corr = kb.insert(llvm.InsertElementOp(corr, c_lanes[b], kb.constant(_first_lane(w, b), i32)))
    store_at(kb, corr, corrections, 0)


def q8_scale(kb: KernelBuilder, amax: SSAValue) -> tuple[SSAValue, SSAValue]:
    """(d, id) of a q8_0/q8_1 block of largest magnitude amax: d = amax/127 (f32) and
    id = 1/d, 0 when d is 0 (quantize_row_q8_0_ref)."""
    d = kb.fdiv(amax, kb.fconst(127.0))
    zero = kb.fconst(0.0)
    return d, kb.select(kb.fcmp("one", d, zero), kb.fdiv(kb.fconst(1.0), d), zero)


def _quantize_rows(kb: KernelBuilder, scheme: Int8Scheme, source: Callable[[Index], SSAValue],
                   k: int, first: Index, rows: Index, scratch: Scratch) -> None:
    """Quantize rows [first, first + rows) of x (`x_row_source`) into scratch rows [0, rows)."""
    blocks = k // BLOCK
    per_step = kb.vector_width // 8

    def one_row(r: Index) -> None:
        src = source(kb.fold_add(first, r))
        dst = scratch.row(kb, r)
        whole = blocks // per_step
        if whole:
            with kb.loop(0, whole) as loop:
                _quantize_step(kb, scheme, kb.gep(src, kb.mul(loop.iv, per_step * BLOCK)), dst,
                               loop.iv, per_step)
        if blocks % per_step:
            _quantize_step(kb, scheme, kb.address(src, whole * per_step * BLOCK), dst, whole,
                           blocks % per_step)

    kb.for_each(rows, one_row)


# ----------------------------------------------------------------------------- weights


def _nibble_bytes(kb: KernelBuilder, scheme: Int8Scheme, blocks: list[SSAValue | None]) -> SSAValue:
    """The 16 nibble bytes of each block side by side (zeros for an absent block)."""
    parts = [load_at(kb, b, scheme.quants, vector_type(16, i8)) if b is not None
             else kb.constant(0, vector_type(16, i8)) for b in blocks]
    return parts[0] if len(parts) == 1 else _concat(kb, parts[0], parts[1])


def _high_bits(kb: KernelBuilder, scheme: Int8Scheme, blocks: list[SSAValue | None]) -> SSAValue:
    """The 5th bits of a step in its byte order, each as 0 or 16 (an i8 vector)."""
    words = [load_at(kb, b, scheme.high_at, i32) if b is not None else kb.constant(0, i32)
             for b in blocks]
    if len(words) == 1:
        mask, lanes = words[0], 32
    else:  # [b0 bits 0-15, b1 bits 0-15, b0 bits 16-31, b1 bits 16-31]
        wide = [kb.insert(llvm.ZExtOp(word, i64)) for word in words]
        low = [kb.insert(llvm.AndOp(v, kb.constant(0xFFFF, i64))) for v in wide]
        high = [kb.insert(llvm.LShrOp(v, kb.constant(16, i64))) for v in wide]
        mask = low[0]
        for part, shift in ((low[1], 16), (high[0], 32), (high[1], 48)):
            mask = kb.or_(mask, kb.insert(llvm.ShlOp(part, kb.constant(shift, i64))))
        lanes = 64
    bits = kb.insert(llvm.ZExtOp(kb.bitcast(mask, vector_type(lanes, i1)), vector_type(lanes, i8)))
    return kb.insert(llvm.ShlOp(bits, kb.constant(4, vector_type(lanes, i8))))


def _unsigned_step(kb: KernelBuilder, scheme: Int8Scheme, blocks: list[SSAValue | None]) -> SSAValue:
    """The unsigned quants u of a step's weight blocks, in the step's byte order."""
    if scheme.bits == 8:
        parts = [load_at(kb, b, scheme.quants, vector_type(32, i8)) if b is not None
                 else kb.constant(0, vector_type(32, i8)) for b in blocks]
        if len(parts) == 1:
            raw = parts[0]
        else:
            raw = kb.shuffle(parts[0], parts[1],
                             [*range(16), *range(32, 48), *range(16, 32), *range(48, 64)])
        if scheme.signed:
            return raw
        # (an absent block's bytes become 128: its x_q are zeros, so they add nothing)
        return kb.insert(llvm.XOrOp(raw, kb.constant(-128, raw.type)))
    raw = _nibble_bytes(kb, scheme, blocks)
    low = kb.insert(llvm.AndOp(raw, kb.constant(0x0F, raw.type)))
    high = kb.insert(llvm.LShrOp(raw, kb.constant(4, raw.type)))
    u = _concat(kb, low, high)
    if scheme.high_at is not None:
        u = kb.or_(u, _high_bits(kb, scheme, blocks))
    return u


def _block_f16(kb: KernelBuilder, blocks: list[SSAValue | None], offset: int) -> SSAValue:
    """The f16 at `offset` of each block (None: 0) as f32, in the lanes of its block."""
    if len(blocks) == 1:
        return kb.splat(f16_as_f32(kb, load_at(kb, blocks[0], offset, i16)))
    pair = kb.constant(0, vector_type(2, i16))
    for lane, block in enumerate(blocks):
        if block is not None:
            pair = kb.insert(llvm.InsertElementOp(pair, load_at(kb, block, offset, i16),
                                                  kb.constant(lane, i32)))
    wide = f16_as_f32(kb, pair)
    return kb.shuffle(wide, wide, _lane_blocks(kb.vector_width))


@dataclass(frozen=True)
class WeightStep:
    """One step of weight blocks: unsigned quants as i32 lanes for vpdpbusd, d per
    lane, m per lane (affine schemes)."""

    quants: SSAValue
    d: SSAValue
    m: SSAValue | None


def _weight_step(kb: KernelBuilder, scheme: Int8Scheme, blocks: list[SSAValue | None]) -> WeightStep:
    """The step of `blocks` (W/8 block pointers; None: a zero block past the row's end)."""
    quants = kb.bitcast(_unsigned_step(kb, scheme, blocks), vector_type(kb.vector_width, i32))
    if scheme.min_at == 2:
        return WeightStep(quants, *_block_d_and_m(kb, blocks))
    m = _block_f16(kb, blocks, scheme.min_at) if scheme.min_at is not None else None
    return WeightStep(quants, _block_f16(kb, blocks, 0), m)


def _block_d_and_m(kb: KernelBuilder, blocks: list[SSAValue | None]) -> tuple[SSAValue, SSAValue]:
    """(d, m) of blocks that start with the f16 pair (d, m): one 4-byte load per block and
    one f16 conversion for the whole step, then each spread over its block's lanes."""
    words = kb.constant(0, vector_type(len(blocks), i32))
    for lane, block in enumerate(blocks):
        if block is not None:
            words = kb.insert(llvm.InsertElementOp(words, load_at(kb, block, 0, i32),
                                                   kb.constant(lane, i32)))
    pairs = f16_as_f32(kb, kb.bitcast(words, vector_type(2 * len(blocks), i16)))  # d0 m0 d1 m1
    lanes = _lane_blocks(kb.vector_width)
    return (kb.shuffle(pairs, pairs, [2 * b for b in lanes]),
            kb.shuffle(pairs, pairs, [2 * b + 1 for b in lanes]))


def int8_dot(kb: KernelBuilder, isa: str, acc: SSAValue, unsigned: SSAValue,
             signed: SSAValue) -> SSAValue:
    """acc + Σ of 4 u8 × s8 products per i32 lane (exact; MADDUBS: while no two
    neighbouring products sum past 32767)."""
    width = kb.vector_width
    if isa == VNNI:
        name = "llvm.x86.avx512.vpdpbusd.512" if width == 16 else "llvm.x86.avx512.vpdpbusd.256"
        return _x86(kb, name, [acc, unsigned, signed], acc.type)
    name = "llvm.x86.avx512.pmaddubs.w.512" if width == 16 else "llvm.x86.avx2.pmadd.ub.sw"
    byte_lanes = vector_type(4 * width, i8)
    pairs = _x86(kb, name, [kb.bitcast(unsigned, byte_lanes), kb.bitcast(signed, byte_lanes)],
                 vector_type(2 * width, i16))
    return kb.add(acc, int16_dot(kb, isa, None, pairs, kb.constant(1, pairs.type)))


def weight_dot(kb: KernelBuilder, isa: str, scheme: Int8Scheme, acc: SSAValue,
               weights: SSAValue, x: SSAValue) -> SSAValue:
    """acc + the 4-byte dots of each lane of `weights` (the scheme's quants) and x."""
    if not scheme.signed:
        return int8_dot(kb, isa, acc, weights, x)
    byte_lanes = vector_type(4 * kb.vector_width, i8)
    w, xs = kb.bitcast(weights, byte_lanes), kb.bitcast(x, byte_lanes)
    zero = kb.constant(0, byte_lanes)
    negative = kb.icmp("slt", w, zero)
    magnitude = kb.select(negative, kb.sub(zero, w), w)  # −(−128) wraps to 128 unsigned
    if kb.vector_width == 8:  # vpsignb: x·sign(w) (0 where w = 0, whose |w| is 0 anyway)
        signed_x = _x86(kb, "llvm.x86.avx2.psign.b", [xs, w], byte_lanes)
    else:
        signed_x = kb.select(negative, kb.sub(zero, xs), xs)
    lanes = weights.type
    return int8_dot(kb, isa, acc, kb.bitcast(magnitude, lanes), kb.bitcast(signed_x, lanes))


def int16_dot(kb: KernelBuilder, isa: str, acc: SSAValue | None, a: SSAValue,
              b: SSAValue) -> SSAValue:
    """acc + Σ of 2 i16 × i16 products per i32 lane (exact; acc None: 0)."""
    width = kb.vector_width
    ivec, words = vector_type(width, i32), vector_type(2 * width, i16)
    if isa == VNNI:
        name = "llvm.x86.avx512.vpdpwssd.512" if width == 16 else "llvm.x86.avx512.vpdpwssd.256"
        start = acc if acc is not None else kb.constant(0, ivec)
        return _x86(kb, name, [start, kb.bitcast(a, ivec), kb.bitcast(b, ivec)], ivec)
    name = "llvm.x86.avx512.pmaddw.d.512" if width == 16 else "llvm.x86.avx2.pmadd.wd"
    sums = _x86(kb, name, [kb.bitcast(a, words), kb.bitcast(b, words)], ivec)
    return sums if acc is None else kb.add(acc, sums)


def _x86(kb: KernelBuilder, name: str, args: list[SSAValue], result: Attribute) -> SSAValue:
    """A call of the (not overloaded) x86 intrinsic `name`."""
    return kb.insert(llvm.CallIntrinsicOp(name, args, [result]))


# ----------------------------------------------------------------------------- kernel


def build_int8_dequant(op: lir.DequantMatmulOp | lir.SharedInputMatmulOp, name: str,
                       vector_width: int, partitioned: bool) -> llvm.FuncOp:
    """The dequant_matmul kernel of the int8 path (see the module docstring); same ABI as
    the f32 path's: (x, w, out, [sizes...], [part, parts]). A shared_input_matmul takes
    (x, w_0..w_n-1, out_0..out_n-1, ...): x is quantized once for every weight."""
    isa = int8_isa_of(op)
    scheme = int8_scheme(op.scheme.data.value, isa)
    width = vector_width
    ns, k = q8_products(op)
    symbols = kernel_symbols(op) if is_dynamic(op) else ()
    per_step = width // 8  # blocks per vector
    blocks = k // BLOCK
    steps = -(-blocks // per_step)
    row_bytes = blocks * scheme.bytes
    kb = KernelBuilder(name, q8_arguments(op, len(symbols), partitioned), vector_width=width)
    dynamic = bool(symbols)
    xs = row_operands(op)[0] if dynamic else shape_of(op.x)
    step_bytes = 4 * width
    chunk = max(1, min(CHUNK_ROWS, SCRATCH_BYTES // (3 * steps * step_bytes)))
    static_m = None if dynamic else math.prod(xs[:-1])
    if static_m is not None:
        chunk = min(chunk, static_m)
    scratch = Scratch(*(kb.alloca(chunk * steps * step_bytes, i8) for _ in range(3)), steps, width)
    ivec = vector_type(width, i32)

    plan = RowPlan(ns, chunk, static_m, len(symbols), partitioned, (1, width),
                   (COLUMN_TILE_ROWS[width], width), interleaved_scheme(op, width), row_bytes,
                   Edges.of(op))
    source = x_row_source(kb, plan, k)

    def tile(first: Index, i: Index, j: Index, rows: int, cols: int, product: int) -> None:
        """out[first + i + r, j + c] for r < rows, c < cols (scratch rows i + r)."""
        if cols == width:
            column_tile(kb, isa, scheme, plan, scratch, (first, i, j), rows, product, blocks)
            return
        pieces = MULTI_ROW_TILES[width][1]
        for c in range(0, cols, pieces):
            row_tile(first, i, kb.fold_add(j, c), rows, min(pieces, cols - c), product)

    def row_tile(first: Index, i: Index, j: Index, rows: int, cols: int, product: int) -> None:
        """out[first + i + r, j + c]: per (row, weight row) lanes of partial sums."""
        wq, out = product_buffers(kb, plan, product)
        n = ns[product]
        w_rows = [kb.address(wq, kb.fold_mul(kb.fold_add(j, c), row_bytes), i8) for c in range(cols)]
        x_rows = [scratch.row(kb, kb.fold_add(i, r)) for r in range(rows)]

        def step(accs: list[SSAValue], index: Index, present: int) -> list[SSAValue]:
            """Add the products of step `index` (its first `present` blocks exist in the
            weights) to the accumulators."""
            block = kb.fold_mul(index, per_step)
            weights = []
            if PREFETCH_BYTES and rows == 1:
                for c in range(cols):
                    kb.prefetch(w_rows[c], kb.fold_add(kb.fold_mul(block, scheme.bytes),
                                                       PREFETCH_BYTES), i8)
            for c in range(cols):
                ptrs = [kb.address(w_rows[c], kb.fold_mul(kb.fold_add(block, b), scheme.bytes), i8)
                        if b < present else None for b in range(per_step)]
                weights.append(_weight_step(kb, scheme, ptrs))
            accs = list(accs)
            offset = kb.fold_mul(index, step_bytes)
            for r, (quants, scales, corrections) in enumerate(x_rows):
                xq = load_at(kb, quants, offset, ivec, align=4)
                dx = load_at(kb, scales, offset, kb.vec, align=4)
                corr = load_at(kb, corrections, offset, ivec if scheme.offset else kb.vec, align=4)
                for c, wt in enumerate(weights):
                    start = corr if scheme.offset else kb.constant(0, ivec)
                    dot = kb.sitofp(weight_dot(kb, isa, scheme, start, wt.quants, xq), kb.vec)
                    acc = kb.fma(dot, kb.fmul(wt.d, dx), accs[r * cols + c])
                    if wt.m is not None:
                        acc = kb.fma(wt.m, corr, acc)
                    accs[r * cols + c] = acc
            return accs

        accs = sweep_steps(kb, blocks, per_step, [kb.vconst(0.0)] * (rows * cols), step)
        base = kb.address(out, kb.fold_add(kb.fold_mul(kb.fold_add(first, i), n), j))
        for r in range(rows):
            for c in range(cols):
                kb.store(kb.hsum(accs[r * cols + c]), base, r * n + c)

    chunked_rows(kb, op, plan,
                 lambda first, rows: _quantize_rows(kb, scheme, source, k, first, rows, scratch),
                 tile, source)
    kb.ret()
    return kb.finish()


def sweep_steps(kb: KernelBuilder, blocks: int, per_step: int, accs: list[SSAValue],
                step: Callable[[list[SSAValue], Index, int], list[SSAValue]]) -> list[SSAValue]:
    """step(accs, index, present) over a row's blocks, `per_step` to a step: a loop over
    the whole steps carrying the accumulators, then the last step's `present` blocks."""
    whole = blocks // per_step
    if whole:
        with kb.loop(0, whole, carried=accs) as loop:
            loop.yield_(*step(loop.carried, loop.iv, per_step))
        accs = loop.results
    if blocks % per_step:
        accs = step(accs, whole, blocks % per_step)
    return accs


# ----------------------------------------------------------------------------- column lanes


@dataclass(frozen=True)
class ColumnWeights:
    """One block of W weight rows, lane c from row c: its unsigned quants as 8 vectors of
    4 bytes per lane (values 4q..4q+3 in vector q), d and m (affine schemes) per lane."""

    quads: list[SSAValue]
    d: SSAValue
    m: SSAValue | None


def transpose_quads(kb: KernelBuilder, rows: list[SSAValue]) -> list[SSAValue]:
    """W vectors <4 x i32> (4 dwords of each weight row) → 4 vectors <W x i32>: vector q
    holds dword q of row c in lane c. Rows c, c+4, c+8, c+12 share a vector (one per
    128-bit lane), then the 4 × 4 transposes within 128-bit lanes (unpack lo/hi of
    dwords, then of qwords)."""
    width = kb.vector_width
    z = []
    for k in range(4):
        parts = [rows[k + 4 * lane] for lane in range(width // 4)]
        while len(parts) > 1:
            parts = [_concat(kb, parts[a], parts[a + 1]) for a in range(0, len(parts), 2)]
        z.append(parts[0])

    def unpack(a: SSAValue, b: SSAValue, picks: tuple[int, int, int, int]) -> SSAValue:
        """Per 128-bit lane L: picks index a's lane (0-3) or b's (4-7)."""
        mask = [4 * lane + p % 4 + (width if p >= 4 else 0)
                for lane in range(width // 4) for p in picks]
        return kb.shuffle(a, b, mask)

    lo32, hi32, lo64, hi64 = (0, 4, 1, 5), (2, 6, 3, 7), (0, 1, 4, 5), (2, 3, 6, 7)
    t0, t1 = unpack(z[0], z[1], lo32), unpack(z[0], z[1], hi32)
    t2, t3 = unpack(z[2], z[3], lo32), unpack(z[2], z[3], hi32)
    return [unpack(t0, t2, lo64), unpack(t0, t2, hi64), unpack(t1, t3, lo64),
            unpack(t1, t3, hi64)]


def column_f16(kb: KernelBuilder, blocks: list[SSAValue], offset: int) -> SSAValue:
    """The f16 at `offset` of each block (one per lane) as f32 lanes."""
    halves = kb.constant(0, vector_type(len(blocks), i16))
    for lane, block in enumerate(blocks):
        halves = kb.insert(llvm.InsertElementOp(halves, load_at(kb, block, offset, i16),
                                                kb.constant(lane, i32)))
    return f16_as_f32(kb, halves)


def column_words(kb: KernelBuilder, blocks: list[SSAValue], offset: int) -> SSAValue:
    """The i32 at `offset` of each block, one per lane."""
    words = kb.constant(0, vector_type(len(blocks), i32))
    for lane, block in enumerate(blocks):
        words = kb.insert(llvm.InsertElementOp(words, load_at(kb, block, offset, i32),
                                               kb.constant(lane, i32)))
    return words


def _with_high_bits(kb: KernelBuilder, quads: list[SSAValue], high: SSAValue) -> list[SSAValue]:
    """q5 quants: bit v of each lane's `high` word is value v's 16. Quad q holds values
    4q..4q+3, so its 4 bits go to its 4 bytes: × 0x00204081 puts bit j at bit 8j (the
    four shifted copies of a 4-bit number do not overlap, so nothing carries)."""
    ivec = quads[0].type
    spread = []
    for q, quad in enumerate(quads):
        bits = kb.insert(llvm.AndOp(kb.insert(llvm.LShrOp(high, kb.constant(4 * q, ivec))),
                                    kb.constant(0xF, ivec)))
        bytes_ = kb.insert(llvm.AndOp(kb.insert(llvm.MulOp(bits, kb.constant(0x00204081, ivec))),
                                      kb.constant(0x01010101, ivec)))
        spread.append(kb.or_(quad, kb.insert(llvm.ShlOp(bytes_, kb.constant(4, ivec)))))
    return spread


def quant_dwords(scheme: Int8Scheme) -> int:
    """Dwords of quants per block: 8 bytes of q8_0, 4 of nibbles."""
    return 8 if scheme.bits == 8 else 4


def _column_weights(kb: KernelBuilder, scheme: Int8Scheme, blocks: list[SSAValue]) -> ColumnWeights:
    """One block of each of W weight rows (`blocks`: its address in each row), transposed
    in registers."""
    quads = [q for half in range(0, 4 * quant_dwords(scheme), 16) for q in transpose_quads(
        kb, [load_at(kb, b, scheme.quants + half, vector_type(4, i32)) for b in blocks])]
    high = column_words(kb, blocks, scheme.high_at) if scheme.high_at is not None else None
    m = column_f16(kb, blocks, scheme.min_at) if scheme.min_at is not None else None
    return ColumnWeights(_unsigned_quads(kb, scheme, quads, high), column_f16(kb, blocks, 0), m)


def _interleaved_weights(kb: KernelBuilder, scheme: Int8Scheme, name: str,
                         group: SSAValue) -> ColumnWeights:
    """One block of each of W weight rows from their interleaved group (`group`: its
    address; layout of `rlx_mlir.core.packing.interleave_blocks`): one vector load per
    field and dword."""
    width = kb.vector_width
    ivec = vector_type(width, i32)

    def field(offset: int, ty: Attribute, unit: int = 0) -> SSAValue:
        return load_at(kb, group, interleaved_offset(name, width, offset, unit, 0), ty)

    # In address order (d, m, 5th bits, quants): read quants first, q5_1's group (6 lines)
    # went lines 2-5, 1, 0, and its one-row product streamed 13.5 GB/s from memory where
    # the others read ~35 (ascending: 31-34 GB/s; cache-resident rates level).
    halves = vector_type(width, i16)
    d = field(0, halves)
    m = field(scheme.min_at, halves) if scheme.min_at is not None else None
    high = field(scheme.high_at, ivec) if scheme.high_at is not None else None
    quads = [field(scheme.quants, ivec, q) for q in range(quant_dwords(scheme))]
    return ColumnWeights(_unsigned_quads(kb, scheme, quads, high), f16_as_f32(kb, d),
                         None if m is None else f16_as_f32(kb, m))


def _unsigned_quads(kb: KernelBuilder, scheme: Int8Scheme, quads: list[SSAValue],
                    high: SSAValue | None) -> list[SSAValue]:
    """The 8 quads of unsigned quants (values 4q..4q+3 in quad q) of a block's quant
    dwords in column lanes (`quads`: 8 of bytes, or 4 of nibbles: byte i holds value i in
    its low nibble, 16 + i in its high one) and its 5th bits per lane (`high`)."""
    ivec = quads[0].type
    if scheme.bits == 8:  # q + 128, as unsigned bytes (or q itself: scheme.signed)
        if scheme.signed:
            return quads
        return [kb.insert(llvm.XOrOp(q, kb.constant(-0x7F7F7F80, ivec))) for q in quads]
    nibbles = kb.constant(0x0F0F0F0F, ivec)
    unsigned = ([kb.insert(llvm.AndOp(q, nibbles)) for q in quads]
                + [kb.insert(llvm.AndOp(kb.insert(llvm.LShrOp(q, kb.constant(4, ivec))), nibbles))
                   for q in quads])
    return unsigned if high is None else _with_high_bits(kb, unsigned, high)


def column_tile(kb: KernelBuilder, isa: str, scheme: Int8Scheme, plan: RowPlan, scratch: Scratch,
                where: tuple[Index, Index, Index], rows: int, product: int, blocks: int) -> None:
    """out[first + i + r, j + c] for r < rows, c < W, with weight row j + c in lane c: per
    block and row of x, 8 `vpdpbusd` of broadcast x dwords give the W exact integer dots
    of the block at once, so its f32 conversion and scales cost one vector op each for W
    outputs (the row tiles pay them per output); the lanes are the outputs, no sums
    across lanes. (first, i, j) = where: x's first row, the scratch row, the weight row."""
    first, i, j = where
    width = kb.vector_width
    per_step, step_bytes = width // 8, 4 * width
    wq, out = product_buffers(kb, plan, product)
    n = plan.ns[product]
    row_bytes = blocks * scheme.bytes
    ivec = vector_type(width, i32)
    x_rows = [scratch.row(kb, kb.fold_add(i, r)) for r in range(rows)]
    if plan.interleaved:  # the W rows' blocks are one run of groups of W·bytes
        group_bytes = width * scheme.bytes
        columns = [kb.address(wq, kb.fold_mul(j, row_bytes), i8)]
    else:
        group_bytes = scheme.bytes
        columns = [kb.address(wq, kb.fold_mul(kb.fold_add(j, c), row_bytes), i8) for c in range(width)]

    def block(accs: list[SSAValue], step: Index, b: int) -> list[SSAValue]:
        at = kb.fold_mul(kb.fold_add(kb.fold_mul(step, per_step), b), group_bytes)
        if plan.interleaved:
            weights = _interleaved_weights(kb, scheme, plan.interleaved, kb.address(columns[0], at, i8))
        else:
            weights = _column_weights(kb, scheme, [kb.address(col, at, i8) for col in columns])
        base = kb.fold_mul(step, step_bytes)
        lane = kb.fold_add(base, 4 * _first_lane(width, b))
        sums = []
        for r, (quants, scales, corrections) in enumerate(x_rows):
            corr = load_at(kb, corrections, lane, i32 if scheme.offset else f32, align=4)
            dot = kb.splat(corr) if scheme.offset else kb.constant(0, ivec)
            for q, quad in enumerate(weights.quads):
                x4 = load_at(kb, quants, kb.fold_add(base, _position(width, b, 4 * q)), i32, align=4)
                dot = weight_dot(kb, isa, scheme, dot, quad, kb.splat(x4))
            dx = kb.splat(load_at(kb, scales, lane, f32, align=4))
            acc = kb.fma(kb.sitofp(dot, kb.vec), kb.fmul(weights.d, dx), accs[r])
            if weights.m is not None:
                acc = kb.fma(weights.m, kb.splat(corr), acc)
            sums.append(acc)
        return sums

    interleaved_ahead = (INTERLEAVED_PREFETCH_BYTES if rows > 1
                         else ONE_ROW_PREFETCH_BYTES.get(plan.interleaved, 0))

    def step(accs: list[SSAValue], index: Index, present: int) -> list[SSAValue]:
        if plan.interleaved and interleaved_ahead:  # every line of the step's groups
            ahead = kb.fold_add(kb.fold_mul(index, per_step * group_bytes), interleaved_ahead)
            for line in range(0, per_step * group_bytes, 64):
                kb.prefetch(columns[0], kb.fold_add(ahead, line), i8)
        elif PREFETCH_BYTES and not plan.interleaved:
            ahead = kb.fold_add(kb.fold_mul(index, per_step * scheme.bytes), PREFETCH_BYTES)
            for col in columns:
                kb.prefetch(col, ahead, i8)
        for b in range(present):
            accs = block(accs, index, b)
        return accs

    accs = sweep_steps(kb, blocks, per_step, [kb.vconst(0.0)] * rows, step)
    base = kb.address(out, kb.fold_add(kb.fold_mul(kb.fold_add(first, i), n), j))
    for r in range(rows):
        kb.store(accs[r], base, r * n, align=4)


@dataclass(frozen=True)
class RopeEdge:
    """A shared input's fused rope (interleaved pairs): which products it rotates, and
    their heads' size and rotated dims."""

    products: tuple[int, ...]
    head_dim: int
    n_rot: int


@dataclass(frozen=True)
class Edges:
    """What a q8 kernel fuses around its products (mir-fuse): an rms_norm of each row of x
    before it is quantized (`norm_eps`; its gamma is the pointer after the weights), a
    gated linear unit of a shared input's two products (`glu`: out_0 = act(out_0) * out_1,
    no pointer), a residual added to the product of a dequant_matmul (the pointer after
    its weight), a rope of some of a shared input's products (`rope`: the cos and sin
    pointers after the gamma) and the products written into caches at a row (`cached`:
    their outs are the caches; the position is the i64 argument after the pointers)."""

    norm_eps: float | None = None
    residual: bool = False
    glu: ElementwiseFn | None = None
    rope: RopeEdge | None = None
    cached: tuple[int, ...] = ()
    residual_eps: float | None = None
    """A shared input's normed residual (Gemma 3's sandwich norm): row r of x becomes
    residual[r] + rms_norm(x[r], residual_gamma) before the norm (`RowSource`); the
    residual and its gamma are the pointers after the weights, the sums the last out."""

    @staticmethod
    def of(op: lir.DequantMatmulOp | lir.SharedInputMatmulOp) -> Edges:
        if not isinstance(op, lir.SharedInputMatmulOp):
            return Edges(residual=op.residual is not None)
        eps, glu, residual_eps = op.norm_eps, op.glu, op.residual_eps
        rope = None
        if op.rope_head_dim is not None and op.rope_n_rot is not None:
            rope = RopeEdge(indices_of(op, "rope_products"), op.rope_head_dim.value.data,
                            op.rope_n_rot.value.data)
        return Edges(norm_eps=None if eps is None else float(eps.value.data),
                     glu=None if glu is None else ElementwiseFn(glu.data.value), rope=rope,
                     cached=indices_of(op, "cache_products"),
                     residual_eps=None if residual_eps is None else float(residual_eps.value.data))

    @property
    def names(self) -> tuple[str, ...]:
        """The pointer arguments between the weights and the outs, in order (the operands'
        order: a dequant_matmul's residual; a shared input's residual and its gamma, gamma,
        cos, sin)."""
        summed = self.residual_eps is not None
        present = (("residual", self.residual or summed), ("residual_gamma", summed),
                   ("gamma", self.norm_eps is not None),
                   ("cos", self.rope is not None), ("sin", self.rope is not None))
        return tuple(name for name, there in present if there)

    @property
    def pointers(self) -> int:
        """How many pointer arguments lie between the weights and the outs."""
        return len(self.names)

    @property
    def extra_outs(self) -> int:
        """Outs after the products' (the residual's sums)."""
        return int(self.residual_eps is not None)

    @property
    def indices(self) -> int:
        """The i64 arguments after the pointers (the cache position)."""
        return int(bool(self.cached))


def q8_pointers(op: lir.DequantMatmulOp | lir.SharedInputMatmulOp) -> int:
    """A q8 kernel's pointer arguments: x, the weights, the fused edges' (`Edges`), the outs."""
    products, edges = len(q8_products(op)[0]), Edges.of(op)
    return 1 + 2 * products + edges.pointers + edges.extra_outs


def q8_arguments(op: lir.DequantMatmulOp | lir.SharedInputMatmulOp, symbols: int,
                 partitioned: bool) -> list[Attribute]:
    """A q8 kernel's argument types: its pointers (`q8_pointers`), the edges' i64 indices,
    the sizes of its `symbols`, and (part, parts) when partitioned."""
    return [PTR] * q8_pointers(op) + [i64] * (Edges.of(op).indices + symbols + 2 * partitioned)


@dataclass(frozen=True)
class RowPlan:
    """How a q8 kernel walks its outs: the weight rows `ns` of each product (one for a
    dequant_matmul, one per weight of a shared_input_matmul, whose weights are one virtual
    range of columns); x's rows quantized `chunk` at a time (`static_m` rows, None when
    run-time), once for every product; tiles of (rows of x, weight rows) for one row of x
    (`single`) and for more (`multi`); partitioned kernels split the virtual weight rows."""

    ns: tuple[int, ...]
    chunk: int
    static_m: int | None
    symbols: int
    partitioned: bool
    single: tuple[int, int]
    multi: tuple[int, int]
    interleaved: str = ""
    """The weights' scheme when their blocks are interleaved W rows at a time (`interleaved`
    of the op: column tiles read groups), "" for row-major GGUF rows."""
    row_bytes: int = 0
    """Bytes of one weight row (every product's): how large a part's share of the weights
    is (`row_groups`); 0: the parts never split x's rows."""
    edges: Edges = Edges()
    """The fused rms_norm before the products, and glu or residual after them."""

    @property
    def pointers(self) -> int:
        """The kernel's pointer arguments: x, a weight and an out per product, the
        edges' between the weights and the outs, and their outs after the products'."""
        return 1 + 2 * len(self.ns) + self.edges.pointers + self.edges.extra_outs

    @property
    def sizes_at(self) -> int:
        """The index of the kernel's first size argument (after the edges' indices)."""
        return self.pointers + self.edges.indices


def q8_products(op: lir.DequantMatmulOp | lir.SharedInputMatmulOp
                ) -> tuple[tuple[int, ...], int]:
    """The weight rows of each product of a q8 kernel and K (x's last dim, static)."""
    weights = op.weights if isinstance(op, lir.SharedInputMatmulOp) else [op.w]
    return tuple(int(shape_of(w)[0]) for w in weights), int(shape_of(op.x)[-1])


def edge_pointer(kb: KernelBuilder, plan: RowPlan, name: str) -> SSAValue:
    """The pointer argument of one of the edges' buffers (`Edges.names`: gamma, residual,
    cos, sin), after the weights."""
    return kb.args[1 + len(plan.ns) + plan.edges.names.index(name)]


def product_buffers(kb: KernelBuilder, plan: RowPlan, product: int) -> tuple[SSAValue, SSAValue]:
    """The weight and out pointers of one product: (x, w_0..w_n-1, [edges], out_0..out_n-1,
    ...); a product written into a cache (`Edges.cached`) starts at the position's row."""
    count = len(plan.ns)
    out = kb.args[1 + count + plan.edges.pointers + product]
    if product in plan.edges.cached:
        out = kb.gep(out, kb.mul(kb.args[plan.pointers], plan.ns[product]))
    return kb.args[1 + product], out


class RowSource:
    """source(r): a pointer to row r of x as the kernel quantizes it. With a fused rms_norm
    (`Edges.norm_eps`), row r is normalized into a stack row first (`rms_norm_row`, the bits
    of `lir.rms_norm`): every part normalizes the rows it quantizes, so no kernel and no
    barrier stands between the residual add before and the products. With a normed
    residual (`Edges.residual_eps`) the row normalized is residual[r] + rms_norm(x[r],
    residual_gamma) (the bits of `lir.rms_norm` then `lir.elementwise add`), stored into
    the sums' out by the part `writer` names (the one part of each row group whose share
    of the columns starts at 0, `chunked_rows` sets it; None: every part, unpartitioned)
    and into a stack row by the others, which compute the same rows."""

    def __init__(self, kb: KernelBuilder, plan: RowPlan, k: int):
        self.kb, self.plan, self.k = kb, plan, k
        self.writer: SSAValue | None = None
        edges = plan.edges
        if edges.norm_eps is not None:
            self.gamma, self.normed = edge_pointer(kb, plan, "gamma"), kb.alloca(k)
        if edges.residual_eps is not None:
            self.residual = edge_pointer(kb, plan, "residual")
            self.residual_gamma = edge_pointer(kb, plan, "residual_gamma")
            self.sums = kb.args[1 + 2 * len(plan.ns) + edges.pointers]
            self.residual_normed, self.own_sum = kb.alloca(k), kb.alloca(k)

    def __call__(self, r: Index) -> SSAValue:
        kb, k, edges = self.kb, self.k, self.plan.edges
        row = kb.address(kb.args[0], kb.fold_mul(r, k))
        if edges.residual_eps is not None:
            row = self._summed(r, row)
        if edges.norm_eps is None:
            return row
        rms_norm_row(kb, row, self.gamma, None, self.normed, 0, k, edges.norm_eps)
        return self.normed

    def _summed(self, r: Index, row: SSAValue) -> SSAValue:
        """residual[r] + rms_norm(row, residual_gamma), in the sums' row r (the writer) or
        the stack row; a pointer to it."""
        kb, k, eps = self.kb, self.k, self.plan.edges.residual_eps
        assert eps is not None
        rms_norm_row(kb, row, self.residual_gamma, None, self.residual_normed, 0, k, eps)
        at = kb.fold_mul(r, k)
        out = kb.address(self.sums, at)
        if self.writer is not None:
            out = kb.select(self.writer, out, self.own_sum)
        residual, normed = kb.address(self.residual, at), self.residual_normed

        def add(c: SSAValue, vector: bool) -> None:
            # no `contract` flag: LLVM would fuse the norm's last fmul into this add (an
            # FMA), which the unfused kernels, reading the norm from memory, never do
            total = kb.insert(llvm.FAddOp(kb.load(residual, c, vector=vector),
                                          kb.load(normed, c, vector=vector)))
            kb.store(total, out, c)

        kb.sweep(0, k, add)
        return out


def x_row_source(kb: KernelBuilder, plan: RowPlan, k: int) -> RowSource:
    """The rows of x a q8 kernel quantizes (`RowSource`)."""
    return RowSource(kb, plan, k)


TileEpilogue = Callable[[SSAValue, bool], None]
"""epilogue(at, vector): the epilogue at element `at` of the outs (row-major [M, N])."""


def _tile_epilogue(kb: KernelBuilder, plan: RowPlan, first: Index, rows: Index, j: Index,
                   ncols: int, epilogue: TileEpilogue) -> None:
    """epilogue at [first + i, j + c] over the chunk's rows and ncols columns of a tile
    just stored (in L1), a vector at a time, then a scalar tail."""
    n = plan.ns[0]

    def one_row(i: Index) -> None:
        base = kb.fold_add(kb.fold_mul(kb.fold_add(first, i), n), j)
        kb.sweep(0, ncols, lambda c, vector: epilogue(kb.add(base, c), vector),
                 vectors=ncols >= kb.vector_width)

    kb.for_each(rows, one_row)


def _add_residual(kb: KernelBuilder, plan: RowPlan) -> TileEpilogue:
    """out += residual: the epilogue of a dequant_matmul with a residual. residual +
    product is the `lir.elementwise add` it replaces, bit for bit."""
    residual, out = edge_pointer(kb, plan, "residual"), product_buffers(kb, plan, 0)[1]

    def add(at: SSAValue, vector: bool) -> None:
        kb.store(kb.fadd(kb.load(residual, at, vector=vector), kb.load(out, at, vector=vector)),
                 out, at)

    return add


def _gated(kb: KernelBuilder, plan: RowPlan) -> TileEpilogue:
    """out_0 = act(out_0) * out_1: the epilogue of a shared input's glu, once both
    products' tiles of the same columns are stored (`glu_function`: the bits of the
    fused_elementwise it replaces)."""
    assert plan.edges.glu is not None
    gate, up = (product_buffers(kb, plan, product)[1] for product in (0, 1))
    glu = glu_function(kb, plan.edges.glu)

    def gated(at: SSAValue, vector: bool) -> None:
        kb.store(glu(kb.load(gate, at, vector=vector), kb.load(up, at, vector=vector), vector),
                 gate, at)

    return gated


def _rope_tile(kb: KernelBuilder, plan: RowPlan, product: int, first: Index, rows: Index,
               j: Index, ncols: int) -> None:
    """Rotate the tile of `product` just stored ([first + i, j + c] over the chunk's rows
    and ncols columns): its interleaved pairs (j and ncols are even, and so is the head
    size) by the cos/sin row of their row of x (`rotate_pair`: the bits of `lir.rope`);
    dims past n_rot of a head stay. A whole tile of W columns inside one head's rotated
    (or kept) dims goes a vector at a time (`_rope_vector`), any other pair by pair."""
    rope = plan.edges.rope
    assert rope is not None
    cos, sin = edge_pointer(kb, plan, "cos"), edge_pointer(kb, plan, "sin")
    out, n, half = product_buffers(kb, plan, product)[1], plan.ns[product], rope.n_rot // 2
    w = kb.vector_width
    whole = ncols == w and rope.head_dim % w == 0 and rope.n_rot % w == 0

    def one_row(i: Index) -> None:
        row = kb.fold_add(first, i)
        values = kb.gep(out, kb.fold_add(kb.fold_mul(row, n), j))
        c_row, s_row = kb.gep(cos, kb.fold_mul(row, half)), kb.gep(sin, kb.fold_mul(row, half))
        if whole:
            _rope_vector(kb, rope, values, c_row, s_row, j)
            return
        for pair in range(ncols // 2):
            _rope_pair(kb, rope, values, c_row, s_row, j, pair)

    kb.for_each(rows, one_row)


def _rope_vector(kb: KernelBuilder, rope: RopeEdge, values: SSAValue, c_row: SSAValue,
                 s_row: SSAValue, j: Index) -> None:
    """values[0:W], dims j..j+W of a head (j a multiple of W, which divides the head size
    and n_rot): every lane's pair partner and cos/sin spread by shuffles, each lane
    computed as `rotate_pair` computes it, so the bits are the scalar ones."""
    w = kb.vector_width
    within = j % rope.head_dim if isinstance(j, int) else kb.srem(j, rope.head_dim)

    def rotate() -> None:
        v = kb.load(values, 0, vector=True)
        first, second = ([2 * (lane // 2) + odd for lane in range(w)] for odd in (0, 1))
        a, b = kb.shuffle(v, v, first), kb.shuffle(v, v, second)
        index = within // 2 if isinstance(within, int) else kb.sdiv(within, 2)
        halves = (load_at(kb, kb.gep(t, index), 0, vector_type(w // 2, f32), align=4)
                  for t in (c_row, s_row))
        c, s = (kb.shuffle(t, t, [lane // 2 for lane in range(w)]) for t in halves)
        even, odd = rotate_pair(kb, a, b, c, s)
        kb.store(kb.shuffle(even, odd, [lane + w * (lane % 2) for lane in range(w)]), values)

    if rope.n_rot == rope.head_dim:
        rotate()
    elif isinstance(within, int):
        if within < rope.n_rot:
            rotate()
    else:
        with kb.if_(kb.icmp("slt", within, rope.n_rot)):
            rotate()


def _rope_pair(kb: KernelBuilder, rope: RopeEdge, values: SSAValue, c_row: SSAValue,
               s_row: SSAValue, j: Index, pair: int) -> None:
    """values[2·pair], values[2·pair + 1]: the pair at dim j + 2·pair of the product."""
    half = rope.n_rot // 2
    column = kb.fold_add(j, 2 * pair)
    if isinstance(column, int):  # a static tile: the pair's dim is known
        if column % rope.head_dim >= rope.n_rot:
            return
        within: Index = column % rope.head_dim
        index: Index = within // 2
    else:
        within = kb.srem(column, rope.head_dim)
        index = kb.fold_min(kb.sdiv(within, 2), half - 1)  # a kept dim reads a cos too
    a, b = kb.load(values, 2 * pair), kb.load(values, 2 * pair + 1)
    ra, rb = rotate_pair(kb, a, b, kb.load(c_row, index), kb.load(s_row, index))
    if not isinstance(within, int) and rope.n_rot < rope.head_dim:
        rotated = kb.icmp("slt", within, rope.n_rot)
        ra, rb = kb.select(rotated, ra, a), kb.select(rotated, rb, b)
    kb.store(ra, values, 2 * pair)
    kb.store(rb, values, 2 * pair + 1)


def row_groups(kb: KernelBuilder, m: Index, parts: SSAValue, min_rows: int,
               weight_bytes: int) -> SSAValue:
    """Into how many groups the parts of a kernel split m rows of x: the largest power of
    two that divides `parts`, leaves each group at least `min_rows` rows and each part a
    share of the `weight_bytes` of at most ROW_SPLIT_SHARE_BYTES (1: every part takes every
    row). Part p takes row group p mod groups and column share p div groups of
    parts/groups. Each part quantizes the rows of its group: split, the rows are
    quantized once instead of once per part, but each part reads groups/parts of the
    weights instead of 1/parts, once per chunk of rows; a share within a core's L2 is
    re-read from there."""
    if not weight_bytes:
        return kb.index(1)
    cap = kb.fold_min(kb.fold_min(kb.sdiv(kb.index(m), min_rows), parts),
                      kb.sdiv(kb.mul(parts, ROW_SPLIT_SHARE_BYTES), weight_bytes))
    groups = kb.index(1)
    for size in (2, 4, 8, 16, 32, 64):
        fits = kb.insert(llvm.AndOp(kb.icmp("sle", kb.index(size), cap),
                                    kb.icmp("eq", kb.srem(parts, size), kb.index(0))))
        groups = kb.select(fits, kb.index(size), groups)
    return groups


ProductTile = Callable[[Index, Index, Index, int, int, int], None]
"""tile(first, i, j, rows, cols, product): out_product[first + i + r, j + c]."""


def chunked_rows(kb: KernelBuilder, op: lir.DequantMatmulOp | lir.SharedInputMatmulOp,
                 plan: RowPlan, quantize: Callable[[Index, Index], None], tile: ProductTile,
                 source: RowSource | None = None) -> None:
    """Chunk by chunk of x's rows: quantize(first, rows) into the scratch (once for every
    product), then tile(first, i, j, rows, cols, product) over the chunk's rows × this
    part's weight rows of each product. A part's share is a range of column panels of
    the products' virtual column range, cut at each product's bounds; with many rows of
    x (`row_groups`), the parts also split x's rows, so that each quantizes only its own
    rows (a prefill at 16 threads quantized every row 16 times). A row's numbers do not
    depend on its tile, so the split never changes them. A glu's two products share one
    range of columns: a part computes the tile of both, then act(gate) * up on it. The
    part of each row group whose column share starts at 0 is `source`'s writer."""
    ns, chunk = plan.ns, plan.chunk
    ranges = ns[:1] if plan.edges.glu is not None else ns
    rope = plan.edges.rope
    epilogue = (_gated(kb, plan) if plan.edges.glu is not None
                else _add_residual(kb, plan) if plan.edges.residual else None)

    def rows_case(m: Index, single: bool) -> None:
        """out for `m` rows of x (1, a static count or a run-time one), chunk by chunk."""
        rows_per_tile, cols = plan.single if single else plan.multi
        panels = [-(-n // cols) for n in ranges]

        def emit(rows_span: tuple[Index, Index], spans: list[tuple[Span, SSAValue | None]]) -> None:
            """rows_span: the rows of x; spans: each product's weight rows, and when they
            may be empty, the test."""
            def chunk_body(first: Index, rows: Index) -> None:
                quantize(first, rows)
                for product, (weight_rows, present) in enumerate(spans):
                    n = ns[product]

                    def weight_tile(j: Index, ncols: int, product: int = product) -> None:
                        for p in (0, 1) if plan.edges.glu is not None else (product,):
                            kb.tile_sweep((0, rows), kb.round_down(rows, rows_per_tile), rows,
                                          rows_per_tile,
                                          lambda i, size, p=p: tile(first, i, j, size, ncols, p))
                        if epilogue is not None:
                            _tile_epilogue(kb, plan, first, rows, j, ncols, epilogue)
                        if rope is not None and product in rope.products:
                            _rope_tile(kb, plan, product, first, rows, j, ncols)

                    if present is None:
                        kb.tile_sweep(weight_rows, n // cols * cols, n, cols, weight_tile)
                    else:
                        with kb.if_(present):
                            kb.tile_sweep(weight_rows, n // cols * cols, n, cols, weight_tile)

            start, stop = rows_span
            if isinstance(start, int) and isinstance(stop, int) and stop - start <= chunk:
                chunk_body(start, stop - start)
            else:
                with kb.loop(start, stop, chunk) as loop:
                    chunk_body(loop.iv, kb.fold_min(kb.index(chunk), kb.sub(stop, loop.iv)))

        if not plan.partitioned:
            emit((0, m), [((0, n), None) for n in ranges])
            return
        part, parts = kb.args[-2:]
        if single:
            lo, hi = kb.part_range(sum(panels), part, parts)
            if source is not None:
                source.writer = kb.icmp("eq", lo, kb.index(0))
            with kb.if_(kb.icmp("slt", lo, hi)):
                emit((0, m), product_spans(kb, ranges, cols, lo, hi))
            return
        groups = row_groups(kb, m, parts, rows_per_tile, sum(ns) * plan.row_bytes)
        first, last = kb.part_range(m, kb.srem(part, groups), groups)
        lo, hi = kb.part_range(sum(panels), kb.sdiv(part, groups), kb.sdiv(parts, groups))
        if source is not None:
            source.writer = kb.icmp("eq", lo, kb.index(0))
        with kb.if_(kb.icmp("slt", lo, hi)):
            emit((first, last), product_spans(kb, ranges, cols, lo, hi))

    if plan.static_m is not None:
        rows_case(plan.static_m, plan.static_m == 1)
    else:
        sizes = RuntimeDims.of(op, kb.args[plan.sizes_at:plan.sizes_at + plan.symbols])
        rows_classes(kb, runtime_rows(kb, sizes.shape(0)[:-1]), lambda _: rows_case(1, True),
                      None, lambda m: rows_case(m, False))
