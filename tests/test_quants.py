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

from rlx_mlir.core.errors import ArgumentError, ShapeError
from rlx_mlir.core.quants import QUANT_TYPES, dequantize, dequantize_rows, quant_type

# Byte offsets of the f16 scale fields inside one block of each quantized type.
SCALE_OFFSETS = {
    "Q4_0": [0], "Q4_1": [0, 2], "Q5_0": [0], "Q5_1": [0, 2], "Q8_0": [0],
    "Q2_K": [80, 82], "Q3_K": [108], "Q4_K": [0, 2], "Q5_K": [0, 2], "Q6_K": [208],
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
