"""`lir-pack-weights`: weights bound at compile time are packed once, not per call.

A function argument with `rlx.role = "param"` whose `rlx.name` is in the option `params`
(the params bound at compile time), a 2-D memref used ONLY as the rhs of `lir.matmul` /
`lir.fused_matmul` ops or as a weight of f32 `lir.shared_input_matmul`s (at least once;
a shared op's weights are packed all or none), takes the prepacked panel layout of
`rlx_mlir.core.packing.pack_rhs`: every such op gets the `packed_rhs` property (its
kernel then reads contiguous K × NR·W panels and packs nothing per call) and the
argument gets the argument attribute `rlx.layout = "packed_rhs"` (`rlx_mlir.core.abi`), which
convert-lir-to-llvm keeps on the llvm entry: the caller must pass that argument packed
(`CompiledGraph` packs its bound copy once, for the target's vector width).

A bound GGUF weight (2-D ui8 blocks) of a scheme with an interleaved layout
(`rlx_mlir.core.packing.BLOCK_FIELDS`: the 32-value schemes and the K-quants) that is
read only as the weight of `activations q8` `lir.dequant_matmul` /
`lir.shared_input_matmul` ops (and as the table of a `lir.dequant_gather`: an embedding
tied to the output projection), when the target runs those ops with its int8 kernels at
its vector width W, takes the layout `interleaved:<scheme>:<W>` (`interleave_blocks`:
each block of W rows side by side, field by field). Every such op gets `interleaved W`:
its column-lane tiles then load each field of W rows as one vector instead of
transposing W rows per call. The caller binds the weight interleaved once. The target
and W are the options `target` and `vector-width`, as for convert-lir-to-llvm, which
refuses an `interleaved` op it would lower at another width or without int8 kernels.

Any other use of the argument (the lhs of a matmul, an elementwise input, a view, ...)
reads it in the logical row-major layout, so such a param stays unpacked, as do inputs
and params not bound at compile time. The pass works on planned and unplanned lir and is
idempotent. The logical semantics do not change: the lir interpreter ignores the property
and runs on logical (unpacked) arrays.
"""

from __future__ import annotations

from dataclasses import dataclass

from xdsl.context import Context
from xdsl.dialects import func
from xdsl.dialects.builtin import (
    ArrayAttr,
    DictionaryAttr,
    IntegerAttr,
    MemRefType,
    ModuleOp,
    StringAttr,
    UnitAttr,
    i64,
)
from xdsl.ir import BlockArgument
from xdsl.passes import ModulePass
from xdsl.utils.exceptions import PassFailedException

from rlx_mlir.core.abi import ARG_LAYOUT, ARG_NAME, ARG_ROLE, LAYOUT_PACKED_RHS, ROLE_PARAM
from rlx_mlir.core.errors import RlxError
from rlx_mlir.core.packing import BLOCK_FIELDS, interleaved_layout
from rlx_mlir.core.target import target_of
from rlx_mlir.dialects import lir
from rlx_mlir.dialects.mir import activations_of
from rlx_mlir.dialects.rlx import QuantActivations
from rlx_mlir.passes.lir_to_llvm.quant_dot import int8_dot_isa
from rlx_mlir.passes.utils import require_lowered

Packer = (lir.MatmulOp | lir.FusedMatmulOp | lir.SharedInputMatmulOp | lir.DequantMatmulOp
          | lir.DequantGatherOp)
"""The kernels that read a prepacked weight (`packed_rhs`) or interleaved blocks."""


def _packable(arg: BlockArgument) -> list[Packer] | None:
    """The matmuls reading `arg` as their rhs (or as a weight of an f32
    shared_input_matmul), if that is all `arg` is used for."""
    if not isinstance(arg.type, MemRefType) or len(arg.type.get_shape()) != 2:
        return None
    users = []
    for use in arg.uses:
        op = use.operation
        if isinstance(op, lir.SharedInputMatmulOp):
            if op.scheme is not None or arg not in op.weights or op.x is arg or arg in op.out:
                return None
        elif not isinstance(op, lir.MatmulOp | lir.FusedMatmulOp) or op.rhs is not arg or op.lhs is arg:
            return None
        users.append(op)
    return users or None


def _interleavable(arg: BlockArgument) -> tuple[str, list[Packer]] | None:
    """The scheme and the q8 block matmuls reading `arg` as a weight, if that is all `arg`
    is used for and they share one scheme with an interleaved layout."""
    if not isinstance(arg.type, MemRefType) or len(arg.type.get_shape()) != 2:
        return None
    users, schemes = [], set()
    for use in arg.uses:
        op = use.operation
        if isinstance(op, lir.SharedInputMatmulOp):
            reads_weight = arg in op.weights and op.x is not arg and arg not in op.out
        elif isinstance(op, lir.DequantMatmulOp):
            reads_weight = op.w is arg and op.x is not arg and op.out is not arg
        elif isinstance(op, lir.DequantGatherOp):  # an embedding tied to the output projection
            reads_weight = op.table is arg and op.ids is not arg and op.out is not arg
        else:
            return None
        if not reads_weight or (not isinstance(op, lir.DequantGatherOp)
                                and (op.scheme is None or activations_of(op) != QuantActivations.Q8)):
            return None
        users.append(op)
        schemes.add(op.scheme.data.value)
    if (len(schemes) != 1 or next(iter(schemes)) not in BLOCK_FIELDS
            or all(isinstance(op, lir.DequantGatherOp) for op in users)):
        return None
    return schemes.pop(), users


def _drop_partial_shared(candidates: dict[BlockArgument, list[Packer]]) -> None:
    """A shared_input_matmul's weights are packed all or none: drop (until none is left)
    the candidates read by one whose other weights are not all candidates."""
    changed = True
    while changed:
        changed = False
        for arg, users in list(candidates.items()):
            if any(isinstance(op, lir.SharedInputMatmulOp)
                   and any(w not in candidates for w in op.weights) for op in users):
                del candidates[arg]
                changed = True


def pack_weights(fn: func.FuncOp, params: frozenset[str], interleave: int = 0) -> list[str]:
    """Mark the packable bound params of `fn` (see the module doc); their names.
    `interleave`: the vector width of the target's int8 kernels (0: none, nothing is
    interleaved)."""
    if fn.body.blocks.first is None or fn.arg_attrs is None:
        return []
    attrs = list(fn.arg_attrs.data)
    panels: dict[BlockArgument, list[Packer]] = {}
    groups: dict[BlockArgument, list[Packer]] = {}
    schemes: dict[BlockArgument, str] = {}
    for arg, arg_attrs in zip(fn.body.block.args, attrs, strict=True):
        role, name = arg_attrs.data.get(ARG_ROLE), arg_attrs.data.get(ARG_NAME)
        if role != StringAttr(ROLE_PARAM) or not isinstance(name, StringAttr) or name.data not in params:
            continue
        users = _packable(arg)
        if users is not None:
            panels[arg] = users
        elif interleave and (found := _interleavable(arg)) is not None:
            schemes[arg], groups[arg] = found
    _drop_partial_shared(panels)
    _drop_partial_shared(groups)
    marks = [(arg, users, "packed_rhs", UnitAttr(), LAYOUT_PACKED_RHS) for arg, users in panels.items()]
    marks += [(arg, users, "interleaved", IntegerAttr(interleave, i64),
               interleaved_layout(schemes[arg], interleave)) for arg, users in groups.items()]
    packed = []
    for arg, users, prop, value, layout in marks:
        for op in users:
            op.properties[prop] = value
        arg_attrs = attrs[arg.index]
        attrs[arg.index] = DictionaryAttr({**arg_attrs.data, ARG_LAYOUT: StringAttr(layout)})
        packed.append(arg_attrs.data[ARG_NAME].data)
    fn.arg_attrs = ArrayAttr(attrs)
    return packed


@dataclass(frozen=True)
class LirPackWeightsPass(ModulePass):
    """Marks `packed_rhs` on the matmuls of bound 2-D weights used only as a matmul rhs
    (or f32 shared-input weight), and `interleaved W` on the q8 block matmuls of bound
    GGUF weights the target's int8 kernels read."""

    name = "lir-pack-weights"

    params: tuple[str, ...] = ()
    """The names of the params bound at compile time (only those get packed)."""
    vector_width: int = 0
    """The vector width convert-lir-to-llvm lowers at (16, 8 or 4); 0 takes the target's."""
    target: str = ""
    """The CPU convert-lir-to-llvm lowers for (its `target` option); "" takes the module's
    `rlx.target`, else the generic x86-64 (no int8 kernels: nothing is interleaved)."""

    def apply(self, ctx: Context, op: ModuleOp) -> None:
        require_lowered(op, self.name, "hir", "mir")
        params = frozenset(self.params)
        if not params:
            return
        try:
            target = target_of(op, self.target)
        except RlxError as err:
            raise PassFailedException(f"{self.name}: {err}") from None
        width = self.vector_width or target.vector_width
        interleave = width if width in (8, 16) and int8_dot_isa(target, width) else 0
        for fn in op.walk():
            if isinstance(fn, func.FuncOp):
                pack_weights(fn, params, interleave)
