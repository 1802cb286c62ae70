"""mir-fuse: fuse MIR primitives into fewer, larger kernels (mir -> mir).

Two rounds of small patterns, in this order so that a matmul epilogue is never taken by
an elementwise chain first:

1. matmul epilogues:
   - `mir.add(matmul(a, w), bias[N])` (either operand order, the matmul used only by the
     add, w of rank >= 2 with last dim N) -> `mir.fused_matmul a, w, bias`;
   - `act(matmul | fused_matmul)` with `act` one of relu gelu gelu_tanh silu sigmoid tanh
     and the product used only by it (a fused_matmul without an activation yet) ->
     `mir.fused_matmul ... activation act`.
2. elementwise trees: a maximal tree of f32 elementwise ops (the 7 binary and 12 unary mir
   ops, and earlier `mir.fused_elementwise` ops) whose inner values have one use, all of
   the root's shape, becomes ONE `mir.fused_elementwise` whose body computes the tree on
   scalars with `arith`/`math` ops. Its inputs are the tree's leaves, each once; they
   broadcast to the root's shape. Splat f32 constants among the leaves (rank-0 scalars
   included) become `arith.constant`s in the body instead of inputs. By default inner
   values of a smaller (broadcast) shape stay outside the tree, so no value is computed
   more than once per element; option `fuse-broadcast=true` takes them in too. A tree of
   one op is left as it is.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from dataclasses import dataclass

from xdsl.context import Context
from xdsl.dialects import arith
from xdsl.dialects import math as mathd
from xdsl.dialects.builtin import (
    DenseIntOrFPElementsAttr,
    Float32Type,
    FloatAttr,
    ModuleOp,
    TensorType,
    f32,
)
from xdsl.ir import Attribute, Block, Operation, OpResult, Region, SSAValue
from xdsl.passes import ModulePass
from xdsl.pattern_rewriter import (
    GreedyRewritePatternApplier,
    PatternRewriter,
    PatternRewriteWalker,
    RewritePattern,
    op_type_rewrite_pattern,
)

from rlx_mlir.dialects import mir
from rlx_mlir.dialects.common import shape_of
from rlx_mlir.dialects.mir_canonicalization import to_numpy
from rlx_mlir.dialects.rlx import Activation
from rlx_mlir.passes.provenance import Derive, with_provenance

ACTIVATION_OPS: dict[type[Operation], Activation] = {
    mir.ReluOp: Activation.RELU,
    mir.GeluOp: Activation.GELU,
    mir.GeluTanhOp: Activation.GELU_TANH,
    mir.SiluOp: Activation.SILU,
    mir.SigmoidOp: Activation.SIGMOID,
    mir.TanhOp: Activation.TANH,
}
"""The unary mir ops a fused_matmul can apply as its activation."""

ActivationOp = mir.ReluOp | mir.GeluOp | mir.GeluTanhOp | mir.SiluOp | mir.SigmoidOp | mir.TanhOp
ElementwiseOp = mir.BinaryElementwiseOp | mir.UnaryElementwiseOp | mir.FusedElementwiseOp


# ----------------------------------------------------------------------------- matmul epilogues


def _single_use_product(value: SSAValue) -> mir.MatmulOp | mir.FusedMatmulOp | None:
    """The matmul (or fused_matmul without an activation) computing `value`, when `value`
    has exactly one use."""
    owner = value.owner
    if not value.has_one_use() or not isinstance(owner, mir.MatmulOp | mir.FusedMatmulOp):
        return None
    if isinstance(owner, mir.FusedMatmulOp) and owner.activation is not None:
        return None
    return owner


def _fits_bias(product: mir.MatmulOp | mir.FusedMatmulOp, bias: SSAValue) -> bool:
    """`bias` is a 1-D [N] for a product whose rhs is at least 2-D with last dim N."""
    if isinstance(product, mir.FusedMatmulOp) and product.bias is not None:
        return False
    rhs = shape_of(product.rhs)
    return len(rhs) >= 2 and shape_of(bias) == rhs[-1:]


class FuseMatmulBias(RewritePattern):
    """add(matmul(a, w), bias) or add(bias, matmul(a, w)) -> fused_matmul(a, w, bias)."""

    @op_type_rewrite_pattern
    def match_and_rewrite(self, op: mir.AddOp, rewriter: PatternRewriter, /):
        for product_value, bias in ((op.lhs, op.rhs), (op.rhs, op.lhs)):
            product = _single_use_product(product_value)
            if product is None or product_value.type != op.result.type:
                continue
            if not _fits_bias(product, bias):
                continue
            fused = mir.FusedMatmulOp(product.lhs, product.rhs, bias, result_type=op.result.type)
            rewriter.replace(op, fused)
            rewriter.erase(product)
            return


class FuseMatmulActivation(RewritePattern):
    """act(matmul(a, w)) or act(fused_matmul(a, w, bias?)) -> fused_matmul with activation."""

    @op_type_rewrite_pattern
    def match_and_rewrite(self, op: ActivationOp, rewriter: PatternRewriter, /):
        product = _single_use_product(op.input)
        if product is None:
            return
        bias = product.bias if isinstance(product, mir.FusedMatmulOp) else None
        fused = mir.FusedMatmulOp(
            product.lhs,
            product.rhs,
            bias,
            activation=ACTIVATION_OPS[type(op)],
            result_type=op.result.type,
        )
        rewriter.replace(op, fused)
        rewriter.erase(product)


# ----------------------------------------------------------------------------- scalar bodies


class ScalarBody:
    """Appends scalar f32 `arith`/`math` ops to a block; constants are made once each."""

    def __init__(self, block: Block):
        self.block = block
        self._constants: dict[float, SSAValue] = {}

    def emit(self, op: Operation) -> SSAValue:
        self.block.add_op(op)
        return op.results[0]

    def const(self, value: float) -> SSAValue:
        if value not in self._constants:
            self._constants[value] = self.emit(arith.ConstantOp(FloatAttr(value, f32)))
        return self._constants[value]

    # composite functions, as docs/semantics.md defines them

    def sigmoid(self, x: SSAValue) -> SSAValue:
        """1 / (1 + exp(-x))."""
        e = self.emit(mathd.ExpOp(self.emit(arith.NegfOp(x))))
        return self.emit(arith.DivfOp(self.const(1.0), self.emit(arith.AddfOp(self.const(1.0), e))))

    def silu(self, x: SSAValue) -> SSAValue:
        """x * sigmoid(x)."""
        return self.emit(arith.MulfOp(x, self.sigmoid(x)))

    def gelu(self, x: SSAValue) -> SSAValue:
        """0.5 * x * (1 + erf(x / sqrt(2)))."""
        erf = self.emit(mathd.ErfOp(self.emit(arith.MulfOp(x, self.const(math.sqrt(0.5))))))
        return self._half_x_one_plus(x, erf)

    def gelu_tanh(self, x: SSAValue) -> SSAValue:
        """0.5 * x * (1 + tanh(sqrt(2/pi) * (x + 0.044715 * x^3)))."""
        x3 = self.emit(arith.MulfOp(self.emit(arith.MulfOp(x, x)), x))
        inner = self.emit(arith.AddfOp(x, self.emit(arith.MulfOp(self.const(0.044715), x3))))
        u = self.emit(arith.MulfOp(self.const(math.sqrt(2.0 / math.pi)), inner))
        return self._half_x_one_plus(x, self.emit(mathd.TanhOp(u)))

    def _half_x_one_plus(self, x: SSAValue, t: SSAValue) -> SSAValue:
        """0.5 * x * (1 + t)."""
        one_plus = self.emit(arith.AddfOp(self.const(1.0), t))
        return self.emit(arith.MulfOp(self.emit(arith.MulfOp(self.const(0.5), x)), one_plus))

    def softplus(self, x: SSAValue) -> SSAValue:
        """max(x, 0) + log1p(e^-|x|), log1p(t) = log(u)·t/(u - 1) with u = 1 + t (t where u
        rounds to 1): as the `lir.elementwise softplus` kernel computes it."""
        t = self.emit(mathd.ExpOp(self.emit(arith.NegfOp(self.emit(mathd.AbsFOp(x))))))
        u = self.emit(arith.AddfOp(self.const(1.0), t))
        d = self.emit(arith.SubfOp(u, self.const(1.0)))
        ratio = self.emit(arith.DivfOp(self.emit(arith.MulfOp(self.emit(mathd.LogOp(u)), t)), d))
        rounds_to_one = self.emit(arith.CmpfOp(d, self.const(0.0), "oeq"))
        log1p = self.emit(arith.SelectOp(rounds_to_one, t, ratio))
        return self.emit(arith.AddfOp(self.emit(arith.MaximumfOp(x, self.const(0.0))), log1p))

    def relu(self, x: SSAValue) -> SSAValue:
        """maximumf(x, 0)."""
        return self.emit(arith.MaximumfOp(x, self.const(0.0)))


ScalarFn = Callable[[ScalarBody, Sequence[SSAValue]], SSAValue]


def _op1(cls: Callable[[SSAValue], Operation]) -> ScalarFn:
    return lambda body, args: body.emit(cls(args[0]))


def _op2(cls: Callable[[SSAValue, SSAValue], Operation]) -> ScalarFn:
    return lambda body, args: body.emit(cls(args[0], args[1]))


SCALAR_BODIES: dict[type[Operation], ScalarFn] = {
    mir.AddOp: _op2(arith.AddfOp),
    mir.SubOp: _op2(arith.SubfOp),
    mir.MulOp: _op2(arith.MulfOp),
    mir.DivOp: _op2(arith.DivfOp),
    mir.MaxOp: _op2(arith.MaximumfOp),
    mir.MinOp: _op2(arith.MinimumfOp),
    mir.PowOp: _op2(mathd.PowFOp),
    mir.NegOp: _op1(arith.NegfOp),
    mir.ExpOp: _op1(mathd.ExpOp),
    mir.LogOp: _op1(mathd.LogOp),
    mir.SqrtOp: _op1(mathd.SqrtOp),
    mir.RsqrtOp: _op1(mathd.RsqrtOp),
    mir.TanhOp: _op1(mathd.TanhOp),
    mir.AbsOp: _op1(mathd.AbsFOp),
    mir.SigmoidOp: lambda body, args: body.sigmoid(args[0]),
    mir.SiluOp: lambda body, args: body.silu(args[0]),
    mir.GeluOp: lambda body, args: body.gelu(args[0]),
    mir.GeluTanhOp: lambda body, args: body.gelu_tanh(args[0]),
    mir.ReluOp: lambda body, args: body.relu(args[0]),
    mir.SoftplusOp: lambda body, args: body.softplus(args[0]),
}
"""The scalar computation of each elementwise mir op, on f32 scalars."""


def _inline_fused(op: mir.FusedElementwiseOp, body: ScalarBody, args: Sequence[SSAValue]):
    """Clone the body of a fused_elementwise with its block arguments bound to `args`."""
    mapping: dict[SSAValue, SSAValue] = dict(zip(op.body.block.args, args, strict=True))
    for inner in op.body.block.ops:
        if isinstance(inner, mir.YieldOp):
            return mapping.get(inner.arguments[0], inner.arguments[0])
        body.block.add_op(inner.clone(mapping))
    raise AssertionError("a verified fused_elementwise body ends in mir.yield")


# ----------------------------------------------------------------------------- elementwise trees


def _is_f32(value: SSAValue) -> bool:
    return isinstance(value.type, TensorType) and isinstance(
        value.type.get_element_type(), Float32Type
    )


def _fusable(op: Operation) -> bool:
    """An f32 elementwise op (or fused_elementwise) that a tree may contain."""
    if isinstance(op, mir.FusedElementwiseOp):
        return _is_f32(op.result)
    return type(op) in SCALAR_BODIES and all(_is_f32(v) for v in (*op.operands, *op.results))


def _absorbable_into(op: Operation, user: Operation, fuse_broadcast: bool) -> bool:
    """`op` becomes an inner node of the tree holding `user`: both fusable, `op`'s value
    used only by `user`, in the same block, and of `user`'s type unless `fuse_broadcast`
    (a smaller value is then recomputed for every element it broadcasts to)."""
    return (
        _fusable(op)
        and _fusable(user)
        and op.results[0].get_user_of_unique_use() is user
        and op.parent_block() is user.parent_block()
        and (fuse_broadcast or op.results[0].type == user.results[0].type)
    )


def _is_tree_root(op: Operation, fuse_broadcast: bool) -> bool:
    user = op.results[0].get_user_of_unique_use() if op.results else None
    return _fusable(op) and (user is None or not _absorbable_into(op, user, fuse_broadcast))


def _collect_tree(root: Operation, fuse_broadcast: bool) -> tuple[list[Operation], list[SSAValue]]:
    """The tree's ops in post-order (root last) and its leaves (each value once, in the
    order a depth-first walk from the root reaches them). Iterative: chains can be long."""
    nodes: list[Operation] = []
    leaves: dict[SSAValue, None] = {}
    stack = [(root, iter(root.operands))]
    while stack:
        op, operands = stack[-1]
        for operand in operands:
            owner = operand.owner
            if isinstance(owner, Operation) and _absorbable_into(owner, op, fuse_broadcast):
                stack.append((owner, iter(owner.operands)))
                break
            leaves.setdefault(operand)
        else:
            stack.pop()
            nodes.append(op)
    return nodes, list(leaves)


def _splat_f32(value: SSAValue) -> float | None:
    """The value of a splat f32 `mir.constant` (e.g. a rank-0 scalar), else None."""
    if not isinstance(value, OpResult) or not isinstance(value.owner, mir.ConstantOp):
        return None
    dense = value.owner.value
    if not isinstance(dense, DenseIntOrFPElementsAttr) or not _is_f32(value):
        return None
    array = to_numpy(dense)
    if array is None or not (array == array.flat[0]).all():
        return None
    return float(array.flat[0])


def _element_type(value: SSAValue) -> Attribute:
    assert isinstance(value.type, TensorType)
    return value.type.get_element_type()


def build_fused_elementwise(
    nodes: Sequence[Operation], leaves: Sequence[SSAValue], result_type: Attribute
) -> tuple[mir.FusedElementwiseOp, list[Operation]]:
    """The fused_elementwise computing the tree `nodes` (post-order) over `leaves`, and the
    splat constants it absorbed into its body."""
    constants = {leaf: c for leaf in leaves if (c := _splat_f32(leaf)) is not None}
    if len(constants) == len(leaves):  # keep one input: a fused op has at least one
        del constants[leaves[0]]
    inputs = [leaf for leaf in leaves if leaf not in constants]
    block = Block(arg_types=[_element_type(v) for v in inputs])
    body = ScalarBody(block)
    scalars: dict[SSAValue, SSAValue] = dict(zip(inputs, block.args, strict=True))
    for leaf, value in constants.items():
        scalars[leaf] = body.const(value)
    for node in nodes:
        args = [scalars[v] for v in node.operands]
        if isinstance(node, mir.FusedElementwiseOp):
            scalars[node.results[0]] = _inline_fused(node, body, args)
        else:
            scalars[node.results[0]] = SCALAR_BODIES[type(node)](body, args)
    block.add_op(mir.YieldOp(scalars[nodes[-1].results[0]]))
    absorbed = [leaf.owner for leaf in constants if isinstance(leaf.owner, Operation)]
    return mir.FusedElementwiseOp(inputs, result_type, Region(block)), absorbed


@dataclass
class FuseElementwiseTree(RewritePattern):
    """A maximal tree of single-use f32 elementwise ops -> one mir.fused_elementwise."""

    fuse_broadcast: bool = False
    """Also take inner values of a smaller shape than the root's (see `MirFusePass`)."""

    @op_type_rewrite_pattern
    def match_and_rewrite(self, op: ElementwiseOp, rewriter: PatternRewriter, /):
        if not _is_tree_root(op, self.fuse_broadcast):
            return
        nodes, leaves = _collect_tree(op, self.fuse_broadcast)
        if len(nodes) < 2:
            return
        fused, absorbed = build_fused_elementwise(nodes, leaves, op.results[0].type)
        rewriter.replace(op, fused)
        for node in reversed(nodes[:-1]):  # users before their operands
            rewriter.erase(node)
        for constant in dict.fromkeys(absorbed):
            if not constant.results[0].uses:
                rewriter.erase(constant)


# ----------------------------------------------------------------------------- the pass


@dataclass(frozen=True)
class MirFusePass(ModulePass):
    """Fuse matmul epilogues (bias, activation) into `mir.fused_matmul`, then trees of
    elementwise ops into `mir.fused_elementwise`."""

    name = "mir-fuse"

    fuse_broadcast: bool = False
    """Let an elementwise tree take inner values of a smaller (broadcast) shape than its
    root's, e.g. a per-row `rsqrt` into a per-element product: one kernel instead of two,
    but the smaller value is recomputed for every element it broadcasts to."""

    def apply(self, ctx: Context, op: ModuleOp) -> None:
        PatternRewriteWalker(
            with_provenance(GreedyRewritePatternApplier(
                [FuseMatmulBias(), FuseMatmulActivation()], dce_enabled=False
            ), Derive.FUSE)  # a fused op is located at every op it replaces
        ).rewrite_module(op)
        PatternRewriteWalker(
            with_provenance(GreedyRewritePatternApplier(
                [FuseElementwiseTree(self.fuse_broadcast)], dce_enabled=False
            ), Derive.FUSE)
        ).rewrite_module(op)
