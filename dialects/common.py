"""Helpers shared by the hir, mir and lir verifiers and by the Graph builder.

They translate between xDSL types and the plain shapes and dtype strings of
`rlx_mlir.core.shape_inference`, and turn that module's `ShapeError`/`DTypeError` into
xDSL `VerifyException`s that name the failing op.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Iterator, Mapping, Sequence
from contextlib import contextmanager
from contextvars import ContextVar
from types import MappingProxyType
from typing import Any, TypeVar

from xdsl.dialects.builtin import (
    ArrayAttr,
    DenseArrayBase,
    FloatAttr,
    IntegerAttr,
    MemRefType,
    StringAttr,
    TensorType,
    f32,
    i64,
)
from xdsl.dialects.utils import EnumAttribute
from xdsl.ir import Attribute, Operation, SSAValue
from xdsl.irdl import IRDLOperation
from xdsl.utils.exceptions import VerifyException
from xdsl.utils.str_enum import StrEnum

from rlx_mlir.core import shape_inference as rules
from rlx_mlir.core.dtypes import DTYPES, element_name
from rlx_mlir.core.errors import RlxError
from rlx_mlir.core.shape_inference import Shape
from rlx_mlir.dialects.rlx import MaskKind, RopeStyle


def element_type(dtype: str) -> Attribute:
    """The MLIR element type of the rlx dtype `dtype` (`core.dtypes`)."""
    return DTYPES[dtype].mlir


_NAMED_SHAPES: ContextVar[Mapping[SSAValue, Shape]] = ContextVar(
    "named_shapes", default=MappingProxyType({})
)


@contextmanager
def named_shapes(shapes: Mapping[SSAValue, Shape]) -> Iterator[None]:
    """Inside, `shape_of` gives the values of `shapes` their symbolic shapes (`("S", 64)`
    instead of `("?", 64)`), so an op's `infer_shape` propagates symbol names."""
    token = _NAMED_SHAPES.set(shapes)
    try:
        yield
    finally:
        _NAMED_SHAPES.reset(token)


def shape_of(value: SSAValue | Attribute) -> Shape:
    """The shape of a tensor or memref value (or type); a `?` dimension is
    `shape_inference.UNKNOWN`, so the shape rules treat it as compatible with any size
    (inside `named_shapes`, a value listed there has its symbolic shape)."""
    if isinstance(value, SSAValue) and (named := _NAMED_SHAPES.get().get(value)) is not None:
        return named
    ty = value.type if isinstance(value, SSAValue) else value
    assert isinstance(ty, TensorType | MemRefType), ty
    return tuple(rules.UNKNOWN if d < 0 else d for d in ty.get_shape())


def ir_dims(shape: Sequence[int | str]) -> list[int]:
    """A shape as an xDSL type stores it: every symbol (and `?`) becomes `DYNAMIC`."""
    return [rules.DYNAMIC if isinstance(d, str) else int(d) for d in shape]


def dtype_of(value: SSAValue | Attribute) -> str:
    ty = value.type if isinstance(value, SSAValue) else value
    assert isinstance(ty, TensorType | MemRefType), ty
    return element_name(ty.get_element_type())


def dims_attr(shape: Shape) -> ArrayAttr[Attribute]:
    """The `rlx.dims` form of a shape (argument attribute, `lir.alloc dims`): an array of
    i64 sizes and symbol names, `[ "S", 64 ]`."""
    return ArrayAttr([StringAttr(d) if isinstance(d, str) else i64_attr(d) for d in shape])


def dims_from_attr(attr: Attribute, what: str) -> Shape:
    """The shape an `rlx.dims` array spells (RlxError naming `what` if it is malformed)."""
    if not isinstance(attr, ArrayAttr):
        raise RlxError(f"{what}: expected an array of sizes and symbol names, got {attr}")
    dims: list[int | str] = []
    for entry in attr.data:
        if isinstance(entry, StringAttr):
            dims.append(entry.data)
        elif isinstance(entry, IntegerAttr):
            dims.append(entry.value.data)
        else:
            raise RlxError(f"{what}: expected sizes and symbol names, got the entry {entry}")
    return rules.check_shape(what, dims)


def verify_dims(op: Operation, what: str, attr: Attribute, ty: Attribute) -> Shape:
    """An `rlx.dims` array that describes the shaped type `ty`: same rank, each symbol or
    `?` where `ty` has `?`, the same size where it is static. Returns the named shape."""
    try:
        dims = dims_from_attr(attr, what)
    except RlxError as err:
        raise VerifyException(f"'{op.name}': {err}") from err
    shape = shape_of(ty)
    ok = len(dims) == len(shape) and all(
        (d == rules.UNKNOWN) == isinstance(n, str) and (isinstance(n, str) or n == d)
        for n, d in zip(dims, shape, strict=True)
    )
    if not ok:
        raise VerifyException(
            f"'{op.name}': {what}: the dims {rules.fmt(dims)} do not describe {ty} (a symbol "
            f"or ? exactly where the type has ?, the same sizes elsewhere)"
        )
    return dims


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


ATTENTION_DEFAULTS: Mapping[str, Callable[[Mapping[str, Any]], Any]] = MappingProxyType({
    "num_kv_heads": lambda p: p["num_heads"],
    "mask_kind": lambda p: MaskKind.NONE,
    "scale": lambda p: 1 / math.sqrt(p["head_dim"]),
})
"""The properties an attention op (hir, mir, lir) computes when left out: `num_kv_heads`
is `num_heads` (no grouping), `scale` 1/sqrt(head_dim), no mask."""

ROPE_DEFAULTS: Mapping[str, Callable[[Mapping[str, Any]], Any]] = MappingProxyType({
    "n_rot": lambda p: p["head_dim"],
    "style": lambda p: RopeStyle.HALF,
})
"""The properties a rope op (hir, mir, lir) computes when left out: rotate every dim of a
head (`n_rot` = `head_dim`), in halves."""


def tensor_type(shape: Shape, dtype: str = "f32") -> TensorType:
    """`tensor<...>` of `shape`; a symbolic dim prints as `?`."""
    return TensorType(element_type(dtype), ir_dims(shape))


def memref_type(shape: Shape, dtype: str = "f32") -> MemRefType:
    """`memref<...>` of `shape`; a symbolic dim prints as `?`."""
    return MemRefType(element_type(dtype), ir_dims(shape))


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
    if len(expected) != len(got) or not all(map(rules.dims_match, expected, got)):
        raise VerifyException(
            f"'{op.name}': {what}: expected shape {rules.fmt(expected)}, got {rules.fmt(got)}"
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


def defined_ops(namespace: Mapping[str, Any], prefix: str,
                base: type[IRDLOperation] = IRDLOperation) -> tuple[type[IRDLOperation], ...]:
    """The op classes of one dialect module (`globals()`), in definition order: every
    concrete subclass of `base` whose op name starts with `prefix`. The op lists and the
    `Dialect` are built from it, so defining an op class is what adds it to its dialect."""
    return tuple(
        value for value in namespace.values()
        if isinstance(value, type) and issubclass(value, base)
        and isinstance(getattr(value, "name", None), str) and value.name.startswith(prefix)
    )
