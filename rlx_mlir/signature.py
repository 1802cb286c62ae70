"""A graph function's calling convention: which arguments it takes and how calls bind them.

Shared by the reference executor and compiled models, so both accept exactly the same
calls and refuse bad ones with the same `ArgumentError`s (docs/semantics.md "Calling a model").
"""

from __future__ import annotations

import functools
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np
from xdsl.dialects import func, llvm
from xdsl.dialects.builtin import ArrayAttr, DictionaryAttr, StringAttr

from rlx_mlir.core.abi import (
    ARG_NAME,
    ARG_ROLE,
    ARG_TYPE,
    ROLE_ARENA,
    ROLE_INPUT,
    ROLE_OUTPUT,
    ROLE_PARAM,
)
from rlx_mlir.core.errors import ArgumentError, GraphError
from rlx_mlir.core.shape_inference import fmt
from rlx_mlir.dialects.common import dtype_of, shape_of

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
    def of(fn: func.FuncOp | llvm.FuncOp) -> Signature:
        """Read names and roles from the argument attributes of `fn` (a graph function,
        or an llvm-stage entry, whose pointer arguments record their memref `rlx.type`)."""
        arg_attrs = fn.arg_attrs.data if fn.arg_attrs is not None else ()
        if isinstance(fn, llvm.FuncOp):
            return Signature._of_llvm_entry(fn.sym_name.data, arg_attrs)
        args = []
        for i, arg in enumerate(fn.body.block.args):
            attrs = arg_attrs[i].data if i < len(arg_attrs) else {}
            name = _string(attrs, ARG_NAME) or default_name(arg, i)
            role = _string(attrs, ARG_ROLE) or ROLE_INPUT
            args.append(ArgSpec(name, role, shape_of(arg), dtype_of(arg)))
        res_attrs = fn.res_attrs.data if fn.res_attrs is not None else ()
        results = tuple(
            ArgSpec((_string(res_attrs[i].data, ARG_NAME) if i < len(res_attrs) else None) or f"out{i}",
                    ROLE_OUTPUT, shape_of(t), dtype_of(t))
            for i, t in enumerate(fn.function_type.outputs.data)
        )
        outputs = tuple(a for a in args if a.role == ROLE_OUTPUT)
        return Signature(fn.sym_name.data, tuple(args), results or outputs)

    @staticmethod
    def _of_llvm_entry(name: str, arg_attrs: Sequence[DictionaryAttr]) -> Signature:
        args = tuple(
            ArgSpec(_string(a.data, ARG_NAME) or f"arg{i}", _string(a.data, ARG_ROLE) or ROLE_INPUT,
                    shape_of(a.data[ARG_TYPE]), dtype_of(a.data[ARG_TYPE]))
            for i, a in enumerate(arg_attrs) if ARG_TYPE in a.data
        )
        return Signature(name, args, tuple(a for a in args if a.role == ROLE_OUTPUT))

    @property
    def output_names(self) -> tuple[str, ...]:
        """The names of the results, in order (out0, out1, ... unless the graph named them)."""
        return tuple(r.name for r in self.results)

    @functools.cached_property
    def callable_args(self) -> tuple[ArgSpec, ...]:
        """Inputs then params: what a caller passes (outputs are the callee's to allocate)."""
        inputs = [a for a in self.args if a.role == ROLE_INPUT]
        params = [a for a in self.args if a.role == ROLE_PARAM]
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


def index_bounds(module: Any) -> dict[str, tuple[int, str]]:
    """The arguments of the graph function that are gather indices or embedding ids: name
    -> (the size of the dimension they index, "gather indices" | "embedding ids"). Followed
    through reshapes and views (same elements, same order); empty at the llvm stage."""
    fn = entry_function(module)
    if not isinstance(fn, func.FuncOp) or fn.is_declaration:
        return {}
    bounds = {}
    for spec, arg in zip(Signature.of(fn).args, fn.body.block.args, strict=False):
        found = _indexed_size(arg)
        if found is not None:
            bounds[spec.name] = found
    return bounds


_SAME_ELEMENTS = ("mir.reshape", "lir.view", "builtin.unrealized_conversion_cast")
"""Ops whose result (or, for lir.view, whose view) holds the operand's elements in order."""


def _indexed_size(value: Any) -> tuple[int, str] | None:
    for use in value.uses:
        op = use.operation
        if op.name in _SAME_ELEMENTS and op.results:
            found = _indexed_size(op.results[0])
        elif op.name.endswith(".gather") and use.index == 1:
            found = shape_of(op.operands[0])[op.axis.value.data], "gather indices"
        elif op.name == "hir.embedding" and use.index == 1:
            found = shape_of(op.operands[0])[0], "embedding ids"
        else:
            found = None
        if found is not None:
            return found
    return None


def describe_bad_index(module: Any, arrays: Mapping[str, np.ndarray]) -> str | None:
    """Where the first out-of-range index among the arguments of `module` is, e.g.
    `ids[3] = 77 is outside [0, 50)`, or None when every index argument is in range (the
    bad index was computed inside the graph). For error paths only: it scans the arrays."""
    for name, (size, what) in index_bounds(module).items():
        array = arrays.get(name)
        if array is None or not np.asarray(array).size:
            continue
        array = np.asarray(array)
        bad = np.flatnonzero((array < 0) | (array >= size))
        if bad.size:
            where = ", ".join(str(int(i)) for i in np.unravel_index(bad[0], array.shape))
            value = int(array.flat[bad[0]])
            return (f"{name}[{where}] = {value} is outside [0, {size}) (argument {name!r}: "
                    f"{what}; negative or out of range indices are errors)")
    return None


def default_name(arg: Any, index: int) -> str:
    """The name of an argument that has no `rlx.name`: its SSA name when that is a Python
    identifier (`%x` -> "x"), else `arg<index>`."""
    hint = arg.name_hint
    return hint if hint and hint.isidentifier() else f"arg{index}"


def name_arguments(module: Any) -> None:
    """Give the graph function's arguments that lack them their `rlx.name` (see
    `default_name`) and `rlx.role` ("input"), in place, so hand-written modules compile.

    Roles cannot be guessed at the lir stage, where outputs are arguments too, nor in an
    llvm-stage entry: there a missing name or role is a GraphError naming the argument.
    """
    fn = entry_function(module)
    if isinstance(fn, llvm.FuncOp):
        _check_llvm_entry_names(fn)
        return
    block_args = fn.body.block.args if not fn.is_declaration else ()
    count = len(fn.function_type.inputs.data)
    old = list(fn.arg_attrs.data) if fn.arg_attrs is not None else []
    old += [DictionaryAttr({})] * (count - len(old))
    lir_stage = not fn.function_type.outputs.data
    taken = {_string(a.data, ARG_NAME) for a in old}
    attrs = []
    for i, entry in enumerate(old):
        data = dict(entry.data)
        if ARG_ROLE not in data:
            if lir_stage:
                raise GraphError(
                    f"@{fn.sym_name.data}: argument {i} has no rlx.role; a function at the lir "
                    "stage (no results) has its outputs among its arguments, so give every "
                    'argument {rlx.name = "...", rlx.role = "input" | "param" | "output"}'
                )
            data[ARG_ROLE] = StringAttr(ROLE_INPUT)
        if ARG_NAME not in data:
            name = default_name(block_args[i], i) if block_args else f"arg{i}"
            if name in taken:
                name = f"arg{i}"
            if name in taken:
                raise GraphError(f"@{fn.sym_name.data}: argument {i} has no rlx.name, and the "
                                 f"default {name!r} is taken; name it with rlx.name")
            taken.add(name)
            data[ARG_NAME] = StringAttr(name)
        attrs.append(DictionaryAttr(data))
    fn.arg_attrs = ArrayAttr(attrs)


def _check_llvm_entry_names(fn: llvm.FuncOp) -> None:
    for i, entry in enumerate(fn.arg_attrs.data if fn.arg_attrs is not None else ()):
        if ARG_TYPE in entry.data and not (
            _string(entry.data, ARG_NAME) and _string(entry.data, ARG_ROLE)
        ):
            raise GraphError(
                f"@{fn.sym_name.data}: argument {i} has no rlx.name or rlx.role; name the "
                "arguments before lowering (a module lowered from unnamed arguments)"
            )


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
    if arr.dtype == np.bool_ and want.kind != "f":
        # numpy casts bool to int under same_kind, but True/False are no ids or bytes.
        raise ArgumentError(f"{spec.describe()}: expected dtype {spec.dtype}, got a bool array")
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
    return any(_string(a.data, ARG_ROLE) == ROLE_ARENA for a in attrs)
