"""Vector-capable `llvm.fcmp` and `llvm.select`, and the llvm dialect that holds them.

xDSL 0.74 types `llvm.fcmp` and `llvm.select` for scalars only, though LLVM compares
and selects lane by lane on vectors. These subclasses keep the ops' names (so xDSL's
llvm converter translates them and rlx-lower output stays pure llvm) and widen the
types; `LLVM` is xDSL's llvm dialect with them swapped in, registered as "llvm" by
rlx-opt and `rlx_mlir.ir.make_context` so printed vector compares parse back.
"""

from __future__ import annotations

from typing import ClassVar

from xdsl.dialects import llvm
from xdsl.dialects.builtin import I1, AnyFloatConstr, IntegerAttr, VectorType, i1, i64
from xdsl.ir import Attribute, Dialect, SSAValue
from xdsl.irdl import (
    AnyAttr,
    ParsePropInAttrDict,
    VarConstraint,
    irdl_op_definition,
    operand_def,
    prop_def,
    result_def,
    traits_def,
)
from xdsl.traits import Pure
from xdsl.utils.exceptions import VerifyException


def mask_type(ty: Attribute) -> Attribute:
    """i1, or vector<N x i1> for a vector type."""
    return VectorType(i1, ty.get_shape()) if isinstance(ty, VectorType) else i1


@irdl_op_definition
class VectorFCmpOp(llvm.FCmpOp):
    """`llvm.fcmp` on scalars or vectors of floats (result i1 or vector<N x i1>)."""

    name = "llvm.fcmp"

    T: ClassVar = VarConstraint("T", AnyFloatConstr | VectorType.constr(AnyFloatConstr))

    lhs = operand_def(T)
    rhs = operand_def(T)
    res = result_def(I1 | VectorType.constr(I1))

    predicate = prop_def(IntegerAttr[i64])
    fastmathFlags = prop_def(llvm.FastMathAttr, default_value=llvm.FastMathAttr(None))

    traits = traits_def(Pure())

    irdl_options = (ParsePropInAttrDict(),)

    def __init__(self, lhs: SSAValue, rhs: SSAValue, predicate: str | IntegerAttr,
                 attributes: dict[str, Attribute] | None = None):
        if isinstance(predicate, str):
            predicate = IntegerAttr(llvm.FCmpPredicateFlag(predicate).to_int(), i64)
        super(llvm.FCmpOp, self).__init__(
            operands=[lhs, rhs],
            result_types=[mask_type(SSAValue.get(lhs).type)],
            properties={"predicate": predicate},
            attributes=attributes or {},
        )

    def verify_(self) -> None:
        if self.res.type != mask_type(self.lhs.type):
            raise VerifyException(f"llvm.fcmp: expected result {mask_type(self.lhs.type)}, "
                                  f"got {self.res.type}")


@irdl_op_definition
class VectorSelectOp(llvm.SelectOp):
    """`llvm.select` with an i1 or a vector<N x i1> condition."""

    name = "llvm.select"

    T: ClassVar = VarConstraint("T", AnyAttr())

    cond = operand_def(I1 | VectorType.constr(I1))
    lhs = operand_def(T)
    rhs = operand_def(T)
    res = result_def(T)

    fastmathFlags = prop_def(llvm.FastMathAttr, default_value=llvm.FastMathAttr(None))

    traits = traits_def(Pure())

    assembly_format = None  # the generic form (the parent's format types the condition i1)

    irdl_options = (ParsePropInAttrDict(),)

    def verify_(self) -> None:
        if self.cond.type not in (i1, mask_type(self.lhs.type)):
            raise VerifyException(
                f"llvm.select: condition must be i1 or {mask_type(self.lhs.type)}, got {self.cond.type}"
            )


LLVM = Dialect(
    "llvm",
    [
        {llvm.FCmpOp: VectorFCmpOp, llvm.SelectOp: VectorSelectOp}.get(op, op)
        for op in llvm.LLVM.operations
    ],
    list(llvm.LLVM.attributes),
)
"""xDSL's llvm dialect with the vector-capable fcmp and select."""
