"""Folders and canonicalization patterns of the `mir` dialect.

The mir ops attach them with traits (`MirFolder`, `<Op>HasCanonicalizationPatterns` in
`mir.py`) that import this module lazily, as xDSL's dialects do with
`xdsl/transforms/canonicalization_patterns/`; xDSL's own `canonicalize` pass applies them
(and `cse` merges the equal Pure ops and constants that result). This module does not
import `mir.py` back (no import cycle): it matches ops by name and builds a replacement
with the matched op's own class.

Folders (`fold`):
- identities forward their input: a reshape or broadcast_to to the input's own type, a
  transpose by the identity permutation, a narrow of a whole axis;
- ops whose operands are all `mir.constant` fold to a constant when the result has at
  most `MAX_FOLD_ELEMENTS` elements: the elementwise ops (computed by the numpy oracle,
  `rlx_mlir.core.reference_kernels`) and reshape, transpose, narrow, broadcast_to.
  The dialect's constant materializer turns the folded value into a `mir.constant`.

Patterns: reshape of a reshape is one reshape; transpose of a transpose is one
transpose by the composed permutation (none when it is the identity); broadcast_to of a
broadcast_to is one broadcast_to.
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from collections.abc import Callable, Sequence
from typing import TYPE_CHECKING, ClassVar

import numpy as np
from xdsl.dialects.builtin import (
    BytesAttr,
    DenseIntOrFPElementsAttr,
    Float32Type,
    TensorType,
)
from xdsl.ir import Attribute, Operation, SSAValue
from xdsl.pattern_rewriter import PatternRewriter, RewritePattern
from xdsl.traits import ConstantLike

from rlx_mlir.core import reference_kernels as ref
from rlx_mlir.core import shape_inference as si
from rlx_mlir.core.dtypes import numpy_of_element
from rlx_mlir.dialects.common import shape_of

if TYPE_CHECKING:
    from rlx_mlir.dialects import mir

MAX_FOLD_ELEMENTS = 1024
"""Largest result (in elements) that constant folding creates."""

FoldResult = Sequence[SSAValue | Attribute] | None

_INT_ELEMENTWISE: dict[str, Callable[..., np.ndarray]] = {
    "add": np.add,
    "sub": np.subtract,
    "mul": np.multiply,
    "max": np.maximum,
    "min": np.minimum,
    "neg": np.negative,
    "abs": np.abs,
    "relu": lambda x: np.maximum(x, 0),
}
"""The elementwise ops that also take i32/i64 (wrapping integer arithmetic)."""


# ----------------------------------------------------------------------------- dense <-> numpy


def to_numpy(value: DenseIntOrFPElementsAttr) -> np.ndarray | None:
    """The dense value as a (read-only) numpy array of its shape, None for other types."""
    dtype = numpy_of_element(value.get_element_type())
    if dtype is None:
        return None
    return np.frombuffer(value.data.data, dtype=dtype).reshape(value.get_shape())


def from_numpy(array: np.ndarray, type: TensorType) -> DenseIntOrFPElementsAttr | None:
    """`array` as a dense value of `type` (None when `type` has no numpy dtype)."""
    dtype = numpy_of_element(type.get_element_type())
    if dtype is None:
        return None
    data = np.ascontiguousarray(np.broadcast_to(array, type.get_shape()), dtype=dtype)
    return DenseIntOrFPElementsAttr(type, BytesAttr(data.tobytes()))


def _constant_operands(op: Operation) -> list[np.ndarray] | None:
    """The operands' values when every operand is a `mir.constant`, else None."""
    arrays: list[np.ndarray] = []
    for operand in op.operands:
        value = ConstantLike.get_constant_value(operand)
        if not isinstance(value, DenseIntOrFPElementsAttr):
            return None
        array = to_numpy(value)
        if array is None:
            return None
        arrays.append(array)
    return arrays


def _fold_constant(op: Operation, compute: Callable[..., np.ndarray]) -> FoldResult:
    """Fold `op` (one result) to `compute(*operand arrays)` when its operands are constants
    and its result is small."""
    result_type = op.results[0].type
    assert isinstance(result_type, TensorType)
    shape = shape_of(op.results[0])
    if not si.is_static_shape(shape) or si.numel(shape) > MAX_FOLD_ELEMENTS:
        return None  # a `?` result has no constant value (its size is the call's)
    arrays = _constant_operands(op)
    if arrays is None:
        return None
    result = np.asarray(compute(*arrays))
    if result.dtype.kind == "f" and not np.isfinite(result).all():
        # xDSL prints inf/nan in a dense list as hex that it parses back as an integer.
        return None
    folded = from_numpy(result, result_type)
    return None if folded is None else (folded,)


# ----------------------------------------------------------------------------- folders


def _op_kind(op: Operation) -> str:
    return op.name.removeprefix("mir.")


def fold_elementwise(op: mir.BinaryElementwiseOp | mir.UnaryElementwiseOp) -> FoldResult:
    """An elementwise op on constants is the numpy oracle's result (f32), or numpy's
    wrapping integer arithmetic (i32, i64)."""
    kind = _op_kind(op)
    assert isinstance(op.result.type, TensorType)
    if isinstance(op.result.type.get_element_type(), Float32Type):
        return _fold_constant(op, ref.ELEMENTWISE[kind])
    if kind in _INT_ELEMENTWISE:
        return _fold_constant(op, _INT_ELEMENTWISE[kind])
    return None


def fold_reshape(op: mir.ReshapeOp) -> FoldResult:
    """reshape(x : T) -> T is x; a small constant is reshaped."""
    if op.input.type == op.result.type:
        return (op.input,)
    return _fold_constant(op, lambda x: x.reshape(shape_of(op.result)))


def _normalized_perm(perm: Sequence[int]) -> list[int]:
    return [p % len(perm) for p in perm] if perm else []


def fold_transpose(op: mir.TransposeOp) -> FoldResult:
    """A transpose by the identity permutation is its input; a small constant is
    transposed."""
    perm = _normalized_perm(op.perm.get_values())
    if perm == list(range(len(perm))):
        return (op.input,)
    return _fold_constant(op, lambda x: ref.transpose(x, perm))


def fold_narrow(op: mir.NarrowOp) -> FoldResult:
    """A narrow that keeps the whole axis is its input; a small constant is sliced."""
    if op.input.type == op.result.type:
        return (op.input,)
    axis, start, length = (a.value.data for a in (op.axis, op.start, op.length))
    return _fold_constant(op, lambda x: ref.narrow(x, axis, start, length))


def fold_broadcast_to(op: mir.BroadcastToOp) -> FoldResult:
    """broadcast_to(x : T) -> T is x; a small constant is broadcast."""
    if op.input.type == op.result.type:
        return (op.input,)
    return _fold_constant(op, lambda x: np.broadcast_to(x, shape_of(op.result)))


FOLDERS: dict[str, Callable[..., FoldResult]] = {
    "mir.constant": lambda op: (op.value,),
    "mir.reshape": fold_reshape,
    "mir.transpose": fold_transpose,
    "mir.narrow": fold_narrow,
    "mir.broadcast_to": fold_broadcast_to,
}
"""The folders of the non-elementwise mir ops, by op name."""


def fold(op: Operation) -> FoldResult:
    """Fold a mir op: the replacement of each result (an existing value or a dense
    attribute to materialize), or None when it does not fold."""
    if _op_kind(op) in ref.ELEMENTWISE:  # `mir.<fn>` is the elementwise fn <fn>
        return fold_elementwise(op)
    folder = FOLDERS.get(op.name)
    return None if folder is None else folder(op)


# ----------------------------------------------------------------------------- patterns


class _OfSameOp(RewritePattern, ABC):
    """A pattern on `OP(OP(x))`: an op whose first operand an op of its own kind makes."""

    OP_NAME: ClassVar[str]

    def match_and_rewrite(self, op: Operation, rewriter: PatternRewriter, /):
        if op.name == self.OP_NAME and isinstance(inner := op.operands[0].owner, type(op)):
            self.rewrite(op, inner, rewriter)

    @abstractmethod
    def rewrite(self, op: Operation, inner: Operation, rewriter: PatternRewriter) -> None: ...


class ReshapeOfReshape(_OfSameOp):
    """reshape(reshape(x)) -> reshape(x) (the identity case then folds away)."""

    OP_NAME = "mir.reshape"

    def rewrite(self, op: mir.ReshapeOp, inner: mir.ReshapeOp, rewriter: PatternRewriter):
        rewriter.replace(op, type(op)(inner.input, op.result.type))


class TransposeOfTranspose(_OfSameOp):
    """transpose(transpose(x, p1), p2) -> transpose(x, p1[p2]), or x when p1[p2] is the
    identity."""

    OP_NAME = "mir.transpose"

    def rewrite(self, op: mir.TransposeOp, inner: mir.TransposeOp, rewriter: PatternRewriter):
        first = _normalized_perm(inner.perm.get_values())
        second = _normalized_perm(op.perm.get_values())
        composed = [first[p] for p in second]
        if composed == list(range(len(composed))):
            rewriter.replace(op, [], [inner.input])
            return
        rewriter.replace(op, type(op)(inner.input, composed, op.result.type))


class BroadcastToOfBroadcastTo(_OfSameOp):
    """broadcast_to(broadcast_to(x)) -> broadcast_to(x) (broadcasting is transitive)."""

    OP_NAME = "mir.broadcast_to"

    def rewrite(self, op: mir.BroadcastToOp, inner: mir.BroadcastToOp,
                rewriter: PatternRewriter):
        rewriter.replace(op, type(op)(inner.input, op.result.type))
