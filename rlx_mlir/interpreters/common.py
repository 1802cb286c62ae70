"""Helpers shared by the hir, mir and lir interpreter functions."""

from __future__ import annotations

import inspect
from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
from contextlib import contextmanager
from contextvars import ContextVar
from types import MappingProxyType
from typing import Any

import numpy as np
from xdsl.dialects.builtin import (
    DenseArrayBase,
    DenseIntOrFPElementsAttr,
    DictionaryAttr,
    FloatAttr,
    IntegerAttr,
    UnitAttr,
)
from xdsl.dialects.utils import EnumAttribute
from xdsl.interpreter import InterpreterFunctions, impl, register_impls
from xdsl.ir import Attribute, Operation, SSAValue
from xdsl.irdl import IRDLOperation

from rlx_mlir.core import shape_inference as rules
from rlx_mlir.core.dtypes import numpy_type
from rlx_mlir.core.errors import ArgumentError
from rlx_mlir.dialects.common import dtype_of, shape_of
from rlx_mlir.dialects.registry import RegistryError

OpImpl = Callable[[Operation, list[Any], dict[str, Any]], Any]
"""An implementation: (op, operands by definition order, python properties) -> result
(a tuple of them for an op with several results)."""


def python_value(attr: Attribute) -> Any:
    """An op property as a plain Python value (int, float, str, tuple, bool, ndarray, or a
    dict of these)."""
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
    if isinstance(attr, DictionaryAttr):
        return {name: python_value(value) for name, value in attr.data.items()}
    return attr


def dense_array(attr: DenseIntOrFPElementsAttr) -> np.ndarray:
    ty = attr.get_type()
    values = np.asarray(attr.get_values(), dtype=numpy_type(dtype_of(ty)))
    return values.reshape(tuple(ty.get_shape()))


# ----------------------------------------------------------------------------- symbolic dims
# A `?` in a result type is a size of this call: the kernels of the reference take it from
# their operands' arrays, or (an lir.alloc) from the symbols the call bound.

_SYMBOL_SIZES: ContextVar[Mapping[str, int]] = ContextVar(
    "symbol_sizes", default=MappingProxyType({})
)


@contextmanager
def bound_symbols(sizes: Mapping[str, int]) -> Iterator[None]:
    """Run the interpreter with the call's symbol sizes (for `lir.alloc dims [...]`)."""
    token = _SYMBOL_SIZES.set(sizes)
    try:
        yield
    finally:
        _SYMBOL_SIZES.reset(token)


_PENDING_ASSIGNS: ContextVar[list[tuple[np.ndarray, np.ndarray]] | None] = ContextVar(
    "pending_assigns", default=None
)


@contextmanager
def deferred_assigns() -> Iterator[None]:
    """Inside, a tensor-level `assign` (`mir.assign`) is recorded instead of written, so
    the state keeps its old value for the rest of the call (value semantics, as the lir
    copy placed last); the writes happen when the block ends without an error."""
    pending: list[tuple[np.ndarray, np.ndarray]] = []
    token = _PENDING_ASSIGNS.set(pending)
    try:
        yield
    finally:
        _PENDING_ASSIGNS.reset(token)
    for state, value in pending:
        state[...] = value


def assign_state(state: np.ndarray, value: np.ndarray) -> None:
    """Write `value` into the state buffer `state`, at the end of the call when inside
    `deferred_assigns`."""
    pending = _PENDING_ASSIGNS.get()
    if pending is None:
        state[...] = value
    else:
        pending.append((state, np.array(value)))


def reshaped_shape(result: SSAValue, source: SSAValue, array: np.ndarray) -> tuple[int, ...]:
    """The shape of a reshape (or view) of `array`: each `?` of the result is the next `?`
    of the source (a symbolic dim stays a whole dim, in order)."""
    sizes = iter(n for d, n in zip(shape_of(source), array.shape, strict=True) if d == rules.UNKNOWN)
    return tuple(next(sizes) if d == rules.UNKNOWN else d for d in shape_of(result))


def broadcast_shape(result: SSAValue, arrays: Sequence[np.ndarray]) -> tuple[int, ...]:
    """The shape of a result the `arrays` broadcast to: each `?` is their broadcast size."""
    declared = shape_of(result)
    rank = len(declared)
    dims = []
    for axis, d in enumerate(declared):
        if d != rules.UNKNOWN:
            dims.append(d)
            continue
        sizes = [a.shape[axis - rank + a.ndim] for a in arrays if axis - rank + a.ndim >= 0]
        dims.append(max([n for n in sizes if n != 1] or [1]))
    return tuple(dims)


def allocated_shape(dims: Sequence[int | str], what: str) -> tuple[int, ...]:
    """The shape of a buffer with symbolic `dims` under the call's symbol sizes."""
    sizes = _SYMBOL_SIZES.get()
    try:
        return tuple(rules.evaluate_dim(d, sizes) for d in dims)
    except (KeyError, rules.ShapeError):
        raise ArgumentError(
            f"{what}: dims {rules.fmt(tuple(dims))}: no size for a dim (a ? the IR does not "
            f"name, or a symbol no argument binds; bound: {dict(sizes)})"
        ) from None


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


def call_kernel(kernel: Callable[..., Any], operands: Sequence[Any], props: dict[str, Any],
                names: Sequence[str] = ()) -> Any:
    """`kernel(*operands, **props)`, passing only the properties the kernel takes; a
    kernel that takes its operands as `**operands` gets them by their `names`, and an
    operand whose name is a keyword-only parameter of the kernel (a fused epilogue's
    `residual`) goes by that keyword."""
    params = inspect.signature(kernel).parameters
    kwargs = {k: v for k, v in props.items() if k in params}
    if names and any(p.kind is inspect.Parameter.VAR_KEYWORD for p in params.values()):
        return kernel(**dict(zip(names, operands, strict=True)), **kwargs)
    if names and any(p.kind is inspect.Parameter.KEYWORD_ONLY and p.name in names
                     for p in params.values()):
        by_name = dict(zip(names, operands, strict=False))  # an lir kernel's outs: not given
        keyword = {name for name, p in params.items() if p.kind is inspect.Parameter.KEYWORD_ONLY}
        kwargs |= {name: by_name[name] for name in keyword & by_name.keys()}
        operands = [value for name, value in by_name.items() if name not in keyword]
    return kernel(*operands, **kwargs)


def functions_for(name: str, implementations: Mapping[type[Operation], OpImpl]
                  ) -> type[InterpreterFunctions]:
    """An InterpreterFunctions class named `name` with one `@impl(op)` per entry of
    `implementations` (xDSL's idiom, as in `xdsl.interpreters.arith`)."""
    namespace: dict[str, Any] = {
        f"run_{op_type.name.replace('.', '_')}": impl(op_type)(_method(implementation))
        for op_type, implementation in implementations.items()
    }
    return register_impls(type(name, (InterpreterFunctions,), namespace))


def reference_impl(kernel: Callable[..., Any]) -> OpImpl:
    """The implementation that calls a reference kernel with the op's operands (in
    definition order) and the properties the kernel takes."""
    return lambda op, args, props: call_kernel(
        kernel, args, props, [name for name, _ in type(op).get_irdl_definition().operands])


def implementations_of(
    records: Iterable[Any], special: Mapping[type[Operation], OpImpl], what: str
) -> dict[type[Operation], OpImpl]:
    """One implementation per registry record: its reference kernel, or the `special`
    implementation of an op whose record has no reference. A record with neither, or with
    both, or a special implementation of an op without a record is a RegistryError."""
    table: dict[type[Operation], OpImpl] = {}
    for record in records:
        has_special = record.op in special
        if (record.reference is None) != has_special:
            raise RegistryError(
                f"{what} interpreter of '{record.op.name}': expected a reference kernel in its "
                f"registry record or a special implementation (exactly one), got "
                f"{'both' if has_special else 'neither'}"
            )
        table[record.op] = special[record.op] if has_special else reference_impl(record.reference)
    return table


def _method(implementation: OpImpl) -> Callable[..., tuple[Any, ...]]:
    # An op with a region (scan) runs its body on the interpreter itself: it takes it as
    # the keyword `interpreter`.
    extra = "interpreter" in inspect.signature(implementation).parameters

    def run(self: InterpreterFunctions, interpreter: Any, op: IRDLOperation,
            args: tuple[Any, ...]) -> tuple[Any, ...]:
        more = {"interpreter": interpreter} if extra else {}
        result = implementation(op, operands_by_definition(op, args), python_props(op), **more)
        if result is None:
            return ()
        return result if isinstance(result, tuple) else (result,)  # an op with several results

    return run
