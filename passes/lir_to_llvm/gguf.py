"""GGUF block formats, read in registers: how a kernel turns the raw bytes of one block of
a GGUF weight row into f32 vectors (`DequantScheme`, one per scheme in `SCHEMES`), shared by
the dequantizing products and gathers (dequant.py) and the int8 path (quant_dot.py).

f16 scales become f32 with F16C where the target has it (W >= 8), else with an exact
integer widening (SSE-only CPUs lack F16C, and `fpext half` would be a libcall MCJIT cannot
resolve).
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass

from xdsl.dialects import llvm
from xdsl.dialects.builtin import (
    DenseIntOrFPElementsAttr,
    VectorType,
    f16,
    f32,
    i8,
    i16,
    i32,
)
from xdsl.ir import Attribute, Operation, SSAValue

from rlx_mlir.core.quants import KVALUES_IQ4NL
from rlx_mlir.passes.lir_to_llvm.builder import KernelBuilder, vector_type


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
    return _half_to_f32(kb, kb.load(kb.address(block, offset, i8), element=i16, align=1))


def f16_scale(kb: KernelBuilder, block: SSAValue) -> SSAValue:
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
    return f16_scale(kb, block), None


def _d_and_m(kb: KernelBuilder, block: SSAValue, g: int) -> Affine:
    return f16_scale(kb, block), _f16_at(kb, block, 2)


def _q6_k_affine(kb: KernelBuilder, block: SSAValue, g: int) -> Affine:
    return kb.fmul(_f16_at(kb, block, 208), kb.sitofp(_byte(kb, block, 192 + g, signed=True), f32)), None


def _f16_values(kb: KernelBuilder, block: SSAValue, first: int) -> SSAValue:
    return _half_to_f32(kb, kb.load(block, first, vector=True, element=i16, align=2))


def _bf16_values(kb: KernelBuilder, block: SSAValue, first: int) -> SSAValue:
    return _bf16_to_f32(kb, kb.load(block, first, vector=True, element=i16, align=2))


def _crumbs(kb: KernelBuilder, block: SSAValue, offset: int, first: int) -> SSAValue:
    """2-bit quants of W values from `first` (i8 vector) of q2_K/q3_K: per half of 128
    values 32 bytes from `offset`, whose 2-bit fields at shifts 0, 2, 4, 6 are values 0-31,
    32-63, 64-95, 96-127 of the half."""
    half, within = divmod(first, 128)
    raw = _bytes(kb, block, offset + half * 32 + within % 32)
    return _and(kb, _lshr(kb, raw, 2 * (within // 32)), 3)


def _q2_k(kb: KernelBuilder, block: SSAValue, first: int) -> SSAValue:
    return kb.sitofp(_crumbs(kb, block, 16, first), kb.vec)


def _q2_k_affine(kb: KernelBuilder, block: SSAValue, g: int) -> Affine:
    # scale byte g: low nibble the scale, high nibble the min of the 16 values
    packed = _byte(kb, block, g)
    d = kb.fmul(_f16_at(kb, block, 80), kb.sitofp(_and(kb, packed, 0x0F), f32))
    dmin = kb.fmul(_f16_at(kb, block, 82), kb.sitofp(_lshr(kb, packed, 4), f32))
    return d, kb.fneg(dmin)


def _q3_k(kb: KernelBuilder, block: SSAValue, first: int) -> SSAValue:
    # bit (first // 32) of hmask[first % 32 ...] set: q = low, clear: q = low - 4
    high = _and(kb, _lshr(kb, _bytes(kb, block, first % 32), first // 32), 1)
    q = kb.or_(_crumbs(kb, block, 32, first), _int_op(kb, llvm.ShlOp, high, 2))
    return kb.sitofp(kb.sub(q, 4), kb.vec)


def _q3_k_affine(kb: KernelBuilder, block: SSAValue, g: int) -> Affine:
    # 6-bit scale g: low 4 bits a nibble of bytes 96-103 (g < 8 low, else high), top 2
    # bits at shift 2·(g // 4) of byte 104 + g % 4; stored + 32
    low = _byte(kb, block, 96 + g % 8)
    low = _and(kb, low, 0x0F) if g < 8 else _lshr(kb, low, 4)
    top = _and(kb, _lshr(kb, _byte(kb, block, 104 + g % 4), 2 * (g // 4)), 3)
    scale = kb.sub(kb.or_(low, _int_op(kb, llvm.ShlOp, top, 4)), 32)
    return kb.fmul(_f16_at(kb, block, 108), kb.sitofp(scale, f32)), None


def _iq4_grid(kb: KernelBuilder, nibbles: SSAValue) -> SSAValue:
    """kvalues_iq4nl[n] of an i8 vector of nibbles n, as f32: one `pshufb` of the 16-byte
    grid on SSSE3 (every target with W >= 8), else a tree of 15 selects on the 4 bits."""
    w = kb.vector_width
    grid = KVALUES_IQ4NL
    if w >= 8:
        wide = vector_type(16, i8)
        lanes = [t % w for t in range(16)]
        index = nibbles if w == 16 else kb.shuffle(nibbles, nibbles, lanes)
        table = kb.insert(llvm.ConstantOp(DenseIntOrFPElementsAttr.from_list(wide, list(grid)), wide))
        looked = kb.insert(llvm.CallIntrinsicOp("llvm.x86.ssse3.pshuf.b.128", [table, index], [wide]))
        if w == 8:
            looked = kb.shuffle(looked, looked, range(w))
        return kb.sitofp(looked, kb.vec)
    level = [kb.constant(v, nibbles.type) for v in grid]
    for bit in range(4):
        taken = kb.icmp("ne", _and(kb, nibbles, 1 << bit), kb.constant(0, nibbles.type))
        level = [kb.select(taken, level[p + 1], level[p]) for p in range(0, len(level), 2)]
    return kb.sitofp(level[0], kb.vec)


def _iq4_nl(kb: KernelBuilder, block: SSAValue, first: int) -> SSAValue:
    return _iq4_grid(kb, _nibbles(kb, block, 2, first, 16))


def _iq4_xs(kb: KernelBuilder, block: SSAValue, first: int) -> SSAValue:
    return _iq4_grid(kb, _nibbles(kb, block, 8, first, 16))


def _iq4_xs_affine(kb: KernelBuilder, block: SSAValue, g: int) -> Affine:
    # 6-bit scale g (stored + 32): low 4 bits the nibble g % 2 of byte 4 + g // 2, top 2
    # bits at shift 2g of the little-endian u16 at bytes 2-3
    low = _byte(kb, block, 4 + g // 2)
    low = _and(kb, low, 0x0F) if g % 2 == 0 else _lshr(kb, low, 4)
    top = _and(kb, _lshr(kb, _byte(kb, block, 2 + g // 4), 2 * (g % 4)), 3)
    scale = kb.sub(kb.or_(low, _int_op(kb, llvm.ShlOp, top, 4)), 32)
    return kb.fmul(f16_scale(kb, block), kb.sitofp(scale, f32)), None


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
    "q2_k": DequantScheme(256, 84, 16, _q2_k, _q2_k_affine),
    "q3_k": DequantScheme(256, 110, 16, _q3_k, _q3_k_affine),
    "iq4_nl": DequantScheme(32, 18, 32, _iq4_nl, _d_only),
    "iq4_xs": DequantScheme(256, 136, 32, _iq4_xs, _iq4_xs_affine),
}
"""Every scheme `lir.dequant_matmul` compiles, described once (see DequantScheme)."""

def dequant_weights(kb: KernelBuilder, scheme: DequantScheme, block: SSAValue, group: int,
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


