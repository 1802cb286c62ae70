"""Reduction-family kernels (lir.reduce, lir.softmax, lir.rms_norm, lir.layer_norm), JIT-compiled
and compared with `rlx_mlir.core.reference_kernels` on odd shapes, every axis pattern, W = 16, 8, 4.

The lir ops are built by hand over memref block arguments of a dummy block; every family's
kernels for one vector width go into one module, compiled once by tests/jit_harness.py
(the backend's LLVM path, then MCJIT; W=16 for the host, W=8 for haswell, W=4 for x86-64
without FMA) and called
with ctypes; `out` starts as a sentinel so an unwritten element fails. The partitioned
kernels (records with `partitioned=True`) run as 1, 2, 3 and 5 parts, one call per part, into one NaN-filled
output, and each part alone must write a share disjoint from the other parts'. The asm is
checked for vector code without libm calls, and a last test goes through `rlx_mlir.jit`.
"""

from __future__ import annotations

import ctypes
import re
from collections.abc import Callable, Sequence

import numpy as np
import pytest
from jit_harness import CPUS, Jitted, has_avx512
from xdsl.dialects.builtin import MemRefType, f32
from xdsl.ir import Block, Operation

import rlx_mlir as rlx
from rlx_mlir.core import reference_kernels as ref
from rlx_mlir.core import shape_inference as rules
from rlx_mlir.dialects import lir
from rlx_mlir.passes.lir_to_llvm import reductions
from rlx_mlir.passes.lir_to_llvm.kernels import family, kernel_builders, partitioned_builders

RTOL, ATOL = 1e-4, 1e-5
WIDTHS = (16, 8, 4)


# ----------------------------------------------------------------------------- cases


def buffers(*shapes: Sequence[int]) -> list:
    """Memref block arguments of a dummy block, one per shape."""
    return list(Block(arg_types=[MemRefType(f32, list(s)) for s in shapes]).args)


class Cases:
    """Kernels of one family and width, with their inputs and expected outputs."""

    def __init__(self, width: int):
        self.width = width
        self.cases: list[tuple[str, Operation, list[np.ndarray], np.ndarray]] = []

    def add(self, label: str, op: Operation, inputs: list[np.ndarray], expected: np.ndarray):
        op.verify()
        self.cases.append((label, op, inputs, np.asarray(expected, np.float32)))

    def run(self, build: Callable[[Operation, str, int], Operation]) -> None:
        fns = [build(op, f"k{i}", self.width) for i, (_, op, _, _) in enumerate(self.cases)]
        jitted = Jitted(fns, CPUS[self.width], verify=False)
        failures = []
        for i, (label, _, inputs, expected) in enumerate(self.cases):
            args = [np.ascontiguousarray(a, np.float32) for a in inputs]
            out = np.full(expected.shape, 12345.0, np.float32)
            proto = ctypes.CFUNCTYPE(None, *[ctypes.c_void_p] * (len(args) + 1))
            proto(jitted.address(f"k{i}"))(*[a.ctypes.data for a in args], out.ctypes.data)
            close = np.isclose(out, expected, rtol=RTOL, atol=ATOL, equal_nan=True)
            if not close.all():
                bad = np.argwhere(~close)[0]
                failures.append(f"{label} (W={self.width}): {(~close).sum()} of {out.size} differ, "
                                f"first at {tuple(bad)}: {out[tuple(bad)]} vs {expected[tuple(bad)]}")
        assert not failures, "\n".join(failures)


RNG = np.random.default_rng(0)


def data(shape: Sequence[int], scale: float = 1.0, offset: float = 0.0) -> np.ndarray:
    return (RNG.standard_normal(shape) * scale + offset).astype(np.float32)


# ----------------------------------------------------------------------------- lir.reduce

REDUCE_SHAPES: list[tuple[tuple[int, ...], list[tuple[int, ...]]]] = [  # lir.reduce needs an axis
    ((1,), [(0,)]),
    ((7,), [(0,)]),
    ((17,), [(0,)]),
    ((100,), [(0,)]),
    ((257,), [(0,)]),
    ((3, 17), [(1,), (0,), (0, 1)]),
    ((7, 33), [(1,), (0,)]),
    ((1, 257), [(1,), (0,)]),
    ((100, 3), [(1,), (0,)]),
    ((33, 1), [(0,), (1,)]),
    ((5, 100), [(0,), (1,)]),
    ((3, 7, 17), [(2,), (0,), (1,), (0, 2), (1, 2), (0, 1), (0, 1, 2)]),
    ((2, 33, 5), [(1,), (0, 2)]),
    ((7, 1, 100), [(0,), (2,), (0, 2), (1,)]),
    ((4, 3, 257), [(1,), (0, 2)]),
    ((2, 3, 7, 17), [(3,), (2,), (0, 2), (1, 3), (0, 1, 3), (0, 3), (0, 1, 2, 3)]),
    ((3, 1, 33, 5), [(0, 2), (2,), (1, 3)]),
    ((17, 40), [(0,)]),
    ((24, 20), [(0,)]),
    ((16, 3), [(0,)]),
    ((3, 5, 4, 33), [(0, 2)]),
    ((2, 17, 3, 9), [(1, 3), (0, 2)]),
]
KINDS = ("sum", "max", "min", "mean")


def reduce_cases(width: int) -> Cases:
    """Every (shape, axes) pair; all kinds at W=16 and two at W=8/4 (one additive, one of
    max/min). The kernel ignores keepdim (same memory layout), so keepdim alternates."""
    cases = Cases(width)
    index = 0
    for shape, axes_list in REDUCE_SHAPES:
        for axes in axes_list:
            x = data(shape, offset=0.5)
            kinds = KINDS if width == 16 else KINDS[index % 2::2]
            for kind in kinds:
                keepdim = (index + KINDS.index(kind)) % 2 == 1
                out_shape = rules.reduce(shape, axes, keepdim)
                xin, out = buffers(shape, out_shape)
                cases.add(f"{kind} {shape} axes={axes} keepdim={keepdim}",
                          lir.ReduceOp(xin, out, kind, axes, keepdim), [x],
                          ref.reduce(x, kind, axes, keepdim))
            index += 1
    return cases


def nan_reduce_cases(width: int) -> Cases:
    """max/min propagate NaN (and handle infinities) in every code path."""
    cases = Cases(width)
    for shape, axes in [((3, 40), (1,)), ((40, 19), (0,)), ((3, 5, 21), (0, 2)), ((37,), (0,)),
                        ((2, 5, 19), (1,))]:
        x = data(shape)
        flat = x.reshape(-1)
        flat[RNG.choice(flat.size, 3, replace=False)] = np.nan
        flat[RNG.choice(flat.size, 3, replace=False)] = np.inf
        flat[RNG.choice(flat.size, 3, replace=False)] = -np.inf
        for kind in ("max", "min", "sum"):
            out_shape = rules.reduce(shape, axes, False)
            xin, out = buffers(shape, out_shape)
            cases.add(f"{kind} {shape} axes={axes} with nan/inf",
                      lir.ReduceOp(xin, out, kind, axes), [x], ref.reduce(x, kind, axes))
    return cases


@pytest.mark.parametrize("width", WIDTHS)
def test_reduce(width):
    reduce_cases(width).run(reductions.build_reduce)


@pytest.mark.parametrize("width", WIDTHS)
def test_reduce_nan(width):
    nan_reduce_cases(width).run(reductions.build_reduce)


def test_reduce_groups():
    assert reductions.reduce_groups((2, 3, 1, 4), (0, 1)) == [(6, True), (4, False)]
    assert reductions.reduce_groups((2, 1, 3, 4), (0, 1, 2)) == [(6, True), (4, False)]
    assert reductions.reduce_groups((2, 3, 4), (0, 2)) == [(2, True), (3, False), (4, True)]
    assert reductions.reduce_groups((5, 1, 7), (1,)) == [(35, False)]


# ----------------------------------------------------------------------------- lir.softmax

SOFTMAX_CASES = [
    ((1,), -1), ((7,), 0), ((257,), -1), ((3, 17), -1), ((3, 17), 0), ((33, 1), 1),
    ((100, 3), 0), ((2, 33, 5), 0), ((2, 33, 5), 1), ((2, 33, 5), 2), ((3, 1, 100), 1),
    ((3, 1, 100), -1), ((2, 3, 7, 17), 1), ((2, 3, 7, 17), 3), ((2, 3, 7, 17), 2),
    ((4, 100, 33), 1), ((3, 2, 1100), 1), ((2, 5, 2100), 0),
]


def softmax_cases(width: int) -> Cases:
    cases = Cases(width)
    for index, (shape, axis) in enumerate(SOFTMAX_CASES):
        scale = 30.0 if index % 2 else 1.0  # large logits: the max subtraction matters
        x = data(shape, scale=scale)
        xin, out = buffers(shape, shape)
        cases.add(f"softmax {shape} axis={axis} scale={scale}", lir.SoftmaxOp(xin, out, axis),
                  [x], ref.softmax(x, axis))
    for shape, axis in [((5, 37), -1), ((37, 5), 0)]:  # masked logits (-inf) give exact zeros
        x = data(shape)
        x[RNG.random(shape) < 0.3] = -np.inf
        xin, out = buffers(shape, shape)
        cases.add(f"softmax {shape} axis={axis} with -inf", lir.SoftmaxOp(xin, out, axis),
                  [x], ref.softmax(x, axis))
    return cases


@pytest.mark.parametrize("width", WIDTHS)
def test_softmax(width):
    softmax_cases(width).run(reductions.build_softmax)


# ----------------------------------------------------------------------------- norms

NORM_SHAPES = [(1,), (7,), (17,), (3, 33), (2, 3, 100), (2, 1, 3, 257), (5, 64)]


def norm_cases(width: int) -> Cases:
    cases = Cases(width)
    for shape in NORM_SHAPES:
        n = shape[-1]
        x, g, b = data(shape), data((n,)), data((n,))
        for with_beta in (False, True):
            eps = 1e-5 if with_beta else 1e-3
            if with_beta:
                xin, gin, bin_, out = buffers(shape, (n,), (n,), shape)
                op = lir.RmsNormOp(xin, gin, out, bin_, eps=eps)
                inputs = [x, g, b]
            else:
                xin, gin, out = buffers(shape, (n,), shape)
                op = lir.RmsNormOp(xin, gin, out, eps=eps)
                inputs = [x, g]
            cases.add(f"rms_norm {shape} beta={with_beta}", op, inputs,
                      ref.rms_norm(x, g, b if with_beta else None, eps))
        for offset in (0.0, 100.0):
            xo = data(shape, offset=offset)
            xin, gin, bin_, out = buffers(shape, (n,), (n,), shape)
            cases.add(f"layer_norm {shape} offset={offset}",
                      lir.LayerNormOp(xin, gin, bin_, out, eps=1e-5), [xo, g, b],
                      ref.layer_norm(xo, g, b, 1e-5))
    return cases


@pytest.mark.parametrize("width", WIDTHS)
def test_norms(width):
    builders = kernel_builders()
    norm_cases(width).run(lambda op, name, w: builders[type(op)](op, name, w))


# ----------------------------------------------------------------------------- partitioned

PARTS = (1, 2, 3, 5)
UNSET = -3.25e38
"""A value no kernel writes: what a part leaves of `out` shows which elements it wrote."""


def partitioned_cases(width: int) -> Cases:
    """Every split of the partitioned kernels, with fewer rows/units than parts too: copy
    (units of W), full reductions (part 0), [K, R] rows, [R, K] and [K, R, K] (batch x
    column chunks), general patterns (part 0), softmax rows and (outer x column tiles,
    with a partial last tile), norm rows."""
    cases = Cases(width)
    for shape, axes, kind in [((5, 1, 70), (1,), "max"), ((257,), (0,), "mean"),
                              ((1, 7), (1,), "sum"), ((7, 33), (1,), "mean"),
                              ((2, 3, 100), (2,), "max"), ((3, 17), (0,), "mean"),
                              ((100, 3), (0,), "min"), ((5, 300), (0,), "sum"),
                              ((4, 9, 70), (1,), "mean"), ((2, 3, 7, 17), (0, 2), "max"),
                              ((3, 5, 4, 33), (0, 2), "mean")]:
        x = data(shape, offset=0.5)
        xin, out = buffers(shape, rules.reduce(shape, axes, False))
        cases.add(f"{kind} {shape} axes={axes}", lir.ReduceOp(xin, out, kind, axes), [x],
                  ref.reduce(x, kind, axes))
    for shape, axis in [((1,), -1), ((2, 7), -1), ((9, 100), -1), ((3, 2, 1100), 1),
                        ((16, 2, 70), 1), ((3, 17), 0), ((2, 33, 5), 1)]:
        x = data(shape, scale=5.0)
        xin, out = buffers(shape, shape)
        cases.add(f"softmax {shape} axis={axis}", lir.SoftmaxOp(xin, out, axis), [x],
                  ref.softmax(x, axis))
    for shape in [(7,), (2, 33), (3, 5, 100)]:
        n = shape[-1]
        x, g, b = data(shape, offset=3.0), data((n,)), data((n,))
        xin, gin, bin_, out = buffers(shape, (n,), (n,), shape)
        cases.add(f"rms_norm {shape}", lir.RmsNormOp(xin, gin, out, bin_, eps=1e-5), [x, g, b],
                  ref.rms_norm(x, g, b, 1e-5))
        xin, gin, bin_, out = buffers(shape, (n,), (n,), shape)
        cases.add(f"layer_norm {shape}", lir.LayerNormOp(xin, gin, bin_, out, eps=1e-5),
                  [x, g, b], ref.layer_norm(x, g, b, 1e-5))
    return cases


@pytest.mark.parametrize("width", WIDTHS)
def test_partitioned(width):
    """Parts 1, 2, 3, 5 called in turn on one NaN-filled `out` give the reference; each
    part alone writes a share disjoint from the other parts' (together: all of out)."""
    cases = partitioned_cases(width)
    fns = [partitioned_builders()[type(op)](op, f"p{i}", width)
           for i, (_, op, _, _) in enumerate(cases.cases)]
    jitted = Jitted(fns, CPUS[width], verify=False)
    failures = []
    for i, (label, _, inputs, expected) in enumerate(cases.cases):
        args = [np.ascontiguousarray(a, np.float32) for a in inputs]
        fn = ctypes.CFUNCTYPE(None, *[ctypes.c_void_p] * (len(args) + 1), ctypes.c_int64,
                              ctypes.c_int64)(jitted.address(f"p{i}"))
        for parts in PARTS:
            out = np.full(expected.shape, np.nan, np.float32)
            written = np.zeros(expected.shape, np.int64)
            for part in range(parts):
                fn(*[a.ctypes.data for a in args], out.ctypes.data, part, parts)
                alone = np.full(expected.shape, UNSET, np.float32)
                fn(*[a.ctypes.data for a in args], alone.ctypes.data, part, parts)
                written += alone != UNSET
            close = np.isclose(out, expected, rtol=RTOL, atol=ATOL)
            if not close.all():
                failures.append(f"{label} (W={width}, parts={parts}): {(~close).sum()} of "
                                f"{out.size} differ")
            if not (written == 1).all():
                failures.append(f"{label} (W={width}, parts={parts}): elements written by "
                                f"{sorted(set(written.ravel().tolist()))} parts")
    assert not failures, "\n".join(failures)


def test_partitioned_registry():
    assert all(record.partitioned for record in family("reductions").values())
    x, out = buffers((3, 5), (3,))
    fn = partitioned_builders()[lir.ReduceOp](lir.ReduceOp(x, out, "sum", [1]), "k", 8)
    assert [str(t) for t in fn.function_type.inputs.data] == ["!llvm.ptr"] * 2 + ["i64"] * 2


# ----------------------------------------------------------------------------- codegen quality


def test_registry():
    assert set(family("reductions")) == {lir.ReduceOp, lir.SoftmaxOp, lir.RmsNormOp, lir.LayerNormOp}


def asm_of(op: Operation, width: int = 16) -> str:
    return Jitted([kernel_builders()[type(op)](op, "k", width)], CPUS[width]).asm


@pytest.mark.skipif(not has_avx512(), reason="needs AVX-512")
def test_row_sum_asm_uses_zmm_and_a_tree():
    x, out = buffers((8, 1024), (8,))
    asm = asm_of(lir.ReduceOp(x, out, "sum", [1]))
    assert re.search(r"vaddps\s+.*zmm", asm), asm
    assert asm.count("vaddss") < 4, asm  # a shuffle tree, not 16 serial scalar adds
    assert "call" not in asm


@pytest.mark.skipif(not has_avx512(), reason="needs AVX-512")
def test_max_asm_is_plain_maxps():
    """max keeps a NaN mask beside plain `vmaxps` (not llvm.maximum's blend sequence)."""
    x, out = buffers((8, 1024), (8,))
    asm = asm_of(lir.ReduceOp(x, out, "max", [1]))
    assert re.search(r"vmaxps\s+.*zmm", asm) and "vcmpunordps" in asm, asm
    assert "vpmovd2m" not in asm.split("vextract")[0], asm  # no signed-zero blends in the loop


@pytest.mark.skipif(not has_avx512(), reason="needs AVX-512")
def test_outer_sum_asm_vectorized():
    x, out = buffers((64, 1024), (1024,))
    asm = asm_of(lir.ReduceOp(x, out, "sum", [0]))
    assert re.search(r"vaddps\s+.*zmm", asm), asm


@pytest.mark.parametrize("width", WIDTHS)
def test_softmax_and_norm_asm_have_no_calls(width):
    """No libm (expf) and no fmaf, also at W=4 on SSE2 without FMA."""
    register = {16: "zmm", 8: "ymm", 4: "xmm"}[width]
    if width == 16 and not has_avx512():
        pytest.skip("needs AVX-512")
    x, out = buffers((4, 1000), (4, 1000))
    ops = [lir.SoftmaxOp(x, out, -1)]
    x, out = buffers((4, 100, 64), (4, 100, 64))
    ops.append(lir.SoftmaxOp(x, out, 1))
    x, g, b, out = buffers((4, 1024), (1024,), (1024,), (4, 1024))
    ops += [lir.RmsNormOp(x, g, out, b, eps=1e-5), lir.LayerNormOp(x, g, b, out, eps=1e-5)]
    for op in ops:
        asm = asm_of(op, width)
        assert register in asm and "call" not in asm, (op.name, asm)
    if width == 16:
        assert re.search(r"vfmadd\w+\s+.*zmm", asm), asm


# ----------------------------------------------------------------------------- end to end


@pytest.mark.parametrize("width", WIDTHS)
def test_jit_end_to_end(width, tmp_path, monkeypatch):
    """One graph of reductions through rlx_mlir.jit (registry, arena, entry function)."""
    monkeypatch.setenv("RLX_CACHE_DIR", str(tmp_path / "cache"))
    g = rlx.Graph("reductions")
    x = g.input("x", (3, 7, 33))
    gamma = g.input("gamma", (33,))
    beta = g.input("beta", (33,))
    g.output(
        g.reduce_sum(x, -1), g.reduce_max(x, 0), g.reduce_min(x, (0, 2), keepdim=True),
        g.reduce_mean(x, (0, 1, 2)), g.reduce_mean(x, 1, keepdim=True),
        g.softmax(x, -1), g.softmax(x, 1), g.rms_norm(x, gamma), g.rms_norm(x, gamma, beta),
        g.layer_norm(x, gamma, beta),
    )
    feeds = [data((3, 7, 33)), data((33,)), data((33,))]
    got = rlx.jit(g, vector_width=width)(*feeds)
    expected = rlx.reference(g)(*feeds)
    for out, want in zip(got, expected, strict=True):
        np.testing.assert_allclose(out, want, rtol=RTOL, atol=ATOL)
