"""softplus end to end (the worked example of docs/adding-an-op.md): the reference kernel
against numpy, the `lir.elementwise softplus` vector kernel at widths 16, 8 and 4 (odd sizes,
size-1 axes, rank 0, large |x| and IEEE specials), the fused form mir-fuse builds, and
`g.softplus` through `rlx_mlir.jit`.

The numpy oracle is `np.logaddexp(0, x)` in float64, an independent formula for
log(1 + e^x) that neither overflows nor loses the tail.
"""

from __future__ import annotations

import ctypes

import numpy as np
import pytest
from jit_harness import CPUS, compile_functions
from xdsl.ir import Block

import rlx_mlir as rlx
from rlx_mlir.core import reference_kernels as K
from rlx_mlir.dialects import lir
from rlx_mlir.dialects.common import memref_type
from rlx_mlir.passes.lir_to_llvm.kernels import kernel_builders
from rlx_mlir.pipeline import lower

WIDTHS = (16, 8, 4)
RTOL = 4e-7
"""A few f32 ulps."""
ATOL = 1e-37
"""Results below the normal range (x < -87) are denormals with absolute precision 1e-45."""
SHAPES = [(), (1,), (7,), (17,), (100,), (3, 1, 5), (1, 33), (2, 1, 19), (4, 9, 8)]
"""Rank 0, size-1 axes and sizes that are not multiples of 16, 8 or 4 (and some that are)."""
SPECIALS = np.array([0.0, -0.0, 1e-8, -1e-8, 0.5, -0.5, 15.0, -15.0, 17.0, -17.0, 30.0, -30.0,
                     88.0, -88.0, 100.0, -100.0, 1e30, -1e30, np.inf, -np.inf, np.nan],
                    dtype=np.float32)


def numpy_softplus(x: np.ndarray) -> np.ndarray:
    with np.errstate(all="ignore"):
        return np.logaddexp(0.0, x.astype(np.float64)).astype(np.float32)


def inputs(shape: tuple[int, ...], seed: int) -> np.ndarray:
    """Values over [-110, 110] with most of them in [-20, 20], where both terms matter."""
    rng = np.random.default_rng(seed)
    x = rng.uniform(-20.0, 20.0, shape)
    wide = rng.random(shape) < 0.2
    x = np.where(wide, rng.uniform(-110.0, 110.0, shape), x)
    return np.asarray(x, dtype=np.float32)


def check(got: np.ndarray, x: np.ndarray, what: str) -> None:
    np.testing.assert_allclose(got, numpy_softplus(x), rtol=RTOL, atol=ATOL, equal_nan=True,
                               err_msg=what)


def test_reference_kernel_matches_numpy():
    for k, shape in enumerate(SHAPES):
        x = inputs(shape, k)
        got = K.softplus(x)
        assert got.dtype == np.float32 and got.shape == shape
        check(got, x, f"shape {shape}")
    check(K.softplus(SPECIALS), SPECIALS, "specials")


@pytest.mark.parametrize("width", WIDTHS)
def test_vector_kernel(width):
    """`lir.elementwise softplus`, one kernel per shape, all compiled for one width."""
    cases = [*((shape, inputs(shape, 100 + k)) for k, shape in enumerate(SHAPES)),
             (SPECIALS.shape, SPECIALS)]
    functions = []
    for k, (shape, _) in enumerate(cases):
        x, out = Block(arg_types=[memref_type(shape, "f32")] * 2).args
        functions.append(kernel_builders()[lir.ElementwiseOp](
            lir.ElementwiseOp("softplus", [x], out), f"softplus_{k}", width))
    _, engine, _ = compile_functions(functions, CPUS[width])
    for k, (shape, x) in enumerate(cases):
        out = np.full(shape, np.nan, dtype=np.float32)
        fn = ctypes.CFUNCTYPE(None, ctypes.c_void_p, ctypes.c_void_p)(
            engine.get_function_address(f"softplus_{k}"))
        fn(x.ctypes.data, out.ctypes.data)
        check(out, x, f"W={width} shape {shape}")


def _graph(shape: tuple[int, ...]) -> rlx.Graph:
    g = rlx.Graph("softplus")
    x = g.input("x", shape)
    y = g.input("y", shape)
    g.output(g.softplus(x), g.softplus(x * y) + y)  # the second one fuses
    return g


def test_softplus_fuses_into_an_elementwise_tree():
    module = lower(_graph((3, 5)).to_module(), until="lir")
    names = [op.name for op in module.walk()]
    assert names.count("lir.elementwise") == 1  # the lone softplus
    assert names.count("lir.fused_elementwise") == 1  # softplus(x * y) + y


@pytest.mark.parametrize("width", WIDTHS)
@pytest.mark.parametrize("shape", [(), (1,), (19,), (3, 1, 33)])
def test_jit_end_to_end(width, shape):
    x = inputs(shape, width)
    y = np.asarray(np.random.default_rng(7).uniform(0.5, 2.0, shape), dtype=np.float32)
    plain, fused = rlx.jit(_graph(shape), vector_width=width)(x, y)
    check(plain, x, f"softplus W={width}")
    want = (numpy_softplus(x * y).astype(np.float64) + y).astype(np.float32)
    np.testing.assert_allclose(fused, want, rtol=1e-6, atol=ATOL)
    np.testing.assert_allclose(fused, rlx.reference(_graph(shape))(x, y)[1], rtol=1e-6, atol=ATOL)
