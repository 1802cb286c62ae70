"""rlx_mlir.core.quants: the numpy dequantization references, bit-exact against gguf.quants.

Blocks are random bytes with their f16 scale fields (d, m, dmin) overwritten by finite random
values, so every bit pattern of the quants and packed scales is exercised while the result
stays finite; the comparison is on the float32 bit patterns.
"""

from __future__ import annotations

import numpy as np
import pytest
from gguf import GGMLQuantizationType
from gguf.quants import dequantize as gguf_dequantize
from gguf.quants import quantize as gguf_quantize

from rlx_mlir.core import quants
from rlx_mlir.core.errors import ArgumentError, ShapeError
from rlx_mlir.core.quants import QUANT_TYPES, dequantize, dequantize_rows, quant_type

# Byte offsets of the f16 scale fields inside one block of each quantized type.
SCALE_OFFSETS = {
    "Q4_0": [0], "Q4_1": [0, 2], "Q5_0": [0], "Q5_1": [0, 2], "Q8_0": [0],
    "Q2_K": [80, 82], "Q3_K": [108], "Q4_K": [0, 2], "Q5_K": [0, 2], "Q6_K": [208],
    "IQ4_NL": [0], "IQ4_XS": [0],
}


def random_blocks(name: str, rows: int, blocks_per_row: int, seed: int) -> np.ndarray:
    """uint8 [rows, blocks_per_row * type_size] of random blocks with finite f16 scales."""
    qtype = QUANT_TYPES[name]
    rng = np.random.default_rng(seed)
    raw = rng.integers(0, 256, size=(rows * blocks_per_row, qtype.type_size), dtype=np.uint8)
    for offset in SCALE_OFFSETS[name]:
        scale = (rng.standard_normal((raw.shape[0], 1)) * 0.1).astype(np.float16)
        raw[:, offset:offset + 2] = scale.view(np.uint8)
    return raw.reshape(rows, blocks_per_row * qtype.type_size)


def assert_bit_exact(got: np.ndarray, expected: np.ndarray) -> None:
    assert got.dtype == np.float32 and got.shape == expected.shape
    np.testing.assert_array_equal(got.view(np.uint32), expected.view(np.uint32))


@pytest.mark.parametrize("name", sorted(SCALE_OFFSETS))
def test_block_types_are_bit_exact_against_gguf(name):
    for seed in range(3):
        raw = random_blocks(name, rows=5, blocks_per_row=4, seed=seed)
        expected = gguf_dequantize(raw, GGMLQuantizationType[name])
        assert_bit_exact(dequantize(raw, name), expected)


@pytest.mark.parametrize("name", ["Q4_0", "Q4_1", "Q5_0", "Q5_1", "Q8_0"])
def test_blocks_quantized_by_gguf_roundtrip(name):
    """Real quantized data (gguf's own quantizer) decodes to the same values as gguf's."""
    values = np.random.default_rng(1).standard_normal((4, 128)).astype(np.float32)
    raw = gguf_quantize(values, GGMLQuantizationType[name])
    expected = gguf_dequantize(raw, GGMLQuantizationType[name])
    assert_bit_exact(dequantize(raw, name), expected)
    assert np.abs(dequantize(raw, name) - values).max() < 0.5


def test_float_types():
    values = np.random.default_rng(2).standard_normal((3, 8)).astype(np.float32)
    assert_bit_exact(dequantize(values.view(np.uint8), "F32"), values)
    half = values.astype(np.float16)
    assert_bit_exact(dequantize(half.view(np.uint8), "F16"), half.astype(np.float32))
    bf16 = (values.view(np.uint32) >> 16).astype(np.uint16)
    expected = gguf_dequantize(bf16.view(np.uint8), GGMLQuantizationType.BF16)
    assert_bit_exact(dequantize(bf16.view(np.uint8), "BF16"), expected)
    assert np.allclose(dequantize(bf16, "BF16"), values, rtol=1e-2)


def test_leading_axes_are_kept():
    raw = random_blocks("Q8_0", rows=6, blocks_per_row=2, seed=3).reshape(2, 3, 68)
    assert dequantize(raw, "Q8_0").shape == (2, 3, 64)


def test_dequantize_rows_reads_only_the_rows_asked_for():
    raw = random_blocks("Q4_K", rows=10, blocks_per_row=2, seed=4)
    full = dequantize(raw, "Q4_K")
    rows = np.array([7, 0, 7, 3])
    assert_bit_exact(dequantize_rows(raw, "Q4_K", rows), full[rows])
    assert dequantize_rows(raw, "Q4_K", []).shape == (0, 512)
    with pytest.raises(ArgumentError, match="out of range"):
        dequantize_rows(raw, "Q4_K", [10])


def test_type_names_ids_and_enums():
    assert quant_type("q6_k") is QUANT_TYPES["Q6_K"]
    assert quant_type(14) is QUANT_TYPES["Q6_K"]
    assert quant_type(GGMLQuantizationType.Q6_K) is QUANT_TYPES["Q6_K"]
    assert QUANT_TYPES["Q4_1"].row_bytes(576) == 360
    with pytest.raises(ArgumentError, match="IQ2_XS"):
        quant_type(GGMLQuantizationType.IQ2_XS)
    with pytest.raises(ShapeError, match="Q4_0"):
        dequantize(np.zeros((2, 17), np.uint8), "Q4_0")
    with pytest.raises(ShapeError, match="blocks"):
        QUANT_TYPES["Q4_K"].row_bytes(100)


# ----------------------------------------------------------------------------- q8 activations


def _q8_0_bytes(rows) -> np.ndarray:
    """Q8Rows of q8_0 as GGUF q8_0 block bytes (f16 d, 32 int8)."""
    d = rows.d.astype(np.float16).view(np.uint8).reshape(*rows.d.shape, 2)
    q = rows.q.astype(np.int8).view(np.uint8)
    return np.concatenate([d, q], axis=-1).reshape(rows.q.shape[0], -1)


def test_q8_0_activations_are_gguf_q8_0():
    """quantize_q8_0 is gguf's Q8_0 quantizer (ggml's quantize_row_q8_0_ref) byte for byte:
    random rows, an all-zero block, exact halves (roundf: away from zero), tiny values."""
    rng = np.random.default_rng(8)
    x = (rng.standard_normal((9, 256)) * 3).astype(np.float32)
    x[0, :32] = 0
    x[1, :32] = (np.arange(32) - 16) * np.float32(0.25)  # d = 0.5, id = 2: x·id = halves
    x[1, 31] = 63.5
    x[2, :32] *= np.float32(1e-6)  # d below f16's normal range
    x[3, 32:64] = -x[3, 32:64]
    got = _q8_0_bytes(quants.quantize_q8_0(x))
    np.testing.assert_array_equal(got, gguf_quantize(x, GGMLQuantizationType.Q8_0))
    # x·id = −1.5, −1, −0.5, 0, 0.5: ties go away from zero
    assert list(quants.quantize_q8_0(x).q[1, 0, 13:18]) == [-2, -1, -1, 0, 1]


def test_q8_1_and_q8_k_by_hand():
    """A small case computed by hand: q8_1's s = f16(d·Σq) with the f32 d; q8_K's scale
    from the first value of largest magnitude (its sign matters), nearest-even rounding."""
    x = np.zeros((1, 32), np.float32)
    x[0, :4] = [1.0, -0.5, 0.25, 127.0]
    rows = quants.quantize_q8_1(x)
    assert list(rows.q[0, 0, :4]) == [1, -1, 0, 127]  # −0.5 rounds away from zero, 0.25 to 0
    assert rows.d[0, 0] == 1.0 and rows.s[0, 0] == np.float32(np.float16(127.0))
    y = np.zeros((1, 256), np.float32)
    y[0, :5] = [2.0, -4.0, 4.0, 1.0, -1.0]
    k = quants.quantize_q8_K(y)
    # max = −4 (the first of |4|): iscale = −127/max = 31.75, d = 1/iscale in f32
    assert list(k.q[0, 0, :5]) == [64, -127, 127, 32, -32]  # 63.5 → 64 (nearest even)
    assert k.d[0] == np.float32(1) / np.float32(31.75)
    y[0, 1] = 4.0  # now +4 comes first: the signs flip
    assert list(quants.quantize_q8_K(y).q[0, 0, :3]) == [-64, -127, -127]
    np.testing.assert_array_equal(quants.quantize_q8_K(np.zeros((2, 256), np.float32)).q, 0)


def test_q8_matmul_by_hand():
    """One q4_1 block: out = d_w·d_x·Σ q_w·q_x + m_w·s_x; one q4_0 block: d_w·d_x·Σ(q−8)·q_x."""
    x = np.zeros((1, 32), np.float32)
    x[0, :3] = [127.0, 63.4, -1.0]  # d_x = 1: q_x = 127, 63, −1
    block = np.zeros(20, np.uint8)
    block[0:2] = np.array([0.5], np.float16).view(np.uint8)  # d_w
    block[2:4] = np.array([-2.0], np.float16).view(np.uint8)  # m_w
    block[4] = 0x21  # q_w[0] = 1, q_w[16] = 2
    block[5] = 0x03  # q_w[1] = 3
    want = 0.5 * 1.0 * (1 * 127 + 3 * 63) + (-2.0) * float(np.float16(127 + 63 - 1))
    got = quants.q8_matmul(x, block.reshape(1, 20), "q4_1")
    assert got.shape == (1, 1) and got[0, 0] == np.float32(want)
    q40 = np.zeros(18, np.uint8)
    q40[0:2] = np.array([0.25], np.float16).view(np.uint8)
    q40[2:18] = 0x88  # every q = 8: value 0
    q40[2] = 0x8A  # q[0] = 10: +2
    assert quants.q8_matmul(x, q40.reshape(1, 18), "q4_0")[0, 0] == np.float32(0.25 * 2 * 127)


def test_q8_matmul_is_the_dot_of_dequantized_operands():
    """For the schemes without q8_1's s, the q8 form is x's q8 dequantization times the
    weights' (float64 both); the q8_1 schemes differ from that only by s's f16 rounding."""
    rng = np.random.default_rng(3)
    for name, k in (("Q4_0", 64), ("Q8_0", 64), ("Q4_K", 256), ("Q6_K", 256), ("Q5_1", 64)):
        raw = random_blocks(name, 5, k // QUANT_TYPES[name].block_size, seed=k)
        x = rng.standard_normal((3, k)).astype(np.float32)
        scheme = name.lower()
        rows = quants.Q8_QUANTIZERS[quants.VEC_DOT_TYPES[scheme]](x)
        plain = rows.dequantized() @ dequantize(raw, name).astype(np.float64).T
        got = quants.q8_matmul(x, raw, scheme)
        scale = np.abs(rows.dequantized()) @ np.abs(dequantize(raw, name).astype(np.float64)).T
        tol = (1e-3 if name == "Q5_1" else 1e-6) * scale
        assert (np.abs(got - plain) <= tol).all(), name
