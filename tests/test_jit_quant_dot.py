"""The int8 path of dequant_matmul (passes/lir_to_llvm/quant_dot.py, issue 11): x quantized
per 32-block to int8, VNNI vpdpbusd dot products with the unsigned weight quants.

Every scheme of the path (q4_0, q4_1, q5_0, q5_1, q8_0), K an odd and an even number of
blocks (W = 16 pairs blocks in one vector: an odd count ends in a half-empty step), at
W = 16 and W = 8; ONE kernel over a symbolic row count S (ABI of lir_to_llvm/dynamic.py)
called at M = 1..17, serial and partitioned into 1, 2 and 3 parts (every output written by
exactly one part), plus static kernels. Each result is checked twice:

- against `int8_model`, numpy doing the same integer arithmetic (the same x_q, d_x, Σx_q
  and integer dots): equal up to f32 accumulation (1e-5 of Σ|x·w|);
- against the f32 reference x @ dequant(w)ᵀ, within the bound of x's quantization: each
  x_q·d_x is within d_x/2 of x, so |out − exact| ≤ Σ_blocks (d_x/2)·Σ|w_block|.

The pipeline picks the path by the target (`int8_dot_isa`) and `exact_dequant`.
"""

from __future__ import annotations

import ctypes

import numpy as np
import pytest
from jit_harness import Jitted
from test_jit_dequant import blocks
from xdsl.dialects.builtin import ModuleOp, StringAttr
from xdsl.ir import Block

import rlx_mlir as rlx
from rlx_mlir.core import quants
from rlx_mlir.core.target import Target, host_target
from rlx_mlir.dialects import lir
from rlx_mlir.dialects.common import memref_type
from rlx_mlir.passes.lir_to_llvm import dequant as mm
from rlx_mlir.passes.lir_to_llvm import dynamic
from rlx_mlir.passes.lir_to_llvm import quant_dot as qd

SCHEMES = tuple(qd.INT8_SCHEMES)
WIDTHS = (16, 8)
KS = (96, 576)
"""3 blocks (odd: the last W = 16 step has one block) and SmolLM2's hidden size (18)."""
N = 11
ROWS = range(1, 18)
PARTS = (1, 2, 3)
RNG = np.random.default_rng(1111)

HAS_VNNI = {w: qd.int8_dot_isa(host_target(), w) is not None for w in WIDTHS}
needs_vnni = pytest.mark.skipif(not HAS_VNNI[16], reason="the host has no AVX512-VNNI")


# ----------------------------------------------------------------------------- numpy model


def quantize_x(x: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """(x_q [..., B, 32] ints, d_x [..., B] f32) as the kernel computes them."""
    xb = x.reshape(*x.shape[:-1], -1, qd.BLOCK).astype(np.float32)
    amax = np.abs(xb).max(-1)
    d = (amax / np.float32(127)).astype(np.float32)
    with np.errstate(divide="ignore"):
        inverse = np.where(amax > 0, np.float32(127) / amax, np.float32(0)).astype(np.float32)
    scaled = (xb * inverse[..., None]).astype(np.float32)
    return np.rint(scaled).astype(np.int64), d  # rint: half to even, like the kernel


def weight_parts(w: np.ndarray, scheme: str):
    """(u [N, B, 32] unsigned quants, d [N, B], m [N, B] or None, offset o)."""
    s = qd.INT8_SCHEMES[scheme]
    b = w.reshape(w.shape[0], -1, s.bytes)

    def f16(at: int) -> np.ndarray:
        return b[..., at:at + 2].copy().view("<f2")[..., 0].astype(np.float32)

    if s.bits == 8:
        u = b[..., s.quants:s.quants + 32].view(np.int8).astype(np.int64) + 128
    else:
        raw = b[..., s.quants:s.quants + 16].astype(np.int64)
        u = np.concatenate([raw & 15, raw >> 4], -1)
        if s.high_at is not None:
            qh = b[..., s.high_at:s.high_at + 4].copy().view("<u4")[..., 0].astype(np.int64)
            u = u | (((qh[..., None] >> np.arange(32)) & 1) << 4)
    return u, f16(0), f16(s.min_at) if s.min_at is not None else None, s.offset


def int8_model(x: np.ndarray, w: np.ndarray, scheme: str) -> np.ndarray:
    """Σ_b f32(d_w·d_x)·(Σ u·x_q − o·Σx_q) (+ m_w·f32(d_x·Σx_q)), summed in float64."""
    xq, dx = quantize_x(x)
    u, dw, mw, offset = weight_parts(w, scheme)
    sx = xq.sum(-1)
    dots = np.einsum("...bv,nbv->...nb", xq, u) - offset * sx[..., None, :]
    scale = (dw * dx[..., None, :]).astype(np.float32).astype(np.float64)
    out = (dots * scale).sum(-1)
    if mw is not None:
        c = (dx * sx.astype(np.float32)).astype(np.float32).astype(np.float64)
        out = out + (mw.astype(np.float64) * c[..., None, :]).sum(-1)
    return out


def magnitude(x: np.ndarray, w: np.ndarray, scheme: str) -> np.ndarray:
    """Σ_k |x_k·w_k| per output (the scale of f32 rounding)."""
    return np.abs(x.astype(np.float64)) @ np.abs(quants.dequantize(w, scheme).astype(np.float64)).T


def quantization_bound(x: np.ndarray, w: np.ndarray, scheme: str) -> np.ndarray:
    """Σ_b (d_x,b/2)·Σ_{k in b}|w_k| per output: how far x's int8 rounding can move it."""
    _, dx = quantize_x(x)
    wd = np.abs(quants.dequantize(w, scheme).astype(np.float64))
    block_w = wd.reshape(wd.shape[0], -1, qd.BLOCK).sum(-1)  # [N, B]
    return (dx.astype(np.float64) / 2) @ block_w.T


def check(got: np.ndarray, x: np.ndarray, w: np.ndarray, scheme: str, where: str) -> None:
    scale = magnitude(x, w, scheme)
    model = int8_model(x, w, scheme)
    excess = np.abs(got - model) - 1e-5 * scale - 1e-30
    assert (excess <= 0).all(), f"{where}: vs the int8 model, worst excess {excess.max():.3g}"
    exact = x.astype(np.float64) @ quants.dequantize(w, scheme).astype(np.float64).T
    bound = 1.001 * quantization_bound(x, w, scheme) + 1e-5 * scale + 1e-30
    excess = np.abs(got - exact) - bound
    assert (excess <= 0).all(), f"{where}: vs f32, worst excess over the bound {excess.max():.3g}"


# ----------------------------------------------------------------------------- kernels


def dequant_op(scheme: str, x_shape: tuple, w: np.ndarray) -> lir.DequantMatmulOp:
    """A lir.dequant_matmul marked for the int8 path (symbolic rows: `S` in x_shape)."""
    out_shape = (*x_shape[:-1], w.shape[0])
    shapes = [x_shape, w.shape, out_shape]
    args = Block(arg_types=[memref_type(s, dt) for s, dt in zip(shapes, ("f32", "ui8", "f32"),
                                                                 strict=True)]).args
    op = lir.DequantMatmulOp(*args, scheme=scheme)
    if not all(isinstance(d, int) for d in x_shape):
        dynamic.set_operand_shapes(op, shapes)
    op.attributes[qd.INT8_DOT] = StringAttr(qd.VNNI)
    op.verify()
    return op


def x_rows(m: int, k: int) -> np.ndarray:
    """Rows of mixed scales, one block all zeros (d_x = 0) and one with a single value."""
    x = (RNG.standard_normal((m, k)) * RNG.choice([0.01, 1.0, 30.0], (m, 1))).astype(np.float32)
    x[0, :qd.BLOCK] = 0.0
    if k >= 2 * qd.BLOCK:
        x[-1, qd.BLOCK:2 * qd.BLOCK] = 0.0
        x[-1, qd.BLOCK + 5] = -2.5
    return x


@needs_vnni
@pytest.mark.parametrize("width", WIDTHS)
def test_dynamic_rows_every_scheme(width):
    if not HAS_VNNI[width]:
        pytest.skip(f"no VNNI at W={width}")
    cases, functions = [], []
    for scheme in SCHEMES:
        for k in KS:
            w = np.ascontiguousarray(blocks(scheme, N, k))
            op = dequant_op(scheme, ("S", k), w)
            i = len(cases)
            functions += [mm.build_dequant_matmul(op, f"k{i}", width),
                          mm.build_dequant_matmul(op, f"p{i}", width, partitioned=True)]
            cases.append((scheme, k, w))
    jitted = Jitted(functions, None, verify=False)
    for i, (scheme, k, w) in enumerate(cases):
        serial = jitted.function(f"k{i}", 3, extra=[ctypes.c_int64])
        parted = jitted.function(f"p{i}", 3, extra=[ctypes.c_int64] * 3)
        for m in ROWS:
            x = x_rows(m, k)
            where = f"{scheme} K={k} M={m} W={width}"
            out = np.full((m, N), np.nan, np.float32)
            serial(x.ctypes.data, w.ctypes.data, out.ctypes.data, m)
            check(out, x, w, scheme, where)
            for parts in PARTS:
                out = np.full((m, N), np.nan, np.float32)
                writers = np.zeros((m, N), np.int64)
                for part in range(parts):
                    share = np.full((m, N), np.nan, np.float32)
                    parted(x.ctypes.data, w.ctypes.data, share.ctypes.data, m, part, parts)
                    written = ~np.isnan(share)
                    writers += written
                    out[written] = share[written]
                assert (writers == 1).all(), f"{where} parts={parts}: not one writer each"
                check(out, x, w, scheme, f"{where} parts={parts}")


@needs_vnni
@pytest.mark.parametrize("scheme", SCHEMES)
def test_static_rows(scheme):
    """Static kernels: one row (decode), a chunk and a rest (17 > CHUNK_ROWS), a batch."""
    k = 160  # 5 blocks
    shapes = [(1, k), (17, k), (2, 3, k)]
    w = np.ascontiguousarray(blocks(scheme, 7, k))
    functions = [mm.build_dequant_matmul(dequant_op(scheme, s, w), f"k{i}", 16)
                 for i, s in enumerate(shapes)]
    jitted = Jitted(functions, None, verify=False)
    for i, shape in enumerate(shapes):
        x = x_rows(int(np.prod(shape[:-1])), k).reshape(shape)
        out = np.full((*shape[:-1], 7), np.nan, np.float32)
        jitted.call(f"k{i}", [x, w, out])
        check(out.reshape(-1, 7), x.reshape(-1, k), w, scheme, f"{scheme} {shape}")


def test_isa_of_targets():
    triple = host_target().triple
    assert qd.int8_dot_isa(Target("haswell", "", triple, 8), 8) is None
    assert qd.int8_dot_isa(Target("x86-64", "", triple, 4), 4) is None
    assert qd.int8_dot_isa(Target("skylake-avx512", "", triple, 16), 16) is None
    assert qd.int8_dot_isa(Target("icelake-server", "", triple, 16), 16) == qd.VNNI
    assert qd.int8_dot_isa(Target("alderlake", "", triple, 8), 8) == qd.VNNI
    host = "+avx512f,+avx512vnni,+avx512vl"
    assert qd.int8_dot_isa(Target("x", host, triple, 16), 16) == qd.VNNI
    assert qd.int8_dot_isa(Target("x", host + ",-avx512vnni", triple, 16), 16) is None


def test_unmarked_and_other_schemes_keep_the_f32_path():
    w = np.ascontiguousarray(blocks("q4_k", 3, 256))
    op = dequant_op("q4_k", (1, 256), w)
    assert not qd.uses_int8_dot(op, 16)  # the K-quants keep the f32 path, marked or not
    module = ModuleOp([])
    assert qd.mark_int8_dots(module, Target("haswell", "", host_target().triple, 8), 8) == 0


def _gemv_graph(scheme: str, k: int, n: int) -> tuple[rlx.Graph, np.ndarray]:
    w = np.ascontiguousarray(blocks(scheme, n, k))
    g = rlx.Graph("gemv")
    x = g.input("x", (3, k))
    g.output(g.dequant_matmul(x, g.param("w", w.shape, "ui8"), scheme))
    return g, w


@needs_vnni
def test_pipeline_default_quantizes_and_exact_dequant_does_not():
    scheme, k, n = "q4_1", 576, 40
    g, w = _gemv_graph(scheme, k, n)
    x = x_rows(3, k)
    fast = rlx.jit(g, params={"w": w}, threads=1)(x)
    check(fast, x, w, scheme, "jit default")
    exact = rlx.jit(g, params={"w": w}, threads=1, exact_dequant=True)(x)
    want = x.astype(np.float64) @ quants.dequantize(w, scheme).astype(np.float64).T
    np.testing.assert_allclose(exact, want, rtol=1e-5, atol=1e-5 * magnitude(x, w, scheme).max())
    assert np.abs(fast - exact).max() > 0  # the paths differ: x's rounding


@pytest.mark.skipif("+avxvnni" not in host_target().features.split(","),
                    reason="the host has no AVX-VNNI")
def test_avx_vnni_target_without_avx512():
    """W = 8 for an AVX-VNNI CPU without AVX-512 (alderlake): the VEX vpdpbusd."""
    cases = [(s, np.ascontiguousarray(blocks(s, 9, 160))) for s in ("q4_0", "q5_1", "q8_0")]
    functions = [mm.build_dequant_matmul(dequant_op(s, ("S", 160), w), f"k{i}", 8)
                 for i, (s, w) in enumerate(cases)]
    jitted = Jitted(functions, "alderlake", verify=False)
    assert "{vex}\tvpdpbusd" in jitted.asm and "zmm" not in jitted.asm
    for i, (scheme, w) in enumerate(cases):
        for m in (1, 5, 17):
            x = x_rows(m, 160)
            out = np.full((m, 9), np.nan, np.float32)
            jitted.function(f"k{i}", 3, extra=[ctypes.c_int64])(
                x.ctypes.data, w.ctypes.data, out.ctypes.data, m)
            check(out, x, w, scheme, f"{scheme} M={m} alderlake")
