"""matmul, fused_matmul and dequant_matmul kernels over a symbolic row count (issue 9).

Each lir op is built by hand with `?` rows (`["S", K]`, `["B", "S", K]`) and its operands'
symbolic shapes (`dynamic.set_operand_shapes`); ONE kernel per op (serial and partitioned)
is compiled, then called at many run-time sizes (1, 2, MR ± 1, 15, 16, 17, 33, 100, 128,
257) against numpy; partitioned kernels run with 1, 2 and 3 parts, every output element
written by exactly one part. The ABI is that of passes/lir_to_llvm/dynamic.py: pointers,
then one i64 per symbol (sorted by name), then (part, parts).
"""

from __future__ import annotations

import ctypes
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass

import numpy as np
import pytest
from jit_harness import CPUS, Jitted
from test_jit_dequant import blocks, want
from xdsl.ir import Block, Operation

from rlx_mlir.core import reference_kernels as ref
from rlx_mlir.core import shape_inference as si
from rlx_mlir.core.packing import pack_rhs
from rlx_mlir.dialects import lir
from rlx_mlir.dialects.common import memref_type
from rlx_mlir.passes.lir_to_llvm import dynamic
from rlx_mlir.passes.lir_to_llvm import matmul as mm
from rlx_mlir.passes.lir_to_llvm.kernels import kernel_builders, partitioned_builders

WIDTHS = (16, 8)
ROWS = (1, 2, 5, 7, 9, 15, 16, 17, 33, 100, 128, 257)
"""Run-time M: one row, MR ± 1 of both plans (6-row and 8-row tiles), the edges of the
decode plan (SMALL_M = 16), odd and large counts."""
PARTS = (1, 2, 3)
RNG = np.random.default_rng(11)

Shape = tuple[int | str, ...]


def _rand(shape: Sequence[int]) -> np.ndarray:
    return RNG.uniform(-1, 1, shape).astype(np.float32)


def _operands(shapes: Sequence[tuple[Shape, str]]):
    """Block arguments of the memref types of symbolic `shapes` (symbols print as `?`)."""
    return Block(arg_types=[memref_type(s, dt) for s, dt in shapes]).args


def _concrete(shape: Shape, binding: Mapping[str, int]) -> tuple[int, ...]:
    return tuple(binding[d] if isinstance(d, str) else d for d in shape)


@dataclass
class Case:
    """One dynamic op, its inputs at a binding and the expected output."""

    label: str
    op: Operation
    shapes: list[Shape]
    """The symbolic shape of each memref operand (the out last)."""
    inputs: Callable[[Mapping[str, int]], list[np.ndarray]]
    expected: Callable[[list[np.ndarray]], np.ndarray]
    options: dict
    tolerance: float = 1e-4


class DynamicKernels:
    """The serial and partitioned kernels of every case, built and compiled ONCE (one
    module per vector width), then called at every binding."""

    def __init__(self, width: int):
        self.width = width
        self.cases: list[Case] = []
        self.builds = 0

    def add(self, case: Case) -> None:
        dynamic.set_operand_shapes(case.op, case.shapes)
        case.op.verify()
        assert dynamic.is_dynamic(case.op)
        self.cases.append(case)

    def compile(self) -> None:
        functions = []
        for i, case in enumerate(self.cases):
            serial = kernel_builders()[type(case.op)]
            parted = partitioned_builders()[type(case.op)]
            functions += [serial(case.op, f"k{i}", self.width, **case.options),
                          parted(case.op, f"p{i}", self.width, **case.options)]
        self.builds += 1
        self.jitted = Jitted(functions, CPUS[self.width], verify=False)

    def run(self, bindings: Callable[[Case], Sequence[Mapping[str, int]]]) -> int:
        """Call every case at each of its bindings; returns the number of calls checked."""
        self.compile()
        failures, calls = [], 0
        for i, case in enumerate(self.cases):
            symbols = dynamic.kernel_symbols(case.op)
            pointers = len(case.shapes)
            serial = self.jitted.function(f"k{i}", pointers, extra=[ctypes.c_int64] * len(symbols))
            parted = self.jitted.function(f"p{i}", pointers,
                                          extra=[ctypes.c_int64] * (len(symbols) + 2))
            for binding in bindings(case):
                inputs = case.inputs(binding)
                expected = case.expected(inputs)
                out_shape = _concrete(case.shapes[-1], binding)
                sizes = [binding[s] for s in symbols]
                try:
                    out = np.full(out_shape, np.nan, np.float32)
                    serial(*(a.ctypes.data for a in (*inputs, out)), *sizes)
                    self._check(out, expected, case.tolerance, "serial")
                    for parts in PARTS:
                        out = np.full(out_shape, np.nan, np.float32)
                        writers = np.zeros(out_shape, np.int64)
                        for part in range(parts):
                            share = np.full(out_shape, np.nan, np.float32)
                            parted(*(a.ctypes.data for a in (*inputs, share)), *sizes, part, parts)
                            written = ~np.isnan(share)
                            writers += written
                            out[written] = share[written]
                        assert (writers == 1).all(), (
                            f"parts={parts}: {np.sum(writers == 0)} elements written by no "
                            f"part, {np.sum(writers > 1)} by several")
                        self._check(out, expected, case.tolerance, f"parts={parts}")
                    calls += 1 + len(PARTS)
                except AssertionError as err:
                    failures.append(f"{case.label} W={self.width} {dict(binding)}: {err}")
        assert not failures, "\n".join(failures[:20])
        assert self.builds == 1, "one compilation serves every size"
        return calls

    @staticmethod
    def _check(got: np.ndarray, expected: np.ndarray, tolerance: float, where: str) -> None:
        np.testing.assert_allclose(got, expected, rtol=tolerance, atol=tolerance,
                                   err_msg=where)


def rows_bindings(case: Case) -> list[dict[str, int]]:
    """Every M of ROWS for one symbol S; for [B, S, K] some (B, S) pairs."""
    symbols = dynamic.kernel_symbols(case.op)
    if symbols == ("S",):
        return [{"S": m} for m in ROWS]
    assert symbols == ("B", "S"), symbols
    return [{"B": b, "S": s} for b, s in ((1, 1), (2, 1), (1, 7), (2, 3), (3, 17), (4, 33))]


# ----------------------------------------------------------------------------- matmul


def matmul_case(lhs: Shape, rhs: Shape, *, bias: bool = False, activation: str | None = None,
                packed: bool = False, width: int = 16) -> Case:
    """A matmul (fused_matmul with `bias`/`activation`) of a symbolic lhs and a static rhs."""
    out = (*lhs[:-1], rhs[-1]) if len(rhs) == 2 else lhs[:-1]
    b = _rand(rhs)
    c = _rand(rhs[-1:]) if bias else None
    fused = bias or activation is not None
    if fused:
        shapes = [lhs, rhs, *([rhs[-1:]] if bias else []), out]
        vals = _operands([(s, "f32") for s in shapes])
        op = lir.FusedMatmulOp(vals[0], vals[1], vals[-1], bias=vals[2] if bias else None,
                               activation=activation)
    else:
        shapes = [lhs, rhs, out]
        op = lir.MatmulOp(*_operands([(s, "f32") for s in shapes]))
    weight = pack_rhs(b, width) if packed else b

    def inputs(binding: Mapping[str, int]) -> list[np.ndarray]:
        a = _rand(_concrete(lhs, binding))
        return [a, weight] + ([c] if bias else [])

    def expected(arrays: list[np.ndarray]) -> np.ndarray:
        return ref.fused_matmul(arrays[0], b, c, activation) if fused else ref.matmul(arrays[0], b)

    label = (f"{'fused_' if fused else ''}matmul {si.fmt(lhs)}@{si.fmt(rhs)} bias={bias} "
             f"{activation}{' packed' if packed else ''}")
    k = lhs[-1]
    return Case(label, op, shapes, inputs, expected, {"packed_rhs": packed} if packed else {},
                tolerance=1e-5 * max(1.0, np.sqrt(k)) + 1e-4)


MATMULS = [  # (lhs, rhs, options): every edge of the tiles of both plans at run time
    (("S", 70), (70, 100), {}),
    (("S", 576), (576, 192), {}),  # SmolLM2's k/v projection
    (("S", 300), (300, 130), {}),  # K in 2 blocks of the large-M plan, a masked edge panel
    (("S", 9), (9, 17), {}),  # only a narrow last panel
    (("S", 33), (33, 300), {}),  # more panels than row tiles: a column split at run time
    (("S", 100), (100,), {}),  # N == 1: the dot kernel, split by rows
    ((2, "S", 40), (40, 50), {}),  # a static batch folded into the rows
    (("B", "S", 20), (20, 70), {}),  # two symbols: M = B·S
    (("S", 40), (40, 130), {"bias": True, "activation": "gelu"}),
    (("S", 64), (64, 48), {"bias": True, "activation": "relu"}),
    (("S", 17), (17, 1), {"bias": True}),  # a 1-element (scalar) bias
    (("S", 70), (70, 200), {"packed": True}),
    (("S", 2100), (2100, 20), {"packed": True}),  # 2 K blocks of a prepacked rhs
    (("S", 33), (33, 70), {"packed": True, "bias": True, "activation": "silu"}),
]

MATMULS_W8 = (0, 2, 5, 7, 8, 11)
"""The cases of MATMULS also run at W = 8 (compile time)."""


@pytest.mark.parametrize("width", WIDTHS)
def test_dynamic_matmul(width):
    kernels = DynamicKernels(width)
    for i, (lhs, rhs, options) in enumerate(MATMULS):
        if width == 16 or i in MATMULS_W8:
            kernels.add(matmul_case(lhs, rhs, width=width, **options))
    calls = kernels.run(rows_bindings)
    assert calls >= len(kernels.cases) * 6 * (1 + len(PARTS))


# ----------------------------------------------------------------------------- dequant_matmul


DEQUANT_SCHEMES = ("q4_0", "q4_1", "q8_0", "q6_k", "f16", "bf16", "q5_0", "q5_1", "q4_k", "q5_k")
DEQUANT_W8 = ("q4_0", "q4_1", "q8_0", "q6_k", "f16")


def dequant_case(scheme: str, x: Shape, n: int) -> Case:
    k = x[-1]
    w = blocks(scheme, n, k)
    out = (*x[:-1], n)
    shapes = [x, w.shape, out]
    op = lir.DequantMatmulOp(*_operands([(x, "f32"), (w.shape, "ui8"), (out, "f32")]),
                             scheme=scheme)

    def inputs(binding: Mapping[str, int]) -> list[np.ndarray]:
        return [_rand(_concrete(x, binding)), w]

    return Case(f"dequant_matmul {scheme} {si.fmt(x)} N={n}", op, shapes, inputs,
                lambda arrays: want(arrays[0], w, scheme), {},
                tolerance=1e-5 * max(1.0, np.sqrt(k)) + 1e-4)


def dequant_k(scheme: str) -> int:
    """Two blocks (float types: a K that no vector width divides)."""
    values = si.QUANT_BLOCKS[scheme][0]
    return 37 if values == 1 else 2 * values


@pytest.mark.parametrize("width", WIDTHS)
def test_dynamic_dequant_matmul(width):
    kernels = DynamicKernels(width)
    for scheme in DEQUANT_SCHEMES if width == 16 else DEQUANT_W8:
        k = dequant_k(scheme)
        kernels.add(dequant_case(scheme, ("S", k), 70))  # whole 4-row tiles of w and a rest
    kernels.add(dequant_case("q4_1", ("S", 576), 9))  # few weight rows: a row split at run time
    kernels.add(dequant_case("q8_0", ("B", "S", 64), 33))
    kernels.run(rows_bindings)


# ----------------------------------------------------------------------------- refusals


def test_batched_rhs_against_symbolic_lhs_is_refused():
    shapes = [("S", 8), (3, 8, 5), (3, "S", 5)]
    op = lir.MatmulOp(*_operands([(s, "f32") for s in shapes]))
    dynamic.set_operand_shapes(op, shapes)
    with pytest.raises(dynamic.DynamicKernelError, match=r"lir\.matmul.*batched rhs"):
        mm.build_matmul(op, "k", 16)


def test_symbolic_contraction_is_refused():
    shapes = [(4, "T"), ("T", 5), (4, 5)]
    op = lir.MatmulOp(*_operands([(s, "f32") for s in shapes]))
    dynamic.set_operand_shapes(op, shapes)
    with pytest.raises(dynamic.DynamicKernelError, match=r"lir\.matmul.*K = T must be static"):
        mm.build_matmul(op, "k", 16, partitioned=True)


def test_dynamic_op_without_operand_dims_is_refused():
    op = lir.MatmulOp(*_operands([(("S", 8), "f32"), ((8, 5), "f32"), (("S", 5), "f32")]))
    with pytest.raises(dynamic.DynamicKernelError, match=r"lir\.matmul.*rlx.operand_dims"):
        mm.build_matmul(op, "k", 16)
