"""`convert-mir-to-lir`: bufferization of mir tensors into lir memrefs.

The output convention every later stage relies on:

- A function's tensor arguments become memref arguments of the same shape and element
  type (identity layout), keeping their argument attributes; then comes one memref
  argument per function result, named `out<i>` with `rlx.role = "output"`, and the
  function returns nothing. No tensor type remains.
- Every mir compute op becomes its destination-passing lir kernel writing into a fresh
  `lir.alloc` placed right before it, except a value the function returns: its kernel
  writes straight into the output argument. When a returned value is a single-use chain
  of reshapes of a value, that producer writes into an `lir.view` of the output argument.
- `mir.reshape` and contiguous `mir.narrow`s become `lir.view`s (no copy); views of views
  are flattened into one view of the base buffer and identity views disappear. A strided
  narrow is the `lir.narrow` kernel.
- Wherever the returned value is not already its output argument (a function argument,
  a view, a value returned twice), `func.return` is preceded by an `lir.copy` into the
  output argument, so every output is fully written and outputs never alias each other.
- Every kernel (and `lir.scan`) carries its streaming phase, `rlx.phase = "prologue" |
  "steady_state" | "epilogue"`: that of the mir op it came from, by the rules of
  `rlx_mlir.passes.phases` (a body's kernels take their scan's; the copies before
  `func.return` are epilogue).

How values change type: the conversion runs op by op in program order
(`PatternRewriteWalker(..., apply_recursively=False)`: every op is visited once, producers
before users). Each pattern replaces the tensor result of its op by the memref buffer
(`rewriter.replace(op, new_ops, new_results=[buffer])`), so the later mir ops temporarily
take memref operands; by the time the walk reaches them their operands are all memrefs and
they are replaced in turn, and after the walk no mir op remains and the IR verifies. This
keeps each pattern small and local (no value map to thread through a rebuilt body) and lets
a pattern see the function's `func.return` to decide where its kernel writes. The signature
(a `func.func` pattern) is converted first, in a walk of its own, so the output arguments
exist before any op pattern looks for them.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from xdsl.context import Context
from xdsl.dialects import func
from xdsl.dialects.builtin import (
    ArrayAttr,
    DenseIntOrFPElementsAttr,
    DictionaryAttr,
    FunctionType,
    MemRefType,
    ModuleOp,
    StringAttr,
    TensorType,
)
from xdsl.ir import Attribute, BlockArgument, Operation, OpResult, SSAValue
from xdsl.irdl import IRDLOperation
from xdsl.passes import ModulePass
from xdsl.pattern_rewriter import (
    GreedyRewritePatternApplier,
    PatternRewriter,
    PatternRewriteWalker,
    RewritePattern,
    op_type_rewrite_pattern,
)
from xdsl.rewriter import InsertPoint
from xdsl.utils.exceptions import PassFailedException

from rlx_mlir.core import shape_inference as si
from rlx_mlir.core.abi import ARG_DIMS, ARG_NAME, ARG_ROLE, ROLE_OUTPUT, ROLE_STATE
from rlx_mlir.core.errors import RlxError
from rlx_mlir.dialects import lir, mir, registry
from rlx_mlir.dialects.common import dims_attr, dims_from_attr, shape_of
from rlx_mlir.dialects.rlx import ElementwiseFn
from rlx_mlir.dialects.verifier import grouped_operands, symbolic_shapes
from rlx_mlir.passes.phases import WithPhases, module_phases
from rlx_mlir.passes.provenance import Derive, with_provenance
from rlx_mlir.passes.utils import require_lowered

ELEMENTWISE_FNS: dict[type[Operation], ElementwiseFn] = registry.ELEMENTWISE_FNS
"""The function of the `lir.elementwise` kernel of each mir elementwise op (registry)."""

KERNELS: dict[type[Operation], type[lir.KernelOp]] = registry.KERNELS
"""mir ops whose lir kernel takes the same operands (in the same order, optional ones
included), then `out`, and the same properties (registry records with `Lowering.KERNEL`)."""


# ----------------------------------------------------------------------------- helpers


def memref_of(ty: Attribute) -> MemRefType:
    """The memref (identity layout) with the shape and element type of a ranked tensor."""
    if not isinstance(ty, TensorType):
        raise PassFailedException(f"convert-mir-to-lir: expected a ranked tensor, got {ty}")
    return MemRefType(ty.get_element_type(), ty.get_shape())


def _str(attrs: DictionaryAttr, key: str) -> str | None:
    value = attrs.data.get(key)
    return value.data if isinstance(value, StringAttr) else None


def output_args(ret: func.ReturnOp) -> Sequence[BlockArgument] | None:
    """The output arguments of the function `ret` returns from (one per return operand),
    or None unless the function follows the output convention."""
    func_op = ret.parent_op()
    block = ret.parent_block()
    if not isinstance(func_op, func.FuncOp) or block is not func_op.body.blocks.first:
        return None
    first = len(block.args) - len(ret.arguments)
    attrs = func_op.arg_attrs
    if first < 0 or attrs is None or len(attrs.data) != len(block.args):
        return None
    roles = [_str(a, ARG_ROLE) for a in attrs.data[first:]]
    return block.args[first:] if all(role == ROLE_OUTPUT for role in roles) else None


def output_target(value: SSAValue) -> BlockArgument | None:
    """The output argument `value`'s buffer should be: the first one the function returns
    it in, or (for a value whose only use is a reshape) the one of that reshape."""
    returns = [use for use in value.uses if isinstance(use.operation, func.ReturnOp)]
    if returns:
        first = min(returns, key=lambda use: use.index)
        assert isinstance(ret := first.operation, func.ReturnOp)
        outputs = output_args(ret)
        return None if outputs is None else outputs[first.index]
    user = value.get_user_of_unique_use()
    if isinstance(user, mir.ReshapeOp):
        return output_target(user.result)
    return None


def view_of(source: SSAValue, result_type: MemRefType, offset: int = 0,
            dims: si.Shape | None = None) -> list[Operation]:
    """An `lir.view` of `source` at `offset` elements (symbolic shape `dims` when it has
    `?` dims), flattened to a view of the base buffer when `source` is a view itself; no
    op when it is the base buffer itself."""
    owner = source.owner
    if isinstance(owner, lir.ViewOp):
        source, offset = owner.source, offset + owner.offset.value.data
    if offset == 0 and source.type == result_type:
        return []
    return [lir.ViewOp(source, result_type, offset, dims)]


def destination(value: SSAValue) -> tuple[list[Operation], SSAValue]:
    """The buffer a kernel computing `value` writes: its output argument (or a view of
    it), else a fresh `lir.alloc`. Returns the ops to insert before the kernel and the
    buffer."""
    ty = memref_of(value.type)
    target = output_target(value)
    if target is None:
        alloc = lir.AllocOp(ty, symbolic_dims(value))
        return [alloc], alloc.result
    ops = view_of(target, ty, dims=symbolic_dims(value))
    return ops, (ops[-1].results[0] if ops else target)


def _dims_key(value: SSAValue) -> str:
    """The attribute of its op holding a result's symbolic shape: `rlx.dims` for the
    first (or only) result, `rlx.dims.<i>` for result i of an op with several."""
    index = value.index if isinstance(value, OpResult) else 0
    return ARG_DIMS if index == 0 else f"{ARG_DIMS}.{index}"


def symbolic_dims(value: SSAValue) -> si.Shape | None:
    """The symbolic shape `annotate_symbolic_dims` left on `value`'s op (None if static)."""
    if si.is_static_shape(shape_of(value)):
        return None
    owner = value.owner
    key = _dims_key(value)
    attr = owner.attributes.get(key) if isinstance(owner, Operation) else None
    return shape_of(value) if attr is None else dims_from_attr(attr, key)


def annotate_symbolic_dims(module: ModuleOp) -> None:
    """Put `rlx.dims` on every mir op whose result has `?` dims (its symbolic shape, by
    `symbolic_shapes`), for the `lir.alloc` that replaces it to carry (and drop)."""
    for fn in module.walk():
        if isinstance(fn, func.FuncOp):
            try:
                shapes = symbolic_shapes(fn)
            except RlxError as err:
                raise PassFailedException(f"convert-mir-to-lir: {err}") from err
            for value, shape in shapes.items():
                if isinstance(owner := value.owner, Operation):
                    owner.attributes[_dims_key(value)] = dims_attr(shape)


def replace_with_view(
    rewriter: PatternRewriter, op: Operation, source: SSAValue, offset: int
) -> None:
    """Replace the single result of `op` (a reshape or narrow of `source`) by a view of
    `source`; a view `source` used only by `op` goes away (the new view reads its base)."""
    new_ops = view_of(source, memref_of(op.results[0].type), offset, symbolic_dims(op.results[0]))
    rewriter.replace(op, new_ops, [new_ops[-1].results[0] if new_ops else _base(source)])
    owner = source.owner
    if isinstance(owner, lir.ViewOp) and not owner.result.uses:
        rewriter.erase(owner)


def _base(value: SSAValue) -> SSAValue:
    owner = value.owner
    return owner.source if isinstance(owner, lir.ViewOp) else value


def narrow_is_contiguous(shape: si.Shape, axis: int, length: int) -> bool:
    """A narrow is one contiguous range when every dim before `axis` is 1 or it keeps the
    whole axis."""
    return si.numel(shape[:axis]) == 1 or length == shape[axis]


# ----------------------------------------------------------------------------- signature


class FuncSignatureLowering(RewritePattern):
    """Tensor arguments become memrefs; each result becomes an output memref argument
    `out<i>` (`rlx.role = "output"`); the function returns nothing."""

    @op_type_rewrite_pattern
    def match_and_rewrite(self, op: func.FuncOp, rewriter: PatternRewriter, /) -> None:
        fn_type = op.function_type
        if not any(isinstance(t, TensorType) for t in (*fn_type.inputs, *fn_type.outputs)):
            return
        inputs = [memref_of(t) if isinstance(t, TensorType) else t for t in fn_type.inputs]
        outputs = [memref_of(t) for t in fn_type.outputs]
        old_attrs = op.arg_attrs.data if op.arg_attrs is not None else ()
        attrs = list(old_attrs) or [DictionaryAttr({}) for _ in inputs]
        res_attrs = op.res_attrs.data if op.res_attrs is not None else ()
        names = [  # a result named in the graph (rlx.name) keeps its name
            (_str(res_attrs[i], ARG_NAME) if i < len(res_attrs) else None) or f"out{i}"
            for i in range(len(outputs))
        ]
        attrs += [
            DictionaryAttr({ARG_NAME: StringAttr(name), ARG_ROLE: StringAttr(ROLE_OUTPUT),
                            **_dims_of_result(res_attrs, i)})
            for i, name in enumerate(names)
        ]
        if not op.is_declaration:
            block = op.body.block
            for arg, ty in zip(block.args, inputs, strict=True):
                if arg.type != ty:
                    rewriter.replace_value_with_new_type(arg, ty)
            for i, ty in enumerate(outputs):
                out = rewriter.insert_block_argument(block, len(block.args), ty)
                out.name_hint = names[i]
        op.function_type = FunctionType.from_lists([*inputs, *outputs], [])
        op.arg_attrs = ArrayAttr(attrs)
        op.res_attrs = None
        rewriter.notify_op_modified(op)


def _dims_of_result(res_attrs: Sequence[DictionaryAttr], i: int) -> dict[str, Attribute]:
    """The `rlx.dims` of result `i` (a symbolic result), for its output argument."""
    dims = res_attrs[i].data.get(ARG_DIMS) if i < len(res_attrs) else None
    return {} if dims is None else {ARG_DIMS: dims}


class ReturnLowering(RewritePattern):
    """`func.return %v...` -> an `lir.copy` of every returned value that is not already
    its output argument, then `func.return` with no operands."""

    @op_type_rewrite_pattern
    def match_and_rewrite(self, op: func.ReturnOp, rewriter: PatternRewriter, /) -> None:
        if not op.arguments or (outputs := output_args(op)) is None:
            return
        copies = [
            lir.CopyOp(value, out)
            for value, out in zip(op.arguments, outputs, strict=True)
            if value is not out
        ]
        # The outputs are read before the states are written (an output may be a state's
        # old value): the copies go before the trailing state writes of `AssignLowering`.
        first = op
        while (prev := first.prev_op) is not None and is_state_write(prev):
            first = prev
        if copies:
            rewriter.insert(copies, InsertPoint.before(first))
        rewriter.replace(op, [func.ReturnOp()])


# ----------------------------------------------------------------------------- kernels


class ElementwiseLowering(RewritePattern):
    """A mir elementwise op -> `lir.elementwise <fn>` (table `ELEMENTWISE_FNS`)."""

    def match_and_rewrite(self, op: Operation, rewriter: PatternRewriter, /) -> None:
        fn = ELEMENTWISE_FNS.get(type(op))
        if fn is None:
            return
        ops, out = destination(op.results[0])
        rewriter.replace(op, [*ops, lir.ElementwiseOp(fn, op.operands, out)], [out])


class FusedElementwiseLowering(RewritePattern):
    """`mir.fused_elementwise` -> `lir.fused_elementwise` with the same body region
    (moved over; its `mir.yield` becomes `lir.yield` by `YieldLowering`)."""

    @op_type_rewrite_pattern
    def match_and_rewrite(self, op: mir.FusedElementwiseOp, rewriter: PatternRewriter, /) -> None:
        ops, out = destination(op.result)
        body = rewriter.move_region_contents_to_new_regions(op.body)
        rewriter.replace(op, [*ops, lir.FusedElementwiseOp(op.inputs, out, body)], [out])


class ScanLowering(RewritePattern):
    """`mir.scan` -> `lir.scan` writing `out`, with the body region moved over: its block
    arguments become buffers (the carry, views of the xs slices, the consts), its ops are
    bufferized by the same walk like any others (into allocs: the arena planner places
    them), and its `mir.yield` becomes `lir.yield` of the next carry's buffer."""

    @op_type_rewrite_pattern
    def match_and_rewrite(self, op: mir.ScanOp, rewriter: PatternRewriter, /) -> None:
        ops, out = destination(op.result)
        body = rewriter.move_region_contents_to_new_regions(op.body)
        block = body.block
        for arg in list(block.args):
            buffer = block.insert_arg(memref_of(arg.type), arg.index)
            rewriter.replace_all_uses_with(arg, buffer)
            block.erase_arg(arg)
        scan = lir.ScanOp(op.init, op.xs, op.consts, out, op.length.value.data, body,
                          op.trajectory is not None)
        rewriter.replace(op, [*ops, scan], [out])


class YieldLowering(RewritePattern):
    """`mir.yield` in a body moved to `lir.fused_elementwise` or `lir.scan` -> `lir.yield`."""

    @op_type_rewrite_pattern
    def match_and_rewrite(self, op: mir.YieldOp, rewriter: PatternRewriter, /) -> None:
        if not isinstance(op.parent_op(), lir.FusedElementwiseOp | lir.ScanOp):
            return
        rewriter.replace(op, lir.YieldOp(*op.arguments))


class KernelLowering(RewritePattern):
    """A mir compute op -> its lir kernel (table `KERNELS`): the same operands plus one
    out buffer per result (None for an absent optional result), the same properties."""

    def match_and_rewrite(self, op: Operation, rewriter: PatternRewriter, /) -> None:
        kernel = KERNELS.get(type(op))  # pyright: ignore[reportArgumentType]
        if kernel is None:
            return
        assert isinstance(op, IRDLOperation)
        ops: list[Operation] = []
        outs: list[SSAValue | None] = []
        for name, _ in type(op).get_irdl_definition().results:
            result = getattr(op, name)
            if result is None:
                outs.append(None)
                continue
            made, out = destination(result)
            ops += made
            outs.append(out)
        new = kernel.build(operands=[*grouped_operands(op), *outs], properties=dict(op.properties))
        rewriter.replace(op, [*ops, new], [out for out in outs if out is not None])


class ConstantLowering(RewritePattern):
    """`mir.constant` -> `lir.constant` writing the value (retyped as a memref) into out."""

    @op_type_rewrite_pattern
    def match_and_rewrite(self, op: mir.ConstantOp, rewriter: PatternRewriter, /) -> None:
        ops, out = destination(op.result)
        value = DenseIntOrFPElementsAttr(memref_of(op.value.type), op.value.data)
        rewriter.replace(op, [*ops, lir.ConstantOp(value, out)], [out])


class ReshapeLowering(RewritePattern):
    """`mir.reshape` -> an `lir.view` of the source at offset 0 (no copy)."""

    @op_type_rewrite_pattern
    def match_and_rewrite(self, op: mir.ReshapeOp, rewriter: PatternRewriter, /) -> None:
        replace_with_view(rewriter, op, op.input, 0)


class NarrowLowering(RewritePattern):
    """`mir.narrow` -> an `lir.view` at the slice's first element when the slice is
    contiguous, else the `lir.narrow` kernel (a strided copy)."""

    @op_type_rewrite_pattern
    def match_and_rewrite(self, op: mir.NarrowOp, rewriter: PatternRewriter, /) -> None:
        shape = shape_of(op.input)
        axis = op.axis.value.data % len(shape)
        start, length = op.start.value.data, op.length.value.data
        if si.is_static_shape(shape) and narrow_is_contiguous(shape, axis, length):
            replace_with_view(rewriter, op, op.input, start * si.numel(shape[axis + 1 :]))
            return
        ops, out = destination(op.result)
        kernel = lir.NarrowOp(op.input, out, op.axis, op.start, op.length)
        rewriter.replace(op, [*ops, kernel], [out])


# ----------------------------------------------------------------------------- state


def is_state_argument(value: SSAValue) -> bool:
    """Whether `value` is a function argument with `rlx.role = "state"`."""
    if not isinstance(value, BlockArgument):
        return False
    fn = value.block.parent_op()
    attrs = fn.arg_attrs if isinstance(fn, func.FuncOp) else None
    return (attrs is not None and value.index < len(attrs.data)
            and _str(attrs.data[value.index], ARG_ROLE) == ROLE_STATE)


def is_state_write(op: Operation) -> bool:
    """An `lir.copy` into a state argument (a bufferized `mir.assign`)."""
    return isinstance(op, lir.CopyOp) and is_state_argument(op.out)


def _state_cache(op: Operation, cache: SSAValue) -> SSAValue:
    """`cache`, which a cache op updates in place: it must be a state argument."""
    if not is_state_argument(cache):
        raise PassFailedException(
            f"convert-mir-to-lir: '{op.name}': cache: expected a state argument (updated "
            f"in place), got {cache.type} defined by "
            f"{cache.owner.name if isinstance(cache.owner, Operation) else 'a block'}"
        )
    return cache


class InsertRowsLowering(RewritePattern):
    """`mir.insert_rows` -> `lir.insert_rows` writing the rows into the cache's state
    buffer in place; the state buffer then stands for the updated cache."""

    @op_type_rewrite_pattern
    def match_and_rewrite(self, op: mir.InsertRowsOp, rewriter: PatternRewriter, /) -> None:
        cache = _state_cache(op, op.cache)
        rewriter.replace(op, [lir.InsertRowsOp(op.rows, op.position, cache)], [cache])


class CacheScatterLowering(RewritePattern):
    """`mir.cache_scatter` -> `lir.cache_scatter` writing the rows into the slot cache's
    state buffer in place; the state buffer then stands for the updated cache."""

    @op_type_rewrite_pattern
    def match_and_rewrite(self, op: mir.CacheScatterOp, rewriter: PatternRewriter, /) -> None:
        cache = _state_cache(op, op.cache)
        kernel = lir.CacheScatterOp(op.rows, op.slots, op.positions, cache)
        rewriter.replace(op, [kernel], [cache])


class ExtractRowsLowering(RewritePattern):
    """`mir.extract_rows` -> an `lir.view` of the cache buffer's first rows, its `?` dim
    named by the op's size symbol (no copy)."""

    @op_type_rewrite_pattern
    def match_and_rewrite(self, op: mir.ExtractRowsOp, rewriter: PatternRewriter, /) -> None:
        dims = (op.size.data, *shape_of(op.cache)[1:])
        view = lir.ViewOp(op.cache, memref_of(op.result.type), 0, dims)
        rewriter.replace(op, [view], [view.result])


class AssignLowering(RewritePattern):
    """`mir.assign %v to %state` -> `lir.copy` of v's buffer into the state buffer, placed
    last (before `func.return`), after every read of the state's old value; nothing when
    v's buffer is the state buffer (an in-place `lir.insert_rows`)."""

    @op_type_rewrite_pattern
    def match_and_rewrite(self, op: mir.AssignOp, rewriter: PatternRewriter, /) -> None:
        block = op.parent_block()
        if op.value is op.state or block is None or block.last_op is None:
            rewriter.erase(op)
            return
        rewriter.insert(lir.CopyOp(op.value, op.state), InsertPoint.before(block.last_op))
        rewriter.erase(op)


class SharedInputMatmulLowering(RewritePattern):
    """`mir.shared_input_matmul` -> one `lir.shared_input_matmul` kernel, one out per
    weight, in every form (f32 weights, GGUF weights with f32 or q8 activations): x is
    read (and quantized) once, in one parallel region (passes/lir_to_llvm/shared_matmul.py).
    A product written into a cache (`cache_products`) has the cache's state buffer for its
    out, which the kernel writes in place (as `lir.insert_rows`); that buffer then stands
    for the updated cache."""

    @op_type_rewrite_pattern
    def match_and_rewrite(self, op: mir.SharedInputMatmulOp, rewriter: PatternRewriter, /) -> None:
        ops: list[Operation] = []
        outs: list[SSAValue] = []
        caches = dict(zip(mir.indices_of(op, "cache_products"), op.caches, strict=True))
        for index, product in enumerate(op.products):
            if index in caches:
                outs.append(_state_cache(op, caches[index]))
                continue
            made, out = destination(product)
            ops += made
            outs.append(out)
        edges = {name: getattr(op, name) for name in mir.SHARED_INPUT_EDGES}
        ops.append(lir.SharedInputMatmulOp(op.x, op.weights, out=outs, **edges))
        rewriter.replace(op, ops, outs)


OWN_PATTERNS: dict[type[Operation], type[RewritePattern]] = {
    mir.FusedElementwiseOp: FusedElementwiseLowering,
    mir.ConstantOp: ConstantLowering,
    mir.ReshapeOp: ReshapeLowering,
    mir.NarrowOp: NarrowLowering,
    mir.InsertRowsOp: InsertRowsLowering,
    mir.ExtractRowsOp: ExtractRowsLowering,
    mir.AssignOp: AssignLowering,
    mir.ScanOp: ScanLowering,
    mir.SharedInputMatmulOp: SharedInputMatmulLowering,
    mir.CacheScatterOp: CacheScatterLowering,
}
"""The pattern of each mir op whose registry record says `Lowering.PATTERN`."""

registry.check_complete(
    "convert-mir-to-lir: mir ops with a pattern of their own",
    [r.op for r in registry.MIR_RECORDS if r.lowering is registry.Lowering.PATTERN],
    OWN_PATTERNS,
)

MIR_TO_LIR_PATTERNS: tuple[type[RewritePattern], ...] = (
    ElementwiseLowering,
    KernelLowering,
    *OWN_PATTERNS.values(),
    YieldLowering,
    ReturnLowering,
)
"""The op patterns, applied in one walk in program order after `FuncSignatureLowering`."""


@dataclass(frozen=True)
class ConvertMirToLirPass(ModulePass):
    """Bufferize mir into destination-passing lir kernels (docs/semantics.md "The pipeline's order")."""

    name = "convert-mir-to-lir"

    def apply(self, ctx: Context, op: ModuleOp) -> None:
        require_lowered(op, self.name, "hir", "func.call")  # bufferization: one function
        annotate_symbolic_dims(op)
        PatternRewriteWalker(FuncSignatureLowering(), apply_recursively=False).rewrite_module(op)
        phases = module_phases(op)  # each kernel gets its mir op's phase (rlx.phase)
        PatternRewriteWalker(
            WithPhases(with_provenance(GreedyRewritePatternApplier(
                [pattern() for pattern in MIR_TO_LIR_PATTERNS], dce_enabled=False
            ), Derive.KEEP), phases),  # kernels and their buffers keep the mir op's location
            apply_recursively=False,
        ).rewrite_module(op)


__all__ = [
    "ELEMENTWISE_FNS",
    "KERNELS",
    "MIR_TO_LIR_PATTERNS",
    "OWN_PATTERNS",
    "ConvertMirToLirPass",
    "FuncSignatureLowering",
    "destination",
    "memref_of",
    "output_args",
]
