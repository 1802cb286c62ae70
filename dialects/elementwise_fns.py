"""The elementwise functions: `ElementwiseFn` (the `rlx.elementwise_fn` enum) and, for each,
its one definition as a scalar body of `arith`/`math` ops.

`BODIES[fn](body, *args)` appends fn(args) to a `ScalarBody` and returns the result. Both
code paths are built from it:

- mir-fuse inlines the bodies of a tree of elementwise ops into one `mir.fused_elementwise`;
- the `lir.elementwise` kernel builds the body of its fn (`scalar_block`) and translates it
  to vector code exactly as a `lir.fused_elementwise` body is translated (arith ops to llvm
  ops, math.exp/log/tanh/erf/pow to the polynomials of `lir_to_llvm/vmath.py`). Only where
  a dedicated vector primitive is more accurate than its composition (sigmoid, silu,
  gelu, gelu_tanh: in their tails) does the kernel call that primitive instead
  (`elementwise.DEDICATED`).

The bodies follow docs/semantics.md (softplus with a log1p that keeps its tail). The
arithmetic helpers pick the integer op on integer operands (add sub mul max min neg abs
relu have an i32/i64 form, wrapping like numpy's fixed-width integers); the other
functions raise `DTypeError` on integers.

Adding an elementwise op: its `ElementwiseFn` member and its `BODIES` entry here, its mir
class and registry record, its reference kernel and `Graph` method (docs/adding-an-op.md).
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence

from xdsl.dialects import arith
from xdsl.dialects import math as mathd
from xdsl.dialects.builtin import FloatAttr, IntegerAttr, IntegerType, f32
from xdsl.ir import Attribute, Block, Operation, SSAValue
from xdsl.utils.str_enum import StrEnum

from rlx_mlir.core.errors import DTypeError


class ElementwiseFn(StrEnum):
    """The scalar function of an `lir.elementwise` kernel (one per mir elementwise op)."""

    ADD = "add"
    SUB = "sub"
    MUL = "mul"
    DIV = "div"
    MAX = "max"
    MIN = "min"
    POW = "pow"
    NEG = "neg"
    EXP = "exp"
    LOG = "log"
    SQRT = "sqrt"
    RSQRT = "rsqrt"
    TANH = "tanh"
    SIGMOID = "sigmoid"
    SILU = "silu"
    GELU = "gelu"
    GELU_TANH = "gelu_tanh"
    RELU = "relu"
    ABS = "abs"
    SOFTPLUS = "softplus"


def _is_int(value: SSAValue) -> bool:
    return isinstance(value.type, IntegerType)


class ScalarBody:
    """Appends scalar `arith`/`math` ops to a block; constants are made once each."""

    def __init__(self, block: Block):
        self.block = block
        self._constants: dict[tuple[str, Attribute], SSAValue] = {}

    def emit(self, op: Operation) -> SSAValue:
        self.block.add_op(op)
        return op.results[0]

    def const(self, value: float | int, ty: Attribute = f32) -> SSAValue:
        """A constant of scalar type `ty` (f32 by default)."""
        value = int(value) if isinstance(ty, IntegerType) else float(value)
        key = (repr(value), ty)  # repr keeps -0.0 apart from 0.0
        if key not in self._constants:
            attr = IntegerAttr(value, ty) if isinstance(ty, IntegerType) else FloatAttr(value, ty)
            self._constants[key] = self.emit(arith.ConstantOp(attr))
        return self._constants[key]

    def const_like(self, value: float | int, like: SSAValue) -> SSAValue:
        return self.const(value, like.type)

    # typed arithmetic: the integer op on integers, the float op on f32

    def add(self, a: SSAValue, b: SSAValue) -> SSAValue:
        return self.emit(arith.AddiOp(a, b) if _is_int(a) else arith.AddfOp(a, b))

    def sub(self, a: SSAValue, b: SSAValue) -> SSAValue:
        return self.emit(arith.SubiOp(a, b) if _is_int(a) else arith.SubfOp(a, b))

    def mul(self, a: SSAValue, b: SSAValue) -> SSAValue:
        return self.emit(arith.MuliOp(a, b) if _is_int(a) else arith.MulfOp(a, b))

    def max(self, a: SSAValue, b: SSAValue) -> SSAValue:
        """max(a, b), NaN propagating like numpy.maximum."""
        return self.emit(arith.MaxSIOp(a, b) if _is_int(a) else arith.MaximumfOp(a, b))

    def min(self, a: SSAValue, b: SSAValue) -> SSAValue:
        """min(a, b), NaN propagating like numpy.minimum."""
        return self.emit(arith.MinSIOp(a, b) if _is_int(a) else arith.MinimumfOp(a, b))

    def neg(self, a: SSAValue) -> SSAValue:
        return self.sub(self.const_like(0, a), a) if _is_int(a) else self.emit(arith.NegfOp(a))

    def abs(self, a: SSAValue) -> SSAValue:
        return self.emit(mathd.AbsIOp(a) if _is_int(a) else mathd.AbsFOp(a))

    def less_than_zero(self, a: SSAValue) -> SSAValue:
        """a < 0 (false for NaN)."""
        zero = self.const_like(0, a)
        return self.emit(arith.CmpiOp(a, zero, "slt") if _is_int(a)
                         else arith.CmpfOp(a, zero, "olt"))

    def select(self, cond: SSAValue, a: SSAValue, b: SSAValue) -> SSAValue:
        return self.emit(arith.SelectOp(cond, a, b))

    def float_op(self, cls: Callable[..., Operation], *args: SSAValue) -> SSAValue:
        """`cls(*args)`, an f32-only op (a DTypeError on integer operands)."""
        if any(_is_int(a) for a in args):
            types = ", ".join(str(a.type) for a in args)
            raise DTypeError(f"'{cls.name}' takes f32 operands, got {types}")
        return self.emit(cls(*args))


# ----------------------------------------------------------------------------- composites


def sigmoid(b: ScalarBody, x: SSAValue) -> SSAValue:
    """1 / (1 + exp(-x))."""
    e = b.float_op(mathd.ExpOp, b.neg(x))
    return b.float_op(arith.DivfOp, b.const(1.0), b.add(b.const(1.0), e))


def silu(b: ScalarBody, x: SSAValue) -> SSAValue:
    """x * sigmoid(x)."""
    return b.mul(x, sigmoid(b, x))


def _half_x_one_plus(b: ScalarBody, x: SSAValue, t: SSAValue) -> SSAValue:
    """0.5 * x * (1 + t)."""
    one_plus = b.add(b.const(1.0), t)
    return b.mul(b.mul(b.const(0.5), x), one_plus)


def gelu(b: ScalarBody, x: SSAValue) -> SSAValue:
    """0.5 * x * (1 + erf(x / sqrt(2)))."""
    erf = b.float_op(mathd.ErfOp, b.mul(x, b.const(math.sqrt(0.5))))
    return _half_x_one_plus(b, x, erf)


def gelu_tanh(b: ScalarBody, x: SSAValue) -> SSAValue:
    """0.5 * x * (1 + tanh(sqrt(2/pi) * (x + 0.044715 * x^3)))."""
    x3 = b.mul(b.mul(x, x), x)
    inner = b.add(x, b.mul(b.const(0.044715), x3))
    u = b.mul(b.const(math.sqrt(2.0 / math.pi)), inner)
    return _half_x_one_plus(b, x, b.float_op(mathd.TanhOp, u))


def relu(b: ScalarBody, x: SSAValue) -> SSAValue:
    """x < 0 ? 0 : x (NaN stays NaN; one `maxps` on vectors)."""
    return b.select(b.less_than_zero(x), b.const_like(0, x), x)


def softplus(b: ScalarBody, x: SSAValue) -> SSAValue:
    """log(1 + e^x) = max(x, 0) + log1p(e^-|x|), with log1p(t) = log(u)·t/(u - 1) for
    u = 1 + t (Goldberg: the rounding of u cancels; t itself where u rounds to 1), so
    neither large x (e^x overflows) nor very negative x (1 + e^x rounds to 1) loses
    accuracy. NaN stays NaN, softplus(-inf) = 0, softplus(+inf) = +inf."""
    t = b.float_op(mathd.ExpOp, b.neg(b.abs(x)))
    u = b.add(t, b.const(1.0))
    d = b.sub(u, b.const(1.0))
    rounds_to_one = b.emit(arith.CmpfOp(d, b.const(0.0), "oeq"))
    ratio = b.float_op(arith.DivfOp, b.mul(b.float_op(mathd.LogOp, u), t), d)
    log1p = b.select(rounds_to_one, t, ratio)
    return b.add(b.max(x, b.const(0.0)), log1p)


def _float(cls: Callable[..., Operation]) -> Callable[..., SSAValue]:
    return lambda b, *args: b.float_op(cls, *args)


BODIES: dict[ElementwiseFn, Callable[..., SSAValue]] = {
    ElementwiseFn.ADD: ScalarBody.add,
    ElementwiseFn.SUB: ScalarBody.sub,
    ElementwiseFn.MUL: ScalarBody.mul,
    ElementwiseFn.DIV: _float(arith.DivfOp),
    ElementwiseFn.MAX: ScalarBody.max,
    ElementwiseFn.MIN: ScalarBody.min,
    ElementwiseFn.POW: _float(mathd.PowFOp),
    ElementwiseFn.NEG: ScalarBody.neg,
    ElementwiseFn.EXP: _float(mathd.ExpOp),
    ElementwiseFn.LOG: _float(mathd.LogOp),
    ElementwiseFn.SQRT: _float(mathd.SqrtOp),
    ElementwiseFn.RSQRT: _float(mathd.RsqrtOp),
    ElementwiseFn.TANH: _float(mathd.TanhOp),
    ElementwiseFn.SIGMOID: sigmoid,
    ElementwiseFn.SILU: silu,
    ElementwiseFn.GELU: gelu,
    ElementwiseFn.GELU_TANH: gelu_tanh,
    ElementwiseFn.RELU: relu,
    ElementwiseFn.ABS: ScalarBody.abs,
    ElementwiseFn.SOFTPLUS: softplus,
}
"""fn(body, *args): appends the scalar computation of each function to `body`."""


def scalar_block(fn: ElementwiseFn, arg_types: Sequence[Attribute]) -> tuple[Block, SSAValue]:
    """A detached block with one argument per type in `arg_types`, computing `fn` on them
    (no terminator); returns it and the result. A DTypeError where `fn` has no form for the
    types (e.g. exp on i32)."""
    block = Block(arg_types=arg_types)
    try:
        return block, BODIES[fn](ScalarBody(block), *block.args)
    except DTypeError as err:
        types = ", ".join(str(ty) for ty in arg_types)
        raise DTypeError(f"elementwise fn '{fn}' has no form for ({types}): {err}") from err
