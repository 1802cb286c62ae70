"""Helpers shared by the rlx passes (module-level functions and tables, no pass state)."""

from __future__ import annotations

from collections.abc import Sequence
from typing import TypeVar

from xdsl.dialects.builtin import DenseIntOrFPElementsAttr, TensorType, f32
from xdsl.ir import Attribute, Operation, SSAValue

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


def splat_constant(
    shape: Sequence[int], value: float = 0.0, element_type: Attribute = f32
) -> mir.ConstantOp:
    """A `mir.constant` of the given shape with every element `value`."""
    ty = TensorType(element_type, shape)
    return mir.ConstantOp(DenseIntOrFPElementsAttr.from_list(ty, [value]))


__all__ = ["ACTIVATION_OPS", "OpSequence", "splat_constant"]
