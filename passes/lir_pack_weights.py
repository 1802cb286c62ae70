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
    MemRefType,
    ModuleOp,
    StringAttr,
    UnitAttr,
)
from xdsl.ir import BlockArgument
from xdsl.passes import ModulePass

from rlx_mlir.core.abi import ARG_LAYOUT, ARG_NAME, ARG_ROLE, LAYOUT_PACKED_RHS, ROLE_PARAM
from rlx_mlir.dialects import lir
from rlx_mlir.passes.utils import require_lowered

Packer = lir.MatmulOp | lir.FusedMatmulOp | lir.SharedInputMatmulOp
"""The kernels that read a prepacked weight (`packed_rhs`)."""


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


def pack_weights(fn: func.FuncOp, params: frozenset[str]) -> list[str]:
    """Mark the packable bound params of `fn` (see the module doc); their names."""
    if fn.body.blocks.first is None or fn.arg_attrs is None:
        return []
    attrs = list(fn.arg_attrs.data)
    candidates: dict[BlockArgument, list[Packer]] = {}
    for arg, arg_attrs in zip(fn.body.block.args, attrs, strict=True):
        role, name = arg_attrs.data.get(ARG_ROLE), arg_attrs.data.get(ARG_NAME)
        if role != StringAttr(ROLE_PARAM) or not isinstance(name, StringAttr) or name.data not in params:
            continue
        users = _packable(arg)
        if users is not None:
            candidates[arg] = users
    _drop_partial_shared(candidates)
    packed = []
    for arg, users in candidates.items():
        for op in users:
            op.properties["packed_rhs"] = UnitAttr()
        arg_attrs = attrs[arg.index]
        attrs[arg.index] = DictionaryAttr({**arg_attrs.data, ARG_LAYOUT: StringAttr(LAYOUT_PACKED_RHS)})
        packed.append(arg_attrs.data[ARG_NAME].data)
    fn.arg_attrs = ArrayAttr(attrs)
    return packed


@dataclass(frozen=True)
class LirPackWeightsPass(ModulePass):
    """Marks `packed_rhs` on the matmuls of bound 2-D weights used only as a matmul rhs
    (or f32 shared-input weight)."""

    name = "lir-pack-weights"

    params: tuple[str, ...] = ()
    """The names of the params bound at compile time (only those get packed)."""

    def apply(self, ctx: Context, op: ModuleOp) -> None:
        require_lowered(op, self.name, "hir", "mir")
        params = frozenset(self.params)
        if not params:
            return
        for fn in op.walk():
            if isinstance(fn, func.FuncOp):
                pack_weights(fn, params)
