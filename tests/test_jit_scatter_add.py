"""Numerics of the `lir.scatter_add` kernel (the transpose of gather; the backward of a
gather or an embedding lookup): built at vector widths 16, 8 and 4, compared with the
numpy reference (`reference_kernels.scatter_add`) and with gather's adjoint identity, and
once through `rlx.jit` (symbolic index count, out-of-range indices)."""

from __future__ import annotations

import ctypes

import numpy as np
import pytest
from jit_harness import Jitted
from xdsl.ir import Block

import rlx_mlir as rlx
from rlx_mlir.core import reference_kernels as R
from rlx_mlir.core.shape_inference import scatter_add
from rlx_mlir.dialects import lir
from rlx_mlir.dialects.common import memref_type
from rlx_mlir.passes.lir_to_llvm.indexing import build_scatter_add
from rlx_mlir.passes.lir_to_llvm.kernels import kernel_builders

WIDTHS = (16, 8, 4)
RTOL, ATOL = 1e-5, 1e-6

CASES = [
    # (updates shape, indices shape, indices dtype, axis, dim_size)
    ((4, 8), (4,), "i32", 0, 100),
    ((6, 5), (6,), "i64", 0, 3),          # more rows than dim_size: repeats
    ((2, 3, 17), (2, 3), "i32", 0, 4),    # 2-d ids (an embedding over [B, S])
    ((5, 7, 33), (7,), "i64", 1, 2),      # middle axis, width 33
    ((3, 9, 1), (9,), "i32", 1, 9),       # inner size 1
    ((1, 1, 5), (1,), "i32", 1, 1),       # size-1 axes
    ((2, 3, 4), (4,), "i64", -1, 6),      # last axis: inner 1
    ((17,), (17,), "i32", 0, 5),          # rank 1: inner 1
    ((2, 2, 2, 33), (2, 2), "i32", 1, 3),
]


def op_of(u_shape, ids_shape, ids_dtype, axis, dim_size):
    out_shape = scatter_add(u_shape, ids_shape, axis, dim_size)
    block = Block(arg_types=[memref_type(u_shape), memref_type(ids_shape, ids_dtype),
                             memref_type(out_shape)])
    op = lir.ScatterAddOp(*block.args, axis=axis, dim_size=dim_size)
    op.verify()
    return op


@pytest.fixture(scope="module", params=WIDTHS, ids=lambda w: f"W{w}")
def jitted(request):
    return Jitted([build_scatter_add(op_of(*c), f"scatter{i}", request.param)
                   for i, c in enumerate(CASES)])


def case_arrays(case: int, with_repeats: bool = True):
    u_shape, ids_shape, ids_dtype, axis, dim = CASES[case]
    rng = np.random.default_rng(case)
    updates = rng.uniform(-2, 2, size=u_shape).astype(np.float32)
    ids = rng.integers(0, dim, size=ids_shape).astype(np.dtype(ids_dtype.replace("i", "int")))
    if with_repeats and ids.size > 1:  # the first and last rows, and a repeat
        ids.flat[0], ids.flat[-1] = 0, dim - 1
        ids.flat[1] = ids.flat[0]
    return updates, ids, axis, dim


def run(jitted, case, updates, ids, fill=7.0):
    out = np.full(scatter_add(updates.shape, ids.shape, CASES[case][3], CASES[case][4]),
                  fill, np.float32)
    status = jitted.function(f"scatter{case}", 3, ctypes.c_int32)(
        updates.ctypes.data, ids.ctypes.data, out.ctypes.data)
    return status, out


def test_builder_is_registered():
    assert kernel_builders()[lir.ScatterAddOp] is build_scatter_add


@pytest.mark.parametrize("case", range(len(CASES)))
def test_scatter_add_matches_reference(jitted, case):
    updates, ids, axis, dim = case_arrays(case)
    status, out = run(jitted, case, updates, ids)  # out starts at 7: the kernel zeroes it
    assert status == 0
    np.testing.assert_allclose(out, R.scatter_add(updates, ids, axis, dim), rtol=RTOL, atol=ATOL)


@pytest.mark.parametrize("case", range(len(CASES)))
def test_scatter_add_is_gathers_transpose(jitted, case):
    """<gather(x, ids), u> == <x, scatter_add(u, ids)> for every x: the adjoint identity."""
    updates, ids, axis, dim = case_arrays(case)
    _, out = run(jitted, case, updates, ids)
    x = np.random.default_rng(case + 7).standard_normal(out.shape).astype(np.float32)
    lhs = np.sum(R.gather(x, ids, axis).astype(np.float64) * updates)
    rhs = np.sum(x.astype(np.float64) * out)
    assert abs(lhs - rhs) <= 1e-4 * (1 + abs(lhs))


def test_repeated_indices_accumulate(jitted):
    updates = np.arange(30, dtype=np.float32).reshape(6, 5)
    ids = np.array([2, 2, 0, 2, 0, 2], np.int64)
    status, out = run(jitted, 1, updates, ids)
    assert status == 0
    np.testing.assert_array_equal(out[0], updates[2] + updates[4])
    np.testing.assert_array_equal(out[1], np.zeros(5, np.float32))
    np.testing.assert_array_equal(out[2], updates[[0, 1, 3, 5]].sum(0))


@pytest.mark.parametrize("case", [0, 2, 3, 6])
def test_bad_indices_return_1_without_writing(jitted, case):
    updates, ids, _, dim = case_arrays(case)
    huge = 2**40 if ids.dtype == np.int64 else 2**31 - 1
    for bad in (dim, -1, huge, -huge):
        for position in (0, ids.size - 1):
            wrong = ids.copy()
            wrong.flat[position] = bad
            status, out = run(jitted, case, updates, wrong)
            assert status == 1, (bad, position)
            assert (out == 7).all(), "a failing scatter_add must not write its result"


def test_reference_rejects_bad_indices_and_shapes():
    with pytest.raises(rlx.ArgumentError, match="out of range"):
        R.scatter_add(np.ones((2, 3), np.float32), np.array([0, 3]), 0, 3)
    with pytest.raises(rlx.ShapeError, match="updates"):
        R.scatter_add(np.ones((2, 3), np.float32), np.array([0, 1, 1]), 0, 3)
    with pytest.raises(rlx.ShapeError, match="dim_size"):
        R.scatter_add(np.ones((2, 3), np.float32), np.array([0, 1]), 0, 0)


@pytest.mark.parametrize("width", WIDTHS)
def test_scatter_add_through_jit(width, monkeypatch, tmp_path):
    """An embedding's backward shape: ids [B, S] with S symbolic, rows [B, S, D] summed
    into a [V, D] table gradient; results match the reference, a bad id raises."""
    monkeypatch.setenv("RLX_CACHE_DIR", str(tmp_path))
    g = rlx.Graph("scatter")
    rows = g.input("rows", (2, "S", 17))
    ids = g.input("ids", (2, "S"), dtype="i32")
    cols = g.input("cols", (3,), dtype="i64")  # a symbolic dim before the axis
    g.output(g.scatter_add(rows, ids, 0, 5), g.scatter_add(rows, ids, -2, 5),
             g.scatter_add(g.transpose(rows, (1, 0, 2)), g.narrow(cols, 0, 0, 2), 1, 3))
    model = rlx.jit(g, vector_width=width)
    for steps in (1, 4):
        rng = np.random.default_rng(steps)
        inputs = {"rows": rng.standard_normal((2, steps, 17)).astype(np.float32),
                  "ids": rng.integers(0, 5, size=(2, steps)).astype(np.int32),
                  "cols": np.array([2, 2, 0], np.int64)}
        for got, want in zip(model(**inputs), rlx.reference(g)(**inputs), strict=True):
            np.testing.assert_allclose(got, want, rtol=RTOL, atol=ATOL)
    with pytest.raises(rlx.RlxError, match="out of range"):
        model(**{**inputs, "ids": np.array([[0, 1, 5, 2], [0, 0, 0, 0]], np.int32)})


def test_graph_checks():
    g = rlx.Graph("bad")
    rows = g.input("rows", (3, 4))
    with pytest.raises(rlx.DTypeError, match="indices"):
        g.scatter_add(rows, g.input("f", (3,)), 0, 5)
    with pytest.raises(rlx.ShapeError, match="updates"):
        g.scatter_add(rows, g.input("ids", (4,), "i32"), 0, 5)
    with pytest.raises(rlx.ShapeError, match="axis"):
        g.scatter_add(rows, g.input("ids2", (3,), "i32"), 2, 5)
