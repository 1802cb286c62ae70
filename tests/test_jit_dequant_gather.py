"""dequant_gather: an embedding lookup on a GGUF-quantized table (issue 10, item 2).

The kernel (passes/lir_to_llvm/dequant.py `build_dequant_gather`) decodes only the rows
it reads; every value must equal rlx_mlir.core.quants' dequantization bit for bit, for
every scheme and vector width; an out-of-range id returns the status code without
writing anything; over `?` ids one kernel serves every id count. Then the same through
`Graph.embedding(table, ids, scheme=...)`, the reference and rlx.jit.
"""

from __future__ import annotations

import ctypes

import numpy as np
import pytest
from jit_harness import CPUS, Jitted
from test_jit_dequant import SCHEMES, blocks, special_blocks
from xdsl.ir import Block

import rlx_mlir as rlx
from rlx_mlir.core import quants
from rlx_mlir.core import reference_kernels as ref
from rlx_mlir.core.abi import STATUS_INDEX_OUT_OF_RANGE, STATUS_OK
from rlx_mlir.core.shape_inference import QUANT_BLOCKS
from rlx_mlir.dialects import lir
from rlx_mlir.dialects.common import memref_type
from rlx_mlir.passes.lir_to_llvm import dequant as mm
from rlx_mlir.passes.lir_to_llvm import dynamic
from rlx_mlir.passes.lir_to_llvm.kernels import kernel_builders, kernel_record, runtime_dims_kernels

WIDTHS = (16, 8, 4)
ROWS = 13
RNG = np.random.default_rng(5)


def row_values(scheme: str) -> int:
    """Two blocks per row (float types: 37 values, which no vector width divides)."""
    values = QUANT_BLOCKS[scheme][0]
    return 37 if values == 1 else 2 * values


def gather_op(scheme: str, table_shape: tuple[int, int], ids_shape: tuple, k: int,
              id_dtype: str = "i32") -> lir.DequantGatherOp:
    shapes = [table_shape, ids_shape, (*ids_shape, k)]
    args = Block(arg_types=[memref_type(table_shape, "ui8"), memref_type(ids_shape, id_dtype),
                            memref_type((*ids_shape, k))]).args
    op = lir.DequantGatherOp(*args, scheme=scheme)
    if dynamic.is_dynamic(op):
        dynamic.set_operand_shapes(op, shapes)
    op.verify()
    return op


def expected(table: np.ndarray, ids: np.ndarray, scheme: str) -> np.ndarray:
    return quants.dequantize(table, scheme)[ids]


def assert_bits_equal(got: np.ndarray, want: np.ndarray) -> None:
    assert got.shape == want.shape
    np.testing.assert_array_equal(got.view(np.uint32), want.view(np.uint32))


def test_is_a_checked_kernel_with_a_builder():
    assert kernel_record(lir.DequantGatherOp).checked
    assert kernel_builders()[lir.DequantGatherOp] is mm.build_dequant_gather
    assert lir.DequantGatherOp in runtime_dims_kernels()


@pytest.mark.parametrize("width", WIDTHS)
def test_every_scheme_is_bit_exact(width):
    cases = []
    for scheme in SCHEMES:
        k = row_values(scheme)
        table = blocks(scheme, ROWS, k)
        for id_dtype, ids in (("i32", np.array([0, 12, 5, 5, 7, 1, 12], np.int32)),
                              ("i64", np.array([[3, 0], [11, 3]], np.int64)),
                              ("i32", np.array(9, np.int32))):  # rank-0 ids: one row
            op = gather_op(scheme, table.shape, ids.shape, k, id_dtype)
            cases.append((scheme, table, ids, k, op))
        special = special_blocks(scheme, ROWS, k) if scheme in ("q4_1", "q6_k", "q4_k",
                                                                 "q2_k", "iq4_xs") else None
        if special is not None:  # zero, subnormal and normal f16 scales
            ids = np.arange(ROWS, dtype=np.int32)
            cases.append((scheme, special, ids, k, gather_op(scheme, special.shape, ids.shape, k)))
    jitted = Jitted([mm.build_dequant_gather(op, f"g{i}", width)
                     for i, (*_, op) in enumerate(cases)], CPUS[width], verify=False)
    for i, (scheme, table, ids, k, _) in enumerate(cases):
        out = np.full((*ids.shape, k), np.nan, np.float32)
        status = jitted.function(f"g{i}", 3, ctypes.c_int32)(
            table.ctypes.data, ids.ctypes.data, out.ctypes.data)
        assert status == STATUS_OK, scheme
        assert_bits_equal(out, expected(table, ids, scheme))


@pytest.mark.parametrize("width", (16, 8))
def test_bad_ids_return_the_status_and_write_nothing(width):
    scheme, k = "q4_0", 64
    table = blocks(scheme, ROWS, k)
    op = gather_op(scheme, table.shape, (4,), k, "i64")
    jitted = Jitted([mm.build_dequant_gather(op, "g", width)], CPUS[width])  # keeps the code
    fn = jitted.function("g", 3, ctypes.c_int32)
    for bad in (-1, ROWS, ROWS + 1000, -(2**40), 2**62):
        ids = np.array([0, 3, bad, 1], np.int64)
        out = np.full((4, k), np.nan, np.float32)
        assert fn(table.ctypes.data, ids.ctypes.data, out.ctypes.data) == STATUS_INDEX_OUT_OF_RANGE
        assert np.isnan(out).all(), "nothing is written when an id is bad"


@pytest.mark.parametrize("width", (16, 8))
def test_symbolic_ids_one_kernel_every_count(width):
    """ids [S] and [B, S]: the id count is read at run time (sizes sorted by symbol)."""
    compiled = []
    for scheme in ("q8_0", "q4_1", "q6_k", "f16"):
        k = row_values(scheme)
        table = blocks(scheme, 50, k)
        compiled.append((scheme, table, k, ("S",), gather_op(scheme, table.shape, ("S",), k)))
        compiled.append((scheme, table, k, ("B", "S"),
                         gather_op(scheme, table.shape, ("B", "S"), k, "i64")))
    jitted = Jitted([mm.build_dequant_gather(op, f"g{i}", width)
                     for i, (*_, op) in enumerate(compiled)], CPUS[width], verify=False)
    for i, (scheme, table, k, symbols, _) in enumerate(compiled):
        fn = jitted.function(f"g{i}", 3, ctypes.c_int32, extra=[ctypes.c_int64] * len(symbols))
        bindings = ([{"S": s} for s in (1, 2, 7, 16, 17, 100)] if symbols == ("S",)
                    else [{"B": b, "S": s} for b, s in ((1, 1), (2, 3), (3, 17))])
        for binding in bindings:
            shape = tuple(binding[d] for d in symbols)
            ids = RNG.integers(0, 50, shape).astype(np.int32 if symbols == ("S",) else np.int64)
            out = np.full((*shape, k), np.nan, np.float32)
            sizes = [binding[s] for s in sorted(binding)]
            assert fn(table.ctypes.data, ids.ctypes.data, out.ctypes.data, *sizes) == STATUS_OK
            assert_bits_equal(out, expected(table, ids, scheme))
            ids.flat[-1] = 50  # the last id of this count is out of range
            out[...] = np.nan
            status = fn(table.ctypes.data, ids.ctypes.data, out.ctypes.data, *sizes)
            assert status == STATUS_INDEX_OUT_OF_RANGE and np.isnan(out).all()


def test_symbolic_table_is_refused():
    shapes = [("V", 34), (4,), (4, 32)]
    args = Block(arg_types=[memref_type(shapes[0], "ui8"), memref_type(shapes[1], "i32"),
                            memref_type(shapes[2])]).args
    op = lir.DequantGatherOp(*args, scheme="q8_0")
    dynamic.set_operand_shapes(op, shapes)
    with pytest.raises(dynamic.DynamicKernelError, match=r"lir\.dequant_gather.*table"):
        mm.build_dequant_gather(op, "g", 16)


# ----------------------------------------------------------------------------- the API


def embedding_graph(scheme: str, table_shape: tuple[int, int], ids_shape: tuple) -> rlx.Graph:
    g = rlx.Graph("qembed")
    ids = g.input("ids", ids_shape, "i32")
    g.output(g.embedding(g.param("table", table_shape, "ui8"), ids, scheme=scheme))
    return g


@pytest.mark.parametrize("scheme", ("q8_0", "q4_1", "q6_k", "bf16", "q3_k", "iq4_nl"))
def test_graph_embedding_with_a_scheme(scheme):
    k = row_values(scheme)
    table = blocks(scheme, 40, k)
    g = embedding_graph(scheme, table.shape, (2, 5))
    assert "mir.dequant_gather" in g.to_mlir()
    ids = RNG.integers(0, 40, (2, 5)).astype(np.int32)
    want = expected(table, ids, scheme)
    assert_bits_equal(rlx.reference(g)(ids=ids, table=table), want)
    model = rlx.jit(g, params={"table": table})
    assert "lir.dequant_gather" in model.mlir("lir")
    assert_bits_equal(model(ids), want)


def test_graph_embedding_bad_id_is_an_error_naming_it():
    table = blocks("q8_0", 50, 64)
    model = rlx.jit(embedding_graph("q8_0", table.shape, (5,)), params={"table": table})
    with pytest.raises(rlx.RlxError, match=r"ids\[1\] = 50 is outside \[0, 50\)"):
        model(np.array([0, 50, 1, 1, 1], np.int32))
    with pytest.raises(rlx.RlxError, match=r"ids\[4\] = -1 is outside"):
        model(np.array([0, 1, 1, 1, -1], np.int32))


def test_graph_embedding_build_errors():
    g = rlx.Graph("bad")
    ids = g.input("ids", (3,), "i32")
    with pytest.raises(rlx.RlxError, match="table: expected element type ui8"):
        g.embedding(g.param("f", (10, 34)), ids, scheme="q8_0")
    with pytest.raises(rlx.RlxError, match=r"whole q8_0 blocks of 34 bytes, got 35"):
        g.embedding(g.param("t", (10, 35), "ui8"), ids, scheme="q8_0")
    with pytest.raises(rlx.RlxError, match="scheme"):
        g.embedding(g.param("u", (10, 34), "ui8"), ids, scheme="q3_x")
    with pytest.raises(rlx.RlxError, match="ids"):
        g.embedding(g.param("v", (10, 34), "ui8"), g.input("fl", (3,)), scheme="q8_0")


def test_reference_kernel_errors():
    table = blocks("q4_0", 8, 32)
    with pytest.raises(rlx.RlxError, match=r"embedding ids: index 8 is out of range \[0, 8\)"):
        ref.dequant_gather(table, np.array([8]), "q4_0")
    with pytest.raises(rlx.RlxError, match="table: expected element type ui8"):
        ref.dequant_gather(table.astype(np.float32), np.array([0]), "q4_0")
    np.testing.assert_array_equal(ref.dequant_gather(table, np.array([[2], [7]]), "q4_0"),
                                  quants.dequantize(table, "q4_0")[[[2], [7]]])
