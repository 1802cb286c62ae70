"""A graph function's calling convention: which arguments it takes and how calls bind them.

`Signature.of` reads it from a graph function (the reference executor), `Signature.of_abi`
from a compiled entry's `EntryABI` (compiled models): one `Signature` for both, so both accept exactly the same
calls and refuse bad ones with the same `ArgumentError`s (docs/semantics.md "Calling a model").
"""

from __future__ import annotations

import functools
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np
from xdsl.dialects import func, llvm
from xdsl.dialects.builtin import DictionaryAttr, IndexType, StringAttr

from rlx_mlir.core import shape_inference as rules
from rlx_mlir.core.abi import (
    ARG_DIMS,
    ARG_NAME,
    ARG_ROLE,
    INDEX_DTYPE,
    ROLE_INPUT,
    ROLE_OUTPUT,
    ROLE_PARAM,
    EntryABI,
    default_name,
    entry_function,
)
from rlx_mlir.core.dtypes import numpy_type
from rlx_mlir.core.errors import ArgumentError, GraphError, RlxError
from rlx_mlir.core.shape_inference import Dim, Shape, fmt
from rlx_mlir.dialects.common import dims_from_attr, dtype_of, shape_of
from rlx_mlir.dialects.verifier import symbolic_shapes


@dataclass(frozen=True)
class ArgSpec:
    """One function argument: its name, role ("input", "param", "output"), shape and
    dtype. A symbolic shape names its symbols (`("S", 64)`, from `rlx.dims`); a `?` no
    symbol names is `shape_inference.UNKNOWN`."""

    name: str
    role: str
    shape: Shape
    dtype: str

    def describe(self) -> str:
        return f"{self.role} {self.name!r} ({self.dtype}{fmt(self.shape)})"

    @functools.cached_property
    def symbolic(self) -> bool:
        """Whether the shape has a symbol or `?` (cached: it is read on every call)."""
        return not rules.is_static_shape(self.shape)

    def concrete_shape(self, sizes: Mapping[str, int]) -> tuple[int, ...]:
        """The shape under the symbols' `sizes` (ArgumentError if one is not bound)."""
        try:
            return tuple(rules.evaluate_dim(d, sizes) for d in self.shape)
        except (KeyError, rules.ShapeError):
            raise ArgumentError(
                f"{self.describe()}: a dim is a ? no symbol names or a symbol no argument "
                f"binds (bound: {dict(sizes)}); its size is unknown"
            ) from None


def _symbolic_shape(ty: Any, attrs: Mapping[str, Any], what: str) -> Shape:
    """The shape of type `ty`, with the symbol names of its `rlx.dims` attribute (if any)."""
    shape = shape_of(ty)
    dims = attrs.get(ARG_DIMS)
    if dims is None:
        return shape
    try:
        named = dims_from_attr(dims, f"{what}: {ARG_DIMS}")
    except RlxError as err:
        raise GraphError(str(err)) from None
    if len(named) != len(shape) or not all(map(rules.dims_match, named, shape)):
        raise GraphError(f"{what}: {ARG_DIMS} {fmt(named)} does not describe its type {ty}")
    return tuple(map(rules.unify, shape, named))


@dataclass(frozen=True)
class Signature:
    """The arguments of a graph function, in declaration order."""

    name: str
    args: tuple[ArgSpec, ...]
    results: tuple[ArgSpec, ...]

    @staticmethod
    def of(fn: func.FuncOp | llvm.FuncOp) -> Signature:
        """Read names and roles from the argument attributes of `fn` (a graph function,
        or an llvm-stage entry: see `of_abi`)."""
        if isinstance(fn, llvm.FuncOp):
            return Signature.of_abi(EntryABI.from_llvm(fn))
        arg_attrs = fn.arg_attrs.data if fn.arg_attrs is not None else ()
        args = []
        for i, arg in enumerate(fn.body.block.args):
            attrs = arg_attrs[i].data if i < len(arg_attrs) else {}
            name = _string(attrs, ARG_NAME) or default_name(arg, i)
            role = _string(attrs, ARG_ROLE) or ROLE_INPUT
            if isinstance(arg.type, IndexType):  # the position: a scalar the model owns
                args.append(ArgSpec(name, role, (), INDEX_DTYPE))
                continue
            args.append(ArgSpec(name, role, _symbolic_shape(arg.type, attrs, name), dtype_of(arg)))
        res_attrs = fn.res_attrs.data if fn.res_attrs is not None else ()
        results = []
        for i, t in enumerate(fn.function_type.outputs.data):
            attrs = res_attrs[i].data if i < len(res_attrs) else {}
            name = _string(attrs, ARG_NAME) or f"out{i}"
            results.append(ArgSpec(name, ROLE_OUTPUT, _symbolic_shape(t, attrs, name), dtype_of(t)))
        return Signature.from_specs(fn.sym_name.data, args, results)

    @staticmethod
    def of_abi(abi: EntryABI) -> Signature:
        """The signature of a compiled entry: its buffer arguments (the position and the
        symbols' sizes are the model's to pass, not the caller's)."""
        return Signature.from_specs(
            abi.name, [ArgSpec(a.name, a.role, a.shape, a.dtype) for a in abi.buffers])

    @staticmethod
    def from_specs(name: str, args: Sequence[ArgSpec],
                   results: Sequence[ArgSpec] = ()) -> Signature:
        """A signature of `args` in order; its results are `results` (a tensor-level
        function's), else its output arguments (lir and llvm, where outputs are arguments)."""
        outputs = tuple(a for a in args if a.role == ROLE_OUTPUT)
        return Signature(name, tuple(args), tuple(results) or outputs)

    @property
    def symbols(self) -> tuple[str, ...]:
        """The symbols of the arguments' shapes, in order of first appearance."""
        return tuple(dict.fromkeys(s for a in self.args for s in rules.symbols_of(a.shape)))

    def symbol_sizes(self, arrays: Mapping[str, np.ndarray]) -> dict[str, int]:
        """The size of each symbol in a call's (already checked) arrays."""
        sizes: dict[str, int] = {}
        for spec in self.callable_args:
            if spec.symbolic and spec.name in arrays:
                _bind_symbols(spec, np.shape(arrays[spec.name]), sizes, {})
        return sizes

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
             bound: Mapping[str, np.ndarray] | None = None,
             sizes: dict[str, int] | None = None) -> dict[str, np.ndarray]:
        """Map a call's positional and keyword arguments to checked, C-contiguous arrays.

        Positional arguments are the inputs in declaration order, then the params not in
        `bound`, in declaration order; keywords work for all of them. `sizes` (if given)
        receives the size each symbol takes in this call.
        """
        return Binder(self, bound or {})(args, kwargs, sizes)


class Binder:
    """`Signature.bind` for one mapping of bound params, with what does not change between
    calls worked out once: a model's call passes a few inputs, and walking its hundreds
    of bound params each call cost ~50 µs of Python per token."""

    def __init__(self, signature: Signature, bound: Mapping[str, np.ndarray]):
        self.name = signature.name
        self.bound = bound
        callable_args = signature.callable_args
        self.free = tuple(a for a in callable_args if a.name not in bound)
        self.specs = {a.name: a for a in callable_args}
        self.binders = tuple(a for a in callable_args  # declaration order
                             if a.name not in bound or a.symbolic)

    def __call__(self, args: Sequence[Any], kwargs: Mapping[str, Any],
                 sizes: dict[str, int] | None = None) -> dict[str, np.ndarray]:
        """The checked arrays of a call (see `Signature.bind`)."""
        bound, free = self.bound, self.free
        if len(args) > len(free):
            names = ", ".join(a.name for a in free)
            raise ArgumentError(
                f"{self.name}: expected at most {len(free)} positional arguments ({names}), "
                f"got {len(args)}"
            )
        given: dict[str, Any] = {spec.name: value for spec, value in zip(free, args, strict=False)}
        for key, value in kwargs.items():
            if key not in self.specs:
                known = ", ".join(self.specs) or "none"
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
        sizes = {} if sizes is None else sizes
        where: dict[str, str] = {}
        for spec in self.binders:  # declaration order: errors name the first binder
            if spec.name in bound:
                _bind_symbols(spec, bound[spec.name].shape, sizes, where)
            elif spec.name in given:
                result[spec.name] = convert(spec, given[spec.name], sizes, where)
        return result


def index_bounds(module: Any) -> dict[str, tuple[Dim, str]]:
    """The arguments of the graph function that are gather indices or embedding ids: name
    -> (the size of the dimension they index, "gather indices" | "embedding ids"). Followed
    through reshapes and views (same elements, same order); empty at the llvm stage. A
    symbolic size is the symbol's name (or `?` when the IR does not name it)."""
    fn = entry_function(module)
    if not isinstance(fn, func.FuncOp) or fn.is_declaration:
        return {}
    try:
        named = symbolic_shapes(fn)
    except RlxError:
        named = {}
    bounds = {}
    for spec, arg in zip(Signature.of(fn).args, fn.body.block.args, strict=False):
        found = _indexed_size(arg, named)
        if found is not None:
            bounds[spec.name] = found
    return bounds


_SAME_ELEMENTS = ("mir.reshape", "lir.view", "builtin.unrealized_conversion_cast")
"""Ops whose result (or, for lir.view, whose view) holds the operand's elements in order."""


_SLOT_OPERANDS: dict[str, dict[int, tuple[int, int, str]]] = {
    name: {slots: (cache, 0, f"slots of {name}"), slots + 1: (cache, 1, f"positions of {name}")}
    for name, cache, slots in (("mir.cache_scatter", 1, 2), ("mir.slot_attention", 1, 3))
}
"""The slot-cache ops' index operands: operand index -> (the cache operand, its axis they
index, what they are)."""


def _indexed_size(value: Any, named: Mapping[Any, Shape]) -> tuple[Dim, str] | None:
    def size(table: Any, axis: int) -> Dim:
        return named.get(table, shape_of(table))[axis]

    for use in value.uses:
        op = use.operation
        if op.name in _SAME_ELEMENTS and op.results:
            found = _indexed_size(op.results[0], named)
        elif op.name.endswith(".gather") and use.index == 1:
            found = size(op.operands[0], op.axis.value.data), "gather indices"
        elif (op.name in ("hir.embedding", "mir.dequant_gather", "lir.dequant_gather")
              and use.index == 1):
            found = size(op.operands[0], 0), "embedding ids"
        elif op.name in _SLOT_OPERANDS and use.index in _SLOT_OPERANDS[op.name]:
            cache, axis, what = _SLOT_OPERANDS[op.name][use.index]
            found = size(op.operands[cache], axis), what
        else:
            found = None
        if found is not None:
            return found
    return None


def describe_bad_index(module: Any, arrays: Mapping[str, np.ndarray]) -> str | None:
    """Where the first out-of-range index among the arguments of `module` is, e.g.
    `ids[3] = 77 is outside [0, 50)`, or None when every index argument is in range (the
    bad index was computed inside the graph). For error paths only: it scans the arrays."""
    fn = entry_function(module)
    sizes = Signature.of(fn).symbol_sizes(arrays) if isinstance(fn, func.FuncOp) else {}
    for name, (dim, what) in index_bounds(module).items():
        array = arrays.get(name)
        try:
            size = rules.evaluate_dim(dim, sizes)
        except (KeyError, rules.ShapeError):
            continue  # a size the call does not name: the kernel's own message stands
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


def _string(attrs: Mapping[str, Any] | DictionaryAttr, key: str) -> str | None:
    value = attrs.get(key)
    return value.data if isinstance(value, StringAttr) else None


def _bind_symbols(spec: ArgSpec, shape: tuple[int, ...], sizes: dict[str, int],
                  where: dict[str, str]) -> None:
    """Check `shape` (of the same rank) against `spec`'s symbolic shape: static dims equal,
    every symbol >= 1 and the size `sizes` has for it (else bind it there, noting in
    `where` which argument did)."""
    for axis, (want, got) in enumerate(zip(spec.shape, shape, strict=True)):
        if not isinstance(want, str):
            if want != got:
                raise ArgumentError(
                    f"{spec.describe()}: expected shape {fmt(spec.shape)}, got {fmt(shape)}"
                )
            continue
        if got < 1:
            raise ArgumentError(
                f"{spec.describe()}: symbol {want} (dim {axis}): expected a size >= 1, got "
                f"{got} (shape {fmt(shape)})"
            )
        if want == rules.UNKNOWN:
            continue
        if want in sizes and sizes[want] != got:
            raise ArgumentError(
                f"{spec.describe()}: symbol {want} (dim {axis}) is {sizes[want]} (bound by "
                f"{where.get(want, 'an earlier argument')}), got {got} (shape {fmt(shape)})"
            )
        sizes[want] = got
        where.setdefault(want, repr(spec.name))


def convert(spec: ArgSpec, value: Any, sizes: dict[str, int] | None = None,
            where: dict[str, str] | None = None) -> np.ndarray:
    """`value` as a C-contiguous array of `spec`'s dtype and shape, under numpy's same_kind
    rule. A symbolic dim takes the array's size, which must be >= 1 and equal the size
    `sizes` already binds that symbol to (the symbol is bound there otherwise)."""
    want = np.dtype(numpy_type(spec.dtype))
    try:
        arr = np.asarray(value)
    except Exception as err:  # numpy raises many types for ragged or odd input
        raise ArgumentError(f"{spec.describe()}: expected an array, got {type(value).__name__}") from err
    shape = spec.shape
    if spec.symbolic and arr.ndim == len(spec.shape):
        _bind_symbols(spec, arr.shape, {} if sizes is None else sizes, {} if where is None else where)
        shape = arr.shape  # checked: the sizes this call gives the symbols
    if arr.dtype == want and arr.shape == shape and arr.flags.c_contiguous:
        return arr  # the common case, checked first: nothing to convert
    if arr.dtype == np.bool_ and want.kind != "f":
        # numpy casts bool to int under same_kind, but True/False are no ids or bytes.
        raise ArgumentError(f"{spec.describe()}: expected dtype {spec.dtype}, got a bool array")
    if arr.dtype == object or not np.can_cast(arr.dtype, want, casting="same_kind"):
        raise ArgumentError(
            f"{spec.describe()}: expected dtype {spec.dtype} (or one that casts to it under "
            f"numpy's same_kind rule), got {arr.dtype}"
        )
    if arr.shape != shape:
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
