"""VJP rules of the elementwise ops (unary, binary with broadcasting, fused_elementwise).

A derivative that needs a comparison (relu, abs, maximum, minimum, pow at 0) is built as
one `mir.fused_elementwise` whose scalar body selects (mir has no comparison op); so are
the unary derivatives, one kernel each. Choices at non-smooth points follow torch:
relu'(0) = 0, abs'(0) = 0, maximum/minimum split the cotangent in halves on ties,
pow's exponent gets 0 where the base is 0 (and the exponent >= 0), the base gets 0
where the exponent is 0.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence

import numpy as np
from xdsl.dialects import arith
from xdsl.dialects import math as mathd
from xdsl.ir import Block, Operation, Region, SSAValue

from rlx_mlir.autodiff.context import VjpContext, VjpRule
from rlx_mlir.core import shape_inference as rules
from rlx_mlir.dialects import mir
from rlx_mlir.dialects.common import element_type, tensor_type
from rlx_mlir.dialects.elementwise_fns import ScalarBody, sigmoid
from rlx_mlir.graph import Graph, Value

ScalarFn = Callable[..., SSAValue]
"""fn(body, *scalar arguments) -> the scalar result, appended to `body`."""


def elementwise(ctx: VjpContext, inputs: Sequence[Value], fn: ScalarFn) -> Value:
    """One `mir.fused_elementwise` computing `fn` on the elements of `inputs` (f32,
    broadcast together)."""
    shape: rules.Shape = ()
    for v in inputs:
        shape = rules.broadcast(shape, v.shape)
    block = Block(arg_types=[element_type(v.dtype) for v in inputs])
    result = fn(ScalarBody(block), *block.args)
    block.add_op(mir.YieldOp(result))
    op = mir.FusedElementwiseOp([v.ssa for v in inputs], tensor_type(shape), Region(block))
    ctx.g.add_op(op)
    return Value(ctx.g, op.result, shape, "f32")


def broadcast_like(ctx: VjpContext, x: Value, like: Value) -> Value:
    """x broadcast to `like`'s shape: `broadcast_to`, or where `like` has symbolic dims
    (which broadcast_to cannot introduce) a fused copy broadcast against `like`."""
    if x.shape == like.shape:
        return x
    if rules.is_static_shape(like.shape):
        return ctx.g.broadcast_to(x, like.shape)
    return elementwise(ctx, [x, like], lambda b, xv, _: xv)


def zeros(g: Graph, shape: rules.Shape) -> Value:
    """Zeros f32 of the static `shape`: a broadcast scalar, not a dense constant."""
    zero = g.constant(np.float32(0.0))
    return zero if tuple(shape) == () else g.broadcast_to(zero, shape)


def zeros_like(ctx: VjpContext, like: Value) -> Value:
    """Zeros of `like`'s shape (a broadcast scalar; `like` is not read when static)."""
    if rules.is_static_shape(like.shape):
        return zeros(ctx.g, like.shape)
    return elementwise(ctx, [like], lambda b, _: b.const(0.0))


# ----------------------------------------------------------------------------- scalar pieces


def _cmp(b: ScalarBody, x: SSAValue, y: SSAValue, predicate: str) -> SSAValue:
    return b.emit(arith.CmpfOp(x, y, predicate))


def _div(b: ScalarBody, x: SSAValue, y: SSAValue) -> SSAValue:
    return b.float_op(arith.DivfOp, x, y)


def _where(b: ScalarBody, x: SSAValue, y: SSAValue, predicate: str, then: SSAValue,
           otherwise: SSAValue) -> SSAValue:
    return b.select(_cmp(b, x, y, predicate), then, otherwise)


def _pick(b: ScalarBody, x: SSAValue, y: SSAValue, c: SSAValue, wins: str) -> SSAValue:
    """The share of `c` that goes to `x` of max(x, y) (`wins` "ogt") or min (`wins`
    "olt"): all of it where x wins, half on a tie (torch), none where y wins."""
    half = b.mul(c, b.const(0.5))
    tie = _where(b, x, y, "oeq", half, b.const(0.0))
    return _where(b, x, y, wins, c, tie)


def _sign_times(b: ScalarBody, x: SSAValue, c: SSAValue) -> SSAValue:
    """sign(x) * c with sign(0) = 0 (torch's abs')."""
    zero = b.const(0.0)
    return _where(b, x, zero, "ogt", c, _where(b, x, zero, "olt", b.neg(c), zero))


def _erf_prime(b: ScalarBody, x: SSAValue) -> SSAValue:
    """d/dx erf(x) = 2/sqrt(pi) exp(-x^2)."""
    e = b.float_op(mathd.ExpOp, b.neg(b.mul(x, x)))
    return b.mul(b.const(2.0 / math.sqrt(math.pi)), e)


def _pow_base(b: ScalarBody, x: SSAValue, p: SSAValue, c: SSAValue) -> SSAValue:
    """c * p * x^(p-1), 0 where p == 0."""
    power = b.float_op(mathd.PowFOp, x, b.sub(p, b.const(1.0)))
    return _where(b, p, b.const(0.0), "oeq", b.const(0.0), b.mul(c, b.mul(p, power)))


def _pow_exponent(b: ScalarBody, x: SSAValue, p: SSAValue, y: SSAValue, c: SSAValue
                  ) -> SSAValue:
    """c * x^p * log(x), 0 where x == 0 and p >= 0."""
    zero = b.const(0.0)
    value = b.mul(c, b.mul(y, b.float_op(mathd.LogOp, x)))
    at_zero = _where(b, p, zero, "oge", zero, value)
    return _where(b, x, zero, "oeq", at_zero, value)


# ----------------------------------------------------------------------------- unary

# d(body, x, y, c): the cotangent of x for the result y = f(x) with cotangent c.
UnaryDerivative = Callable[[ScalarBody, SSAValue, SSAValue, SSAValue], SSAValue]


def _silu(b: ScalarBody, x: SSAValue, y: SSAValue, c: SSAValue) -> SSAValue:
    s = sigmoid(b, x)
    one = b.const(1.0)
    return b.mul(c, b.mul(s, b.add(one, b.mul(x, b.sub(one, s)))))


def _gelu(b: ScalarBody, x: SSAValue, y: SSAValue, c: SSAValue) -> SSAValue:
    """0.5 (1 + erf(x/sqrt2)) + x exp(-x^2/2)/sqrt(2 pi)."""
    cdf = b.mul(b.const(0.5), b.add(b.const(1.0), b.float_op(
        mathd.ErfOp, b.mul(x, b.const(math.sqrt(0.5))))))
    pdf = b.mul(b.const(1.0 / math.sqrt(2.0 * math.pi)),
                b.float_op(mathd.ExpOp, b.mul(b.const(-0.5), b.mul(x, x))))
    return b.mul(c, b.add(cdf, b.mul(x, pdf)))


def _gelu_tanh(b: ScalarBody, x: SSAValue, y: SSAValue, c: SSAValue) -> SSAValue:
    """0.5 (1 + t) + 0.5 x (1 - t^2) k (1 + 3 a x^2), t = tanh(k (x + a x^3))."""
    k, a = math.sqrt(2.0 / math.pi), 0.044715
    x2 = b.mul(x, x)
    u = b.mul(b.const(k), b.add(x, b.mul(b.const(a), b.mul(x2, x))))
    t = b.float_op(mathd.TanhOp, u)
    one, half = b.const(1.0), b.const(0.5)
    du = b.mul(b.const(k), b.add(one, b.mul(b.const(3 * a), x2)))
    outer = b.mul(half, b.add(one, t))
    inner = b.mul(b.mul(half, x), b.mul(b.sub(one, b.mul(t, t)), du))
    return b.mul(c, b.add(outer, inner))


UNARY: dict[type[Operation], UnaryDerivative] = {
    mir.NegOp: lambda b, x, y, c: b.neg(c),
    mir.ExpOp: lambda b, x, y, c: b.mul(c, y),
    mir.LogOp: lambda b, x, y, c: _div(b, c, x),
    mir.SqrtOp: lambda b, x, y, c: _div(b, b.mul(c, b.const(0.5)), y),
    mir.RsqrtOp: lambda b, x, y, c: b.mul(b.mul(c, b.const(-0.5)), b.mul(y, b.mul(y, y))),
    mir.TanhOp: lambda b, x, y, c: b.mul(c, b.sub(b.const(1.0), b.mul(y, y))),
    mir.SigmoidOp: lambda b, x, y, c: b.mul(c, b.mul(y, b.sub(b.const(1.0), y))),
    mir.SiluOp: _silu,
    mir.GeluOp: _gelu,
    mir.GeluTanhOp: _gelu_tanh,
    mir.ReluOp: lambda b, x, y, c: _where(b, x, b.const(0.0), "ogt", c, b.const(0.0)),
    mir.AbsOp: lambda b, x, y, c: _sign_times(b, x, c),
    mir.SoftplusOp: lambda b, x, y, c: b.mul(c, sigmoid(b, x)),
}
"""The derivative of every unary elementwise op."""


def _unary_rule(derivative: UnaryDerivative) -> VjpRule:
    def rule(ctx: VjpContext, op: Operation, cotangents: Sequence[Value | None]
             ) -> list[Value | None]:
        (c,) = cotangents
        assert c is not None
        x, y = ctx.value(op.operands[0]), ctx.value(op.results[0])
        if isinstance(op, mir.NegOp):
            return [ctx.g.neg(c)]
        return [elementwise(ctx, [x, y, c], derivative)]

    return rule


# ----------------------------------------------------------------------------- binary


def _binary_operands(ctx: VjpContext, op: Operation) -> tuple[Value, Value, Value]:
    return ctx.value(op.operands[0]), ctx.value(op.operands[1]), ctx.value(op.results[0])


def _add(ctx: VjpContext, op: Operation, cts: Sequence[Value | None]) -> list[Value | None]:
    (c,) = cts
    assert c is not None
    a, b, _ = _binary_operands(ctx, op)
    return [ctx.unbroadcast(c, a.shape), ctx.unbroadcast(c, b.shape)]


def _sub(ctx: VjpContext, op: Operation, cts: Sequence[Value | None]) -> list[Value | None]:
    (c,) = cts
    assert c is not None
    a, b, _ = _binary_operands(ctx, op)
    return [ctx.unbroadcast(c, a.shape), ctx.unbroadcast(ctx.g.neg(c), b.shape)]


def _mul(ctx: VjpContext, op: Operation, cts: Sequence[Value | None]) -> list[Value | None]:
    (c,) = cts
    assert c is not None
    a, b, _ = _binary_operands(ctx, op)
    return [ctx.unbroadcast(ctx.g.mul(c, b), a.shape), ctx.unbroadcast(ctx.g.mul(c, a), b.shape)]


def _binary_rule(da: Callable[..., SSAValue], db: Callable[..., SSAValue]) -> VjpRule:
    """A rule whose operand cotangents are fused bodies of (a, b, y, c)."""

    def rule(ctx: VjpContext, op: Operation, cts: Sequence[Value | None]) -> list[Value | None]:
        (c,) = cts
        assert c is not None
        a, b, y = _binary_operands(ctx, op)
        inputs = [a, b, y, c]
        return [ctx.unbroadcast(elementwise(ctx, inputs, da), a.shape),
                ctx.unbroadcast(elementwise(ctx, inputs, db), b.shape)]

    return rule


BINARY: dict[type[Operation], VjpRule] = {
    mir.AddOp: _add,
    mir.SubOp: _sub,
    mir.MulOp: _mul,
    mir.DivOp: _binary_rule(lambda s, a, b, y, c: _div(s, c, b),
                            lambda s, a, b, y, c: s.neg(_div(s, s.mul(c, y), b))),
    mir.MaxOp: _binary_rule(lambda s, a, b, y, c: _pick(s, a, b, c, "ogt"),
                            lambda s, a, b, y, c: _pick(s, b, a, c, "ogt")),
    mir.MinOp: _binary_rule(lambda s, a, b, y, c: _pick(s, a, b, c, "olt"),
                            lambda s, a, b, y, c: _pick(s, b, a, c, "olt")),
    mir.PowOp: _binary_rule(lambda s, a, b, y, c: _pow_base(s, a, b, c),
                            lambda s, a, b, y, c: _pow_exponent(s, a, b, y, c)),
}
"""The rule of every binary elementwise op."""


# ----------------------------------------------------------------------------- fused bodies

# Scalar reverse mode over a fused body: the partials of each arith/math op, given its
# operands, its result r and the adjoint a of r (None: no gradient to that operand).
ScalarPartials = Callable[..., Sequence[SSAValue | None]]

SCALAR_PARTIALS: dict[type[Operation], ScalarPartials] = {
    arith.AddfOp: lambda b, x, y, r, a: (a, a),
    arith.SubfOp: lambda b, x, y, r, a: (a, b.neg(a)),
    arith.MulfOp: lambda b, x, y, r, a: (b.mul(a, y), b.mul(a, x)),
    arith.DivfOp: lambda b, x, y, r, a: (_div(b, a, y), b.neg(_div(b, b.mul(a, r), y))),
    arith.NegfOp: lambda b, x, r, a: (b.neg(a),),
    arith.MaximumfOp: lambda b, x, y, r, a: (_pick(b, x, y, a, "ogt"), _pick(b, y, x, a, "ogt")),
    arith.MaxnumfOp: lambda b, x, y, r, a: (_pick(b, x, y, a, "ogt"), _pick(b, y, x, a, "ogt")),
    arith.MinimumfOp: lambda b, x, y, r, a: (_pick(b, x, y, a, "olt"), _pick(b, y, x, a, "olt")),
    arith.MinnumfOp: lambda b, x, y, r, a: (_pick(b, x, y, a, "olt"), _pick(b, y, x, a, "olt")),
    arith.SelectOp: lambda b, cond, x, y, r, a: (
        None, b.select(cond, a, b.const(0.0)), b.select(cond, b.const(0.0), a)),
    mathd.ExpOp: lambda b, x, r, a: (b.mul(a, r),),
    mathd.LogOp: lambda b, x, r, a: (_div(b, a, x),),
    mathd.SqrtOp: lambda b, x, r, a: (_div(b, b.mul(a, b.const(0.5)), r),),
    mathd.RsqrtOp: lambda b, x, r, a: (b.mul(b.mul(a, b.const(-0.5)), b.mul(r, b.mul(r, r))),),
    mathd.TanhOp: lambda b, x, r, a: (b.mul(a, b.sub(b.const(1.0), b.mul(r, r))),),
    mathd.AbsFOp: lambda b, x, r, a: (_sign_times(b, x, a),),
    mathd.ErfOp: lambda b, x, r, a: (b.mul(a, _erf_prime(b, x)),),
    mathd.PowFOp: lambda b, x, p, r, a: (_pow_base(b, x, p, a), _pow_exponent(b, x, p, r, a)),
    mathd.FmaOp: lambda b, x, y, z, r, a: (b.mul(a, y), b.mul(a, x), a),
}
"""The scalar partials of the arith/math ops a fused body holds (comparisons and
constants have none)."""

NO_PARTIALS = (arith.CmpfOp, arith.CmpiOp, arith.ConstantOp)


def _body_adjoint(body: Block, wanted: int) -> ScalarFn:
    """fn(b, *inputs, c): the adjoint of input `wanted` of the fused body `body` for the
    result's cotangent c (forward recomputed, then reverse over the scalar ops)."""

    def fn(b: ScalarBody, *args: SSAValue) -> SSAValue:
        *inputs, c = args
        mapping: dict[SSAValue, SSAValue] = dict(zip(body.args, inputs, strict=True))
        ops = []
        for op in body.ops:
            if isinstance(op, mir.YieldOp):
                result = mapping[op.operands[0]]
                break
            clone = op.clone(value_mapper=mapping)
            b.block.add_op(clone)
            ops.append(clone)
        adjoints: dict[SSAValue, SSAValue] = {result: c}
        for op in reversed(ops):
            a = adjoints.get(op.results[0])
            if a is None or isinstance(op, NO_PARTIALS):
                continue
            partials = SCALAR_PARTIALS.get(type(op))
            if partials is None:
                raise NotImplementedError(f"rlx.grad: no scalar derivative of {op.name} in a "
                                          "fused_elementwise body")
            # Partials are linear in a: where a is 0 they are 0, also where the forward
            # gave inf or nan on a branch a select dropped (softplus's 0/0 when 1 + t
            # rounds to 1), which would otherwise poison the adjoints.
            dropped = _cmp(b, a, b.const(0.0), "oeq")
            for operand, p in zip(op.operands, partials(b, *op.operands, op.results[0], a),
                                  strict=True):
                if p is not None:
                    p = b.select(dropped, b.const(0.0), p)
                    known = adjoints.get(operand)
                    adjoints[operand] = p if known is None else b.add(known, p)
        return adjoints.get(b.block.args[wanted], b.const(0.0))

    return fn


def _fused_elementwise(ctx: VjpContext, op: Operation, cts: Sequence[Value | None]
                       ) -> list[Value | None]:
    """Each f32 input's cotangent: one fused body (the forward body, then its scalar
    adjoint), summed back to the input's shape."""
    assert isinstance(op, mir.FusedElementwiseOp)
    (c,) = cts
    assert c is not None
    inputs = [ctx.value(v) for v in op.inputs]
    return [None if v.dtype != "f32" else
            ctx.unbroadcast(elementwise(ctx, [*inputs, c], _body_adjoint(op.body.block, i)),
                            v.shape)
            for i, v in enumerate(inputs)]


RULES: dict[str, VjpRule] = {
    **{op.name: _unary_rule(d) for op, d in UNARY.items()},
    **{op.name: rule for op, rule in BINARY.items()},
    mir.FusedElementwiseOp.name: _fused_elementwise,
}
"""Op name (`mir.add`) -> its VJP rule."""
