"""Q2_K, Q3_K, IQ4_NL and IQ4_XS model files made by llama.cpp's `llama-quantize`
(tests/data/llama-quantize/README.md: the commands), loaded by rlx.models.load_gguf.

Every tensor of each file dequantizes bit for bit as gguf.quants does; the compiled model's
logits equal the independent numpy forward (tests/gguf_models.numpy_logits, weights
dequantized by gguf) within f32 rounding with f32 activations (`exact_dequant=True`), and
within twice the q8 tolerance of test_models.py with the default q8 activations (the int8
kernels for Q2_K/Q3_K where the CPU has them, the emulation for IQ4_NL/IQ4_XS; ggml's
vec_dot types q8_K / q8_0).
"""

from __future__ import annotations

from pathlib import Path

import gguf
import numpy as np
import pytest
from gguf_models import N_VOCAB, numpy_logits
from test_models import IDS, QUANTIZED_ACTIVATIONS, assert_logits_close

from rlx_mlir.models import load_gguf
from rlx_mlir.models.gguf_file import read_gguf

DATA = Path(__file__).parent / "data" / "llama-quantize"
TYPES = ("Q2_K", "Q3_K", "IQ4_NL", "IQ4_XS")


def model_file(kind: str) -> Path:
    return DATA / f"tiny-{kind}.gguf"


@pytest.mark.parametrize("kind", TYPES)
def test_every_tensor_is_bit_exact_against_gguf(kind):
    reader = gguf.GGUFReader(model_file(kind))
    types = set()
    with read_gguf(model_file(kind)) as file:
        for tensor in reader.tensors:
            want = gguf.quants.dequantize(tensor.data, tensor.tensor_type)
            got = file.array(tensor.name)
            assert got.shape == want.shape, tensor.name
            np.testing.assert_array_equal(got.view(np.uint32), want.view(np.uint32), tensor.name)
            types.add(tensor.tensor_type.name)
    assert types == {kind, "F32"}  # --pure: every matrix in the type


@pytest.mark.parametrize("kind", TYPES)
def test_logits_match_numpy(kind):
    want = numpy_logits(model_file(kind), IDS)
    exact = load_gguf(model_file(kind), max_seq=16, exact_dequant=True)
    got = exact.logits(IDS)
    assert got.shape == (len(IDS), N_VOCAB)
    assert_logits_close(got, want)
    quantized = load_gguf(model_file(kind), max_seq=16)  # activations="q8", as llama.cpp
    assert_logits_close(quantized.logits(IDS), want, Q8_TOLERANCE)


Q8_TOLERANCE = 2 * QUANTIZED_ACTIVATIONS
"""The q8 form against the f64 forward, of the largest logit: Q2_K's real weights (a min
per 16 values, d·scale·q − dmin·min) take the error of Σq_x as well as of each q_x, which
went just over 3% on 2 of 2800 logits (an exact kernel check: test_jit_quant_dot.py)."""
