"""Numerics of the map-family kernels (rlx_mlir.passes.lir_to_llvm.elementwise): `lir.elementwise`,
`fused_elementwise`, `broadcast_to`, `copy`, `constant`, `transpose`, `narrow`, `concat`.

Each lir op is built by hand over the memref arguments of a dummy block (fused bodies are
parsed from text, or come out of the real pipeline: convert-hir-to-mir, mir-fuse,
convert-mir-to-lir), its kernel is built at vector widths 16, 8 and 4, every kernel of one
width is JIT-compiled in one module with llvmlite (width 16 for the host, 8 for Haswell,
4 for generic x86-64 without FMA), and the results are compared with
`rlx_mlir.core.reference_kernels` on odd shapes of ranks 0-4 with broadcasting. `out` starts
as NaN (or a sentinel) so an unwritten element fails. The partitioned kernels
(records with `partitioned=True`) run as 1, 2, 3 and 5 parts, one call per part, into one output, and each
part alone must write a share disjoint from the others'. A last test goes through
`rlx_mlir.jit` end to end.
"""

from __future__ import annotations

import functools
import re
import zlib
from collections.abc import Callable
from dataclasses import dataclass

import numpy as np
import pytest
from jit_harness import CPUS, Jitted, target_for
from xdsl.dialects.builtin import DenseIntOrFPElementsAttr, IntegerType, ModuleOp, TensorType
from xdsl.ir import Block, Operation, Region
from xdsl.transforms.canonicalize import CanonicalizePass

import rlx_mlir as rlx
from rlx_mlir.core import reference_kernels as R
from rlx_mlir.core.errors import DTypeError
from rlx_mlir.core.shape_inference import broadcast
from rlx_mlir.dialects import elementwise_fns, lir
from rlx_mlir.dialects.common import dtype_of, element_type, memref_type, shape_of
from rlx_mlir.dialects.elementwise_fns import ElementwiseFn, scalar_block
from rlx_mlir.interpreters.arrays import run_scalar_body
from rlx_mlir.ir import make_context, parse_module
from rlx_mlir.passes import get_all_passes
from rlx_mlir.passes.lir_to_llvm.elementwise import canonicalize, tile_dim
from rlx_mlir.passes.lir_to_llvm.kernels import family

BUILDERS = {op: record.build for op, record in family("elementwise").items()}
PARTITIONED = {op: record.build_partitioned() for op, record in family("elementwise").items()
               if record.partitioned}

WIDTHS = (16, 8, 4)
RTOL, ATOL = 1e-4, 1e-5
NP = {"f32": np.float32, "i32": np.int32, "i64": np.int64, "ui8": np.uint8}
SENTINEL = {"i32": -7, "i64": -7, "ui8": 77}


def called_functions(asm: str) -> set[str]:
    """Symbols the code calls (directly, or through `movabsq $sym, %reg` + `callq *%reg`)."""
    direct = re.findall(r"\bcall[qw]?\s+([A-Za-z_][\w.@]*)", asm)
    loaded = re.findall(r"movabsq\s+\$([A-Za-z_][\w.@]*),", asm)
    return set(direct) | set(loaded)


LIBC_MEMORY = {"memcpy", "memset", "memmove"}
"""LLVM turns copy and fill loops into these (fine: fast and not libm)."""


# ----------------------------------------------------------------------------- cases


@dataclass
class Case:
    """A hand-built lir op, the reference computing `out` from the inputs, and inputs."""

    name: str
    op: Operation
    reference: Callable[..., np.ndarray]
    low: float = -3.0
    high: float = 3.0
    ranges: tuple[tuple[float, float], ...] = ()
    """Per-input (low, high) of f32 inputs, overriding low and high."""

    def inputs(self) -> list[np.ndarray]:
        rng = np.random.default_rng(zlib.crc32(self.name.encode()))
        arrays = []
        for k, value in enumerate(self.op.operands[:-1]):
            shape, dtype = shape_of(value), dtype_of(value)
            if dtype == "f32":
                low, high = self.ranges[k] if self.ranges else (self.low, self.high)
                arrays.append(rng.uniform(low, high, shape).astype(np.float32))
            elif dtype == "ui8":
                arrays.append(rng.integers(0, 256, shape).astype(np.uint8))
            else:
                arrays.append(rng.integers(-1000, 1000, shape).astype(NP[dtype]))
        return arrays


def args(*types: tuple[tuple[int, ...], str] | tuple[int, ...]):
    """Block arguments of memref types: shapes (f32) or (shape, dtype) pairs."""
    memrefs = [memref_type(t[0], t[1]) if len(t) == 2 and isinstance(t[1], str)
               else memref_type(t, "f32") for t in types]
    return Block(arg_types=memrefs).args


UNARY_SHAPES = [(257,), (3, 7), (), (2, 3, 5, 7), (1,), (17, 33), (100,), (1, 17, 3)]
BINARY_SHAPES = [((4, 8, 33), (33,)), ((7, 1), (1, 17)), ((), (100,)), ((3, 1, 5), (1, 7, 1)),
                 ((2, 3, 4, 5), (2, 3, 4, 5)), ((257,), ()), ((17, 1, 3), (17, 33, 1)),
                 ((1,), (1,)), ((33, 17), (33, 1))]
INT_FNS = ("add", "sub", "mul", "max", "min", "neg", "relu", "abs")
DOMAIN = {"log": (0.01, 5.0), "sqrt": (0.0, 9.0), "rsqrt": (0.01, 9.0), "exp": (-20.0, 20.0),
          "tanh": (-6.0, 6.0), "gelu": (-8.0, 8.0), "gelu_tanh": (-8.0, 8.0)}


def elementwise_cases() -> list[Case]:
    cases = []
    for k, fn in enumerate(R.UNARY_OPS):
        for j in range(2):
            shape = UNARY_SHAPES[(2 * k + j) % len(UNARY_SHAPES)]
            x, o = args(shape, shape)
            cases.append(Case(f"u_{fn}_{j}", lir.ElementwiseOp(fn, [x], o), R.ELEMENTWISE[fn],
                              *DOMAIN.get(fn, (-3.0, 3.0))))
    for k, fn in enumerate(R.BINARY_OPS):
        pairs = BINARY_SHAPES if fn == "add" else [
            BINARY_SHAPES[(3 * k + j) % len(BINARY_SHAPES)] for j in range(3)]
        for j, (sa, sb) in enumerate(pairs):
            a, b, o = args(sa, sb, broadcast(sa, sb))
            ranges = ((0.05, 3.0), (-4.0, 4.0)) if fn == "pow" else ()
            cases.append(Case(f"b_{fn}_{j}", lir.ElementwiseOp(fn, [a, b], o), R.ELEMENTWISE[fn],
                              ranges=ranges))
    int_ops = {"add": np.add, "sub": np.subtract, "mul": np.multiply, "max": np.maximum,
               "min": np.minimum, "neg": np.negative, "abs": np.abs,
               "relu": lambda x: np.maximum(x, 0).astype(x.dtype)}
    for dtype in ("i32", "i64"):
        for fn in INT_FNS:
            if fn in ("neg", "relu", "abs"):
                x, o = args(((5, 17), dtype), ((5, 17), dtype))
                operands = [x]
            else:
                x, y, o = args(((5, 17), dtype), ((17,), dtype), ((5, 17), dtype))
                operands = [x, y]
            cases.append(Case(f"i_{dtype}_{fn}", lir.ElementwiseOp(fn, operands, o), int_ops[fn]))
    return cases


def data_cases() -> list[Case]:
    cases = []
    for j, (src, dst, dtype) in enumerate([((33,), (4, 8, 33), "f32"), ((), (7,), "f32"),
                                           ((7, 1), (3, 7, 17), "f32"), ((1,), (1,), "f32"),
                                           ((3, 1, 5), (2, 3, 100, 5), "i64"),
                                           ((1, 17), (33, 17), "ui8"), ((17,), (3, 17), "i32")]):
        x, o = args((src, dtype), (dst, dtype))
        cases.append(Case(f"bc_{j}", lir.BroadcastToOp(x, o),
                          functools.partial(R.broadcast_to, shape=dst)))
    for j, (shape, dtype) in enumerate([((257,), "f32"), ((2, 3, 5, 7), "f32"), ((), "f32"),
                                        ((100,), "i64"), ((33,), "ui8")]):
        x, o = args((shape, dtype), (shape, dtype))
        cases.append(Case(f"copy_{j}", lir.CopyOp(x, o), lambda v: v.copy()))
    for j, (shape, perm, dtype) in enumerate([((3, 5, 7), (2, 0, 1), "f32"),
                                              ((17, 33), (1, 0), "f32"),
                                              ((2, 3, 4, 5), (3, 1, 0, 2), "f32"),
                                              ((1, 7, 1, 3), (3, 2, 1, 0), "f32"),
                                              ((4, 8, 33), (0, 1, 2), "f32"),
                                              ((4, 8, 33), (1, 0, 2), "f32"),
                                              ((33, 17), (-1, 0), "i64"),
                                              ((7, 100), (1, 0), "ui8"), ((), (), "f32"),
                                              ((33, 100), (1, 0), "f32"),
                                              ((3, 17, 33), (0, 2, 1), "i32"),
                                              ((17, 5, 33), (2, 1, 0), "f32")]):
        out_shape = tuple(shape[p] for p in perm)
        x, o = args((shape, dtype), (out_shape, dtype))
        cases.append(Case(f"tr_{j}", lir.TransposeOp(x, o, perm),
                          functools.partial(R.transpose, perm=perm)))
    for j, (shape, axis, start, length, dtype) in enumerate([
            ((4, 8, 33), 2, 3, 17, "f32"), ((4, 8, 33), 0, 1, 2, "f32"),
            ((257,), 0, 100, 100, "f32"), ((3, 7, 17), -2, 6, 1, "i32"),
            ((2, 3, 4, 5), 3, 1, 3, "f32"), ((17, 33), 1, 0, 32, "ui8")]):
        out_shape = list(shape)
        out_shape[axis] = length
        x, o = args((shape, dtype), (tuple(out_shape), dtype))
        cases.append(Case(f"nar_{j}", lir.NarrowOp(x, o, axis, start, length),
                          functools.partial(R.narrow, axis=axis, start=start, length=length)))
    for j, (shapes, axis, dtype) in enumerate([
            ([(3, 5, 7), (3, 2, 7)], 1, "f32"), ([(17,), (1,), (33,)], 0, "f32"),
            ([(2, 3, 4), (2, 3, 1), (2, 3, 17)], -1, "f32"), ([(1, 33), (7, 33)], 0, "i64"),
            ([(2, 1, 3, 5), (2, 2, 3, 5)], 1, "ui8")]):
        out_shape = list(shapes[0])
        out_shape[axis] = sum(s[axis] for s in shapes)
        *xs, o = args(*((s, dtype) for s in shapes), (tuple(out_shape), dtype))
        cases.append(Case(f"cat_{j}", lir.ConcatOp(xs, o, axis),
                          lambda *vs, axis=axis: R.concat(list(vs), axis)))
    rng = np.random.default_rng(5)
    for j, (shape, dtype, splat) in enumerate([((17, 33), "f32", True), ((3, 7), "f32", False),
                                               ((100,), "f32", False), ((257,), "i32", False),
                                               ((5, 3), "i64", False), ((40,), "ui8", False),
                                               ((), "f32", False), ((2, 3, 4, 5), "i32", True),
                                               ((16,), "f32", False)]):
        if dtype == "f32":
            data = rng.uniform(-5, 5, shape).astype(np.float32)
        else:
            data = rng.integers(0 if dtype == "ui8" else -2**31, 255 if dtype == "ui8" else 2**31,
                                shape).astype(NP[dtype])
        if splat:
            data = np.full(shape, data.flat[0], dtype=data.dtype)
        attr = DenseIntOrFPElementsAttr.from_list(
            TensorType(element_type(dtype), shape), [v.item() for v in data.ravel()])
        (o,) = args((shape, dtype))
        cases.append(Case(f"const_{j}", lir.ConstantOp(attr, o), lambda data=data: data.copy()))
    return cases


FUSED_TEXT = """
func.func @f(%a: memref<7x17xf32>, %b: memref<17xf32>, %c: memref<7x1xf32>, %o: memref<7x17xf32>,
             %i: memref<3x33xi32>, %j: memref<33xi32>, %p: memref<3x33xi32>,
             %s: memref<f32>, %q: memref<2x3x4x5xf32>) {
  lir.fused_elementwise ins(%a, %b, %c : memref<7x17xf32>, memref<17xf32>, memref<7x1xf32>) outs(%o : memref<7x17xf32>) {
  ^bb0(%x: f32, %y: f32, %z: f32):
    %k = arith.constant 0.5 : f32
    %gt = arith.cmpf ogt, %x, %y : f32
    %sel = arith.select %gt, %x, %z : f32
    %f = math.fma %sel, %k, %y : f32
    %n = arith.maxnumf %f, %z : f32
    %m = arith.minimumf %n, %x : f32
    %e = math.exp %m : f32
    %l = math.log %e : f32
    %t = math.tanh %l : f32
    %r = math.rsqrt %e : f32
    %w = math.powf %e, %y : f32
    %er = math.erf %t : f32
    %ab = math.absf %er : f32
    %q1 = math.sqrt %ab : f32
    %d = arith.divf %q1, %w : f32
    %u = arith.subf %d, %r : f32
    %v = arith.negf %u : f32
    %le = arith.cmpf ole, %x, %z : f32
    %v2 = arith.select %le, %v, %x : f32
    lir.yield %v2 : f32
  }
  lir.fused_elementwise ins(%i, %j : memref<3x33xi32>, memref<33xi32>) outs(%p : memref<3x33xi32>) {
  ^bb0(%x: i32, %y: i32):
    %k = arith.constant 3 : i32
    %s1 = arith.addi %x, %y : i32
    %m1 = arith.muli %s1, %k : i32
    %d1 = arith.subi %m1, %y : i32
    %mx = arith.maxsi %d1, %x : i32
    %mn = arith.minsi %mx, %k : i32
    %a1 = math.absi %mn : i32
    %lt = arith.cmpi slt, %x, %y : i32
    %r = arith.select %lt, %a1, %d1 : i32
    lir.yield %r : i32
  }
  lir.fused_elementwise ins(%s : memref<f32>) outs(%q : memref<2x3x4x5xf32>) {
  ^bb0(%x: f32):
    %k = arith.constant -1.5 : f32
    %r = arith.mulf %x, %k : f32
    lir.yield %r : f32
  }
  func.return
}
"""


@functools.cache
def fused_text_module() -> ModuleOp:
    return parse_module(FUSED_TEXT)


@functools.cache
def pipeline_module() -> ModuleOp:
    """mir-fuse's fused_elementwise ops after convert-mir-to-lir (broadcasts, constants,
    composite activations in the scalar bodies)."""
    g = rlx.Graph("fused")
    x = g.input("x", (4, 8, 33))
    y = g.input("y", (33,))
    z = g.input("z", (4, 1, 33))
    s = g.input("s", ())
    h = g.gelu(g.add(g.mul(x, y), 1.0))
    h2 = g.silu(g.sub(g.tanh(h), z)) * 0.5
    h3 = g.maximum(g.sigmoid(h2), g.gelu_tanh(x)) + s
    h4 = g.pow(g.abs(g.neg(g.relu(h3))) + 0.1, g.sqrt(g.exp(g.div(y, 3.0))))
    g.output(g.rsqrt(g.log(h4 + 2.0)) - g.minimum(x, 0.0), g.relu(x) * 2.0)
    module = g.to_module()
    passes, ctx = get_all_passes(), make_context()
    passes["convert-hir-to-mir"]()().apply(ctx, module)
    CanonicalizePass().apply(ctx, module)
    passes["mir-fuse"]()().apply(ctx, module)
    passes["convert-mir-to-lir"]()().apply(ctx, module)
    return module


def fused_reference(op: lir.FusedElementwiseOp):
    return lambda *arrays: run_scalar_body(op.body, arrays, shape_of(op.out))


def integer_body(x: np.ndarray, y: np.ndarray) -> np.ndarray:
    """The second body of FUSED_TEXT in numpy (the reference executor has no arith.cmpi)."""
    d1 = (x + y) * 3 - y
    a1 = np.abs(np.minimum(np.maximum(d1, x), 3))
    return np.where(x < y, a1, d1).astype(np.int32)


def fused_cases() -> list[Case]:
    cases = []
    for source, module in (("text", fused_text_module()), ("pipe", pipeline_module())):
        ops = [op for op in module.walk() if isinstance(op, lir.FusedElementwiseOp)]
        assert ops, source
        for j, op in enumerate(ops):
            reference = integer_body if (source, j) == ("text", 1) else fused_reference(op)
            cases.append(Case(f"fused_{source}_{j}", op, reference, 0.05, 2.0))
    return cases


@functools.cache
def all_cases() -> list[Case]:
    return elementwise_cases() + data_cases() + fused_cases()


@functools.cache
def compiled(width: int) -> Jitted:
    kernels = [BUILDERS[type(case.op)](case.op, case.name, width) for case in all_cases()]
    return Jitted(kernels, CPUS[width])


def run_case(case: Case, width: int) -> tuple[np.ndarray, np.ndarray]:
    inputs = case.inputs()
    out_value = case.op.operands[-1]
    dtype = dtype_of(out_value)
    out = np.full(shape_of(out_value), SENTINEL.get(dtype, np.nan), dtype=NP[dtype])
    compiled(width).call(case.name, [*inputs, out])
    with np.errstate(all="ignore"):
        expected = np.asarray(case.reference(*inputs))
    return out, expected


# ----------------------------------------------------------------------------- tests


@pytest.mark.parametrize("width", WIDTHS)
def test_every_kernel_matches_the_reference(width: int):
    failures = []
    for case in all_cases():
        out, expected = run_case(case, width)
        assert out.shape == expected.shape, case.name
        try:
            if out.dtype == np.float32:
                np.testing.assert_allclose(out, expected, rtol=RTOL, atol=ATOL, equal_nan=True)
            else:
                np.testing.assert_array_equal(out, expected.astype(out.dtype))
        except AssertionError as err:
            failures.append(f"{case.name}: {err}")
    assert not failures, "\n".join(failures)


PARTS = (1, 2, 3, 5)
UNSET = {"f32": -3.25e38, "i32": 2**30 + 7, "i64": 2**40 + 7}
"""A value no case writes: what a part leaves of `out` shows which elements it wrote."""


@functools.cache
def partitioned_cases() -> list[Case]:
    """The shapes that exercise every way of splitting: rank 0 and rows shorter than W
    (fewer units than parts), one long row (a column range), many short rows (whole
    rows), long rows (partial first and last rows), outer dims (decomposed row index),
    tiled transposes with and without outer dims, strided and offset inputs, concat."""
    names = {"u_exp_0", "u_neg_1", "u_tanh_0", "b_add_0", "b_add_1", "b_add_2", "b_add_3",
             "b_add_4", "b_add_5", "b_add_6", "b_add_7", "b_add_8", "i_i64_max",
             "bc_0", "bc_4", "bc_5", "copy_0", "copy_2", "copy_4", "tr_0", "tr_1", "tr_2",
             "tr_6", "tr_9", "tr_11", "nar_0", "nar_1", "nar_3", "cat_0", "cat_2",
             "fused_text_0", "fused_text_2", "fused_pipe_0"}
    cases = [c for c in all_cases() if c.name in names]
    assert len(cases) == len(names)
    for j, (sa, sb) in enumerate([((3,), (3,)), ((2, 3, 100), (3, 1)), ((5, 1000), (1000,)),
                                  ((1, 16), (16,)), ((40, 48), (40, 48))]):
        a, b, o = args(sa, sb, broadcast(sa, sb))
        cases.append(Case(f"p_mul_{j}", lir.ElementwiseOp("mul", [a, b], o),
                          R.ELEMENTWISE["mul"]))
    return cases


@functools.cache
def compiled_partitioned(width: int) -> Jitted:
    kernels = [PARTITIONED[type(case.op)](case.op, case.name, width)
               for case in partitioned_cases()]
    return Jitted(kernels, CPUS[width])


@pytest.mark.parametrize("width", WIDTHS)
def test_partitioned_kernels(width: int):
    """Parts 1, 2, 3, 5 called in turn on one NaN-filled `out` give the reference; each
    part alone writes a share disjoint from the other parts' (together: all of out)."""
    jit = compiled_partitioned(width)
    failures = []
    for case in partitioned_cases():
        inputs = case.inputs()
        out_value = case.op.operands[-1]
        dtype, shape = dtype_of(out_value), shape_of(out_value)
        with np.errstate(all="ignore"):
            expected = np.asarray(case.reference(*inputs)).astype(NP[dtype])
        for parts in PARTS:
            out = np.full(shape, SENTINEL.get(dtype, np.nan), dtype=NP[dtype])
            for part in range(parts):
                jit.call_part(case.name, [*inputs, out], part, parts)
            try:
                if out.dtype == np.float32:
                    np.testing.assert_allclose(out, expected, rtol=RTOL, atol=ATOL, equal_nan=True)
                else:
                    np.testing.assert_array_equal(out, expected)
            except AssertionError as err:
                failures.append(f"{case.name} parts={parts}: {err}")
            if dtype not in UNSET or parts == 1:
                continue
            written = np.zeros(shape, np.int64)
            for part in range(parts):
                alone = np.full(shape, UNSET[dtype], dtype=NP[dtype])
                jit.call_part(case.name, [*inputs, alone], part, parts)
                written += alone != UNSET[dtype]
            if not (written == 1).all():
                failures.append(f"{case.name} parts={parts}: elements written by "
                                f"{sorted(set(written.ravel().tolist()))} parts")
    assert not failures, "\n".join(failures)


def test_partitioned_registry():
    assert set(PARTITIONED) == set(BUILDERS) - {lir.ConstantOp}
    for cls, build in PARTITIONED.items():
        case = next(c for c in partitioned_cases() if isinstance(c.op, cls))
        fn = build(case.op, "k", 8)
        inputs = fn.function_type.inputs.data
        assert len(inputs) == len(case.op.operands) + 2 and str(inputs[-1]) == "i64", cls


def test_the_cases_cover_the_family():
    kinds = {type(case.op) for case in all_cases()}
    assert kinds == set(BUILDERS)
    fns = {case.op.fn.data for case in all_cases() if isinstance(case.op, lir.ElementwiseOp)}
    assert fns == set(ElementwiseFn)
    ranks = {len(shape_of(case.op.operands[-1])) for case in all_cases()}
    assert ranks == {0, 1, 2, 3, 4}


def test_special_values():
    """IEEE specials through elementwise kernels: NaN propagates through max/min/relu,
    exp/log/pow edge cases follow numpy."""
    a, b, o = args((19,), (19,), (19,))
    values = np.array([0, -0.0, 1, -1, 2, -2, 0.5, np.inf, -np.inf, np.nan, 3, -3, 1e-45, 1e30,
                       -1e30, 88.8, -104, 7, -7], dtype=np.float32)
    kernels = {fn: lir.ElementwiseOp(fn, [a, b] if fn in R.BINARY_OPS else [a], o)
               for fn in R.ELEMENTWISE}
    for width in (16, 4):
        jit = Jitted([BUILDERS[lir.ElementwiseOp](op, fn, width) for fn, op in kernels.items()],
                     CPUS[width])
        for fn in kernels:
            for x, y in ((values, values[::-1].copy()), (values, np.roll(values, 3))):
                out = np.empty_like(values)
                jit.call(fn, [x, y, out] if fn in R.BINARY_OPS else [x, out])
                with np.errstate(all="ignore"):
                    ref = R.ELEMENTWISE[fn](*((x, y) if fn in R.BINARY_OPS else (x,)))
                np.testing.assert_allclose(out, ref, rtol=RTOL, atol=1e-30, equal_nan=True,
                                           err_msg=f"{fn} W={width}")


@pytest.mark.parametrize("fn", list(ElementwiseFn))
def test_each_scalar_body_matches_the_reference(fn: ElementwiseFn):
    """The one definition of each function, its scalar body (elementwise_fns.BODIES, what
    mir-fuse inlines and the kernel is generated from), run by the array interpreter,
    against the reference kernel; on i32 too where the function has an integer form."""
    arity = 2 if fn.value in R.BINARY_OPS else 1
    rng = np.random.default_rng(zlib.crc32(fn.value.encode()))
    low, high = DOMAIN.get(fn.value, (0.05, 3.0) if fn.value == "pow" else (-3.0, 3.0))
    for dtype in ("f32", "i32") if fn.value in INT_FNS else ("f32",):
        block, result = scalar_block(fn, [element_type(dtype)] * arity)
        block.add_op(lir.YieldOp(result))
        if dtype == "f32":
            inputs = [rng.uniform(low, high, 257).astype(np.float32) for _ in range(arity)]
        else:
            inputs = [rng.integers(-1000, 1000, 257).astype(np.int32) for _ in range(arity)]
        got = run_scalar_body(Region(block), inputs, (257,))
        np.testing.assert_allclose(got, R.ELEMENTWISE[fn.value](*inputs), rtol=RTOL, atol=ATOL,
                                   err_msg=f"{fn} on {dtype}")


def test_the_kernel_is_generated_from_the_body(monkeypatch: pytest.MonkeyPatch):
    """Change the body of `neg` (to x·x + 1 on f32, x·x on i32): the `lir.elementwise neg`
    kernels compute the new function, vector loop and scalar tail alike."""
    def square_plus_one(body, x):
        square = body.mul(x, x)
        return square if isinstance(x.type, IntegerType) else body.add(square, body.const(1.0))

    monkeypatch.setitem(elementwise_fns.BODIES, ElementwiseFn.NEG, square_plus_one)
    x, o = args((37,), (37,))
    xi, oi = args(((37,), "i64"), ((37,), "i64"))
    jit = Jitted([BUILDERS[lir.ElementwiseOp](lir.ElementwiseOp("neg", [x], o), "f", 8),
                  BUILDERS[lir.ElementwiseOp](lir.ElementwiseOp("neg", [xi], oi), "i", 8)],
                 CPUS[8])
    values = np.linspace(-3.0, 3.0, 37, dtype=np.float32)
    out = np.full(37, np.nan, dtype=np.float32)
    jit.call("f", [values, out])
    np.testing.assert_allclose(out, values * values + 1.0, rtol=1e-6)
    integers = np.arange(-18, 19, dtype=np.int64)
    out_i = np.full(37, -7, dtype=np.int64)
    jit.call("i", [integers, out_i])
    np.testing.assert_array_equal(out_i, integers * integers)


def test_integer_form_missing_is_a_dtype_error():
    x, o = args(((5,), "i32"), ((5,), "i32"))
    with pytest.raises(DTypeError, match="elementwise fn 'exp' has no form for \\(i32\\)"):
        BUILDERS[lir.ElementwiseOp](lir.ElementwiseOp("exp", [x], o), "exp_i32", 8)


def test_canonicalize_collapses_contiguous_dims():
    # [4, 8, 32] + [32]: a 32 x 32 nest whose inner loop is contiguous for both
    assert canonicalize((4, 8, 32), [[0, 0, 1], [256, 32, 1]]) == ([32, 32], [[0, 1], [32, 1]])
    # same shape: one flat loop; size-1 dims vanish
    assert canonicalize((2, 1, 3, 5), [[15, 15, 5, 1], [15, 15, 5, 1]]) == ([30], [[1], [1]])
    # a transpose keeps its dims
    assert canonicalize((7, 3), [[1, 7], [3, 1]]) == ([7, 3], [[1, 7], [3, 1]])
    # rank 0
    assert canonicalize((), [[], []]) == ([], [[], []])


def test_transposes_are_tiled():
    # out [33, 5, 17] of input [17, 5, 33] (perm 2, 1, 0): the input is contiguous along dim 0
    assert tile_dim([33, 5, 17], [[1, 33, 165], [85, 17, 1]]) == 0
    assert tile_dim([100, 7], [[1, 100], [7, 1]]) is None  # 7 < TILE: a plain strided loop
    assert tile_dim([32, 32], [[0, 1], [32, 1]]) is None  # a broadcast, not a transpose


def test_asm_vector_code_without_calls():
    jit16 = compiled(16)
    # width 16 is for the host: zmm registers with AVX-512, else (e.g. RLX_TARGET_CPU=haswell) ymm
    wide = "zmm" if target_for(CPUS[16]).vector_width >= 16 else "ymm"
    mul = next(c for c in all_cases() if c.name.startswith("b_mul"))
    assert wide in jit16.function_asm(mul.name) and "vmulps" in jit16.function_asm(mul.name)
    fused = jit16.function_asm("fused_text_0")
    assert "vfmadd" in fused and wide in fused and not called_functions(fused)
    for fn in ("exp", "gelu", "pow", "tanh", "log"):
        case = max((c for c in all_cases() if c.name[2:].startswith(fn + "_")),
                   key=lambda c: int(np.prod(shape_of(c.op.operands[-1]))))
        body = jit16.function_asm(case.name)
        assert wide in body and not called_functions(body), case.name
        assert "ymm" in compiled(8).function_asm(case.name)
    for width in WIDTHS:  # (width 4 is SSE2 without FMA: still no libm, no fmaf)
        assert called_functions(compiled(width).asm) <= LIBC_MEMORY, width


@pytest.mark.parametrize("width", WIDTHS)
def test_jit_end_to_end(width: int):
    """One graph through rlx_mlir.jit (the registry, the arena, the entry function)."""
    g = rlx.Graph("maps")
    x = g.input("x", (3, 7, 17))
    y = g.input("y", (17,))
    c = g.input("c", (7, 1))
    h = g.gelu(x * y + 1.0) - c
    t = g.transpose(h, (2, 0, 1))
    n = g.narrow(x, 2, 3, 9)
    cat = g.concat([x, g.exp(h)], 1)
    g.output(h, t, n, cat, g.broadcast_to(y, (2, 3, 17)), g.tanh(g.sigmoid(x)))
    rng = np.random.default_rng(width)
    feeds = [rng.uniform(-2, 2, s).astype(np.float32) for s in ((3, 7, 17), (17,), (7, 1))]
    got = rlx.jit(g, vector_width=width)(*feeds)
    expected = rlx.reference(g)(*feeds)
    for out, ref in zip(got, expected, strict=True):
        np.testing.assert_allclose(out, ref, rtol=RTOL, atol=ATOL)
