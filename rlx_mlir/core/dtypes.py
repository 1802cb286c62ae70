"""The element types of rlx, in one table: each dtype's API name, numpy type, MLIR type,
the llvm type that moves one element, and its size in bytes.

Every layer takes these facts from here (the Graph builder's dtype names, the call
binding's numpy conversion, the dialects' element types, the kernels' llvm types and
byte strides) instead of keeping a table of its own.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import numpy as np
from xdsl.dialects.builtin import Float32Type, IntegerType, Signedness, f32, i8, i32, i64
from xdsl.ir import Attribute

ui8 = IntegerType(8, Signedness.UNSIGNED)
"""GGUF block bytes: MLIR's `ui8`."""


@dataclass(frozen=True)
class DType:
    """One rlx element type."""

    name: str
    """The API name: "f32", "i32", "i64", "ui8"."""
    numpy: type[np.generic]
    """The numpy scalar type of arrays of this dtype."""
    mlir: Attribute
    """The builtin element type in tensors and memrefs."""
    llvm: Attribute
    """The llvm type that loads and stores one element (ui8 as a signless i8)."""
    bytes: int
    """Bytes per element."""

    @property
    def np_dtype(self) -> np.dtype:
        return np.dtype(self.numpy)


DTYPES: dict[str, DType] = {
    "f32": DType("f32", np.float32, f32, f32, 4),
    "i32": DType("i32", np.int32, i32, i32, 4),
    "i64": DType("i64", np.int64, i64, i64, 8),
    "ui8": DType("ui8", np.uint8, ui8, i8, 1),
}
"""Every rlx element type, by API name."""

DTYPE_NAMES: tuple[str, ...] = tuple(DTYPES)
"""The API names, f32 first."""

INDEX_DTYPE_NAMES: tuple[str, ...] = ("i32", "i64")
"""The dtypes of index operands (gather indices, embedding ids)."""

NUMPY_NAMES: dict[str, str] = {np.dtype(d.numpy).name: d.name for d in DTYPES.values()}
"""numpy's names ("float32") -> rlx names ("f32")."""


def numpy_type(name: str) -> type[np.generic]:
    """The numpy scalar type of the rlx dtype `name`."""
    return DTYPES[name].numpy


def dtype_of_element(element_type: Attribute) -> DType | None:
    """The rlx dtype of an MLIR element type, None for a foreign one."""
    if isinstance(element_type, Float32Type):
        return DTYPES["f32"]
    for dtype in DTYPES.values():
        if element_type == dtype.mlir:
            return dtype
    return None


def element_name(element_type: Attribute) -> str:
    """The API name of an element type, or its MLIR spelling if foreign."""
    dtype = dtype_of_element(element_type)
    return dtype.name if dtype is not None else str(element_type)


def element_bytes(element_type: Attribute) -> int:
    """Bytes of one element of an MLIR element type (integers of any width, f32 4)."""
    dtype = dtype_of_element(element_type)
    if dtype is not None:
        return dtype.bytes
    if isinstance(element_type, IntegerType):
        return max(1, element_type.width.data // 8)
    return 4


def llvm_element(element_type: Attribute) -> Attribute:
    """The llvm type that moves one element of `element_type` (ui8 as signless i8)."""
    dtype = dtype_of_element(element_type)
    if dtype is None:
        raise ValueError(f"unsupported element type {element_type}")
    return dtype.llvm


def numpy_of_element(element_type: Attribute) -> np.dtype | None:
    """The (little-endian) numpy dtype of an MLIR element type, None for a foreign one."""
    dtype = dtype_of_element(element_type)
    return None if dtype is None else np.dtype(dtype.numpy).newbyteorder("<")


def canonical_name(dtype: Any) -> str | None:
    """The rlx name of an rlx name, a numpy name, scalar type or `np.dtype`; None if none."""
    if isinstance(dtype, str):
        name = NUMPY_NAMES.get(dtype, dtype)
        return name if name in DTYPES else None
    try:
        return NUMPY_NAMES.get(np.dtype(dtype).name)
    except TypeError:
        return None
