"""VJP rules of the linear algebra, reductions, norms and data movement (matmul, fused_matmul, dequant_matmul, shared_input_matmul, reduce, softmax, rms_norm, layer_norm, transpose, reshape, narrow, concat, broadcast_to, constant, state ops).

Choices: reduce max/min split the cotangent evenly over ties (torch's `amax`/`amin`);
a quantized weight (dequant_matmul, a shared_input_matmul with a scheme) gets no
gradient, and x's gradient is taken through the dequantized weight as if x were
multiplied in f32 (the q8 rounding of x is treated as the identity). Gradients through
a KV cache (insert_rows, extract_rows) are refused; `mir.assign` has no result, so no
gradient flows through it (a state's gradient is the one of its value at the start of
the call).
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np
from xdsl.dialects import arith
from xdsl.ir import Operation

from rlx_mlir.autodiff.context import VjpContext, VjpRule
from rlx_mlir.autodiff.rules_elementwise import UNARY, broadcast_like, elementwise, zeros
from rlx_mlir.core import shape_inference as rules
from rlx_mlir.core.errors import RlxError
from rlx_mlir.dialects import mir
from rlx_mlir.dialects.rlx import Activation, ReduceKind
from rlx_mlir.graph import Graph, Value

Cotangents = Sequence[Value | None]
Result = list[Value | None]

ACTIVATIONS: dict[Activation, type[Operation]] = {
    Activation.RELU: mir.ReluOp,
    Activation.GELU: mir.GeluOp,
    Activation.GELU_TANH: mir.GeluTanhOp,
    Activation.SILU: mir.SiluOp,
    Activation.SIGMOID: mir.SigmoidOp,
    Activation.TANH: mir.TanhOp,
}
"""The elementwise op of each fused activation (its derivative is `UNARY[op]`)."""


def _one(cotangents: Cotangents) -> Value:
    (c,) = cotangents
    assert c is not None
    return c


def _int(attr: object) -> int:
    return attr.value.data  # pyright: ignore[reportAttributeAccessIssue]


# ----------------------------------------------------------------------------- matmul


def swap_last(g: Graph, x: Value) -> Value:
    """x with its last two axes swapped."""
    perm = list(range(x.rank))
    perm[-2], perm[-1] = perm[-1], perm[-2]
    return g.transpose(x, perm)


def matmul_vjp(ctx: VjpContext, a: Value, b: Value, c: Value) -> tuple[Value, Value]:
    """The cotangents of a and b for c, the cotangent of np.matmul(a, b) (1-D operands
    promoted, batch dimensions broadcast)."""
    g = ctx.g
    a2 = a if a.rank >= 2 else g.reshape(a, (1, a.shape[0]))
    b2 = b if b.rank >= 2 else g.reshape(b, (b.shape[0], 1))
    full = rules.matmul(a2.shape, b2.shape)
    c2 = c if c.shape == full else g.reshape(c, full)
    da = ctx.unbroadcast(g.matmul(c2, swap_last(g, b2)), a2.shape)
    if b2.rank == 2 and a2.rank > 2 and rules.is_static_shape(a2.shape):
        # a shared weight: one matmul over all the rows
        k, n = b2.shape
        db = g.matmul(swap_last(g, g.reshape(a2, (-1, k))), g.reshape(c2, (-1, n)))
    else:
        db = ctx.unbroadcast(g.matmul(swap_last(g, a2), c2), b2.shape)
    da = da if da.shape == a.shape else g.reshape(da, a.shape)
    db = db if db.shape == b.shape else g.reshape(db, b.shape)
    return da, db


def _matmul(ctx: VjpContext, op: Operation, cts: Cotangents) -> Result:
    a, b = ctx.value(op.operands[0]), ctx.value(op.operands[1])
    return list(matmul_vjp(ctx, a, b, _one(cts)))


def _fused_matmul(ctx: VjpContext, op: Operation, cts: Cotangents) -> Result:
    """activation(a @ b + bias): the pre-activation recomputed, then the activation's
    derivative, the bias's sum and the matmul's cotangents."""
    assert isinstance(op, mir.FusedMatmulOp)
    g, c = ctx.g, _one(cts)
    a, b = ctx.value(op.lhs), ctx.value(op.rhs)
    bias = None if op.bias is None else ctx.value(op.bias)
    if op.activation is not None:
        z = g.matmul(a, b)
        z = z if bias is None else g.add(z, bias)
        y = ctx.value(op.result)
        c = elementwise(ctx, [z, y, c], UNARY[ACTIVATIONS[op.activation.data]])
    da, db = matmul_vjp(ctx, a, b, c)
    return [da, db] + ([] if bias is None else [ctx.unbroadcast(c, bias.shape)])


def dequantized(g: Graph, w: Value, scheme: str) -> Value:
    """The f32 [N, K] of the raw GGUF blocks w [N, bytes] (every row looked up)."""
    ids = g.constant(np.arange(w.shape[0], dtype=np.int32))
    return g.embedding(w, ids, scheme=scheme)


def _dequant_matmul(ctx: VjpContext, op: Operation, cts: Cotangents) -> Result:
    """x @ dequant(w)^T (+ residual): x gets c @ dequant(w), a fused residual c; the
    bytes w none."""
    assert isinstance(op, mir.DequantMatmulOp)
    w = dequantized(ctx.g, ctx.value(op.w), op.scheme.data.value)
    c = _one(cts)
    return [ctx.g.matmul(c, w), None] + ([] if op.residual is None else [c])


def _shared_input_matmul(ctx: VjpContext, op: Operation, cts: Cotangents) -> Result:
    """x @ w_i for each weight: x gets the sum over the products reached, each f32 weight
    its matmul cotangent; quantized weights (a scheme) none."""
    assert isinstance(op, mir.SharedInputMatmulOp)
    for fused, what in ((op.norm_weight, "a fused rms_norm (norm_weight)"),
                        (op.residual, "a fused residual sum (residual)"),
                        (op.glu, "a fused gated linear unit (glu)"),
                        (op.rope_products, "a fused rope (rope_products)"),
                        (op.cache_products, "fused cache inserts (cache_products)")):
        if fused is not None:  # mir-fuse's forms: autodiff runs before mir-fuse
            raise RlxError(f"rlx.grad: {op.name} with {what} has no gradient rule; "
                           f"differentiate the graph before mir-fuse")
    g = ctx.g
    x = ctx.value(op.x)
    scheme = op.scheme
    dx: Value | None = None
    dws: Result = []
    for w_ssa, c in zip(op.weights, cts, strict=True):
        w = ctx.value(w_ssa)
        if c is None:
            dws.append(None)
            continue
        if scheme is None:
            part, dw = matmul_vjp(ctx, x, w, c)
        else:
            part, dw = g.matmul(c, dequantized(g, w, scheme.data.value)), None
        dx = part if dx is None else g.add(dx, part)
        dws.append(dw)
    return [dx, *dws]


# ----------------------------------------------------------------------------- reductions


def _kept(shape: rules.Shape, axes: Sequence[int]) -> rules.Shape:
    return tuple(1 if i in axes else d for i, d in enumerate(shape))


def _reduce(ctx: VjpContext, op: Operation, cts: Cotangents) -> Result:
    """sum: the cotangent broadcast back; mean: divided by the count; max/min: to the
    positions equal to the result, split evenly over ties (torch's amax/amin)."""
    assert isinstance(op, mir.ReduceOp)
    g = ctx.g
    x = ctx.value(op.input)
    axes = tuple(op.axes.get_values())
    kept = _kept(x.shape, axes)
    c = _one(cts)
    c = c if c.shape == kept else g.reshape(c, kept)
    kind = op.kind.data
    if kind in (ReduceKind.SUM, ReduceKind.MEAN):
        if kind is ReduceKind.MEAN:
            c = g.div(c, _count(ctx, x, axes))
        return [broadcast_like(ctx, c, x)]
    y = ctx.value(op.result)
    y = y if y.shape == kept else g.reshape(y, kept)
    hit = elementwise(ctx, [x, y], lambda b, xv, yv: b.select(
        b.emit(arith.CmpfOp(xv, yv, "oeq")), b.const(1.0), b.const(0.0)))
    count = g.reduce_sum(hit, axes, keepdim=True)
    return [elementwise(ctx, [hit, c, count], lambda b, h, cv, n: b.mul(
        h, b.float_op(arith.DivfOp, cv, n)))]


def _count(ctx: VjpContext, x: Value, axes: Sequence[int]) -> Value | float:
    """How many elements the `axes` of x hold: a float, or (symbolic dims) a Value
    counted at run time (kept dims)."""
    dims = [x.shape[a] for a in axes]
    if all(rules.is_static(d) for d in dims):
        return float(np.prod(dims))
    ones = elementwise(ctx, [x], lambda b, _: b.const(1.0))
    return ctx.g.reduce_sum(ones, tuple(axes), keepdim=True)


def _softmax(ctx: VjpContext, op: Operation, cts: Cotangents) -> Result:
    """y * (c - sum(c * y, axis))."""
    assert isinstance(op, mir.SoftmaxOp)
    g, c = ctx.g, _one(cts)
    y = ctx.value(op.result)
    s = g.reduce_sum(g.mul(c, y), _int(op.axis), keepdim=True)
    return [g.mul(y, g.sub(c, s))]


def _rms_norm(ctx: VjpContext, op: Operation, cts: Cotangents) -> Result:
    """n = x r, r = rsqrt(mean(x^2) + eps): x gets r (dn - n mean(dn n)) with dn = c gamma;
    gamma the sum of c n, beta the sum of c."""
    assert isinstance(op, mir.RmsNormOp)
    g, c = ctx.g, _one(cts)
    x, gamma = ctx.value(op.x), ctx.value(op.gamma)
    r = g.rsqrt(g.add(g.reduce_mean(g.mul(x, x), -1, keepdim=True), op.eps.value.data))
    n = g.mul(x, r)
    dn = g.mul(c, gamma)
    dx = g.mul(r, g.sub(dn, g.mul(n, g.reduce_mean(g.mul(dn, n), -1, keepdim=True))))
    result: Result = [dx, ctx.unbroadcast(g.mul(c, n), gamma.shape)]
    if op.beta is not None:
        result.append(ctx.unbroadcast(c, ctx.value(op.beta).shape))
    return result


def _layer_norm(ctx: VjpContext, op: Operation, cts: Cotangents) -> Result:
    """n = (x - mean) r, r = rsqrt(var + eps): x gets r (dn - mean(dn) - n mean(dn n))
    with dn = c gamma; gamma the sum of c n, beta the sum of c."""
    assert isinstance(op, mir.LayerNormOp)
    g, c = ctx.g, _one(cts)
    x, gamma, beta = ctx.value(op.x), ctx.value(op.gamma), ctx.value(op.beta)
    centered = g.sub(x, g.reduce_mean(x, -1, keepdim=True))
    var = g.reduce_mean(g.mul(centered, centered), -1, keepdim=True)
    r = g.rsqrt(g.add(var, op.eps.value.data))
    n = g.mul(centered, r)
    dn = g.mul(c, gamma)
    inner = g.sub(g.sub(dn, g.reduce_mean(dn, -1, keepdim=True)),
                  g.mul(n, g.reduce_mean(g.mul(dn, n), -1, keepdim=True)))
    return [g.mul(r, inner), ctx.unbroadcast(g.mul(c, n), gamma.shape),
            ctx.unbroadcast(c, beta.shape)]


# ----------------------------------------------------------------------------- data movement


def _transpose(ctx: VjpContext, op: Operation, cts: Cotangents) -> Result:
    assert isinstance(op, mir.TransposeOp)
    perm = list(op.perm.get_values())
    inverse = [perm.index(i) for i in range(len(perm))]
    return [ctx.g.transpose(_one(cts), inverse)]


def _reshape(ctx: VjpContext, op: Operation, cts: Cotangents) -> Result:
    return [ctx.g.reshape(_one(cts), ctx.value(op.operands[0]).shape)]


def _broadcast_to(ctx: VjpContext, op: Operation, cts: Cotangents) -> Result:
    return [ctx.unbroadcast(_one(cts), ctx.value(op.operands[0]).shape)]




def _narrow(ctx: VjpContext, op: Operation, cts: Cotangents) -> Result:
    """The cotangent padded with zeros back to the input's extent along `axis`."""
    assert isinstance(op, mir.NarrowOp)
    g, c = ctx.g, _one(cts)
    x = ctx.value(op.input)
    axis, start, length = _int(op.axis), _int(op.start), _int(op.length)
    after = x.shape[axis] - start - length
    if not isinstance(after, int):
        raise RlxError(f"rlx.grad: mir.narrow along a symbolic axis ({rules.fmt(x.shape)}) is "
                       "not supported yet")
    pieces = []
    for size in (start, None, after):
        if size is None:
            pieces.append(c)
        elif size > 0:
            pieces.append(zeros(g, tuple(size if i == axis else d
                                         for i, d in enumerate(c.shape))))
    return [pieces[0] if len(pieces) == 1 else g.concat(pieces, axis)]


def _concat(ctx: VjpContext, op: Operation, cts: Cotangents) -> Result:
    """Each input gets its slice of the cotangent."""
    assert isinstance(op, mir.ConcatOp)
    g, c = ctx.g, _one(cts)
    axis = _int(op.axis)
    result: Result = []
    offset = 0
    for v in op.inputs:
        value = ctx.value(v)
        size = value.shape[axis]
        if not isinstance(size, int):
            raise RlxError("rlx.grad: mir.concat along a symbolic axis is not supported yet")
        result.append(None if value.dtype != "f32" else g.narrow(c, axis, offset, size))
        offset += size
    return result


def _constant(ctx: VjpContext, op: Operation, cts: Cotangents) -> Result:
    return []


def _refuse_cache(ctx: VjpContext, op: Operation, cts: Cotangents) -> Result:
    raise RlxError(f"rlx.grad: {op.name}: gradients through a KV cache (cache_append) are not "
                   "supported; differentiate a graph without caches")


def _assign(ctx: VjpContext, op: Operation, cts: Cotangents) -> Result:
    return [None, None]  # no result: nothing reaches it (the walker never calls it)


RULES: dict[str, VjpRule] = {
    mir.MatmulOp.name: _matmul,
    mir.FusedMatmulOp.name: _fused_matmul,
    mir.DequantMatmulOp.name: _dequant_matmul,
    mir.SharedInputMatmulOp.name: _shared_input_matmul,
    mir.ReduceOp.name: _reduce,
    mir.SoftmaxOp.name: _softmax,
    mir.RmsNormOp.name: _rms_norm,
    mir.LayerNormOp.name: _layer_norm,
    mir.TransposeOp.name: _transpose,
    mir.ReshapeOp.name: _reshape,
    mir.BroadcastToOp.name: _broadcast_to,
    mir.NarrowOp.name: _narrow,
    mir.ConcatOp.name: _concat,
    mir.ConstantOp.name: _constant,
    mir.InsertRowsOp.name: _refuse_cache,
    mir.ExtractRowsOp.name: _refuse_cache,
    mir.AssignOp.name: _assign,
}
"""Op name (`mir.add`) -> its VJP rule."""
