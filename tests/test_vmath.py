"""Accuracy of the vectorized math library (rlx_mlir.passes.lir_to_llvm.vmath) over the whole f32 range.

Every function is JIT-compiled in a tiny loop kernel, at vector widths 16, 8 and 4 and as
plain scalars, and compared with float64 numpy over a dense sweep: random bit patterns
(every exponent, denormals, ±inf, NaN), a fine grid of [-20, 20], ±10^-45 .. 10^3 on a log
scale, and the special values. The bounds are ulps of the float32 result (measured maxima,
see the vmath docstrings, plus a small margin); results in the denormal range may be off
by a few denormal ulps (2^-149). Width 8 is compiled for Haswell (AVX2) and width 4 for
generic x86-64 (SSE2, no FMA), the CPUs that get those widths, and the code must contain
no calls (no libm, no fmaf).
"""

from __future__ import annotations

import ctypes
import functools
import math

import numpy as np
import pytest
from jit_harness import CPUS, Jitted
from xdsl.dialects.builtin import i64

from rlx_mlir.passes.lir_to_llvm import vmath
from rlx_mlir.passes.lir_to_llvm.builder import PTR, KernelBuilder

WIDTHS = (16, 8, 4, 1)
"""Vector widths; 1 means scalar code only."""
TINY = 2.0**-126
"""The smallest normal f32."""

_erf = np.frompyfunc(math.erf, 1, 1)
_erfc = np.frompyfunc(math.erfc, 1, 1)


def _sigmoid(x):
    return 1.0 / (1.0 + np.exp(-x))


REFERENCES = {
    "exp": np.exp,
    "log": np.log,
    "tanh": np.tanh,
    "sigmoid": _sigmoid,
    "erf": lambda x: _erf(x).astype(np.float64),
    "erfc": lambda x: _erfc(x).astype(np.float64),
    "sqrt": np.sqrt,
    "rsqrt": lambda x: 1.0 / np.sqrt(x),
    "relu": lambda x: np.maximum(x, 0.0),
    "silu": lambda x: x * _sigmoid(x),
    "gelu": lambda x: 0.5 * x * _erfc(-x / math.sqrt(2.0)).astype(np.float64),
    "gelu_tanh": lambda x: x * _sigmoid(2.0 * math.sqrt(2.0 / math.pi) * (x + 0.044715 * x**3)),
}
"""float64 references (same formulas as rlx_mlir.core.reference_kernels)."""

MAX_ULP = {
    "exp": 1.5, "log": 1.5, "tanh": 2, "sigmoid": 3, "erf": 3, "erfc": 7, "sqrt": 0.5,
    "rsqrt": 2, "relu": 0, "silu": 4, "gelu": 8, "gelu_tanh": 4,
}
"""Max error in ulps of the f32 result (normal results)."""

DENORMAL_ABS = 6 * 2.0**-149
"""Max absolute error of a result in the denormal range: 6 denormal ulps (measured 4.2)."""


def map_kernel(name: str, fn, width: int, arity: int = 1):
    """y[i] = fn(x0[i], ...) for i < n: a vector loop of `width` lanes, then a scalar tail
    (scalar loop only for width 1)."""
    kb = KernelBuilder(name, [PTR] * (arity + 1) + [i64], vector_width=max(width, 4))
    *xs, y, n = kb.args
    vector_end = 0
    if width > 1:
        vector_end = kb.mul(kb.sdiv(n, width), width)
        with kb.loop(0, vector_end, width) as loop:
            kb.store(fn(kb, *(kb.load(x, loop.iv, vector=True) for x in xs)), y, loop.iv)
    with kb.loop(vector_end, n) as loop:
        kb.store(fn(kb, *(kb.load(x, loop.iv) for x in xs)), y, loop.iv)
    kb.ret()
    return kb.finish()


@functools.cache
def compiled(width: int) -> Jitted:
    kernels = [map_kernel(name, vmath.UNARY[name], width) for name in REFERENCES]
    kernels.append(map_kernel("pow", vmath.pow, width, arity=2))
    kernels.append(map_kernel("act_gelu", lambda kb, v: vmath.activation(kb, "gelu", v), width))
    return Jitted(kernels, CPUS[width])


def run(width: int, name: str, *inputs: np.ndarray) -> np.ndarray:
    out = np.empty_like(inputs[0])
    fn = compiled(width).function(name, len(inputs) + 1, extra=(ctypes.c_int64,))
    fn(*(x.ctypes.data for x in inputs), out.ctypes.data, out.size)
    return out


# ----------------------------------------------------------------------------- inputs, errors

SPECIALS = np.array([0.0, -0.0, np.inf, -np.inf, np.nan, 1e-45, -1e-45, TINY, -TINY, 3.4e38,
                     -3.4e38, 1.0, -1.0, 0.5, -0.5, 0.625, -0.625, 88.72, 88.73, -87.3,
                     -103.97, -104.0, 10.05, -14.4], dtype=np.float32)


@functools.cache
def sweep() -> np.ndarray:
    """~1.3e5 f32 values over the whole range."""
    rng = np.random.default_rng(0)
    random_bits = rng.integers(0, 2**32, 60000, dtype=np.uint64).astype(np.uint32).view(np.float32)
    magnitudes = np.geomspace(1e-45, 1e3, 20000).astype(np.float32)
    grid = np.linspace(-20.0, 20.0, 30001, dtype=np.float32)
    return np.concatenate([random_bits, grid, magnitudes, -magnitudes, SPECIALS])


@functools.cache
def reference(name: str) -> np.ndarray:
    with np.errstate(all="ignore"):
        return REFERENCES[name](sweep().astype(np.float64))


def check(got: np.ndarray, exact: np.ndarray, max_ulp: float, what: str) -> float:
    """Assert `got` (f32) matches the float64 `exact` values: NaN where exact is NaN,
    inf/0 exactly where the rounded result is, else within `max_ulp` (normal results) or
    DENORMAL_ABS (denormal results). Returns the max ulp error seen."""
    with np.errstate(all="ignore"):
        rounded = exact.astype(np.float32)
        nan = np.isnan(exact)
        np.testing.assert_array_equal(np.isnan(got), nan, err_msg=f"{what}: NaN positions")
        exact_match = ~nan & (np.isinf(rounded) | (rounded == 0))
        wrong = exact_match & (got != rounded) & ~(np.abs(got.astype(np.float64)) < DENORMAL_ABS)
        assert not wrong.any(), (f"{what}: {got[wrong][:5]} where the rounded result is "
                                 f"{rounded[wrong][:5]}")
        finite = ~nan & ~exact_match
        err = np.abs(got.astype(np.float64) - exact)
        normal = finite & (np.abs(exact) >= TINY)
        ulps = err / np.spacing(np.abs(rounded)).astype(np.float64)
        bad = normal & (ulps > max_ulp)
        assert not bad.any(), (f"{what}: {ulps[bad].max():.2f} ulp at {np.nonzero(bad)[0][:5]}: "
                               f"got {got[bad][:5]}, expected {exact[bad][:5]}")
        denormal = finite & ~normal
        assert (err[denormal] <= DENORMAL_ABS).all(), (
            f"{what}: denormal error {err[denormal].max()}")
        return float(np.where(normal, ulps, 0).max())


# ----------------------------------------------------------------------------- tests


@pytest.mark.parametrize("width", WIDTHS)
@pytest.mark.parametrize("name", list(REFERENCES))
def test_unary_accuracy(name: str, width: int):
    x = sweep()
    check(run(width, name, x), reference(name), MAX_ULP[name], f"{name} (W={width})")


@pytest.mark.parametrize("width", (16, 8, 4))
def test_vector_lanes_and_scalar_tail_agree(width: int):
    """A value gives the same bits in a vector lane as in the scalar tail (calls of
    width - 1 elements only run the tail)."""
    x = sweep()[::50].copy()
    for name in REFERENCES:
        fn = compiled(width).function(name, 2, extra=(ctypes.c_int64,))
        lanes = run(width, name, x)
        tail = np.empty_like(x)
        for start in range(0, x.size, width - 1):
            n = min(width - 1, x.size - start)
            fn(x[start:].ctypes.data, tail[start:].ctypes.data, n)
        same = (lanes.view(np.uint32) == tail.view(np.uint32)) | (np.isnan(lanes) & np.isnan(tail))
        assert same.all(), (
            f"{name}: x={x[~same][:4]} lanes {lanes[~same][:4]} tail {tail[~same][:4]}")


def pow_inputs() -> tuple[np.ndarray, np.ndarray]:
    rng = np.random.default_rng(1)
    n = 30000
    # results spread over the whole range, up to over/underflow
    a1 = np.exp(rng.uniform(-87, 88, n)).astype(np.float32)
    b1 = (rng.uniform(-100, 100, n) / np.log(a1.astype(np.float64))).astype(np.float32)
    a2, b2 = rng.uniform(0, 3, n), rng.uniform(-30, 30, n)
    a3, b3 = 1 + rng.uniform(-1e-3, 1e-3, n), rng.uniform(-1e5, 1e5, n)  # a near 1, huge b
    a4, b4 = -rng.uniform(0, 4, n), np.round(rng.uniform(-40, 40, n))  # negative a, integer b
    special = np.array([0.0, -0.0, 1.0, -1.0, 2.0, -2.0, 0.5, -0.5, np.inf, -np.inf, np.nan, 3.0,
                        -3.0, 1e-45, 3e38, 16777217.0, 8388609.0, 2.5, -2.5, 1e9, -1e9, 7.0,
                        -7.0], dtype=np.float32)
    grid_a, grid_b = np.meshgrid(special, special)
    a = np.concatenate([a1, a2, a3, a4, grid_a.ravel()]).astype(np.float32)
    b = np.concatenate([b1, b2, b3, b4, grid_b.ravel()]).astype(np.float32)
    return a, b


@pytest.mark.parametrize("width", WIDTHS)
def test_pow(width: int):
    """numpy's power: a^±0 = 1, 1^b = 1 (even NaN), signs for negative a with integer b,
    NaN for negative a with a non-integer b, zeros and infinities as their limits."""
    a, b = pow_inputs()
    got = run(width, "pow", a, b)
    with np.errstate(all="ignore"):
        exact = np.power(a.astype(np.float64), b.astype(np.float64))
    check(got, exact, 6, f"pow (W={width})")
    signed = ~np.isnan(exact)
    np.testing.assert_array_equal(np.signbit(got[signed]), np.signbit(exact[signed]))


def test_activation_dispatch():
    x = sweep()
    np.testing.assert_array_equal(run(16, "act_gelu", x).view(np.uint32),
                                  run(16, "gelu", x).view(np.uint32))
    kb = KernelBuilder("k", [PTR], vector_width=16)
    with pytest.raises(ValueError, match="unknown activation 'swish'"):
        vmath.activation(kb, "swish", kb.load(kb.args[0]))
    assert vmath.activation(kb, None, kb.args[0]) is kb.args[0]


def test_special_values():
    x = np.array([0.0, -0.0, np.inf, -np.inf, np.nan, -1.0], dtype=np.float32)
    with np.errstate(all="ignore"):
        for name, expected in {
            "exp": [1, 1, np.inf, 0, np.nan, math.exp(-1)],
            "log": [-np.inf, -np.inf, np.inf, np.nan, np.nan, np.nan],
            "tanh": [0, -0.0, 1, -1, np.nan, math.tanh(-1)],
            "sigmoid": [0.5, 0.5, 1, 0, np.nan, 1 / (1 + math.e)],
            "erf": [0, -0.0, 1, -1, np.nan, math.erf(-1)],
            "rsqrt": [np.inf, -np.inf, 0, np.nan, np.nan, np.nan],
        }.items():
            for width in (16, 1):
                np.testing.assert_allclose(run(width, name, x), np.float32(expected), rtol=2e-7,
                                           err_msg=name)
    # signed zeros survive the polynomial branches
    for name in ("tanh", "erf"):
        assert np.signbit(run(16, name, np.full(16, -0.0, np.float32))).all(), name


@pytest.mark.parametrize("width", WIDTHS)
def test_no_calls_in_the_code(width: int):
    """Polynomials only: no libm call (expf, floorf, fmaf, ...) at any width, even on SSE2."""
    asm = compiled(width).asm
    assert "call" not in asm and "jmp\texp" not in asm and "fmaf" not in asm
    if width == 16:
        assert "zmm" in asm and "vfmadd" in asm
