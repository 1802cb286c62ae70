"""Vectorized f32 math for kernels: polynomial exp, log, tanh, sigmoid, erf, pow, ...

Every function takes a `KernelBuilder` and an f32 SSA value, either a scalar `f32` or a
`vector<W x f32>` (any W), and emits branch-free llvm-dialect code for it: range
reduction, a polynomial, and bit manipulation through `llvm.bitcast` and i32 (vector)
integer ops; special cases are merged with `select`s. Nothing calls libm, so a vector
loop stays a vector loop (`llvm.intr.exp` on a vector is scalarized into 16 `expf`
calls), and nothing needs SSE4.1 (`llvm.floor` is a libcall on plain x86-64).

Accuracy, measured against float64 numpy over dense sweeps of the whole f32 range
(±0, denormals, huge values, ±inf, NaN; `tests/test_vmath.py` asserts it) is given in
each docstring as max ulp (of the float32 result) / max relative error; results in the
denormal range (|y| < 2^-126) are within 4.2 denormal ulps (2^-149) of the exact value.
IEEE special values follow numpy (`exp(-inf) = 0`, `log(0) = -inf`, `log(x<0) = nan`,
`tanh(±inf) = ±1`, `x*sigmoid(x)` at -inf is nan like numpy's formula, NaN propagates).

Polynomials use `muladd` (`llvm.fmuladd`: an FMA where the target has one, else a multiply
and an add, never the `fmaf` libcall). The double-f32 steps (`two_prod`, used by pow,
erfc, gelu and gelu_tanh to keep exp's argument exact) use a real `llvm.fma` when
`has_fma(kb)` (vector width 8 or 16, or `kb.has_fma`) and Dekker's product otherwise, so
results differ in the last bit between FMA and SSE-only code but meet the same bounds.

Comparisons and selects on vectors use `KernelBuilder.fcmp`/`select`, built on the
vector-capable `llvm.fcmp`/`llvm.select` of `rlx_mlir.dialects.llvm_vector`.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence

import numpy as np
from xdsl.dialects import llvm
from xdsl.dialects.builtin import (
    IntegerType,
    VectorType,
    f32,
)
from xdsl.ir import Attribute, Operation, SSAValue

from rlx_mlir.dialects.llvm_vector import mask_type
from rlx_mlir.passes.lir_to_llvm.builder import KernelBuilder, Value

NAN = float("nan")
INF = float("inf")

# ----------------------------------------------------------------------------- typed helpers


def int_type(ty: Attribute, width: int = 32) -> Attribute:
    """The integer type (scalar or vector of the same shape) of `width` bits."""
    element = IntegerType(width)
    return VectorType(element, ty.get_shape()) if isinstance(ty, VectorType) else element


def float_type(ty: Attribute) -> Attribute:
    return VectorType(f32, ty.get_shape()) if isinstance(ty, VectorType) else f32


def const(kb: KernelBuilder, value: float | int, ty: Attribute) -> SSAValue:
    """A constant of type `ty` (a splat for vectors)."""
    element = ty.element_type if isinstance(ty, VectorType) else ty
    value = int(value) if isinstance(element, IntegerType) else float(value)
    return kb.constant(value, ty)


# Formulas below read f(kb, a, b): the builder's own methods, called as functions (a
# Python number becomes a constant of the other operand's type, see `KernelBuilder.pair`).
fcmp = KernelBuilder.fcmp
"""An ordered/unordered float comparison (`olt`, `uge`, `uno`, ...), scalar or vector."""
icmp = KernelBuilder.icmp
select = KernelBuilder.select
"""cond ? a : b, lane by lane for a vector condition."""
muladd = KernelBuilder.fma
"""a·b + c, fused when the target has fast FMA (`llvm.fmuladd`: never a libcall)."""


def _binary(op: type[Operation]) -> Callable[[KernelBuilder, Value, Value], SSAValue]:
    """`f(kb, a, b)` emitting `op` (a two-operand llvm op without fast-math flags)."""

    def emit(kb: KernelBuilder, a: Value, b: Value) -> SSAValue:
        return kb.insert(op(*kb.pair(a, b)))

    return emit


and_ = _binary(llvm.AndOp)
or_ = _binary(llvm.OrOp)
xor = _binary(llvm.XOrOp)
shl = _binary(llvm.ShlOp)
ashr = _binary(llvm.AShrOp)
lshr = _binary(llvm.LShrOp)
mul_exact = _binary(llvm.FMulOp)
"""a * b that LLVM may not contract into an FMA (for error-free transformations)."""
add_exact = _binary(llvm.FAddOp)
sub_exact = _binary(llvm.FSubOp)


def bits(kb: KernelBuilder, x: SSAValue) -> SSAValue:
    """The i32 bit pattern of an f32 (lane by lane)."""
    return kb.bitcast(x, int_type(x.type))


def from_bits(kb: KernelBuilder, n: SSAValue) -> SSAValue:
    return kb.bitcast(n, float_type(n.type))


def min_(kb: KernelBuilder, x: SSAValue, bound: Value) -> SSAValue:
    """min(x, bound) that lets a NaN `x` through (one `minps`)."""
    return select(kb, fcmp(kb, "ogt", x, bound), bound, x)


def max_(kb: KernelBuilder, x: SSAValue, bound: Value) -> SSAValue:
    """max(x, bound) that lets a NaN `x` through (one `maxps`)."""
    return select(kb, fcmp(kb, "olt", x, bound), bound, x)


def copysign(kb: KernelBuilder, magnitude: SSAValue, sign: SSAValue) -> SSAValue:
    return kb.intrinsic("llvm.copysign", [magnitude, sign], magnitude.type)


def has_fma(kb: KernelBuilder) -> bool:
    """Whether the target has hardware FMA: `kb.has_fma` when the builder says, else
    assumed for vector widths 8 (AVX2) and 16 (AVX-512) but not 4 (SSE). Only speed
    depends on it: `two_prod` uses `llvm.fma` (a libcall without hardware FMA) or
    Dekker's product."""
    return bool(getattr(kb, "has_fma", kb.vector_width >= 8))


def polynomial(kb: KernelBuilder, x: SSAValue, coefficients: Sequence[float]) -> SSAValue:
    """Horner's scheme with multiply-adds; `coefficients` from the highest degree down."""
    p = const(kb, coefficients[0], x.type)
    for c in coefficients[1:]:
        p = muladd(kb, p, x, c)
    return p


_SPLITTER = 4097.0
"""2^12 + 1: Veltkamp's constant splitting an f32 into two 12-bit halves."""


def _split_bits(kb: KernelBuilder, a: SSAValue) -> tuple[SSAValue, SSAValue]:
    c = mul_exact(kb, a, _SPLITTER)
    hi = sub_exact(kb, c, sub_exact(kb, c, a))
    return hi, sub_exact(kb, a, hi)


def two_prod(kb: KernelBuilder, a: SSAValue, b: Value) -> tuple[SSAValue, SSAValue]:
    """p + e == a·b exactly, p = fl(a·b): one FMA, or Dekker's product without hardware
    FMA (then exact for |a|, |b| < 8e34; the error term is NaN beyond)."""
    b = b if isinstance(b, SSAValue) else const(kb, b, a.type)
    p = mul_exact(kb, a, b)
    if has_fma(kb):  # llvm.fma, not fmuladd: the error term needs the single rounding
        return p, kb.insert(llvm.FMAOp(a, b, kb.fneg(p)))
    a_hi, a_lo = _split_bits(kb, a)
    b_hi, b_lo = (a_hi, a_lo) if b is a else _split_bits(kb, b)
    e = sub_exact(kb, mul_exact(kb, a_hi, b_hi), p)
    e = add_exact(kb, e, mul_exact(kb, a_hi, b_lo))
    e = add_exact(kb, e, mul_exact(kb, a_lo, b_hi))
    return p, add_exact(kb, e, mul_exact(kb, a_lo, b_lo))


def two_sum(kb: KernelBuilder, a: SSAValue, b: SSAValue) -> tuple[SSAValue, SSAValue]:
    """s + e == a + b exactly, s = fl(a + b) (Knuth's branch-free TwoSum)."""
    s = add_exact(kb, a, b)
    bb = sub_exact(kb, s, a)
    e = add_exact(kb, sub_exact(kb, a, sub_exact(kb, s, bb)), sub_exact(kb, b, bb))
    return s, e


# ----------------------------------------------------------------------------- exp

LOG2E = 1.4426950408889634
LN2_HI = 0.693359375
"""ln 2 to 9 bits: k·LN2_HI is exact for every exponent k of a float."""
LN2_LO = -2.12194440e-4
"""ln 2 - LN2_HI."""
_ROUND_MAGIC = 12582912.0
"""1.5·2^23: fl(y + magic) - magic rounds y to an integer for |y| < 2^22."""
EXP_MAX = 88.8
"""Above ln(FLT_MAX) = 88.72: every larger input (and +inf) gives +inf."""
EXP_MIN = -110.0
"""Below ln(2^-150) = -103.97 every e^x rounds to 0; clamping a little lower keeps 2^n in
two normal factors and lets callers scale y·s1 by up to 2^8 before the last rounding."""
_EXP_POLY = (1.9875691500e-4, 1.3981999507e-3, 8.3334519073e-3, 4.1665795894e-2,
             1.6666665459e-1, 5.0000001201e-1)
"""Cephes expf: exp(r) ≈ 1 + r + r²·P(r) on |r| ≤ ln2/2."""


def _exp_parts(kb: KernelBuilder, x: SSAValue, lo: SSAValue | None = None,
               lo_is_finite: bool = False) -> tuple[SSAValue, SSAValue, SSAValue]:
    """(y, s1, s2) with exp(x + lo) = (y·s1)·s2, y ∈ [0.7, 1.42], s1 and s2 normal powers
    of two; `lo` is a small correction (|lo| ≲ ulp(x)) to an exact argument, dropped where
    x is out of range or lo is NaN (an overflowed error term) unless `lo_is_finite`.
    Callers may fold a factor into y·s1 before the last (possibly denormalizing) scaling."""
    if lo is not None and not lo_is_finite:
        lo = select(kb, fcmp(kb, "olt", kb.fabs(x), -EXP_MIN), lo, 0.0)
        lo = select(kb, fcmp(kb, "uno", lo, lo), 0.0, lo)
    x = max_(kb, min_(kb, x, EXP_MAX), EXP_MIN)
    t = muladd(kb, x, LOG2E, _ROUND_MAGIC)  # magic + round(x·log2 e)
    n = kb.fsub(t, _ROUND_MAGIC)
    r = muladd(kb, n, -LN2_HI, x)  # x - n·ln2, exact: n·LN2_HI has few bits
    r = muladd(kb, n, -LN2_LO, r)
    if lo is not None:
        r = kb.fadd(r, lo)
    p = polynomial(kb, r, _EXP_POLY)
    y = kb.fadd(muladd(kb, p, kb.fmul(r, r), r), 1.0)
    # 2^n as two normal factors 2^(n>>1)·2^(n - n>>1): n ∈ [-159, 128] reaches the
    # denormals (one rounding) and overflows to inf past 2^128.
    ni = kb.sub(bits(kb, t), bits(kb, const(kb, _ROUND_MAGIC, t.type)))
    n1 = ashr(kb, ni, 1)
    n2 = kb.sub(ni, n1)
    s1 = from_bits(kb, shl(kb, kb.add(n1, 127), 23))
    s2 = from_bits(kb, shl(kb, kb.add(n2, 127), 23))
    return y, s1, s2


def _exp(kb: KernelBuilder, x: SSAValue, lo: SSAValue | None = None,
         lo_is_finite: bool = False) -> SSAValue:
    """exp(x + lo) (see `_exp_parts`)."""
    y, s1, s2 = _exp_parts(kb, x, lo, lo_is_finite)
    return kb.fmul(kb.fmul(y, s1), s2)


def exp(kb: KernelBuilder, x: SSAValue) -> SSAValue:
    """e^x: n = round(x·log2 e), r = x - n·ln2 (hi/lo), Cephes polynomial, ·2^n built
    from exponent bits (in two factors, so denormal results round once).

    Overflow gives +inf, underflow 0 (gradually, through the denormals), NaN stays NaN.
    Measured: max 0.97 ulp (rel 7.9e-8) on normal results.
    """
    return _exp(kb, x)


# ----------------------------------------------------------------------------- log

_SQRT_HALF_BITS = 0x3F3504F3
"""The bits of sqrt(1/2) (rounded): mantissas are reduced to [sqrt(1/2), sqrt(2))."""
_LOG_POLY = (7.0376836292e-2, -1.1514610310e-1, 1.1676998740e-1, -1.2420140846e-1,
             1.4249322787e-1, -1.6668057665e-1, 2.0000714765e-1, -2.4999993993e-1,
             3.3333331174e-1)
"""Cephes logf: log(1+f) ≈ f - f²/2 + f³·P(f) on sqrt(1/2)-1 ≤ f < sqrt(2)-1."""


def _log_reduce(kb: KernelBuilder, x: SSAValue) -> tuple[SSAValue, SSAValue]:
    """(k, f) with x = 2^k·(1 + f), k an f32 integer, f ∈ [sqrt(1/2)-1, sqrt(2)-1)
    (exact); for positive finite x, denormals included."""
    denormal = fcmp(kb, "olt", x, 2.0**-126)
    xs = select(kb, denormal, kb.fmul(x, 2.0**23), x)
    ix = kb.add(bits(kb, xs), 0x3F800000 - _SQRT_HALF_BITS)
    k = kb.sub(ashr(kb, ix, 23), 127)
    k = select(kb, denormal, kb.sub(k, 23), k)
    m = from_bits(kb, kb.add(and_(kb, ix, 0x007FFFFF), _SQRT_HALF_BITS))
    return kb.sitofp(k, x.type), kb.fsub(m, 1.0)


def log(kb: KernelBuilder, x: SSAValue) -> SSAValue:
    """Natural logarithm: exponent/mantissa split through the bits (denormals scaled
    first), Cephes polynomial for log(1 + f), k·ln2 added in two parts.

    log(0) = -inf, log(x < 0) = NaN, log(+inf) = +inf, NaN stays NaN.
    Measured: max 0.74 ulp (rel 7.9e-8).
    """
    k, f = _log_reduce(kb, x)
    z = kb.fmul(f, f)
    y = kb.fmul(kb.fmul(polynomial(kb, f, _LOG_POLY), f), z)
    y = muladd(kb, k, LN2_LO, y)
    y = muladd(kb, z, -0.5, y)
    r = muladd(kb, k, LN2_HI, kb.fadd(f, y))
    r = select(kb, fcmp(kb, "oeq", x, INF), INF, r)
    r = select(kb, fcmp(kb, "oeq", x, 0.0), -INF, r)
    return select(kb, fcmp(kb, "ult", x, 0.0), NAN, r)  # negative or NaN


def _log_pair(kb: KernelBuilder, x: SSAValue) -> tuple[SSAValue, SSAValue]:
    """log(x) as an unevaluated sum hi + lo good to ~2^-30 relative, for pow."""
    k, f = _log_reduce(kb, x)
    zh, zl = two_prod(kb, f, f)
    tail = kb.fmul(kb.fmul(polynomial(kb, f, _LOG_POLY), f), zh)
    half = mul_exact(kb, zh, 0.5)
    s = sub_exact(kb, f, half)  # |f| > |f²/2|: Fast2Sum
    s_err = sub_exact(kb, sub_exact(kb, f, s), half)
    lo = kb.fadd(kb.fsub(s_err, mul_exact(kb, zl, 0.5)), tail)
    kh = mul_exact(kb, k, LN2_HI)  # exact
    hi = add_exact(kb, kh, s)  # |k·ln2| > |s| unless k = 0 (then exact anyway)
    err = add_exact(kb, sub_exact(kb, kh, hi), s)
    lo = kb.fadd(kb.fadd(err, lo), kb.fmul(k, LN2_LO))
    total = add_exact(kb, hi, lo)  # renormalize: |lo| <= ulp(hi)/2
    lo = add_exact(kb, sub_exact(kb, hi, total), lo)
    hi = total
    hi = select(kb, fcmp(kb, "oeq", x, 0.0), -INF, hi)
    hi = select(kb, fcmp(kb, "uge", x, INF), x, hi)  # +inf or NaN
    return hi, lo


# ----------------------------------------------------------------------------- pow


def pow(kb: KernelBuilder, a: SSAValue, b: SSAValue) -> SSAValue:
    """a^b = exp(b·log|a|) with log|a| and the product carried in double-f32 precision,
    and C/numpy special cases: a^±0 = 1 and 1^b = 1 (even for NaN), (-1)^±inf = 1,
    a < 0 with an integer b takes the sign of (-1)^b, a < 0 with a non-integer b is NaN,
    (±0)^b is 0 / inf with the sign of a for odd integer b, ±inf as the limits.

    Measured: max 4.4 ulp (rel 3e-7) over random a, b with results across the whole
    range (b·log a up to ±100, a near 1 with |b| up to 1e5); a single-f32 exp(b·log a)
    would be off by up to |b·log a|·2^-24 (1e-5 near overflow).
    """
    ax = kb.fabs(a)
    hi, lo = _log_pair(kb, ax)
    yh, yl = two_prod(kb, b, hi)
    yl = kb.fadd(yl, kb.fmul(b, lo))
    r = _exp(kb, yh, yl)
    # integer and odd exponents, without llvm.floor (a libcall before SSE4.1)
    ab = kb.fabs(b)
    big = fcmp(kb, "oge", ab, 2.0**23)  # every float this large is an integer
    t = kb.fadd(ab, 2.0**23)
    is_int = or_(kb, big, fcmp(kb, "oeq", kb.fsub(t, 2.0**23), ab))
    units = select(kb, big, ab, t)  # for |b| < 2^24 the last mantissa bit is the units bit
    odd_bit = icmp(kb, "ne", and_(kb, bits(kb, units), 1), 0)
    odd = and_(kb, and_(kb, is_int, odd_bit), fcmp(kb, "olt", ab, 2.0**24))
    negative = icmp(kb, "slt", bits(kb, a), 0)  # sign bit: -0 counts
    r = select(kb, and_(kb, odd, negative), kb.fneg(r), r)
    finite_negative = and_(kb, fcmp(kb, "olt", a, 0.0), fcmp(kb, "one", a, -INF))
    r = select(kb, and_(kb, finite_negative, xor(kb, is_int, 1)), NAN, r)
    one = or_(kb, fcmp(kb, "oeq", b, 0.0), fcmp(kb, "oeq", a, 1.0))
    one = or_(kb, one, and_(kb, fcmp(kb, "oeq", ax, 1.0), fcmp(kb, "oeq", ab, INF)))
    return select(kb, one, 1.0, r)


# ----------------------------------------------------------------------------- tanh, sigmoid

_TANH_POLY = (-5.70498872745e-3, 2.06390887954e-2, -5.37397155531e-2, 1.33314422036e-1,
              -3.33332819422e-1)
"""Cephes tanhf: tanh(x) ≈ x + x³·P(x²) for |x| < 0.625."""


def tanh(kb: KernelBuilder, x: SSAValue) -> SSAValue:
    """Hyperbolic tangent: x + x³·P(x²) for |x| < 0.625 (exact near 0), else
    ±(1 - 2/(e^{2|x|} + 1)), which saturates to ±1.

    Measured: max 1.16 ulp (rel 1.2e-7).
    """
    ax = kb.fabs(x)
    z = kb.fmul(x, x)
    small = muladd(kb, kb.fmul(polynomial(kb, z, _TANH_POLY), z), x, x)
    e = _exp(kb, kb.fadd(ax, ax))
    large = kb.fsub(1.0, kb.fdiv(2.0, kb.fadd(e, 1.0)))
    return copysign(kb, select(kb, fcmp(kb, "olt", ax, 0.625), small, large), x)  # (-0 too)


def sigmoid(kb: KernelBuilder, x: SSAValue) -> SSAValue:
    """1 / (1 + e^-x), as e/(1 + e) with e = e^-|x| for x < 0 so that tiny results keep
    their relative precision (down into the denormals).

    Measured: max 2.4 ulp (rel 1.8e-7) on normal results.
    """
    e = _exp(kb, kb.fneg(kb.fabs(x)))
    s = kb.fdiv(1.0, kb.fadd(e, 1.0))
    return select(kb, fcmp(kb, "oge", x, 0.0), s, kb.fmul(e, s))


def _times_sigmoid(kb: KernelBuilder, x: SSAValue, v: SSAValue,
                   v_lo: SSAValue | None = None) -> SSAValue:
    """x·sigmoid(v + v_lo) (v_lo finite); for v < 0 as (x·e^v)/(1 + e^v) with x folded in
    before e^v's last scaling, so a normal product keeps full precision even where e^v is
    denormal."""
    negative = fcmp(kb, "olt", v, 0.0)
    lo = None if v_lo is None else select(kb, negative, v_lo, kb.fneg(v_lo))
    y, s1, s2 = _exp_parts(kb, kb.fneg(kb.fabs(v)), lo, lo_is_finite=True)  # e^-|v|
    e = kb.fmul(kb.fmul(y, s1), s2)
    s = kb.fdiv(1.0, kb.fadd(e, 1.0))
    xe = kb.fmul(kb.fmul(kb.fmul(x, y), s1), s2)
    clamped = fcmp(kb, "ogt", kb.fabs(v), -EXP_MIN)  # e^v underflowed to 0: x·0 (nan at ±inf)
    xe = select(kb, clamped, kb.fmul(x, e), xe)
    return select(kb, negative, kb.fmul(xe, s), kb.fmul(x, s))


# ----------------------------------------------------------------------------- erf, erfc

_ERF_POLY = (7.853861353153693e-5, -8.010193625184903e-4, 5.188327685732524e-3,
             -2.685381193529856e-2, 1.128358514861418e-1, -3.761262582423300e-1,
             1.128379165726710e0)
"""Cephes erff: erf(x) ≈ x·T(x²) for |x| < 1."""
_ERFC_POLY = (0.17087277, -0.82215223, 1.48851587, -1.13520398, 0.27886807, -0.18628806,
              0.09678418, 0.37409196, 1.00002368, -1.26551223)
"""Numerical Recipes erfcc: erfc(z) ≈ t·exp(-z² + P(t)), t = 1/(1 + z/2), z ≥ 0, relative
error < 1.2e-7 everywhere."""


_ERFC_ZERO = 16.0
"""erfc(z) underflows to 0 for z > 10.06; inputs are clamped here so z² stays finite."""


def _erfc_core(kb: KernelBuilder, z: SSAValue, q_hi: SSAValue, q_lo: SSAValue) -> SSAValue:
    """erfc(z) for 0 ≤ z ≤ 32 with z² = q_hi + q_lo given exactly: the exponent
    -z² + P(t) is summed without rounding and handed to exp as hi + lo."""
    t = kb.fdiv(1.0, muladd(kb, z, 0.5, 1.0))
    c = kb.fsub(polynomial(kb, t, _ERFC_POLY), q_lo)
    s, e = two_sum(kb, c, kb.fneg(q_hi))
    return kb.fmul(t, _exp(kb, s, e, lo_is_finite=True))


def _erf_small(kb: KernelBuilder, x: SSAValue) -> SSAValue:
    """erf(x) = x·T(x²) for |x| < 1."""
    return kb.fmul(x, polynomial(kb, kb.fmul(x, x), _ERF_POLY))


def _square(kb: KernelBuilder, x: SSAValue) -> tuple[SSAValue, SSAValue]:
    """x² = hi + lo exactly."""
    return two_prod(kb, x, x)


def erfc(kb: KernelBuilder, x: SSAValue) -> SSAValue:
    """Complementary error function 1 - erf(x): 1 - x·T(x²) for |x| < 0.5, else the
    tail formula (accurate down to the underflow at x = 10.05), or 2 - erfc|x| for x < 0.

    Measured: max 4.9 ulp (rel 3.1e-7) on normal results (the tail formula's own error is 1.7 ulp).
    """
    ax = min_(kb, kb.fabs(x), _ERFC_ZERO)
    q_hi, q_lo = _square(kb, ax)
    e = _erfc_core(kb, ax, q_hi, q_lo)
    large = select(kb, fcmp(kb, "olt", x, 0.0), kb.fsub(2.0, e), e)
    return select(kb, fcmp(kb, "olt", ax, 0.5), kb.fsub(1.0, _erf_small(kb, x)), large)


def erf(kb: KernelBuilder, x: SSAValue) -> SSAValue:
    """Error function: x·T(x²) for |x| < 1 (relative accuracy near 0), else
    ±(1 - erfc|x|), saturating to ±1.

    Measured: max 2.2 ulp (rel 1.6e-7).
    """
    ax = kb.fabs(x)
    small = _erf_small(kb, x)
    big = min_(kb, ax, _ERFC_ZERO)
    q_hi, q_lo = _square(kb, big)
    large = copysign(kb, kb.fsub(1.0, _erfc_core(kb, big, q_hi, q_lo)), x)
    return select(kb, fcmp(kb, "olt", ax, 1.0), small, large)


# ----------------------------------------------------------------------------- the rest


def sqrt(kb: KernelBuilder, x: SSAValue) -> SSAValue:
    """IEEE square root (`sqrtps`), correctly rounded."""
    return kb.sqrt(x)


def rsqrt(kb: KernelBuilder, x: SSAValue) -> SSAValue:
    """1 / sqrt(x) (two correctly rounded steps: max 1 ulp)."""
    return kb.fdiv(1.0, kb.sqrt(x))


def relu(kb: KernelBuilder, x: SSAValue) -> SSAValue:
    """max(x, 0), NaN stays NaN (one `maxps`)."""
    return max_(kb, x, 0.0)


def silu(kb: KernelBuilder, x: SSAValue) -> SSAValue:
    """x·sigmoid(x). Measured: max 2.5 ulp (rel 2.2e-7) on normal results."""
    return _times_sigmoid(kb, x, x)


_SQRT_HALF = math.sqrt(0.5)


def gelu(kb: KernelBuilder, x: SSAValue) -> SSAValue:
    """Exact gelu 0.5·x·(1 + erf(x/√2)) = 0.5·x·erfc(-x/√2), with erfc(|x|/√2) from the
    tail formula (relative error 1.2e-7 for every z ≥ 0; z² = x²/2 summed exactly) and
    2 - erfc for x > 0, so the negative tail keeps its relative precision.

    Measured: max 5.9 ulp (rel 4.7e-7) on normal results (7.2 ulp without hardware FMA).
    """
    ax = min_(kb, kb.fabs(x), _ERFC_ZERO * 2)  # (erfc(x/√2) is 0 or 2 beyond)
    z = kb.fmul(ax, _SQRT_HALF)
    q_hi, q_lo = _square(kb, ax)
    e = _erfc_core(kb, z, mul_exact(kb, q_hi, 0.5), mul_exact(kb, q_lo, 0.5))
    phi2 = select(kb, fcmp(kb, "olt", x, 0.0), e, kb.fsub(2.0, e))
    return kb.fmul(kb.fmul(x, 0.5), phi2)


def _split(value: float) -> tuple[float, float]:
    """A float64 constant as f32 hi + f32 lo."""
    hi = float(np.float32(value))
    return hi, float(np.float32(value - hi))


_GELU_K1 = _split(2.0 * math.sqrt(2.0 / math.pi))
_GELU_K3 = _split(2.0 * math.sqrt(2.0 / math.pi) * 0.044715)


def gelu_tanh(kb: KernelBuilder, x: SSAValue) -> SSAValue:
    """0.5·x·(1 + tanh(u)), u = √(2/π)·(x + 0.044715·x³), computed as x·sigmoid(2u) with
    2u = x·(k1 + k3·x²) carried in double-f32 precision (exp(2u) amplifies any error of
    2u by |2u|, up to ~100 in the negative tail).

    Measured: max 2.9 ulp (rel 1.9e-7) on normal results.
    """
    (k1, k1_lo), (k3, k3_lo) = _GELU_K1, _GELU_K3
    xc = max_(kb, min_(kb, x, 20.0), -20.0)  # sigmoid(2u) is 0 or 1 beyond; no overflow
    x2, x2_lo = _square(kb, xc)
    p, p_lo = two_prod(kb, x2, k3)
    w, w_err = two_sum(kb, const(kb, k1, x.type), p)
    w_lo = kb.fadd(kb.fadd(w_err, p_lo), muladd(kb, x2_lo, k3, muladd(kb, x2, k3_lo, k1_lo)))
    v, v_err = two_prod(kb, xc, w)
    v_lo = muladd(kb, xc, w_lo, v_err)
    return _times_sigmoid(kb, x, v, v_lo)


ACTIVATIONS: dict[str, Callable[[KernelBuilder, SSAValue], SSAValue]] = {
    "relu": relu,
    "gelu": gelu,
    "gelu_tanh": gelu_tanh,
    "silu": silu,
    "sigmoid": sigmoid,
    "tanh": tanh,
}
"""The activations of linear / fused_matmul (docs/semantics.md "Weight layout")."""


def activation(kb: KernelBuilder, name: str | None, x: SSAValue) -> SSAValue:
    """One of relu gelu gelu_tanh silu sigmoid tanh applied to `x`; None is the identity."""
    if name is None:
        return x
    name = getattr(name, "value", name)  # an Activation enum member works too
    if name not in ACTIVATIONS:
        raise ValueError(f"unknown activation {name!r}; expected one of {', '.join(ACTIVATIONS)}")
    return ACTIVATIONS[name](kb, x)


UNARY: dict[str, Callable[[KernelBuilder, SSAValue], SSAValue]] = {
    "exp": exp, "log": log, "tanh": tanh, "sigmoid": sigmoid, "erf": erf, "erfc": erfc,
    "sqrt": sqrt, "rsqrt": rsqrt, "relu": relu, "silu": silu, "gelu": gelu,
    "gelu_tanh": gelu_tanh,
}
"""Every one-argument function of this module by name."""

__all__ = [
    "ACTIVATIONS", "UNARY", "activation", "and_", "ashr",
    "bits", "const", "copysign", "erf", "erfc", "exp", "fcmp", "float_type", "from_bits",
    "gelu", "gelu_tanh", "has_fma", "icmp", "int_type", "log", "lshr", "mask_type", "max_",
    "min_", "mul_exact", "muladd", "or_", "polynomial", "pow", "relu", "rsqrt", "select",
    "shl", "sigmoid", "silu", "sqrt", "tanh", "two_prod", "two_sum", "xor",
]

