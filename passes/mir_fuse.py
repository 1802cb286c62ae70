"""mir-fuse: fuse MIR primitives into fewer, larger kernels (mir -> mir).

Rounds of small patterns, in this order so that a matmul epilogue, a shared input and a
q8 edge are never taken by an elementwise tree first:

1. matmul epilogues:
   - `mir.add(matmul(a, w), bias[N])` (either operand order, the matmul used only by the
     add, w of rank >= 2 with last dim N) -> `mir.fused_matmul a, w, bias`;
   - `act(matmul | fused_matmul)` with `act` one of relu gelu gelu_tanh silu sigmoid tanh
     and the product used only by it (a fused_matmul without an activation yet) ->
     `mir.fused_matmul ... activation act`.
2. shared inputs (option `shared-input`), after the epilogue round so that a matmul
   fused with its bias/activation stays a `mir.fused_matmul`: the sibling `mir.matmul`s
   with a 2-D rhs on one lhs value, and the sibling `mir.dequant_matmul`s of one scheme and
   activation form on one x, become one `mir.shared_input_matmul` (all of them, N >= 2;
   q/k/v, gate/up) whose kernel reads the input once.
3. q8 edges (option `q8-edges`), after the shared inputs: the fusions that take small
   kernels out from between the q8 products of a transformer layer, and with them the
   thread barriers around them (lir-parallelize):
   - `rms_norm(h, gamma)` without a beta, read only as the x of q8 products (a
     `mir.shared_input_matmul` without a norm, a `mir.dequant_matmul` without a residual
     whose product is not an add's) -> each of them `mir.shared_input_matmul h, ...
     norm(gamma) eps` (a dequant_matmul: one weight): each kernel normalizes the rows of
     h before quantizing them, as every part of it quantizes its rows anyway. Products of
     different schemes on one norm (a Q4_K_M file's Q8_0 attn_v beside Q5_0 q/k) then
     run side by side with no kernel and no barrier before them;
   - then, with h = `mir.add(r, rms_norm(p, g1))` (either order; the norm used only by the
     add, no beta; h's other uses after the op) -> `mir.shared_input_matmul p, ...
     residual(r, g1) eps norm(gamma) eps`: each row becomes r + rms_norm(p, g1) in the
     kernel, which also hands that sum out as its last result (in place of h's other
     uses); a later q8 product normalizing h too takes the same form (its own sum left
     unused), so it needs no barrier after the first. Gemma 3's post-attention and
     post-FFN norms then stand between no two kernels;
   - `mir.add(r, dequant_matmul(x, w))` (either order) of q8 activations, the product used
     only by the add and r of the result's shape -> `mir.dequant_matmul x, w residual r`:
     r is added as the product is stored;
   - `mir.mul(act(g), u)` (either order; act one of relu gelu gelu_tanh silu sigmoid tanh)
     with g and u the two products of a q8 `mir.shared_input_matmul`, g used only by act
     and act only by the mul -> that op with `glu act` (its gate weight first): its first
     product is act(g) * u, computed in the kernel's epilogue (SwiGLU, GeGLU). Its
     numbers are those of the `mir.fused_elementwise` the elementwise round would make;
   - `mir.rope(p, cos, sin)` of the interleaved style with p a rank-2 product of a q8
     `mir.shared_input_matmul` (no glu), used only there, cos and sin defined before it
     -> that op with p in its `rope_products` (one cos/sin/head_dim/n_rot for all): the
     kernel rotates each tile as it is stored (a half-style pair spans two tiles);
   - `mir.insert_rows(p, cache, position)` with p such a product (after a fused rope:
     its rotated rows), the old cache read by nothing but its `mir.assign` -> that op
     with p in its `cache_products` and the cache among its `caches`: the product is the
     updated cache, which bufferization makes the cache's state buffer, written by the
     kernel in place. With q and k roped and k and v inserted, nothing stands between a
     llama layer's q/k/v product and its attention.
4. elementwise trees: a maximal tree of f32 elementwise ops (the binary and unary mir ops
   of `registry.ELEMENTWISE_FNS`, and earlier `mir.fused_elementwise` ops) whose inner values have one use, all of
   the root's shape, becomes ONE `mir.fused_elementwise` whose body computes the tree on
   scalars with `arith`/`math` ops. Its inputs are the tree's leaves, each once; they
   broadcast to the root's shape. Each op's scalar body is its `ElementwiseFn`'s
   (`rlx_mlir.dialects.elementwise_fns.BODIES`, the definition the `lir.elementwise` kernel
   is generated from too). Splat f32 constants among the leaves (rank-0 scalars
   included) become `arith.constant`s in the body instead of inputs. By default inner
   values of a smaller (broadcast) shape stay outside the tree, so no value is computed
   more than once per element; option `fuse-broadcast=true` takes them in too. A tree of
   one op is left as it is.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from dataclasses import dataclass

from xdsl.context import Context
from xdsl.dialects.builtin import (
    DenseIntOrFPElementsAttr,
    Float32Type,
    FusedLoc,
    ModuleOp,
    NoneAttr,
    TensorType,
)
from xdsl.ir import Attribute, Block, Operation, OpResult, Region, SSAValue, Use
from xdsl.passes import ModulePass
from xdsl.pattern_rewriter import (
    GreedyRewritePatternApplier,
    PatternRewriter,
    PatternRewriteWalker,
    RewritePattern,
    op_type_rewrite_pattern,
)
from xdsl.rewriter import InsertPoint

from rlx_mlir.core.locations import loc_names
from rlx_mlir.dialects import mir, registry
from rlx_mlir.dialects.common import shape_of
from rlx_mlir.dialects.elementwise_fns import BODIES, ScalarBody
from rlx_mlir.dialects.mir_canonicalization import to_numpy
from rlx_mlir.dialects.rlx import Activation, ActivationAttr, QuantActivations, RopeStyle
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


def _scalar(node: Operation, body: ScalarBody, args: Sequence[SSAValue]) -> SSAValue:
    """The scalar computation of elementwise mir op `node` (its `ElementwiseFn`'s body)."""
    return BODIES[registry.ELEMENTWISE_FNS[type(node)]](body, *args)


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
    return type(op) in registry.ELEMENTWISE_FNS and all(_is_f32(v) for v in (*op.operands, *op.results))


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
            scalars[node.results[0]] = _scalar(node, body, args)
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


# ----------------------------------------------------------------------------- shared inputs


def _sibling_key(op: Operation) -> tuple[object, ...] | None:
    """What must agree for two products of one input to merge: the kind, and a
    dequant_matmul's scheme and activation form (None: `op` cannot merge)."""
    if isinstance(op, mir.MatmulOp) and len(shape_of(op.rhs)) == 2 and len(shape_of(op.lhs)) >= 1:
        return ("f32",)
    if isinstance(op, mir.DequantMatmulOp) and op.residual is None:
        return ("gguf", op.scheme.data, mir.activations_of(op))
    return None


class FuseSharedInput(RewritePattern):
    """The sibling products of one input (`_sibling_key` equal), read in block order, ->
    one `mir.shared_input_matmul` placed at the first of them (its weights are defined
    before it: a matmul's weight dominates the matmul; the first one only is the bound,
    so siblings whose weight is computed between them are left out)."""

    def match_and_rewrite(self, op: Operation, rewriter: PatternRewriter, /) -> None:
        key = _sibling_key(op)
        if key is None:
            return
        x = op.operands[0]
        siblings = [use.operation for use in x.uses
                    if use.index == 0 and use.operation.parent_block() is op.parent_block()
                    and _sibling_key(use.operation) == key]
        block = op.parent_block()
        assert block is not None
        order = {o: i for i, o in enumerate(block.ops)}
        siblings = sorted(dict.fromkeys(siblings), key=order.__getitem__)
        if len(siblings) < 2 or siblings[0] is not op:
            return
        siblings = [s for s in siblings if _defined_before(s.operands[1], op, order)]
        if len(siblings) < 2:
            return
        weights = [s.operands[1] for s in siblings]
        if key[0] == "f32":
            merged = mir.SharedInputMatmulOp(x, weights)
        else:
            merged = mir.SharedInputMatmulOp(x, weights, scheme=op.scheme,
                                             activations=op.properties.get("activations"))
        located = [s.location for s in siblings if loc_names(s.location)]
        if len(located) > 1:  # at every product it replaces (else Derive.FUSE's, the first's)
            merged.location = FusedLoc(located, NoneAttr())
        rewriter.insert(merged, InsertPoint.before(op))
        for sibling, product in zip(siblings, merged.products, strict=True):
            rewriter.replace(sibling, [], [product])


def _defined_before(value: SSAValue, op: Operation, order: dict[Operation, int]) -> bool:
    """Whether `value` is available at `op` (a block argument, or defined before it)."""
    owner = value.owner
    return not isinstance(owner, Operation) or owner not in order or order[owner] < order[op]


# ----------------------------------------------------------------------------- q8 edges


def _takes_norm(use: Use) -> bool:
    """Whether the user of a normed value can take the norm into its kernel: as x of a q8
    shared_input_matmul without a norm yet, or of a q8 dequant_matmul without a residual
    whose product is not an add's (FuseResidualIntoDequantMatmul's epilogue keeps it)."""
    op = use.operation
    if use.index != 0 or mir.activations_of(op) != QuantActivations.Q8:
        return False
    if isinstance(op, mir.SharedInputMatmulOp):
        return op.norm_weight is None and op.x not in op.operands[1:]
    if isinstance(op, mir.DequantMatmulOp):
        feeds_add = op.result.has_one_use() and isinstance(next(iter(op.result.uses)).operation,
                                                           mir.AddOp)
        return op.residual is None and op.w is not op.x and not feeds_add
    return False


class FuseNormIntoQ8Products(RewritePattern):
    """rms_norm(h, gamma) (no beta) read only as the x of q8 products that can take it
    (`_takes_norm`) -> each of them normalizes h's rows itself: a shared_input_matmul
    gains `norm(gamma) eps`, a dequant_matmul becomes a one-weight shared_input_matmul
    with it. Every part of a product's kernel normalizes the rows it quantizes anyway, so
    the copies cost nothing; the norm's kernel, and the barriers around it, go. Products
    of different schemes on one norm (a Q4_K_M file's Q8_0 attn_v beside its Q5_0 q/k, a
    Q6_K v beside Q4_K q/k) then run side by side in one parallel region."""

    @op_type_rewrite_pattern
    def match_and_rewrite(self, op: mir.RmsNormOp, rewriter: PatternRewriter, /):
        uses = list(op.result.uses)
        if op.beta is not None or not uses or not all(_takes_norm(use) for use in uses):
            return
        users = _in_block_order(use.operation for use in uses)
        fused = [_shared_like(user, x=op.x, weights=user.weights, norm_weight=op.gamma,
                              norm_eps=op.eps) if isinstance(user, mir.SharedInputMatmulOp)
                 else mir.SharedInputMatmulOp(op.x, [user.w], norm_weight=op.gamma,
                                              norm_eps=op.eps, scheme=user.scheme,
                                              activations=user.activations)
                 for user in users]
        for user, new in zip(users, fused, strict=True):
            _place_beside(rewriter, _located_at(new, op, user), user, users[0])
        for user, new in zip(users, fused, strict=True):
            rewriter.replace(user, [], list(new.results))
        rewriter.erase(op)


def _in_block_order(ops: Iterable[Operation]) -> list[Operation]:
    """`ops` once each, those of one block in its order (the others after them)."""
    unique = list(dict.fromkeys(ops))
    return sorted(unique, key=lambda o: (o.parent_block() is not unique[0].parent_block(),
                                         _index_in_block(o)))


def _index_in_block(op: Operation) -> int:
    block = op.parent_block()
    return 0 if block is None else block.get_operation_index(op)


def _located_at(new: Operation, *ops: Operation) -> Operation:
    """`new`, located at the ops it replaces (a pattern matched at one of them would
    derive its location from that one alone)."""
    known = [op.location for op in ops if loc_names(op.location)]
    if known:
        new.location = known[0] if len(known) == 1 else FusedLoc(known, NoneAttr())
    return new


def _place_beside(rewriter: PatternRewriter, fused: Operation, op: Operation,
                  first: Operation) -> None:
    """Insert `fused`, which is to replace `op`, just before `first` when both lie in one
    block and its operands are available there (products of one normed input then run
    one after the other, in one parallel region), else before `op`."""
    beside = op.parent_block() is first.parent_block() and _available_at(fused.operands, first)
    rewriter.insert(fused, InsertPoint.before(first if beside else op))


class FuseResidualNormIntoSharedInput(RewritePattern):
    """shared_input_matmul(x, ...) norm(gamma) with x = add(h, rms_norm(p, g1)) (either
    order; the norm used only by the add, no beta), every other use of x after the op ->
    shared_input_matmul p, ... residual(h, g1) eps norm(gamma) eps: the kernel forms each
    row's sum itself and hands it out as its last result, which replaces x's other uses
    (Gemma 3's sandwich norms: no serial kernel between the products)."""

    @op_type_rewrite_pattern
    def match_and_rewrite(self, op: mir.SharedInputMatmulOp, rewriter: PatternRewriter, /):
        add = op.x.owner
        if op.norm_weight is None or op.residual is not None or not isinstance(add, mir.AddOp):
            return
        others = [use.operation for use in op.x.uses if use.operation is not op]
        if any(user.parent_block() is not op.parent_block() or not op.is_before_in_block(user)
               for user in others):
            return
        for normed, residual in ((add.lhs, add.rhs), (add.rhs, add.lhs)):
            norm = normed.owner
            if (isinstance(norm, mir.RmsNormOp) and norm.beta is None and normed.has_one_use()
                    and residual.type == normed.type == add.result.type):
                edges = {"residual": residual, "residual_norm_weight": norm.gamma,
                         "residual_eps": norm.eps}
                fused = _shared_like(op, x=norm.x, weights=op.weights, **edges)
                rewriter.insert(fused, InsertPoint.before(op))
                for twin in _in_block_order(u for u in others if _normed_sibling(u, add)):
                    # it forms the sum too (no barrier on fused's); its own copy stays unused
                    again = _located_at(_shared_like(twin, x=norm.x, weights=twin.weights,
                                                     **edges), norm, add, twin)
                    _place_beside(rewriter, again, twin, op)
                    rewriter.replace(twin, [], list(again.products)[:-1])
                rewriter.replace_all_uses_with(add.result, fused.products[-1])
                rewriter.replace(op, [], list(fused.products)[:-1])
                rewriter.erase(add)
                rewriter.erase(norm)
                return


def _normed_sibling(op: Operation, add: mir.AddOp) -> bool:
    """Whether `op` is another q8 shared_input_matmul normalizing the sum `add` (as x
    only), which FuseResidualNormIntoSharedInput gives the residual form as well."""
    return (isinstance(op, mir.SharedInputMatmulOp) and op.x is add.result
            and op.norm_weight is not None and op.residual is None
            and add.result not in op.operands[1:])


def _shared_like(op: mir.SharedInputMatmulOp, **changes: object) -> mir.SharedInputMatmulOp:
    """A q8 shared_input_matmul with `op`'s operands and properties, but for `changes`
    (keywords of its constructor: x and weights always)."""
    fields = {name: getattr(op, name) for name in (*mir.SHARED_INPUT_EDGES, "caches")} | changes
    return mir.SharedInputMatmulOp(fields.pop("x"), fields.pop("weights"), **fields)


def _q8_product(value: SSAValue) -> tuple[mir.SharedInputMatmulOp, int] | None:
    """(op, index) when `value` is product `index` of a q8 shared_input_matmul without a
    glu, `value` used once, rank 2 (the rope and cache edges' products)."""
    shared = value.owner
    if (not isinstance(shared, mir.SharedInputMatmulOp) or shared.glu is not None
            or mir.activations_of(shared) != QuantActivations.Q8 or not value.has_one_use()
            or len(shape_of(value)) != 2):
        return None
    index = list(shared.products).index(value)
    return (shared, index) if index < len(shared.weights) else None  # not a residual's sum


def _available_at(values: Sequence[SSAValue], op: Operation) -> bool:
    """Whether every value is defined before `op` (an argument of its block or an op
    before it), so that an op replacing `op` may take them."""
    for value in values:
        owner = value.owner
        if isinstance(owner, Block):
            if owner is not op.parent_block():
                return False
        elif owner.parent_block() is not op.parent_block() or not owner.is_before_in_block(op):
            return False
    return True


def _replace_shared(rewriter: PatternRewriter, shared: mir.SharedInputMatmulOp,
                    fused: mir.SharedInputMatmulOp, edge: Operation, index: int) -> None:
    """Put `fused` in place of `shared`, its product `index` in place of `edge`'s result
    (the rope or insert it took in)."""
    rewriter.insert(fused, InsertPoint.before(shared))
    rewriter.replace(edge, [], [fused.products[index]])
    rewriter.replace(shared, [], list(fused.products))


class FuseRopeIntoSharedInput(RewritePattern):
    """rope(p, cos, sin) of the interleaved style with p a rank-2 product of a q8
    shared_input_matmul (no glu), used only there, cos and sin defined before it -> that
    op with p in its `rope_products` (and these cos, sin, head_dim and n_rot: a second
    rope fuses only with the same ones): the kernel rotates each tile as it is stored."""

    @op_type_rewrite_pattern
    def match_and_rewrite(self, op: mir.RopeOp, rewriter: PatternRewriter, /):
        found = _q8_product(op.x)
        if found is None or op.style.data != RopeStyle.INTERLEAVED or op.head_dim.value.data % 2:
            return
        shared, index = found
        if index in mir.indices_of(shared, "cache_products"):
            return
        props = {"rope_head_dim": op.head_dim, "rope_n_rot": op.n_rot, "rope_style": op.style}
        roped = mir.indices_of(shared, "rope_products")
        if roped and (shared.rope_cos is not op.cos or shared.rope_sin is not op.sin
                      or any(shared.properties.get(k) != v for k, v in props.items())):
            return
        if not _available_at([op.cos, op.sin], shared):
            return
        fused = _shared_like(shared, x=shared.x, weights=list(shared.weights), rope_cos=op.cos,
                             rope_sin=op.sin, rope_products=[*roped, index], **props)
        _replace_shared(rewriter, shared, fused, op, index)


class FuseCacheInsertIntoSharedInput(RewritePattern):
    """insert_rows(p, cache, position) with p a rank-2 product of a q8 shared_input_matmul
    (no glu), used only there, the old cache read by nothing else (a `mir.assign` to it
    aside) and cache and position defined before it -> that op with p in its
    `cache_products` (a second insert fuses only at the same position): its product is
    the updated cache, written in place by the kernel after bufferization."""

    @op_type_rewrite_pattern
    def match_and_rewrite(self, op: mir.InsertRowsOp, rewriter: PatternRewriter, /):
        found = _q8_product(op.rows)
        if found is None:
            return
        shared, index = found
        cached = mir.indices_of(shared, "cache_products")
        if cached and shared.position is not op.position:
            return
        if any(use.operation is not op and not (isinstance(use.operation, mir.AssignOp)
                                               and use.index == 1) for use in op.cache.uses):
            return
        if not _available_at([op.cache, op.position], shared):
            return
        fused = _shared_like(shared, x=shared.x, weights=list(shared.weights),
                             caches=[*shared.caches, op.cache], position=op.position,
                             cache_products=[*cached, index])
        _replace_shared(rewriter, shared, fused, op, index)


class FuseGluIntoSharedInput(RewritePattern):
    """mul(act(g), u) (either order, act one of `ACTIVATION_OPS`) with g and u the two
    products of a q8 shared_input_matmul, g used only by act and act only by the mul ->
    the shared_input_matmul with its gate weight first and `glu act`: its first product
    is act(g) * u, computed as the tiles are stored; u stays its second (a gated linear
    unit: SwiGLU, GeGLU)."""

    @op_type_rewrite_pattern
    def match_and_rewrite(self, op: mir.MulOp, rewriter: PatternRewriter, /):
        for gated, up in ((op.lhs, op.rhs), (op.rhs, op.lhs)):
            act = gated.owner
            if type(act) not in ACTIVATION_OPS or not gated.has_one_use():
                continue
            gate = act.operands[0]
            shared = gate.owner
            if (not isinstance(shared, mir.SharedInputMatmulOp) or shared.glu is not None
                    or shared.rope_products is not None or shared.cache_products is not None
                    or mir.activations_of(shared) != QuantActivations.Q8
                    or len(shared.weights) != 2 or up not in list(shared.products)[:2]
                    or up is gate
                    or not gate.has_one_use() or not gate.type == up.type == op.result.type):
                continue
            weights = list(shared.weights) if gate is shared.products[0] else list(shared.weights)[::-1]
            fused = _shared_like(shared, x=shared.x, weights=weights,
                                 glu=ActivationAttr(ACTIVATION_OPS[type(act)]))
            rewriter.insert(fused, InsertPoint.before(shared))
            rewriter.replace_all_uses_with(up, fused.products[1])
            if shared.residual is not None:  # the residual's sum stays the last product
                rewriter.replace_all_uses_with(shared.products[-1], fused.products[-1])
            rewriter.replace(op, [], [fused.products[0]])
            rewriter.erase(act)
            rewriter.erase(shared)
            return


class FuseResidualIntoDequantMatmul(RewritePattern):
    """add(r, dequant_matmul(x, w)) or add(dequant_matmul(x, w), r) of q8 activations, the
    product used only by the add, r of the result's shape -> dequant_matmul x, w residual r:
    added in the kernel's epilogue as each tile is stored."""

    @op_type_rewrite_pattern
    def match_and_rewrite(self, op: mir.AddOp, rewriter: PatternRewriter, /):
        for product_value, residual in ((op.lhs, op.rhs), (op.rhs, op.lhs)):
            product = product_value.owner
            if (not isinstance(product, mir.DequantMatmulOp) or product.residual is not None
                    or mir.activations_of(product) != QuantActivations.Q8
                    or not product_value.has_one_use()
                    or not product_value.type == residual.type == op.result.type):
                continue
            fused = mir.DequantMatmulOp(product.x, product.w, residual=residual,
                                        scheme=product.scheme, activations=product.activations,
                                        result_type=op.result.type)
            rewriter.replace(op, fused)
            rewriter.erase(product)
            return


# ----------------------------------------------------------------------------- the pass


@dataclass(frozen=True)
class MirFusePass(ModulePass):
    """Fuse matmul epilogues (bias, activation) into `mir.fused_matmul`, then sibling
    products of one input into `mir.shared_input_matmul` (after the epilogues: a fused
    matmul stays as it is), then the q8 edges (norm, glu, rope, cache inserts, residual) into the q8 products,
    then trees of elementwise ops into `mir.fused_elementwise`. Each family of patterns
    has its option (the fields of `rlx.FusionPolicy`); all off leaves the module as it is."""

    name = "mir-fuse"

    matmul_epilogue: bool = True
    """Fold a bias add and an activation into the matmul before them (`mir.fused_matmul`)."""
    elementwise: bool = True
    """Fuse trees of single-use elementwise ops into one `mir.fused_elementwise`."""
    fuse_broadcast: bool = False
    """Let an elementwise tree take inner values of a smaller (broadcast) shape than its
    root's, e.g. a per-row `rsqrt` into a per-element product: one kernel instead of two,
    but the smaller value is recomputed for every element it broadcasts to."""
    shared_input: bool = True
    """Merge sibling matmuls (and dequant_matmuls of one scheme) that read the same input
    into one op whose kernel reads the input once (q/k/v, gate/up)."""
    q8_edges: bool = True
    """Fold an rms_norm (and a normed residual add before it) into the q8 products after
    it, a gated linear unit
    (act(gate) * up), interleaved ropes and KV-cache inserts into the q8 shared-input
    product before them, and a residual add into the q8 dequant_matmul before it (the
    kernels' prologue and epilogues)."""

    def apply(self, ctx: Context, op: ModuleOp) -> None:
        if self.matmul_epilogue:
            PatternRewriteWalker(
                with_provenance(GreedyRewritePatternApplier(
                    [FuseMatmulBias(), FuseMatmulActivation()], dce_enabled=False
                ), Derive.FUSE)  # a fused op is located at every op it replaces
            ).rewrite_module(op)
        if self.shared_input:  # after the epilogues: a fused matmul keeps its epilogue
            PatternRewriteWalker(
                with_provenance(GreedyRewritePatternApplier(
                    [FuseSharedInput()], dce_enabled=False
                ), Derive.FUSE)
            ).rewrite_module(op)
        if self.q8_edges:  # after the shared inputs (the norm's consumer, the glu's
            # producer is the merged op), before the elementwise trees (they would take
            # the glu's act and mul, and the residual's add, into fused_elementwise ops)
            PatternRewriteWalker(
                with_provenance(GreedyRewritePatternApplier(
                    [FuseNormIntoQ8Products(), FuseResidualNormIntoSharedInput(),
                     FuseGluIntoSharedInput(),
                     FuseRopeIntoSharedInput(), FuseCacheInsertIntoSharedInput(),
                     FuseResidualIntoDequantMatmul()],
                    dce_enabled=False
                ), Derive.FUSE)
            ).rewrite_module(op)
        if self.elementwise:
            PatternRewriteWalker(
                with_provenance(GreedyRewritePatternApplier(
                    [FuseElementwiseTree(self.fuse_broadcast)], dce_enabled=False
                ), Derive.FUSE)
            ).rewrite_module(op)
