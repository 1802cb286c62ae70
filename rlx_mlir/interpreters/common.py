"""Helpers shared by the hir, mir and lir interpreter functions."""

from __future__ import annotations

import inspect
from collections.abc import Callable, Sequence
from typing import Any

import numpy as np
from xdsl.dialects.builtin import (
    DenseArrayBase,
    DenseIntOrFPElementsAttr,
    FloatAttr,
    IntegerAttr,
    UnitAttr,
)
from xdsl.dialects.utils import EnumAttribute
from xdsl.interpreter import InterpreterFunctions, impl, register_impls
from xdsl.ir import Attribute, Dialect, Operation, SSAValue
from xdsl.irdl import IRDLOperation

from rlx_mlir.dialects.common import dtype_of
from rlx_mlir.signature import NUMPY_DTYPES

OpImpl = Callable[[Operation, list[Any], dict[str, Any]], Any]
"""An implementation: (op, operands by definition order, python properties) -> result."""


def python_value(attr: Attribute) -> Any:
    """An op property as a plain Python value (int, float, str, tuple, bool or ndarray)."""
    if isinstance(attr, IntegerAttr):
        return attr.value.data
    if isinstance(attr, FloatAttr):
        return attr.value.data
    if isinstance(attr, EnumAttribute):
        return attr.data.value
    if isinstance(attr, DenseArrayBase):
        return tuple(attr.get_values())
    if isinstance(attr, UnitAttr):
        return True
    if isinstance(attr, DenseIntOrFPElementsAttr):
        return dense_array(attr)
    return attr


def dense_array(attr: DenseIntOrFPElementsAttr) -> np.ndarray:
    ty = attr.get_type()
    values = np.asarray(attr.get_values(), dtype=NUMPY_DTYPES[dtype_of(ty)])
    return values.reshape(tuple(ty.get_shape()))


def python_props(op: Operation) -> dict[str, Any]:
    return {name: python_value(attr) for name, attr in op.properties.items()}


def operands_by_definition(op: IRDLOperation, args: Sequence[Any]) -> list[Any]:
    """The interpreter's operand values in definition order: None for an absent optional
    operand, a list for a variadic one."""
    value_of = dict(zip(op.operands, args, strict=True))
    result = []
    for name, _ in type(op).get_irdl_definition().operands:
        ssa = getattr(op, name)
        if ssa is None:
            result.append(None)
        elif isinstance(ssa, SSAValue):
            result.append(value_of[ssa])
        else:
            result.append([value_of[v] for v in ssa])
    return result


def call_kernel(kernel: Callable[..., Any], operands: Sequence[Any], props: dict[str, Any]) -> Any:
    """`kernel(*operands, **props)`, passing only the properties the kernel takes."""
    params = inspect.signature(kernel).parameters
    return kernel(*operands, **{k: v for k, v in props.items() if k in params})


def functions_for(dialect: Dialect, implementations: dict[str, OpImpl],
                  name: str) -> type[InterpreterFunctions]:
    """An InterpreterFunctions class with one `@impl` per op of `dialect` that has an entry
    (keyed by the op name without the dialect prefix) in `implementations`."""
    namespace: dict[str, Any] = {}
    for op_type in dialect.operations:
        short = op_type.name.split(".", 1)[1]
        if short in implementations:
            namespace[f"run_{short}"] = impl(op_type)(_method(implementations[short]))
    return register_impls(type(name, (InterpreterFunctions,), namespace))


def _method(implementation: OpImpl) -> Callable[..., tuple[Any, ...]]:
    def run(self: InterpreterFunctions, interpreter: Any, op: IRDLOperation,
            args: tuple[Any, ...]) -> tuple[Any, ...]:
        result = implementation(op, operands_by_definition(op, args), python_props(op))
        return () if result is None else (result,)

    return run
