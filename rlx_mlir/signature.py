"""A graph function's calling convention: which arguments it takes and how calls bind them.

Shared by the reference executor and compiled models, so both accept exactly the same
calls and refuse bad ones with the same `ArgumentError`s (SPEC "Errors").
"""

from __future__ import annotations

import functools
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np
from xdsl.dialects import func, llvm
from xdsl.dialects.builtin import DictionaryAttr, StringAttr

from rlx_mlir.core.errors import ArgumentError, GraphError
from rlx_mlir.core.shape_inference import fmt
from rlx_mlir.dialects.common import dtype_of, shape_of

ARG_NAME = "rlx.name"
"""Argument attribute holding an argument's name (survives every stage)."""
ARG_ROLE = "rlx.role"
"""Argument attribute holding an argument's role: "input", "param" or (in LIR) "output"."""

NUMPY_DTYPES: dict[str, type[np.generic]] = {
    "f32": np.float32, "i32": np.int32, "i64": np.int64, "ui8": np.uint8,
}


@dataclass(frozen=True)
class ArgSpec:
    """One function argument: its name, role ("input", "param", "output"), shape and dtype."""

    name: str
    role: str
    shape: tuple[int, ...]
    dtype: str

    def describe(self) -> str:
        return f"{self.role} {self.name!r} ({self.dtype}{fmt(self.shape)})"


@dataclass(frozen=True)
class Signature:
    """The arguments of a graph function, in declaration order."""

    name: str
    args: tuple[ArgSpec, ...]
    results: tuple[ArgSpec, ...]

    @staticmethod
    def of(fn: func.FuncOp) -> Signature:
        """Read names and roles from the argument attributes of `fn`."""
        arg_attrs = fn.arg_attrs.data if fn.arg_attrs is not None else ()
        args = []
        for i, arg in enumerate(fn.body.block.args):
            attrs = arg_attrs[i].data if i < len(arg_attrs) else {}
            name = _string(attrs, ARG_NAME) or (arg.name_hint or f"arg{i}")
            role = _string(attrs, ARG_ROLE) or "input"
            args.append(ArgSpec(name, role, shape_of(arg), dtype_of(arg)))
        results = tuple(
            ArgSpec(f"out{i}", "output", shape_of(t), dtype_of(t))
            for i, t in enumerate(fn.function_type.outputs.data)
        )
        outputs = tuple(a for a in args if a.role == "output")
        return Signature(fn.sym_name.data, tuple(args), results or outputs)

    @functools.cached_property
    def callable_args(self) -> tuple[ArgSpec, ...]:
        """Inputs then params: what a caller passes (outputs are the callee's to allocate)."""
        inputs = [a for a in self.args if a.role == "input"]
        params = [a for a in self.args if a.role == "param"]
        return tuple(inputs + params)

    def bind(self, args: Sequence[Any], kwargs: Mapping[str, Any],
             bound: Mapping[str, np.ndarray] | None = None) -> dict[str, np.ndarray]:
        """Map a call's positional and keyword arguments to checked, C-contiguous arrays.

        Positional arguments are the inputs in declaration order, then the params not in
        `bound`, in declaration order; keywords work for all of them.
        """
        bound = bound or {}
        free = [a for a in self.callable_args if a.name not in bound]
        if len(args) > len(free):
            names = ", ".join(a.name for a in free)
            raise ArgumentError(
                f"{self.name}: expected at most {len(free)} positional arguments ({names}), "
                f"got {len(args)}"
            )
        given: dict[str, Any] = {spec.name: value for spec, value in zip(free, args, strict=False)}
        specs = {a.name: a for a in self.callable_args}
        for key, value in kwargs.items():
            if key not in specs:
                known = ", ".join(specs) or "none"
                raise ArgumentError(f"{self.name}: unknown argument {key!r} (arguments: {known})")
            if key in given:
                raise ArgumentError(f"{self.name}: argument {key!r} given both by position and by keyword")
            if key in bound:
                raise ArgumentError(f"{self.name}: param {key!r} was bound at compile time; do not pass it again")
            given[key] = value
        missing = [a.name for a in free if a.name not in given]
        if missing:
            raise ArgumentError(f"{self.name}: missing argument(s): {', '.join(missing)}")
        result = dict(bound)
        for name, value in given.items():
            result[name] = convert(specs[name], value)
        return result


def _string(attrs: Mapping[str, Any] | DictionaryAttr, key: str) -> str | None:
    value = attrs.get(key)
    return value.data if isinstance(value, StringAttr) else None


def convert(spec: ArgSpec, value: Any) -> np.ndarray:
    """`value` as a C-contiguous array of `spec`'s dtype and shape, under numpy's same_kind rule."""
    want = np.dtype(NUMPY_DTYPES[spec.dtype])
    try:
        arr = np.asarray(value)
    except Exception as err:  # numpy raises many types for ragged or odd input
        raise ArgumentError(f"{spec.describe()}: expected an array, got {type(value).__name__}") from err
    if arr.dtype == want and arr.shape == spec.shape and arr.flags.c_contiguous:
        return arr  # the common case, checked first: nothing to convert
    if arr.dtype == object or not np.can_cast(arr.dtype, want, casting="same_kind"):
        raise ArgumentError(
            f"{spec.describe()}: expected dtype {spec.dtype} (or one that casts to it under "
            f"numpy's same_kind rule), got {arr.dtype}"
        )
    if arr.shape != spec.shape:
        raise ArgumentError(f"{spec.describe()}: expected shape {fmt(spec.shape)}, got {fmt(arr.shape)}")
    if arr.dtype != want and want.kind in "iu" and arr.size:
        info = np.iinfo(want)
        low, high = arr.min(), arr.max()
        if low < info.min or high > info.max:
            raise ArgumentError(
                f"{spec.describe()}: values must fit in {spec.dtype} [{info.min}, {info.max}], "
                f"got range [{low}, {high}]"
            )
    return np.asarray(arr, dtype=want, order="C")  # (ascontiguousarray makes rank 0 rank 1)


def entry_function(module: Any) -> func.FuncOp | llvm.FuncOp:
    """The graph function of a module: its only public `func.func` (or the only one), or
    after convert-lir-to-llvm the `llvm.func` that takes the arena."""
    ops = list(module.body.block.ops)
    funcs = [op for op in ops if isinstance(op, func.FuncOp)]
    public = [f for f in funcs if f.sym_visibility is None or f.sym_visibility.data == "public"]
    candidates = public or funcs or [op for op in ops if isinstance(op, llvm.FuncOp) and _is_entry(op)]
    if len(candidates) != 1:
        names = ", ".join(f.sym_name.data for f in candidates) or "none"
        raise GraphError(f"expected exactly one graph function in the module, got {len(candidates)} ({names})")
    return candidates[0]


def _is_entry(fn: llvm.FuncOp) -> bool:
    attrs = fn.arg_attrs.data if fn.arg_attrs is not None else ()
    return any(_string(a.data, ARG_ROLE) == "arena" for a in attrs)
