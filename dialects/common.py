"""Helpers shared by the hir, mir and lir verifiers and by the Graph builder.

They translate between xDSL types and the plain shapes and dtype strings of
`rlx_mlir.core.shape_inference`, and turn that module's `ShapeError`/`DTypeError` into
xDSL `VerifyException`s that name the failing op.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from typing import Any, TypeVar

from xdsl.dialects.builtin import (
    DenseArrayBase,
    Float32Type,
    FloatAttr,
    IntegerAttr,
    IntegerType,
    MemRefType,
    Signedness,
    TensorType,
    f32,
    i32,
    i64,
)
from xdsl.dialects.utils import EnumAttribute
from xdsl.ir import Attribute, Operation, SSAValue
from xdsl.utils.exceptions import VerifyException
from xdsl.utils.str_enum import StrEnum

from rlx_mlir.core import shape_inference as rules
from rlx_mlir.core.errors import RlxError
from rlx_mlir.core.shape_inference import Shape
from rlx_mlir.dialects.rlx import MaskKind, MaskKindAttr, RopeStyle, RopeStyleAttr

ui8 = IntegerType(8, Signedness.UNSIGNED)

ELEMENT_TYPES: dict[str, Attribute] = {"f32": f32, "i32": i32, "i64": i64, "ui8": ui8}
"""The element types rlx accepts, by their Python API name."""

T = TypeVar("T")


def dtype_name(element_type: Attribute) -> str:
    """The API name ("f32", "i32", ...) of an element type, or its MLIR spelling if foreign."""
    if isinstance(element_type, Float32Type):
        return "f32"
    for name, ty in ELEMENT_TYPES.items():
        if element_type == ty:
            return name
    return str(element_type)


def element_type(dtype: str) -> Attribute:
    return ELEMENT_TYPES[dtype]


def shape_of(value: SSAValue | Attribute) -> Shape:
    """The static shape of a tensor or memref value (or type)."""
    ty = value.type if isinstance(value, SSAValue) else value
    assert isinstance(ty, TensorType | MemRefType), ty
    return tuple(ty.get_shape())


def dtype_of(value: SSAValue | Attribute) -> str:
    ty = value.type if isinstance(value, SSAValue) else value
    assert isinstance(ty, TensorType | MemRefType), ty
    return dtype_name(ty.get_element_type())


def opt_shape(value: SSAValue | None) -> Shape | None:
    return None if value is None else shape_of(value)


def i64_attr(value: int | IntegerAttr) -> IntegerAttr:
    """An i64 IntegerAttr property (kept as is if already an attribute)."""
    return value if isinstance(value, IntegerAttr) else IntegerAttr(int(value), i64)


def f32_attr(value: float | FloatAttr) -> FloatAttr:
    """An f32 FloatAttr property (kept as is if already an attribute)."""
    return value if isinstance(value, FloatAttr) else FloatAttr(float(value), f32)


def i64_array_attr(values: Sequence[int] | DenseArrayBase) -> DenseArrayBase:
    """An i64 DenseArrayBase property (kept as is if already an attribute)."""
    if isinstance(values, DenseArrayBase):
        return values
    return DenseArrayBase.from_list(i64, [int(v) for v in values])


EnumAttrT = TypeVar("EnumAttrT", bound=EnumAttribute[Any])


def enum_attr(attr_type: type[EnumAttrT], value: str | StrEnum | EnumAttrT) -> EnumAttrT:
    """An enum property (`ActivationAttr`, `MaskKindAttr`, ...) from its keyword, enum
    member or attribute."""
    if isinstance(value, attr_type):
        return value
    return attr_type(attr_type.enum_type(value))


def attention_properties(
    num_heads: int,
    head_dim: int,
    num_kv_heads: int | None = None,
    mask_kind: str | MaskKind | MaskKindAttr = MaskKind.NONE,
    scale: float | FloatAttr | None = None,
) -> dict[str, Attribute]:
    """The properties of an attention op at any level: `num_kv_heads` defaults to
    `num_heads` (no grouping), `scale` to 1/sqrt(head_dim)."""
    return {
        "num_heads": i64_attr(num_heads),
        "head_dim": i64_attr(head_dim),
        "num_kv_heads": i64_attr(num_heads if num_kv_heads is None else num_kv_heads),
        "mask_kind": enum_attr(MaskKindAttr, mask_kind),
        "scale": f32_attr(1 / math.sqrt(head_dim) if scale is None else scale),
    }


def rope_properties(
    head_dim: int | IntegerAttr,
    n_rot: int | IntegerAttr | None = None,
    style: str | RopeStyle | RopeStyleAttr = RopeStyle.HALF,
) -> dict[str, Attribute]:
    """The properties of a rope op at any level: `n_rot` defaults to `head_dim` (rotate
    every dim of a head)."""
    return {
        "head_dim": i64_attr(head_dim),
        "n_rot": i64_attr(head_dim if n_rot is None else n_rot),
        "style": enum_attr(RopeStyleAttr, style),
    }


def tensor_type(shape: Shape, dtype: str = "f32") -> TensorType:
    return TensorType(element_type(dtype), shape)


def memref_type(shape: Shape, dtype: str = "f32") -> MemRefType:
    return MemRefType(element_type(dtype), shape)


@contextmanager
def rule_errors(op: Operation) -> Iterator[None]:
    """Re-raise a shape or dtype rule's `RlxError` as a VerifyException naming `op`."""
    try:
        yield
    except RlxError as err:
        raise VerifyException(f"'{op.name}': {err}") from err


def verify_result(op: Operation, result: SSAValue, rule: Callable[[], Shape], what: str = "result") -> None:
    """Check that `result` has the shape `rule` infers (the rule's errors name `op`)."""
    with rule_errors(op):
        expected = rule()
    got = shape_of(result)
    if tuple(expected) != got:
        raise VerifyException(
            f"'{op.name}': {what}: expected shape {list(expected)}, got {list(got)}"
        )


def verify_dtype(op: Operation, name: str, value: SSAValue, allowed: tuple[str, ...]) -> None:
    got = dtype_of(value)
    if got not in allowed:
        raise VerifyException(
            f"'{op.name}': {name}: expected element type {' or '.join(allowed)}, got {got}"
        )


def verify_same_dtype(op: Operation, names: list[str], values: list[SSAValue]) -> None:
    dtypes = [dtype_of(v) for v in values]
    for name, dt in zip(names[1:], dtypes[1:], strict=True):
        if dt != dtypes[0]:
            raise VerifyException(
                f"'{op.name}': {name}: expected element type {dtypes[0]} (as {names[0]}), got {dt}"
            )


# ----------------------------------------------------------------------------- rules shared by hir, mir and lir
# The three levels name the operands and properties of these ops alike (`q`, `k`, `v`,
# `mask`, `num_heads`, ...), so one adapter per rule serves all of them.


def attention_shape(op: Operation) -> Shape:
    """The attention rule applied to an hir, mir or lir attention op."""
    return rules.attention(
        shape_of(op.q), shape_of(op.k), shape_of(op.v), opt_shape(op.mask),
        num_heads=op.num_heads.value.data, head_dim=op.head_dim.value.data,
        num_kv_heads=op.num_kv_heads.value.data, mask_kind=op.mask_kind.data.value,
    )


def rope_shape(op: Operation) -> Shape:
    """The rope rule applied to an hir, mir or lir rope op."""
    return rules.rope(shape_of(op.x), shape_of(op.cos), shape_of(op.sin),
                      op.head_dim.value.data, op.n_rot.value.data)


def verify_eps(op: Operation, eps: FloatAttr) -> None:
    """A norm's eps: finite and > 0."""
    value = eps.value.data
    if not (value > 0 and math.isfinite(value)):
        raise VerifyException(f"'{op.name}': eps: expected a finite value > 0, got {value:g}")


def verify_scale(op: Operation, scale: FloatAttr) -> None:
    """An attention scale: finite."""
    value = scale.value.data
    if not math.isfinite(value):
        raise VerifyException(f"'{op.name}': scale: expected a finite value, got {value:g}")
