"""dequant_matmul kernels for every GGUF scheme vs numpy: x @ dequant(w)ᵀ with the
dequantization of rlx_mlir.core.quants (bit-exact against gguf.quants, tests/test_quants.py).

Blocks come from gguf.quants.quantize where it exists (f16, bf16, q8_0, q4_0, q4_1, q5_0,
q5_1), else random bytes with random finite f16 d/dmin (random_inputs.random_blocks)."""

from __future__ import annotations

import gguf
import numpy as np
import pytest
from test_jit_matmul import WIDTHS, Kernels, _args, _close
from xdsl.dialects.builtin import f32

import rlx_mlir as rlx
from rlx_mlir.core import quants
from rlx_mlir.core import reference_kernels as ref
from rlx_mlir.core.dtypes import ui8
from rlx_mlir.core.shape_inference import QUANT_BLOCKS
from rlx_mlir.dialects import lir
from rlx_mlir.passes.lir_to_llvm import dequant as mm
from rlx_mlir.random_inputs import F16_FIELDS, random_blocks

SCHEMES = ("f16", "bf16", "q8_0", "q4_0", "q4_1", "q5_0", "q5_1", "q4_k", "q5_k", "q6_k",
           "q2_k", "q3_k", "iq4_nl", "iq4_xs")
GGUF_QUANTIZE = ("f16", "bf16", "q8_0", "q4_0", "q4_1", "q5_0", "q5_1")
"""Schemes gguf.quants.quantize can make (not the K-quants)."""
RNG = np.random.default_rng(7)


def blocks(scheme: str, n: int, k: int) -> np.ndarray:
    """Raw data ui8 [n, row_bytes] of scheme for rows of k values."""
    if scheme in GGUF_QUANTIZE:
        weights = RNG.standard_normal((n, k)).astype(np.float32)
        raw = gguf.quants.quantize(weights, gguf.GGMLQuantizationType[scheme.upper()])
        return np.ascontiguousarray(raw).view(np.uint8).reshape(n, -1)  # (f16 comes as float16)
    values, block_bytes = QUANT_BLOCKS[scheme]
    return random_blocks(scheme, (n, k // values * block_bytes), RNG)


def want(x: np.ndarray, w: np.ndarray, scheme: str) -> np.ndarray:
    wd = quants.dequantize(w, scheme).astype(np.float64)
    return (x.astype(np.float64) @ wd.T).astype(np.float32)


def ks(scheme: str) -> tuple[int, int]:
    """One block and several (float types: a K that no vector width divides, and 64)."""
    values = QUANT_BLOCKS[scheme][0]
    return (37, 64) if values == 1 else (values, 3 * values)


def add(kernels: Kernels, scheme: str, x_shape: tuple[int, ...], n: int,
        w: np.ndarray | None = None, x: np.ndarray | None = None, exact: bool = False) -> None:
    k = x_shape[-1]
    w = blocks(scheme, n, k) if w is None else w
    x = RNG.uniform(-1, 1, x_shape).astype(np.float32) if x is None else x
    out_shape = (*x_shape[:-1], n)
    op = lir.DequantMatmulOp(*_args((x_shape, f32), (w.shape, ui8), (out_shape, f32)), scheme=scheme)
    if exact:  # x = identity: every output is one product plus exact zeros
        expected = quants.dequantize(w, scheme).T + np.float32(0)

        def check(got):
            np.testing.assert_array_equal(got, expected)
    else:
        check = _close(want(x, w, scheme), k)
    kernels.add(f"{scheme} x{x_shape} N={n}", op, mm.build_dequant_matmul,
                [x, np.ascontiguousarray(w)], out_shape, check)


def shapes(scheme: str) -> list[tuple[tuple[int, ...], int]]:
    one, several = ks(scheme)
    return [((1, one), 1), ((3, several), 3), ((4, one), 7), ((5, several), 64),
            ((17, one), 7), ((17, several), 3), ((1, several), 64), ((2, 3, one), 5)]


@pytest.mark.parametrize("width", WIDTHS)
@pytest.mark.parametrize("scheme", SCHEMES)
def test_dequant_matmul_matches_numpy(scheme, width):
    kernels = Kernels(width)
    for x_shape, n in shapes(scheme):
        add(kernels, scheme, x_shape, n)
    k = ks(scheme)[0]
    add(kernels, scheme, (k, k), 9, x=np.eye(k, dtype=np.float32), exact=True)
    kernels.run()


@pytest.mark.parametrize("width", WIDTHS)
@pytest.mark.parametrize("scheme", SCHEMES)
def test_partitioned_dequant_matmul(scheme, width):
    kernels = Kernels(width, partitioned=True)
    one, several = ks(scheme)
    for x_shape, n in [((1, several), 33), ((5, one), 8), ((2, 3, one), 9), ((17, one), 2)]:
        add(kernels, scheme, x_shape, n)
    kernels.run()


def special_blocks(scheme: str, n: int, k: int) -> np.ndarray:
    """Blocks whose f16 scale/min fields are zero, subnormal (2^-24 .. 2^-15) or normal."""
    values, block_bytes = QUANT_BLOCKS[scheme]
    w = random_blocks(scheme, (n, k // values * block_bytes), RNG).reshape(n, -1, block_bytes)
    choices = np.array([0.0, -0.0, 2.0**-24, -(2.0**-20), 2.0**-15, 6.1e-5, 0.01], np.float16)
    for offset in F16_FIELDS[scheme]:
        picked = RNG.choice(choices, size=w.shape[:2] + (1,)).astype("<f2")
        w[..., offset:offset + 2] = picked.view(np.uint8)
    return w.reshape(n, -1)


@pytest.mark.parametrize("width", WIDTHS)
def test_special_scales(width):
    kernels = Kernels(width)
    for scheme in F16_FIELDS:
        k = 2 * QUANT_BLOCKS[scheme][0]
        w = special_blocks(scheme, 6, k)
        add(kernels, scheme, (3, k), 6, w=w)
        add(kernels, scheme, (k, k), 6, w=w, x=np.eye(k, dtype=np.float32), exact=True)
    special = np.array([0.0, -0.0, 2.0**-24, -(2.0**-14), 65504.0, 1.5], np.float32)
    w = RNG.choice(special, size=(5, 40)).astype(np.float32)
    add(kernels, "f16", (40, 40), 5, w=w.astype("<f2").view(np.uint8),
        x=np.eye(40, dtype=np.float32), exact=True)
    kernels.run()


@pytest.mark.parametrize("scheme", SCHEMES)
def test_graph_threads_rank3(scheme):
    k = ks(scheme)[1]
    n = 96
    w = blocks(scheme, n, k)
    g = rlx.Graph("deq")
    x = g.input("x", (2, 3, k))
    wq = g.param("w", w.shape, "ui8")
    g.output(g.dequant_matmul(x, wq, scheme))
    xs = RNG.uniform(-1, 1, (2, 3, k)).astype(np.float32)
    expected = want(xs, w, scheme)
    np.testing.assert_allclose(ref.dequant_matmul(xs, w, scheme), expected, rtol=1e-5, atol=1e-5)
    # the f32 form (a graph without `activations`) on every target; q8: test_jit_quant_dot.py
    two = rlx.jit(g, params={"w": w}, threads=2)
    np.testing.assert_allclose(two(xs), expected, rtol=1e-4, atol=1e-4)


@pytest.mark.parametrize("scheme", SCHEMES)
def test_k_must_be_whole_blocks(scheme):
    values = QUANT_BLOCKS[scheme][0]
    if values == 1:
        return
    g = rlx.Graph("bad")
    x = g.input("x", (1, values + 16))
    w = g.param("w", (4, QUANT_BLOCKS[scheme][1]), "ui8")
    with pytest.raises(rlx.RlxError, match=f"multiple of {values} .*{scheme}"):
        g.dequant_matmul(x, w, scheme)
