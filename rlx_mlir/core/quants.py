"""numpy reference dequantization of GGUF (ggml) tensor types: the oracle for quantized kernels.

Each function is written from the block layout of ggml (ggml-common.h / ggml-quants.c), not
from the `gguf` package, and is bit-exact against `gguf.quants.dequantize`: every value is
computed in float32 with the same operations in the same order (a product of the f16 scale
converted to f32 and the integer quant, then the offset), so a compiled kernel that follows
the same order can be compared for equality.

Raw data is uint8 with the bytes of a row in the last axis (`[..., n_blocks * type_size]`);
the result is float32 with the values of a row in the last axis (`[..., n_blocks *
block_size]`). Types are named like ggml ("Q4_K"), by their ggml type id, or by any IntEnum
with those names (such as `gguf.GGMLQuantizationType`).

Block layouts (little-endian; d, dmin and m are f16):

| type | values | bytes | layout |
|---|---|---|---|
| Q4_0 | 32 | 18 | d; 16 bytes: low nibbles values 0-15, high nibbles 16-31; v = d*(q-8) |
| Q4_1 | 32 | 20 | d, m; nibbles as Q4_0; v = d*q + m |
| Q5_0 | 32 | 22 | d; u32 qh (bit i = 5th bit of value i); nibbles as Q4_0; v = d*(q-16) |
| Q5_1 | 32 | 24 | d, m; qh; nibbles; v = d*q + m |
| Q8_0 | 32 | 34 | d; 32 int8; v = d*q |
| Q2_K | 256 | 84 | 16 scale bytes (lo nibble scale, hi nibble min, per 16 values); 64 bytes of 2-bit quants; d; dmin |
| Q3_K | 256 | 110 | 32 bytes hmask; 64 bytes 2-bit quants; 12 bytes of 16 6-bit scales; d |
| Q4_K | 256 | 144 | d; dmin; 12 bytes of 8 6-bit scales and 8 6-bit mins; 128 bytes of nibbles |
| Q5_K | 256 | 176 | d; dmin; 12 scale bytes; 32 bytes qh; 128 bytes of nibbles |
| Q6_K | 256 | 210 | 128 bytes low nibbles; 64 bytes of 2-bit highs; 16 int8 scales; d |
| IQ4_NL | 32 | 18 | d; nibbles as Q4_0, each an index into KVALUES_IQ4NL; v = d*kvalue |
| IQ4_XS | 256 | 136 | d; u16 scales_h; 4 bytes scales_l (8 6-bit scales, -32); 128 bytes of nibbles, 16 per 32 values as Q4_0; v = (d*scale)*kvalue |
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from enum import IntEnum

import numpy as np

from rlx_mlir.core.errors import ArgumentError, ShapeError

QK_K = 256
"""Values per super-block of the K-quants."""


@dataclass(frozen=True)
class QuantType:
    """A ggml tensor type: its id in GGUF files and its block geometry."""

    name: str
    type_id: int
    block_size: int
    """Values per block."""
    type_size: int
    """Bytes per block."""

    def row_bytes(self, n_values: int) -> int:
        """Bytes of a row of `n_values` values (a multiple of the block size)."""
        if n_values % self.block_size:
            raise ShapeError(f"{self.name}: a row of {n_values} values is not a whole number "
                             f"of {self.block_size}-value blocks")
        return n_values // self.block_size * self.type_size


_TYPES = [
    QuantType("F32", 0, 1, 4), QuantType("F16", 1, 1, 2), QuantType("BF16", 30, 1, 2),
    QuantType("Q4_0", 2, 32, 18), QuantType("Q4_1", 3, 32, 20),
    QuantType("Q5_0", 6, 32, 22), QuantType("Q5_1", 7, 32, 24), QuantType("Q8_0", 8, 32, 34),
    QuantType("Q2_K", 10, QK_K, 84), QuantType("Q3_K", 11, QK_K, 110),
    QuantType("Q4_K", 12, QK_K, 144), QuantType("Q5_K", 13, QK_K, 176),
    QuantType("Q6_K", 14, QK_K, 210),
]
_TYPES += [QuantType("IQ4_NL", 20, 32, 18), QuantType("IQ4_XS", 23, QK_K, 136)]
QUANT_TYPES: dict[str, QuantType] = {t.name: t for t in _TYPES}
"""Every type this module dequantizes, by ggml name."""
_BY_ID = {t.type_id: t for t in _TYPES}


def quant_type(kind: str | int | IntEnum | QuantType) -> QuantType:
    """The QuantType named by `kind` (a name, a ggml type id, an IntEnum member or a QuantType)."""
    if isinstance(kind, QuantType):
        return kind
    if isinstance(kind, IntEnum):
        found = QUANT_TYPES.get(kind.name)
    elif isinstance(kind, str):
        found = QUANT_TYPES.get(kind.upper())
    else:
        found = _BY_ID.get(int(kind))
    if found is None:
        raise ArgumentError(f"unsupported tensor type {getattr(kind, 'name', kind)!r}; "
                            f"supported: {', '.join(QUANT_TYPES)}")
    return found


def dequantize(raw: np.ndarray, kind: str | int | IntEnum | QuantType) -> np.ndarray:
    """float32 values of `raw`, the bytes of rows of type `kind` in its last axis.

    `raw` may be any uint8 array (for F32/F16/BF16 also an array of that dtype, read as bytes).
    """
    qtype = quant_type(kind)
    data = np.ascontiguousarray(raw).view(np.uint8)
    if data.ndim == 0 or data.shape[-1] % qtype.type_size:
        raise ShapeError(f"{qtype.name}: the last axis of the raw data ({data.shape}) is not a "
                         f"whole number of {qtype.type_size}-byte blocks")
    outer = data.shape[:-1]
    n_blocks = data.shape[-1] // qtype.type_size
    blocks = data.reshape(-1, qtype.type_size)
    values = _DEQUANTIZERS[qtype.name](blocks)
    return values.reshape(*outer, n_blocks * qtype.block_size)


def dequantize_rows(raw: np.ndarray, kind: str | int | IntEnum | QuantType,
                    rows: np.ndarray | list[int]) -> np.ndarray:
    """Dequantize only `rows` of the 2-D raw table `raw` ([n_rows, row_bytes]): an embedding
    lookup on a quantized table, `dequantize(raw, kind)[rows]` without touching other rows."""
    data = np.asarray(raw)
    if data.ndim != 2:
        raise ShapeError(f"dequantize_rows: expected a 2-D [rows, row_bytes] table, got shape "
                         f"{data.shape}")
    index = np.asarray(rows, dtype=np.int64).reshape(-1)
    if index.size and (index.min() < -data.shape[0] or index.max() >= data.shape[0]):
        raise ArgumentError(f"dequantize_rows: row index out of range for a table of "
                            f"{data.shape[0]} rows")
    return dequantize(data[index], kind)


# --- per-type block dequantizers: blocks is uint8 [n_blocks, type_size] -> f32 [n, block] ---

def _f16(blocks: np.ndarray, start: int) -> np.ndarray:
    """The f16 at byte `start` of every block, as an f32 column [n, 1]."""
    return blocks[:, start:start + 2].copy().view(np.float16).astype(np.float32)


def _nibbles(qs: np.ndarray) -> np.ndarray:
    """[n, 16] bytes -> [n, 32]: the 16 low nibbles, then the 16 high nibbles."""
    return np.concatenate([qs & 0x0F, qs >> 4], axis=1)


def _f32(blocks: np.ndarray) -> np.ndarray:
    return blocks.copy().view(np.float32)


def _f16_values(blocks: np.ndarray) -> np.ndarray:
    return blocks.copy().view(np.float16).astype(np.float32)


def _bf16(blocks: np.ndarray) -> np.ndarray:
    # bf16 is the top half of an f32: shift the 16 bits into place.
    return (blocks.copy().view(np.uint16).astype(np.uint32) << 16).view(np.float32)


def _q4_0(blocks: np.ndarray) -> np.ndarray:
    q = _nibbles(blocks[:, 2:18]).astype(np.float32) - np.float32(8)
    return _f16(blocks, 0) * q


def _q4_1(blocks: np.ndarray) -> np.ndarray:
    q = _nibbles(blocks[:, 4:20]).astype(np.float32)
    return _f16(blocks, 0) * q + _f16(blocks, 2)


def _fifth_bits(qh_bytes: np.ndarray) -> np.ndarray:
    """[n, 4] bytes of a little-endian u32 -> [n, 32] bits, bit i for value i, as 0 or 16."""
    bits = np.unpackbits(qh_bytes, axis=1, bitorder="little")
    return bits << 4


def _q5_0(blocks: np.ndarray) -> np.ndarray:
    q = (_nibbles(blocks[:, 6:22]) | _fifth_bits(blocks[:, 2:6])).astype(np.float32)
    return _f16(blocks, 0) * (q - np.float32(16))


def _q5_1(blocks: np.ndarray) -> np.ndarray:
    q = (_nibbles(blocks[:, 8:24]) | _fifth_bits(blocks[:, 4:8])).astype(np.float32)
    return _f16(blocks, 0) * q + _f16(blocks, 2)


def _q8_0(blocks: np.ndarray) -> np.ndarray:
    q = blocks[:, 2:34].view(np.int8).astype(np.float32)
    return q * _f16(blocks, 0)


def _k_scales_mins(packed: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """The 8 6-bit scales and 8 6-bit mins of Q4_K/Q5_K from their 12 packed bytes.

    Sub-blocks 0-3 keep scale and min in the low 6 bits of bytes 0-3 and 4-7; sub-blocks 4-7
    keep their low 4 bits in the nibbles of bytes 8-11 and their top 2 bits in the top bits
    of bytes 0-3 (scales) and 4-7 (mins).
    """
    low_sc, low_m, high = packed[:, 0:4], packed[:, 4:8], packed[:, 8:12]
    scales = np.concatenate([low_sc & 63, (high & 0x0F) | ((low_sc >> 6) << 4)], axis=1)
    mins = np.concatenate([low_m & 63, (high >> 4) | ((low_m >> 6) << 4)], axis=1)
    return scales, mins


def _q4_k_style(blocks: np.ndarray, q: np.ndarray) -> np.ndarray:
    """Q4_K and Q5_K: v = (d*scale) * q - (dmin*min), per sub-block of 32 values."""
    n = blocks.shape[0]
    scales, mins = _k_scales_mins(blocks[:, 4:16])
    d = (_f16(blocks, 0) * scales.astype(np.float32)).reshape(n, 8, 1)
    dm = (_f16(blocks, 2) * mins.astype(np.float32)).reshape(n, 8, 1)
    return (d * q.reshape(n, 8, 32).astype(np.float32) - dm).reshape(n, QK_K)


def _k_nibbles(qs: np.ndarray) -> np.ndarray:
    """[n, 128] bytes -> [n, 256]: each 32-byte chunk gives 32 low nibbles then 32 high."""
    n = qs.shape[0]
    chunks = qs.reshape(n, 4, 1, 32)
    return np.concatenate([chunks & 0x0F, chunks >> 4], axis=2).reshape(n, QK_K)


def _q4_k(blocks: np.ndarray) -> np.ndarray:
    return _q4_k_style(blocks, _k_nibbles(blocks[:, 16:144]))


def _q5_k(blocks: np.ndarray) -> np.ndarray:
    n = blocks.shape[0]
    # Bit j of qh[l] is the 5th bit of value l of sub-block j.
    qh = blocks[:, 16:48].reshape(n, 1, 32) >> np.arange(8, dtype=np.uint8).reshape(1, 8, 1)
    high = ((qh & 1) << 4).reshape(n, QK_K)
    return _q4_k_style(blocks, _k_nibbles(blocks[:, 48:176]) | high)


def _q6_k(blocks: np.ndarray) -> np.ndarray:
    n = blocks.shape[0]
    # Per half of 128 values: 64 ql bytes (values 0-31 low nibbles of bytes 0-31, 32-63 of
    # bytes 32-63, 64-127 their high nibbles) and 32 qh bytes (2 bits per value, shifts 0-6).
    ql = blocks[:, 0:128].reshape(n, 2, 1, 64)
    low = np.concatenate([ql & 0x0F, ql >> 4], axis=2).reshape(n, 2, 4, 32)
    qh = blocks[:, 128:192].reshape(n, 2, 1, 32)
    high = (qh >> np.array([0, 2, 4, 6], dtype=np.uint8).reshape(1, 1, 4, 1)) & 3
    q = (low | (high << 4)).reshape(n, 16, 16).astype(np.float32) - np.float32(32)
    scales = blocks[:, 192:208].view(np.int8).astype(np.float32)
    d = (_f16(blocks, 208) * scales).reshape(n, 16, 1)
    return (d * q).reshape(n, QK_K)


def _q2_k(blocks: np.ndarray) -> np.ndarray:
    n = blocks.shape[0]
    scales = blocks[:, 0:16]
    # Per half of 128 values: 32 qs bytes, 2-bit fields at shifts 0, 2, 4, 6 give values
    # 0-31, 32-63, 64-95, 96-127.
    qs = blocks[:, 16:80].reshape(n, 2, 1, 32)
    q = (qs >> np.array([0, 2, 4, 6], dtype=np.uint8).reshape(1, 1, 4, 1)) & 3
    d = (_f16(blocks, 80) * (scales & 0x0F).astype(np.float32)).reshape(n, 16, 1)
    m = (_f16(blocks, 82) * (scales >> 4).astype(np.float32)).reshape(n, 16, 1)
    return (d * q.reshape(n, 16, 16).astype(np.float32) - m).reshape(n, QK_K)


def _q3_k_scales(packed: np.ndarray) -> np.ndarray:
    """The 16 signed 6-bit scales of Q3_K: low 4 bits in the nibbles of bytes 0-7 (scales 0-7
    low nibbles, 8-15 high nibbles), top 2 bits in bytes 8-11 (shift 2k gives scales 4k..4k+3)."""
    n = packed.shape[0]
    low = np.concatenate([packed[:, 0:8] & 0x0F, packed[:, 0:8] >> 4], axis=1)
    high = (packed[:, 8:12].reshape(n, 1, 4)
            >> np.array([0, 2, 4, 6], dtype=np.uint8).reshape(1, 4, 1)) & 3
    return (low | (high.reshape(n, 16) << 4)).astype(np.float32) - np.float32(32)


def _q3_k(blocks: np.ndarray) -> np.ndarray:
    n = blocks.shape[0]
    hmask = blocks[:, 0:32].reshape(n, 1, 32)
    qs = blocks[:, 32:96].reshape(n, 2, 1, 32)
    low = (qs >> np.array([0, 2, 4, 6], dtype=np.uint8).reshape(1, 1, 4, 1)) & 3
    # Bit k of hmask[l] belongs to value 32k + l; a clear bit subtracts 4.
    high = (hmask >> np.arange(8, dtype=np.uint8).reshape(1, 8, 1)) & 1
    q = (low.reshape(n, 8, 32).astype(np.int8) - ((high ^ 1) << 2).astype(np.int8))
    d = (_f16(blocks, 108) * _q3_k_scales(blocks[:, 96:108])).reshape(n, 16, 1)
    return (d * q.reshape(n, 16, 16).astype(np.float32)).reshape(n, QK_K)


_DEQUANTIZERS: dict[str, Callable[[np.ndarray], np.ndarray]] = {
    "F32": _f32, "F16": _f16_values, "BF16": _bf16,
    "Q4_0": _q4_0, "Q4_1": _q4_1, "Q5_0": _q5_0, "Q5_1": _q5_1, "Q8_0": _q8_0,
    "Q2_K": _q2_k, "Q3_K": _q3_k, "Q4_K": _q4_k, "Q5_K": _q5_k, "Q6_K": _q6_k,
}


KVALUES_IQ4NL = (-127, -104, -83, -65, -49, -35, -22, -10, 1, 13, 25, 38, 53, 69, 89, 113)
"""ggml's `kvalues_iq4nl`: the non-linear 4-bit grid of IQ4_NL and IQ4_XS (index = nibble)."""


def _iq4_grid(nibbles: np.ndarray) -> np.ndarray:
    return np.array(KVALUES_IQ4NL, dtype=np.float32)[nibbles]


def _iq4_nl(blocks: np.ndarray) -> np.ndarray:
    return _f16(blocks, 0) * _iq4_grid(_nibbles(blocks[:, 2:18]))


def iq4_xs_scales(blocks: np.ndarray) -> np.ndarray:
    """The 8 signed 6-bit scales (ls - 32) of IQ4_XS blocks [n, 136] as int32 [n, 8]: low 4
    bits in the nibbles of scales_l (bytes 4-7: sub-block 2i low, 2i+1 high), top 2 bits
    in the little-endian u16 scales_h (bytes 2-3, shift 2i for sub-block i)."""
    low = np.stack([blocks[:, 4:8] & 0x0F, blocks[:, 4:8] >> 4], axis=2).reshape(-1, 8)
    high = blocks[:, 2:4].copy().view("<u2").astype(np.int32) >> (2 * np.arange(8))
    return (low.astype(np.int32) | ((high & 3) << 4)) - 32


def _iq4_xs(blocks: np.ndarray) -> np.ndarray:
    n = blocks.shape[0]
    dl = (_f16(blocks, 0) * iq4_xs_scales(blocks).astype(np.float32)).reshape(n, 8, 1)
    q = _iq4_grid(_nibbles(blocks[:, 8:136].reshape(n * 8, 16))).reshape(n, 8, 32)
    return (dl * q).reshape(n, QK_K)


_DEQUANTIZERS.update({"IQ4_NL": _iq4_nl, "IQ4_XS": _iq4_xs})


# --- activations quantized as ggml's CPU dot products read them (`activations="q8"`) ---
#
# ggml multiplies a quantized weight row by activations quantized to the weight type's
# `vec_dot_type` (ggml-cpu.c type_traits_cpu), with the reference quantizers of
# ggml-quants.c (quantize_row_q8_0_ref, quantize_row_q8_1_ref, quantize_row_q8_K_ref):
#
# - q8_0 (32 values): d = amax/127 in f32, id = 1/d (0 when d is 0), q = roundf(x·id)
#   (half away from zero); d is stored as f16 and the dot reads the f16 value.
# - q8_1: q8_0's d and q, plus s = f16(d·Σq) with the f32 d.
# - q8_K (256 values): the value of largest magnitude `max` (the first one on ties),
#   iscale = −127/max, q = min(127, nearest_int(iscale·x)) (half to even), d = 1/iscale
#   kept in f32; bsums (Σq per 16 values) are what ggml's K-quant dots use for the mins.
#
# Then per block, ggml's vec_dot computes d_w·d_x·Σ q_w·q_x (+ m_w·s_x for q4_1/q5_1;
# the K-quants: Σ over sub-blocks of d·scale·d_x·Σ q_w·q_x − dmin·min·d_x·Σq_x), in
# exact integers and f32 scale factors. (ggml's x86 quantize_row_q8_0/q8_1 take
# 127/amax and round half to even instead, which differs from the reference only where
# x·id lies within an ulp of a half: rare, one quant step there.)

VEC_DOT_TYPES: dict[str, str] = {
    "q4_0": "Q8_0", "q5_0": "Q8_0", "q8_0": "Q8_0",
    "q4_1": "Q8_1", "q5_1": "Q8_1",
    "q4_k": "Q8_K", "q5_k": "Q8_K", "q6_k": "Q8_K",
    "q2_k": "Q8_K", "q3_k": "Q8_K", "iq4_xs": "Q8_K", "iq4_nl": "Q8_0",
}
"""ggml's `vec_dot_type` of each block-quantized dequant_matmul scheme: the type its
activations take with `activations="q8"` (f16/bf16 weights take f32 activations only)."""

QK8 = 32
"""Values per q8_0 / q8_1 block."""


@dataclass(frozen=True)
class Q8Rows:
    """Rows of x quantized to a q8 type: x ≈ d·q per block.

    `q` int32 [..., n_blocks, block] (values in [−127, 127]); `d` float32 [..., n_blocks]
    (the value the dot products read: f16-rounded for q8_0/q8_1, f32 for q8_K); `s`
    float32 [..., n_blocks], q8_1's f16 s = d·Σq (else None)."""

    q: np.ndarray
    d: np.ndarray
    s: np.ndarray | None = None

    def dequantized(self) -> np.ndarray:
        """d·q as float64 [..., n_blocks·block]."""
        values = self.d[..., None].astype(np.float64) * self.q
        return values.reshape(*values.shape[:-2], -1)


def _blocks_of(x: np.ndarray, block: int) -> np.ndarray:
    x = np.asarray(x, dtype=np.float32)
    if x.ndim == 0 or x.shape[-1] % block:
        raise ShapeError(f"q8 activations: the last axis ({x.shape}) is not a whole number "
                         f"of {block}-value blocks")
    return x.reshape(*x.shape[:-1], x.shape[-1] // block, block)


def _q8_blocks(x: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """(q, d) of quantize_row_q8_0_ref: q int32 [..., nb, 32], d the f32 amax/127."""
    blocks = _blocks_of(x, QK8)
    d = np.max(np.abs(blocks), axis=-1) / np.float32(127)
    with np.errstate(divide="ignore"):
        inverse = np.where(d == 0, np.float32(0), np.float32(1) / d).astype(np.float32)
    scaled = (blocks * inverse[..., None]).astype(np.float64)  # the f32 product, widened
    # roundf, half away from zero (|scaled| + 0.5 is exact in float64)
    q = np.sign(scaled) * np.floor(np.abs(scaled) + 0.5)
    return q.astype(np.int32), d


def quantize_q8_0(x: np.ndarray) -> Q8Rows:
    """x f32 [..., K] (K a multiple of 32) as ggml's quantize_row_q8_0_ref."""
    q, d = _q8_blocks(x)
    return Q8Rows(q, d.astype(np.float16).astype(np.float32))


def quantize_q8_1(x: np.ndarray) -> Q8Rows:
    """x f32 [..., K] as ggml's quantize_row_q8_1_ref: q8_0's d and q, s = f16(Σq·d)."""
    q, d = _q8_blocks(x)
    s = q.sum(axis=-1).astype(np.float32) * d
    return Q8Rows(q, d.astype(np.float16).astype(np.float32),
                  s.astype(np.float16).astype(np.float32))


def quantize_q8_K(x: np.ndarray) -> Q8Rows:
    """x f32 [..., K] (K a multiple of 256) as ggml's quantize_row_q8_K_ref."""
    blocks = _blocks_of(x, QK_K)
    first_largest = np.argmax(np.abs(blocks), axis=-1)[..., None]
    largest = np.take_along_axis(blocks, first_largest, axis=-1)[..., 0]
    with np.errstate(divide="ignore", invalid="ignore"):
        iscale = np.where(largest == 0, np.float32(0), np.float32(-127) / largest).astype(np.float32)
        d = np.where(largest == 0, np.float32(0), np.float32(1) / iscale).astype(np.float32)
    # nearest_int: round half to even (ggml adds 1.5·2^23 and reads the mantissa)
    q = np.minimum(np.rint(iscale[..., None] * blocks), 127).astype(np.int32)
    return Q8Rows(q, d)


Q8_QUANTIZERS: dict[str, Callable[[np.ndarray], Q8Rows]] = {
    "Q8_0": quantize_q8_0, "Q8_1": quantize_q8_1, "Q8_K": quantize_q8_K,
}


def q8_matmul(x: np.ndarray, raw: np.ndarray, scheme: str) -> np.ndarray:
    """x[..., K] @ dequant(raw)ᵀ with x quantized to the scheme's `vec_dot_type`, computed
    as ggml's dot products do (float64 here: exact integer sums, one rounding at the end).

    `raw` is ui8 [N, K/values·bytes] of `scheme` (a key of VEC_DOT_TYPES); result f32
    [..., N]."""
    vec_dot_type = VEC_DOT_TYPES[scheme]
    rows = Q8_QUANTIZERS[vec_dot_type](x)
    k = rows.q.shape[-2] * rows.q.shape[-1]
    if vec_dot_type != "Q8_1":
        # d_w·d_x·Σ q_w·q_x per (sub-)block, exactly Σ w·(d_x·q_x) in float64
        weights = dequantize(raw, scheme).astype(np.float64).reshape(-1, k)
        return (rows.dequantized() @ weights.T).astype(np.float32)
    d_w, q_w, m_w = _affine_q(raw, scheme)  # [N, nb], [N, nb, 32], [N, nb]
    x_lead = rows.q.shape[:-2]
    q_x = rows.q.reshape(-1, *rows.q.shape[-2:]).astype(np.float64)
    dots = np.einsum("mbj,nbj->mnb", q_x, q_w.astype(np.float64))
    d_x = rows.d.reshape(-1, rows.d.shape[-1]).astype(np.float64)
    s_x = rows.s.reshape(-1, rows.s.shape[-1]).astype(np.float64)
    out = (np.einsum("mnb,nb,mb->mn", dots, d_w, d_x) + s_x @ m_w.T)
    return out.astype(np.float32).reshape(*x_lead, -1)


def _affine_q(raw: np.ndarray, scheme: str) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """(d, q, m) of q4_1 / q5_1 rows ([N, nb] f64, [N, nb, 32] ints, [N, nb] f64)."""
    qtype = quant_type(scheme)
    data = np.ascontiguousarray(raw).view(np.uint8)
    n = data.shape[0]
    blocks = data.reshape(-1, qtype.type_size)
    if qtype.name == "Q4_1":
        q = _nibbles(blocks[:, 4:20])
    else:
        q = _nibbles(blocks[:, 8:24]) | _fifth_bits(blocks[:, 4:8])
    d, m = _f16(blocks, 0), _f16(blocks, 2)
    return (d.reshape(n, -1).astype(np.float64), q.reshape(n, -1, QK8),
            m.reshape(n, -1).astype(np.float64))
