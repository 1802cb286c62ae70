"""Helpers shared by the rlx passes (module-level functions and tables, no pass state)."""

from __future__ import annotations

from collections.abc import Sequence
from typing import TypeVar

from xdsl.dialects.builtin import DenseIntOrFPElementsAttr, ShapedType, TensorType, f32
from xdsl.ir import Attribute, Operation, SSAValue
from xdsl.utils.exceptions import PassFailedException

from rlx_mlir.dialects import mir
from rlx_mlir.dialects.rlx import Activation

OpT = TypeVar("OpT", bound=Operation)

ACTIVATION_OPS: dict[Activation, type[mir.UnaryElementwiseOp]] = {
    Activation.RELU: mir.ReluOp,
    Activation.GELU: mir.GeluOp,
    Activation.GELU_TANH: mir.GeluTanhOp,
    Activation.SILU: mir.SiluOp,
    Activation.SIGMOID: mir.SigmoidOp,
    Activation.TANH: mir.TanhOp,
}
"""The unary mir op computing each activation."""


class OpSequence:
    """New ops in program order, built one after the other and inserted together
    (`rewriter.replace(op, seq.ops)` puts them where `op` was)."""

    def __init__(self) -> None:
        self.ops: list[Operation] = []
        """The ops emitted so far, in order."""

    def emit(self, op: Operation) -> SSAValue:
        """Append `op` and return its (single) result."""
        self.ops.append(op)
        return op.results[0]

    @property
    def result(self) -> SSAValue:
        """The result of the last op emitted."""
        return self.ops[-1].results[0]


REMOVED_BY: dict[str, str] = {
    "hir": "convert-hir-to-mir",
    "mir": "convert-mir-to-lir",
    "lir.alloc": "lir-plan-arena",
}
"""The pass that removes each dialect's ops (or one op): what must run before a pass that
expects none of them."""


def require_lowered(module: Operation, pass_name: str, *removed: str) -> None:
    """Refuse a module that still has ops of the dialects (or the op names) in `removed`,
    naming them and the pass that must run first (the pipeline run out of order).

    Called at the start of a pass's `apply`, it turns the verifier error of a half-lowered
    module into one diagnostic, e.g. "convert-mir-to-lir: the module still has hir ops
    (hir.linear); run convert-hir-to-mir first".
    """
    found: dict[str, set[str]] = {key: set() for key in removed}
    for op in module.walk():
        for key in removed:
            if op.name == key or op.name.startswith(key + "."):
                found[key].add(op.name)
    for key in removed:  # earliest stage first: that pass runs before the others
        if found[key]:
            names = sorted(found[key])
            listed = ", ".join(names[:4]) + (f", ... ({len(names)} kinds)" if len(names) > 4 else "")
            what = f"{key} ops ({listed})" if "." not in key else f"{key} ops"
            raise PassFailedException(
                f"{pass_name}: the module still has {what}; run {REMOVED_BY[key]} first"
            )


def refuse_dynamic(module: Operation, pass_name: str) -> None:
    """Refuse a module with `?` dims (symbolic shapes): the passes from lir-plan-arena on
    need static sizes (planning for max_dims and kernels that read sizes at run time are
    not there yet), so they say so instead of planning or lowering wrongly."""
    for op in module.walk():
        values = [*op.results, *(arg for region in op.regions for block in region.blocks for arg in block.args)]
        for value in values:
            ty = value.type
            if isinstance(ty, ShapedType) and any(d < 0 for d in ty.get_shape()):
                raise PassFailedException(
                    f"{pass_name}: the module has values with ? dims (a {ty} in '{op.name}'); "
                    "dynamic buffers are not planned or lowered yet: run it with the "
                    "reference executor or build it with static sizes"
                )


def splat_constant(
    shape: Sequence[int], value: float = 0.0, element_type: Attribute = f32
) -> mir.ConstantOp:
    """A `mir.constant` of the given shape with every element `value`."""
    ty = TensorType(element_type, shape)
    return mir.ConstantOp(DenseIntOrFPElementsAttr.from_list(ty, [value]))


__all__ = [
    "ACTIVATION_OPS", "REMOVED_BY", "OpSequence", "refuse_dynamic", "require_lowered", "splat_constant",
]
