"""Numerics of the `lir.gather` and `lir.depthwise_conv1d` kernels (rlx_mlir.passes.lir_to_llvm.indexing).

Each lir op is built by hand over the memref arguments of a dummy block, its kernel is
built at vector widths 16, 8 and 4, every kernel of one width is JIT-compiled in one
module with llvmlite, and the results are compared with `rlx_mlir.core.reference_kernels`.
"""

from __future__ import annotations

import ctypes

import numpy as np
import pytest
from jit_harness import Jitted, has_avx512
from xdsl.ir import Block

from rlx_mlir.core import reference_kernels as R
from rlx_mlir.core.shape_inference import depthwise_conv1d, gather
from rlx_mlir.dialects import lir
from rlx_mlir.dialects.common import memref_type
from rlx_mlir.passes.lir_to_llvm.indexing import build_depthwise_conv1d, build_gather
from rlx_mlir.passes.lir_to_llvm.kernels import family, kernel_builders

WIDTHS = (16, 8, 4)
RTOL, ATOL = 1e-4, 1e-5
NP_DTYPES = {"f32": np.float32, "i32": np.int32, "i64": np.int64, "ui8": np.uint8}


# ----------------------------------------------------------------------------- JIT harness


def dummy_args(*types):
    """Block arguments of the given memref types (operands for a hand-built lir op)."""
    return Block(arg_types=list(types)).args


def call(fn, *arrays):
    for a in arrays:
        assert a.flags.c_contiguous
    return fn(*(a.ctypes.data for a in arrays))


def rng(seed):
    return np.random.default_rng(seed)


# ----------------------------------------------------------------------------- cases

GATHER_CASES = [
    # (x shape, x dtype, ids shape, ids dtype, axis)
    ((100, 8), "f32", (4,), "i32", 0),
    ((5, 7, 3), "f32", (2, 3), "i64", 1),
    ((5, 7, 33), "f32", (4,), "i32", -1),
    ((3, 17), "i64", (), "i32", 1),
    ((6, 40), "ui8", (7,), "i64", 0),
    ((4, 257), "i32", (3,), "i32", 0),
    ((1,), "f32", (5,), "i64", 0),
    ((2, 3, 4, 33), "f32", (2, 2), "i32", 2),
    ((9, 100), "f32", (1,), "i64", 0),
]

CONV_CASES = [
    # (batch, steps, channels, taps)
    (1, 1, 1, 1),
    (2, 5, 3, 1),
    (1, 7, 17, 2),
    (2, 4, 33, 3),
    (1, 9, 100, 4),
    (3, 3, 7, 4),
    (1, 6, 16, 3),
]


def gather_op(x_shape, x_dtype, ids_shape, ids_dtype, axis):
    out_shape = gather(x_shape, ids_shape, axis)
    x, ids, out = dummy_args(memref_type(x_shape, x_dtype), memref_type(ids_shape, ids_dtype),
                             memref_type(out_shape, x_dtype))
    op = lir.GatherOp(x, ids, out, axis=axis)
    op.verify()
    return op


def conv_op(batch, steps, channels, taps):
    x_shape, w_shape = (batch, steps + taps - 1, channels), (taps, channels)
    x, w, out = dummy_args(memref_type(x_shape), memref_type(w_shape),
                           memref_type(depthwise_conv1d(x_shape, w_shape)[0]))
    op = lir.DepthwiseConv1dOp(x, w, out)
    op.verify()
    return op


@pytest.fixture(scope="module", params=WIDTHS, ids=lambda w: f"W{w}")
def kernels(request):
    w = request.param
    functions = [build_gather(gather_op(*c), f"gather{i}", w) for i, c in enumerate(GATHER_CASES)]
    functions += [build_depthwise_conv1d(conv_op(*c), f"conv{i}", w)
                  for i, c in enumerate(CONV_CASES)]
    return w, Jitted(functions)


def random_array(shape, dtype, seed):
    if dtype == "f32":
        return rng(seed).uniform(-2, 2, size=shape).astype(np.float32)
    info = np.iinfo(NP_DTYPES[dtype])
    lo, hi = max(info.min, -(2**40)), min(info.max, 2**40)
    return rng(seed).integers(lo, hi, size=shape, endpoint=True).astype(NP_DTYPES[dtype])


# ----------------------------------------------------------------------------- tests


def test_builders_registry():
    assert kernel_builders()[lir.GatherOp] is build_gather
    assert kernel_builders()[lir.DepthwiseConv1dOp] is build_depthwise_conv1d
    assert set(family("indexing")) == {lir.GatherOp, lir.ScatterAddOp, lir.DepthwiseConv1dOp,
                                       lir.InsertRowsOp, lir.CacheScatterOp}


def gather_setup(kernels, case):
    """(compiled gather of the case, its x, the case's ids shape and dtype, axis, dim)."""
    _, jitted = kernels
    x_shape, x_dtype, ids_shape, ids_dtype, axis = GATHER_CASES[case]
    fn = jitted.function(f"gather{case}", 3, ctypes.c_int32)
    return fn, random_array(x_shape, x_dtype, case), ids_shape, ids_dtype, axis, x_shape[axis]


@pytest.mark.parametrize("case", range(len(GATHER_CASES)))
def test_gather(kernels, case):
    fn, x, ids_shape, ids_dtype, axis, dim = gather_setup(kernels, case)
    ids = rng(case + 100).integers(0, dim, size=ids_shape).astype(NP_DTYPES[ids_dtype])
    if ids.size > 1:  # the first and last rows are reachable
        ids.flat[0], ids.flat[-1] = 0, dim - 1
    want = R.gather(x, ids, axis)
    out = np.zeros(want.shape, dtype=want.dtype)
    assert call(fn, x, np.ascontiguousarray(ids), out) == 0
    np.testing.assert_array_equal(out, want)


@pytest.mark.parametrize("case", range(len(GATHER_CASES)))
def test_gather_bad_ids_return_1_without_reading(kernels, case):
    fn, x, ids_shape, ids_dtype, axis, dim = gather_setup(kernels, case)
    out_shape = gather(x.shape, ids_shape, axis)
    huge = 2**40 if ids_dtype == "i64" else 2**31 - 1
    for bad in (dim, -1, huge, -huge, dim + 1000):
        for position in {0, max(0, int(np.prod(ids_shape)) - 1)}:
            ids = np.zeros(ids_shape, dtype=NP_DTYPES[ids_dtype])
            ids.flat[position] = bad
            out = np.full(out_shape, 7, dtype=x.dtype)
            assert call(fn, x, ids, out) == 1, (bad, position)
            assert (out == 7).all(), "a failing gather must not write its output"


@pytest.mark.parametrize("case", range(len(CONV_CASES)))
def test_depthwise_conv1d(kernels, case):
    _, jitted = kernels
    batch, steps, channels, taps = CONV_CASES[case]
    fn = jitted.function(f"conv{case}", 3)
    x = random_array((batch, steps + taps - 1, channels), "f32", case)
    w = random_array((taps, channels), "f32", case + 50)
    want = R.depthwise_conv1d(x, w)
    out = np.zeros(want.shape, dtype=np.float32)
    call(fn, x, w, out)
    np.testing.assert_allclose(out, want, rtol=RTOL, atol=ATOL)


def test_conv_uses_vector_fma():
    op = conv_op(1, 9, 64, 4)
    asm = Jitted([build_depthwise_conv1d(op, "conv", 16)]).asm
    assert "vfmadd" in asm
    if has_avx512():
        assert "zmm" in asm


def test_long_convolution_loops_over_taps():
    """More taps than the unroll limit take the looped path."""
    op = conv_op(2, 5, 19, 20)
    for w in WIDTHS:
        jitted = Jitted([build_depthwise_conv1d(op, "conv", w)])
        fn = jitted.function("conv", 3)
        x = random_array((2, 24, 19), "f32", 1)
        wt = random_array((20, 19), "f32", 2)
        out = np.zeros((2, 5, 19), dtype=np.float32)
        call(fn, x, wt, out)
        np.testing.assert_allclose(out, R.depthwise_conv1d(x, wt), rtol=RTOL, atol=ATOL)


# ----------------------------------------------------------------------------- through rlx.jit


@pytest.mark.parametrize("width", WIDTHS)
def test_gather_through_jit(width, monkeypatch, tmp_path):
    """Gathers compiled by `rlx_mlir.jit`: results match, a bad id raises an RlxError."""
    import rlx_mlir as rlx

    monkeypatch.setenv("RLX_CACHE_DIR", str(tmp_path))
    g = rlx.Graph("gathers")
    x = g.input("x", (4, 9, 17))
    ids32 = g.input("ids32", (2, 3), dtype="i32")
    ids64 = g.input("ids64", (5,), dtype="i64")
    g.output(g.gather(x, ids32, axis=1), g.gather(x, ids64, axis=-1), g.gather(x, ids32, axis=0))
    model = rlx.jit(g, vector_width=width)
    inputs = {"x": random_array((4, 9, 17), "f32", width),
              "ids32": np.array([[0, 3, 1], [2, 3, 0]], np.int32),
              "ids64": np.array([16, 0, 5, 5, 9], np.int64)}
    for a, b in zip(model(**inputs), rlx.reference(g)(**inputs), strict=True):
        np.testing.assert_array_equal(a, b)
    for bad in ({"ids32": np.array([[0, 3, 1], [2, 4, 0]], np.int32)},  # 4 >= dim 0
                {"ids64": np.array([16, 0, 17, 5, 9], np.int64)},
                {"ids32": np.array([[0, -1, 1], [2, 3, 0]], np.int32)}):
        with pytest.raises(rlx.RlxError, match="out of range"):
            model(**{**inputs, **bad})
