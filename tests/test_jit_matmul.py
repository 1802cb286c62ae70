"""Native matmul kernels (rlx_mlir.passes.lir_to_llvm.matmul) against the numpy reference kernels.

Each kernel is built from a hand-made lir op over memref-typed block arguments, lowered
with xDSL's llvm converter and JIT-compiled with llvmlite; vector widths 16, 8 and 4.
"""

from __future__ import annotations

import ctypes
import functools
import re
from collections.abc import Callable

import numpy as np
import pytest
from jit_harness import CPUS, Jitted, has_avx512
from xdsl.dialects.builtin import MemRefType, f32, i16
from xdsl.ir import Block, Operation

from rlx_mlir.core import reference_kernels as ref
from rlx_mlir.core.dtypes import ui8
from rlx_mlir.core.packing import pack_rhs
from rlx_mlir.dialects import lir
from rlx_mlir.passes.lir_to_llvm import dequant, gguf
from rlx_mlir.passes.lir_to_llvm import matmul as mm
from rlx_mlir.passes.lir_to_llvm.builder import PTR, KernelBuilder
from rlx_mlir.passes.lir_to_llvm.kernels import partitioned_builders

WIDTHS = (16, 8, 4)
ACTIVATIONS = ("relu", "gelu", "gelu_tanh", "silu", "sigmoid", "tanh")


# ----------------------------------------------------------------------------- harness


PARTS = (1, 2, 3, 5)
"""Thread counts the partitioned kernels are run with (all parts one after the other)."""


class Kernels:
    """Kernels of one vector width compiled in one module for the width's CPU (`CPUS` of
    the JIT harness: the host, haswell, x86-64). With `partitioned`, every kernel is the
    PARTITIONED variant, run for each count of PARTS with part = 0..parts-1 in turn on
    one NaN-filled output (a missing or doubly written share shows up)."""

    def __init__(self, width: int, partitioned: bool = False):
        self.width = width
        self.partitioned = partitioned
        self.cases: list[tuple[str, Operation, Callable, list[np.ndarray], np.ndarray, float]] = []

    def add(self, label: str, op: Operation, build: Callable, inputs: list[np.ndarray],
            out_shape: tuple[int, ...], check, **options) -> None:
        """A kernel `build(op, name, W, **options)` (its PARTITIONED variant when
        partitioned) called on `inputs` and an output of `out_shape` checked by `check`."""
        op.verify()
        if self.partitioned:
            build = partitioned_builders()[type(op)]
        if options:
            build = functools.partial(build, **options)
        self.cases.append((label, op, build, inputs, out_shape, check))

    def compile(self):
        fns = [build(op, f"k{i}", self.width)
               for i, (_, op, build, _, _, _) in enumerate(self.cases)]
        self.jitted = Jitted(fns, CPUS[self.width], verify=False)
        return self

    def run(self) -> None:
        self.compile()
        failures = []
        for i, (label, _, _, inputs, out_shape, check) in enumerate(self.cases):
            pointers = [ctypes.c_void_p] * (len(inputs) + 1)
            address = self.jitted.address(f"k{i}")
            for parts in PARTS if self.partitioned else (None,):
                try:
                    check(self._call(address, pointers, inputs, out_shape, parts))
                except AssertionError as err:
                    where = f", parts={parts}" if parts else ""
                    failures.append(f"{label} (W={self.width}{where}): {err}")
        assert not failures, "\n".join(failures)

    @staticmethod
    def _call(address: int, pointers, inputs, out_shape, parts: int | None) -> np.ndarray:
        """The output of the kernel; with `parts`, each part writes a NaN-filled buffer of
        its own and every element must come from exactly one part."""
        if parts is None:
            out = np.full(out_shape, np.nan, np.float32)
            ctypes.CFUNCTYPE(None, *pointers)(address)(*(a.ctypes.data for a in (*inputs, out)))
            return out
        fn = ctypes.CFUNCTYPE(None, *pointers, ctypes.c_int64, ctypes.c_int64)(address)
        out = np.full(out_shape, np.nan, np.float32)
        writers = np.zeros(out_shape, np.int64)
        for part in range(parts):
            share = np.full(out_shape, np.nan, np.float32)
            fn(*(a.ctypes.data for a in (*inputs, share)), part, parts)
            written = ~np.isnan(share)
            writers += written
            out[written] = share[written]
        assert (writers == 1).all(), (
            f"{np.sum(writers == 0)} elements written by no part, {np.sum(writers > 1)} by several")
        return out

    @property
    def asm(self) -> str:
        return self.jitted.asm


def _args(*types):
    return Block(arg_types=[MemRefType(dt, list(shape)) for shape, dt in types]).args


def _f32(*shapes):
    return _args(*((s, f32) for s in shapes))


RNG = np.random.default_rng(0)


def _rand(shape, lo=-1.0, hi=1.0):
    return RNG.uniform(lo, hi, size=shape).astype(np.float32)


def _close(want, k):
    def check(got):
        np.testing.assert_allclose(got, want, rtol=1e-4, atol=1e-5 * max(1.0, np.sqrt(k)))
    return check


def add_matmul(kernels: Kernels, lhs_shape, rhs_shape, *, bias=False, activation=None,
               fused=None, packed=False) -> None:
    """One matmul (or fused_matmul with `bias`/`activation`/`fused`) of random operands;
    `packed`: the rhs passed in the prepacked layout (pack_rhs)."""
    out_shape = ref.matmul(np.zeros(lhs_shape), np.zeros(rhs_shape)).shape
    k = lhs_shape[-1]
    fused = fused if fused is not None else (bias or activation is not None)
    a, b = _rand(lhs_shape), _rand(rhs_shape)
    if fused:
        # the lir verifier wants bias == rhs[-1:] (N); a 1-D rhs takes no bias
        bias_shape = rhs_shape[-1:]
        vals = _f32(lhs_shape, rhs_shape, *([bias_shape] if bias else []), out_shape)
        op = lir.FusedMatmulOp(vals[0], vals[1], vals[-1], bias=vals[2] if bias else None,
                               activation=activation)
        c = _rand(bias_shape) if bias else None
        inputs = [a, b, c] if bias else [a, b]
        want = ref.fused_matmul(a, b, c, activation)
        build = mm.build_fused_matmul
    else:
        op = lir.MatmulOp(*_f32(lhs_shape, rhs_shape, out_shape))
        inputs, want, build = [a, b], ref.matmul(a, b), mm.build_matmul
    label = (f"{'fused_' if fused else ''}matmul {lhs_shape}@{rhs_shape} bias={bias} "
             f"{activation}{' packed' if packed else ''}")
    options = {}
    if packed:
        inputs[1] = pack_rhs(b, kernels.width)
        options["packed_rhs"] = True
    kernels.add(label, op, build, inputs, out_shape, _close(want, k), **options)


# ----------------------------------------------------------------------------- matmul

SHAPES_2D = [  # (M, K, N): every edge of the tiles (MR=6, NR·W = 64/16/8; 8 x 48 for 7..16
    # rows at W=16), of K_UNROLL and of the K blocks (16/32 rows for M <= 16, else 256)
    (1, 1, 1),
    (1, 257, 100),
    (3, 7, 17),
    (7, 3, 33),
    (17, 100, 257),
    (33, 17, 3),
    (100, 33, 1),
    (257, 1, 7),
    (6, 64, 64),
    (12, 5, 128),
    (13, 4, 200),
    (257, 257, 33),  # large M, K in 2 blocks (the second of run-time length), no whole panel
    (5, 256, 40),  # K in equal blocks
    (40, 300, 130),  # large M: packed panels, K blocks, a masked 2-column edge
    (64, 512, 64),  # large M, 2 equal K blocks, one whole panel
    (35, 7, 100),
    (16, 70, 97),  # the most rows of the decode plan
    (17, 2, 48),  # the fewest of the packed one
]


ONE_D_AND_BATCHED = [
    ((7,), (7, 33)),  # 1-D lhs
    ((17, 100), (100,)),  # 1-D rhs: the N == 1 dot kernel
    ((33,), (33,)),  # rank-0 result
    ((5,), (3, 5, 17)),  # 1-D lhs against a batch
    ((7, 3), (2, 3, 3, 4)),  # rhs batched, lhs broadcast
    ((2, 3, 7, 9), (9, 20)),  # batch folded into M
    ((2, 1, 5, 7), (3, 7, 9)),  # both operands broadcast
    ((2, 3, 4, 5), (2, 3, 5, 6)),  # full batch
    ((1, 4, 9), (2, 9, 3)),  # size-1 lhs batch
]


@pytest.mark.parametrize("width", WIDTHS)
def test_matmul(width):
    kernels = Kernels(width)
    for m, k, n in SHAPES_2D:
        add_matmul(kernels, (m, k), (k, n))
    for lhs, rhs in ONE_D_AND_BATCHED:
        add_matmul(kernels, lhs, rhs)
    kernels.run()


PACKED_SHAPES = [  # (lhs, rhs) with the rhs prepacked (pack_rhs): panels of NR·W columns,
    # several per tile for few rows
    ((1, 70), (70, 100)),
    ((1, 20), (20, 600)),
    ((2, 20), (20, 300)),
    ((3, 33), (33, 17)),  # only the narrow last panel
    ((16, 40), (40, 128)),
    ((40, 300), (300, 130)),
    ((2, 3, 7, 9), (9, 200)),  # batch folded into M
    ((9,), (9, 70)),
    ((13, 2100), (2100, 20)),  # K in 2 blocks (PACKED_K_BLOCK = 2048)
]


@pytest.mark.parametrize("width", WIDTHS)
def test_packed_rhs(width):
    kernels = Kernels(width)
    for lhs, rhs in PACKED_SHAPES:
        add_matmul(kernels, lhs, rhs, packed=True)
    add_matmul(kernels, (40, 33), (33, 70), bias=True, activation="gelu", packed=True)
    add_matmul(kernels, (1, 64), (64, 130), bias=True, activation="relu", packed=True)
    kernels.run()


def test_pack_rhs_layout():
    b = np.arange(3 * 40, dtype=np.float32).reshape(3, 40)
    packed = pack_rhs(b, 8)  # panels of 16 columns: [3, 16], [3, 16], [3, 8]
    assert packed.shape == b.shape
    flat = packed.ravel()
    np.testing.assert_array_equal(flat[:48].reshape(3, 16), b[:, :16])
    np.testing.assert_array_equal(flat[48:96].reshape(3, 16), b[:, 16:32])
    np.testing.assert_array_equal(flat[96:].reshape(3, 8), b[:, 32:])


# ----------------------------------------------------------------------------- partitioned

PARTITIONED_MATMULS = [  # (lhs, rhs): column splits (decode), row splits, smaller than a unit
    ((1, 70), (70, 100)),
    ((3, 33), (33, 17)),
    ((16, 40), (40, 200)),
    ((40, 300), (300, 130)),
    ((100, 20), (20, 7)),
    ((70, 9), (9, 300)),  # more panels than row tiles: split by columns
    ((17, 100), (100,)),  # N == 1: split by rows
    ((2, 3, 7, 9), (9, 20)),  # batch folded into M
    ((2, 3, 4, 5), (2, 3, 5, 6)),  # units spread over the batch
    ((2, 1, 5, 7), (3, 7, 9)),  # both operands broadcast
    ((3, 40, 50), (3, 50, 70)),
    ((4, 2, 30), (4, 30, 100)),
]


PARTITIONED_FEW = (0, 1, 3, 5, 6, 8, 11)
"""The cases of PARTITIONED_MATMULS also run at W = 8 and 4 (compile time)."""


@pytest.mark.parametrize("width", WIDTHS)
def test_partitioned_matmul(width):
    kernels = Kernels(width, partitioned=True)
    cases = [c for i, c in enumerate(PARTITIONED_MATMULS) if width == 16 or i in PARTITIONED_FEW]
    for lhs, rhs in cases:
        add_matmul(kernels, lhs, rhs)
    add_matmul(kernels, (40, 300), (300, 70), bias=True, activation="gelu")
    add_matmul(kernels, (1, 20), (20, 600), packed=True)
    if width == 16:
        add_matmul(kernels, (1, 64), (64, 130), bias=True, activation="relu")
        add_matmul(kernels, (2, 20), (20, 300), packed=True)
        add_matmul(kernels, (40, 300), (300, 130), packed=True)
    kernels.run()


# ----------------------------------------------------------------------------- fused_matmul


@pytest.mark.parametrize("width", WIDTHS)
def test_fused_matmul(width):
    kernels = Kernels(width)
    add_matmul(kernels, (13, 33), (33, 100), bias=True)  # bias, no activation
    add_matmul(kernels, (2, 3, 17), (17, 7), bias=True)  # folded batch, scalar columns
    add_matmul(kernels, (3, 4), (4, 1), bias=True)  # a 1-element bias
    add_matmul(kernels, (3, 4), (4, 5), fused=True)  # neither bias nor activation
    add_matmul(kernels, (7, 300), (300, 40), bias=True, activation="gelu")  # K blocks
    add_matmul(kernels, (2, 3, 256), (256, 17), bias=True, activation="relu")
    for activation in ACTIVATIONS:
        add_matmul(kernels, (7, 17), (17, 70), bias=True, activation=activation)
        add_matmul(kernels, (3, 33), (33, 20), activation=activation)  # no bias
        add_matmul(kernels, (5, 9), (9, 1), bias=True, activation=activation)  # dot kernel
    kernels.run()


# ----------------------------------------------------------------------------- assembly


def _fma_registers(asm: str) -> set[str]:
    return set(re.findall(r"vfmadd\w*\s+[^\n]*?%([xyz]mm)\d+", asm))


@pytest.mark.skipif(not has_avx512(), reason="needs AVX-512")
def test_asm_w16_uses_zmm_fma():
    kernels = Kernels(16)
    add_matmul(kernels, (12, 64), (64, 128))
    add_matmul(kernels, (6, 16), (16, 64), bias=True, activation="gelu")
    kernels.run()
    asm = kernels.asm
    assert "zmm" in _fma_registers(asm)
    assert not re.search(r"call\s+\S*(exp|erf|tanh)", asm)


@pytest.mark.skipif(not has_avx512(), reason="needs AVX-512")
def test_asm_w16_edge_columns_are_masked_vectors():
    """N % W columns: masked zmm loads and stores, no scalar FMAs and no calls."""
    kernels = Kernels(16)
    add_matmul(kernels, (7, 32), (32, 100))  # decode plan: 64 + 36 columns
    add_matmul(kernels, (40, 32), (32, 100), bias=True)  # packed plan
    kernels.run()
    asm = kernels.asm
    assert re.search(r"vmovups\s+[^\n]*%zmm\d+ \{%k\d\}", asm)
    assert not re.search(r"vfmadd\w*ss\s", asm)
    assert not re.search(r"\bcall", asm)


def test_asm_w8_uses_ymm_fma():
    kernels = Kernels(8)
    add_matmul(kernels, (12, 64), (64, 32))
    kernels.run()
    asm = kernels.asm
    assert _fma_registers(asm) == {"ymm"}
    assert "zmm" not in asm


# ----------------------------------------------------------------------------- dequant_matmul


def add_dequant(kernels: Kernels, x_shape, n, scheme, x=None, exact=False) -> None:
    k = x_shape[-1]
    w = ref.QUANTIZE[scheme](RNG.normal(size=(n, k)).astype(np.float32))
    out_shape = (*x_shape[:-1], n)
    vals = _args((x_shape, f32), (w.shape, ui8), (out_shape, f32))
    op = lir.DequantMatmulOp(*vals, scheme=scheme)
    x = _rand(x_shape) if x is None else x
    if exact:  # x = identity: out = dequant(w)ᵀ, each element one product plus exact zeros
        want = ref.DEQUANTIZE[scheme](w, k).T + np.float32(0)  # (-0 + 0 sums to +0)

        def check(got):
            np.testing.assert_array_equal(got.view(np.uint32), want.view(np.uint32))
    else:
        check = _close(ref.dequant_matmul(x, w, scheme), k)
    kernels.add(f"dequant_matmul {scheme} {x_shape} N={n} exact={exact}", op,
                dequant.build_dequant_matmul, [x, np.ascontiguousarray(w)], out_shape, check)


DEQUANT_SHAPES = [((1, 32), 1), ((3, 64), 7), ((5, 96), 17), ((2, 4, 256), 33), ((64,), 3),
                  ((9, 32), 8)]


@pytest.mark.parametrize("width", WIDTHS)
def test_dequant_matmul(width):
    kernels = Kernels(width)
    for scheme in ("q8_0", "q4_0"):
        for x_shape, n in DEQUANT_SHAPES:
            add_dequant(kernels, x_shape, n, scheme)
        add_dequant(kernels, (64, 64), 9, scheme, x=np.eye(64, dtype=np.float32), exact=True)
    kernels.run()


@pytest.mark.parametrize("width", WIDTHS)
def test_partitioned_dequant_matmul(width):
    kernels = Kernels(width, partitioned=True)
    for scheme in ("q8_0", "q4_0"):
        for x_shape, n in [((1, 64), 33), ((9, 32), 8), ((2, 4, 256), 33), ((64, 64), 9),
                           ((3, 32), 2)]:
            add_dequant(kernels, x_shape, n, scheme)
    kernels.run()


@pytest.mark.parametrize("width", WIDTHS)
def test_f16_scales_widen_exactly(width):
    """Every f16 bit pattern: fpext (W >= 8) or the integer widening (W = 4, no F16C)."""
    kb = KernelBuilder("widen", [PTR, PTR], vector_width=width)
    src, dst = kb.args
    with kb.loop(0, 1 << 16) as loop:
        kb.store(gguf.f16_scale(kb, kb.gep(src, loop.iv, i16)), dst, loop.iv)
    kb.ret()
    jitted = Jitted([kb.finish()], CPUS[width], verify=False)
    halves = np.arange(1 << 16, dtype=np.uint32).astype(np.uint16)
    out = np.empty(1 << 16, np.float32)
    jitted.function("widen", 2)(halves.ctypes.data, out.ctypes.data)
    want = halves.view("<f2").astype(np.float32)
    nan = np.isnan(want)
    np.testing.assert_array_equal(np.isnan(out), nan)
    np.testing.assert_array_equal(out[~nan].view(np.uint32), want[~nan].view(np.uint32))
