"""The Graph builder: build a model as xDSL IR (hir blocks, mir primitives) from Python.

```python
g = rlx.Graph("mlp")
x = g.input("x", (4, 64))
w = g.param("w", (64, 10))
g.output(g.softmax(x @ w))
print(g.to_mlir())
```

Shapes are inferred (and checked) at build time by the rules of
`rlx_mlir.core.shape_inference`, so a mistake is an `RlxError` at the line that made it.
An input's shape may hold symbols, `g.input("x", ("S", 64))`: sizes fixed by each call,
printed `?` in the IR with their names in `rlx.dims` (docs/semantics.md "Dynamic
dimensions"; run by `rlx.reference` at any size, not compiled yet).
IR is built directly, never by printing and re-parsing text.
"""

from __future__ import annotations

import copy
import math
from collections.abc import Callable, Iterator, Mapping, Sequence
from contextlib import contextmanager
from dataclasses import dataclass, replace
from functools import cache
from typing import Any

import numpy as np
from xdsl.dialects import func
from xdsl.dialects.builtin import (
    ArrayAttr,
    DenseIntOrFPElementsAttr,
    DictionaryAttr,
    FloatAttr,
    FunctionType,
    IndexType,
    IntegerAttr,
    ModuleOp,
    NameLoc,
    StringAttr,
    TensorType,
)
from xdsl.ir import Attribute, Block, BlockArgument, Operation, Region, SSAValue
from xdsl.irdl import IRDLOperation, OptOperandDef
from xdsl.printer import Printer
from xdsl.utils.exceptions import VerifyException

from rlx_mlir.core import shape_inference as rules
from rlx_mlir.core.abi import (
    ARG_DIMS,
    ARG_NAME,
    ARG_ROLE,
    ARG_ROLLBACK,
    CACHE_DIMS,
    ROLE_INPUT,
    ROLE_PARAM,
    ROLE_POSITION,
    ROLE_STATE,
)
from rlx_mlir.core.dtypes import canonical_name, numpy_type
from rlx_mlir.core.errors import ArgumentError, DTypeError, GraphError, RlxError, ShapeError
from rlx_mlir.core.locations import name_loc
from rlx_mlir.core.quants import VEC_DOT_TYPES
from rlx_mlir.dialects import hir, mir
from rlx_mlir.dialects.common import dims_attr, f32_attr, named_shapes, shape_of, tensor_type
from rlx_mlir.dialects.rlx import (
    Activation,
    ActivationAttr,
    QuantActivations,
    QuantActivationsAttr,
    QuantScheme,
    QuantSchemeAttr,
    ReduceKind,
    RopeStyle,
    RopeStyleAttr,
)
from rlx_mlir.dialects.verifier import VerifiesSignature

Scalar = float | int
Operand = "Value | float | int"

CACHE_SYMBOL = "T"
"""The symbol of the rows a KV cache holds after an append: bound per call to position +
appended rows (`rlx.cache_dims`)."""

POSITION_NAME = "position"
"""The name of the graph's position argument (`rlx.role = "position"`)."""

def dtype_name(dtype: Any) -> str:
    """The rlx dtype name ("f32", "i32", "i64", "ui8") of `dtype`: an rlx name, a numpy
    name ("float32"), a numpy scalar type (`np.float32`) or a `np.dtype`."""
    name = canonical_name(dtype)
    if name is None:
        raise DTypeError(
            f"dtype: expected one of f32, i32, i64, ui8 (or numpy's float32, int32, int64, "
            f"uint8, as a name, a scalar type or a np.dtype), got {dtype!r}"
        )
    return name


def _dims(what: str, shape: Any, *, infer: bool = False,
          symbols: Sequence[str] | None = None, declare: bool = False) -> rules.Shape:
    """`shape` as a tuple of Python ints, each >= 1 (or -1 when `infer`, for reshape).

    numpy integers count as ints; bools and floats do not. A string entry is a symbolic
    dimension when an input `declare`s it (any identifier) or, where `symbols` is given
    (a reshape or broadcast_to target), when it is one of the graph's symbols.
    """
    if isinstance(shape, int | np.integer) and not isinstance(shape, bool):
        shape = (shape,)
    if isinstance(shape, str):
        raise ShapeError(f"{what}: expected a shape (tuple of ints), got the string {shape!r}")
    try:
        dims = tuple(shape)
    except TypeError:
        raise ShapeError(f"{what}: expected a shape (tuple of ints), got {shape!r}") from None
    for i, d in enumerate(dims):
        if isinstance(d, str):
            _check_symbol(what, i, d, shape, symbols, declare)
            continue
        if isinstance(d, bool | np.bool_) or not isinstance(d, int | np.integer):
            raise ShapeError(
                f"{what}: dimension {i} is {d!r} ({type(d).__name__}); expected a shape "
                f"(tuple of ints >= 1), got {shape!r}"
            )
        if d < 1 and not (infer and d == -1):
            want = "an int >= 1 (or one -1, inferred)" if infer else "an int >= 1"
            raise ShapeError(
                f"{what}: dimension {i} is {int(d)}; every dimension must be >= 1: expected "
                f"{want}, got shape {tuple(int(x) for x in dims)}"
            )
    return tuple(d if isinstance(d, str) else int(d) for d in dims)


def _check_symbol(what: str, i: int, d: str, shape: Any, symbols: Sequence[str] | None,
                  declare: bool) -> None:
    """A string dimension: a Python identifier, declared here or one of `symbols`."""
    if symbols is None and not declare:
        raise ShapeError(
            f"{what}: dimension {i} is the symbol {d!r}: only graph inputs (and reshape or "
            f"broadcast_to targets) take symbolic dimensions; expected an int >= 1 "
            f"(shape {shape!r})"
        )
    if not d.isidentifier():
        raise ShapeError(
            f"{what}: dimension {i} is {d!r}: a symbolic dimension must be a Python "
            f"identifier (shape {shape!r})"
        )
    if not declare and d not in (symbols or ()):
        known = ", ".join(symbols or ()) or "none"
        raise ShapeError(
            f"{what}: dimension {i} is the symbol {d!r}, which no input of the graph "
            f"declares (its symbols: {known})"
        )


def _finite(what: str, value: Any, *, positive: bool = False) -> float:
    """`value` as a float; a bool, a non-number, nan or ±inf (or, when `positive`, a value
    <= 0) is a GraphError naming `what`."""
    want = "a finite positive float" if positive else "a finite float"
    if isinstance(value, bool) or not isinstance(value, int | float | np.integer | np.floating):
        raise GraphError(f"{what}: expected {want}, got {value!r}")
    if not math.isfinite(value) or (positive and not value > 0):
        raise GraphError(f"{what}: expected {want}, got {value!r}")
    return float(value)


class Value:
    """A tensor in a Graph: `.shape` (tuple), `.dtype` ("f32", "i32", "i64", "ui8")."""

    __slots__ = ("graph", "ssa", "shape", "dtype")
    __array_priority__ = 1000  # numpy scalars on the left defer to our operators

    def __init__(self, graph: Graph, ssa: SSAValue, shape: rules.Shape, dtype: str):
        self.graph = graph
        self.ssa = ssa
        self.shape = shape
        self.dtype = dtype
        graph._remember_shape(ssa, shape)

    def __repr__(self) -> str:
        return f"Value(shape={self.shape}, dtype={self.dtype!r})"

    @property
    def rank(self) -> int:
        return len(self.shape)

    def __add__(self, other: Operand) -> Value:
        return self.graph.add(self, other)

    def __radd__(self, other: Operand) -> Value:
        return self.graph.add(other, self)

    def __sub__(self, other: Operand) -> Value:
        return self.graph.sub(self, other)

    def __rsub__(self, other: Operand) -> Value:
        return self.graph.sub(other, self)

    def __mul__(self, other: Operand) -> Value:
        return self.graph.mul(self, other)

    def __rmul__(self, other: Operand) -> Value:
        return self.graph.mul(other, self)

    def __truediv__(self, other: Operand) -> Value:
        return self.graph.div(self, other)

    def __rtruediv__(self, other: Operand) -> Value:
        return self.graph.div(other, self)

    def __matmul__(self, other: Value) -> Value:
        return self.graph.matmul(self, other)

    def __rmatmul__(self, other: Value) -> Value:
        return self.graph.matmul(other, self)

    def __neg__(self) -> Value:
        return self.graph.neg(self)

    def __pow__(self, other: Operand) -> Value:
        return self.graph.pow(self, other)

    def __bool__(self) -> bool:
        raise GraphError("a graph Value has no truth value (it is symbolic)")


@contextmanager
def _context(method: str) -> Iterator[None]:
    """Prefix an RlxError raised inside a builder method with the method's name."""
    try:
        yield
    except RlxError as err:
        raise type(err)(f"{method}: {err}") from None











def _enum(enum_cls: type, attr_cls: type, value: str, what: str) -> Attribute:
    try:
        return attr_cls(enum_cls(value))
    except ValueError:
        allowed = ", ".join(repr(m.value) for m in enum_cls)
        raise RlxError(f"{what}: expected one of {allowed}, got {value!r}") from None


def _check_dtype(name: str, value: Value, allowed: Sequence[str]) -> None:
    rules.check_dtype(name, value.dtype, allowed)


def _shape(value: Value | SSAValue | None) -> rules.Shape | None:
    """A Value's symbolic shape, an SSA value's (the position: none), None when absent."""
    if value is None or (isinstance(value, SSAValue) and isinstance(value.type, IndexType)):
        return None
    return value.shape if isinstance(value, Value) else shape_of(value)


def _bind_operands(method: str, op_cls: type[IRDLOperation], args: Sequence[Any],
                   named: Mapping[str, Any]) -> dict[str, Any]:
    """The operands of `op_cls` by name from a method's positional `args` (in the op's
    definition order) and `named` ones; a required operand missing is a GraphError."""
    definition = op_cls.get_irdl_definition().operands
    names = [name for name, _ in definition]
    if len(args) > len(names):
        raise GraphError(f"{method}: expected at most {len(names)} operands, got {len(args)}")
    values = dict(zip(names, args, strict=False))
    for name, value in named.items():
        if name not in names or name in values:
            why = "given twice" if name in values else f"expected one of {', '.join(names)}"
            raise GraphError(f"{method}: operand {name!r}: {why}")
        values[name] = value
    for name, operand in definition:
        if values.get(name) is None and not isinstance(operand, OptOperandDef):
            raise GraphError(f"{method}: {name}: expected a Value, got none")
    return values


class Graph:
    """A model under construction: one function of inputs and params to outputs."""

    def __init__(self, name: str = "main"):
        if not isinstance(name, str) or not name:
            raise GraphError(f"Graph name: expected a non-empty string, got {name!r}")
        self.name = name
        self._block = Block()
        self._arg_names: list[str] = []
        self._arg_roles: list[str] = []
        self._outputs: list[Value] = []
        self._output_names: list[str] = []
        self._arg_shapes: list[rules.Shape] = []
        self._symbols: dict[str, None] = {}  # the inputs' symbols, in order of declaration
        self._position: BlockArgument | None = None  # added by the first cache_append
        self._cache_dims: tuple[rules.Dim, int] | None = None  # (appended, capacity)
        self._updated: dict[SSAValue, str] = {}  # states already appended to or assigned
        self._scopes: list[str] = []  # g.scope names, outermost first (op locations)
        self._located: dict[str, int] = {}  # ops per location name so far (their counters)
        self._functions: dict[str, _CustomFunction | None] = {}  # custom_fn's, shared with bodies
        self._arg_extra: dict[str, dict[str, Attribute]] = {}  # more argument attributes, by name
        self._shapes: dict[SSAValue, rules.Shape] = {}  # the symbolic shape of every Value made

    # ------------------------------------------------------------------ arguments, output

    def input(self, name: str, shape: Sequence[int | str], dtype: Any = "f32") -> Value:
        """Declare a graph input (given at every call). `dtype` is an rlx name ("f32",
        "i32", "i64", "ui8"), a numpy name ("float32"), a numpy type or a np.dtype.

        A string in `shape` is a symbolic dimension, its size fixed by each call:
        `g.input("x", ("S", 64))`. Equal names are equal sizes (docs/semantics.md,
        "Dynamic dimensions")."""
        return self._argument(name, shape, dtype, ROLE_INPUT)

    def param(self, name: str, shape: Sequence[int], dtype: Any = "f32") -> Value:
        """Declare a parameter (bound once at `jit(params=...)` or given at call time);
        `dtype` as for `input`."""
        return self._argument(name, shape, dtype, ROLE_PARAM)

    def state(self, name: str, shape: Sequence[int], dtype: Any = "f32",
              rollback: bool = True) -> Value:
        """Declare a state: a buffer that lives in the model between calls, zero when the
        model is created (static `shape`; `dtype` as for `input`). Update it with
        `cache_append` (a KV cache) or `assign`; read it before you update it
        (docs/semantics.md "State"). `rlx.jit(g, state={name: array})` or
        `model.set_state(name, array)` give it another value.

        With `rollback=False` (weights, optimizer moments of a training step) a call that
        raises does not restore it and `reset()` does not zero it, so a call pays no
        snapshot copy of it (the argument attribute `rlx.rollback = false`)."""
        if not isinstance(rollback, bool):
            raise GraphError(f"state {name!r}: rollback: expected a bool, got {rollback!r}")
        value = self._argument(name, shape, dtype, ROLE_STATE)
        if not rollback:
            self._arg_extra[name] = {ARG_ROLLBACK: IntegerAttr.from_bool(False)}
        return value

    def _argument(self, name: str, shape: Sequence[int], dtype: Any, role: str) -> Value:
        with _context(role):
            if not isinstance(name, str) or not name.isidentifier():
                raise GraphError(f"name: expected a Python identifier, got {name!r}")
            if name in self._arg_names:
                raise GraphError(f"name: {name!r} is already an argument of graph {self.name!r}")
            with _context(name):
                dtype = dtype_name(dtype)
            shape = _dims(name, shape, declare=role == ROLE_INPUT)
        arg = self._block.insert_arg(tensor_type(shape, dtype), len(self._block.args))
        arg.name_hint = name
        self._arg_names.append(name)
        self._arg_roles.append(role)
        self._arg_shapes.append(shape)
        self._symbols.update(dict.fromkeys(rules.symbols_of(shape)))
        return Value(self, arg, shape, dtype)

    @property
    def symbols(self) -> list[str]:
        """The symbolic dimensions of the inputs, in order of declaration."""
        return list(self._symbols)

    def _graph_symbols(self) -> list[str]:
        """Every symbol a shape of the graph may name: the inputs' and, once a cache is
        appended to, the cache's `T` (reshape and broadcast_to targets take them all)."""
        return self.symbols + ([CACHE_SYMBOL] if self._cache_dims is not None else [])

    def output(self, *values: Value, names: Sequence[str] | None = None, **named: Value) -> None:
        """Mark the graph's results, in order: `g.output(a, b)`. Name them with
        `names=("logits", "h")` or as keywords, `g.output(logits=a, h=b)` (keywords
        follow the positional values); unnamed results are out0, out1, ... by position.
        The names survive every stage (`model.output_names`, rlx-run's npz keys).

        A graph has one set of outputs: a second call is a GraphError (build every
        result first, then call `output` once with all of them).
        """
        if self._outputs:
            raise GraphError(
                f"output: graph {self.name!r} already has its outputs; call g.output(...) once, "
                "with every result"
            )
        values = (*values, *named.values())
        if not values:
            raise GraphError("output: expected at least one Value, got none")
        for i, v in enumerate(values):
            self._own(f"output {i}", v)
        if names is not None and named:
            raise GraphError("output: give the names either as names=... or as keywords, not both")
        if named:
            names = [f"out{i}" for i in range(len(values) - len(named))] + list(named)
        self._output_names = self._check_output_names(names, len(values))
        self._outputs = list(values)

    def _check_output_names(self, names: Sequence[str] | None, count: int) -> list[str]:
        if names is None:
            return [f"out{i}" for i in range(count)]
        if isinstance(names, str):
            names = (names,)
        names = list(names)
        if len(names) != count:
            raise GraphError(f"output: names: expected {count} names (one per output), got {len(names)}")
        for name in names:
            if not isinstance(name, str) or not name.isidentifier():
                raise GraphError(f"output: names: expected Python identifiers, got {name!r}")
            if name in self._arg_names:
                raise GraphError(f"output: names: {name!r} is already an argument of graph {self.name!r}")
        if len(set(names)) != len(names):
            raise GraphError(f"output: names: expected distinct names, got {names}")
        return names

    @property
    def output_names(self) -> list[str]:
        """The names of the results (out0, out1, ... unless named in `output`)."""
        return list(self._output_names)

    @property
    def inputs(self) -> list[str]:
        return [n for n, r in zip(self._arg_names, self._arg_roles, strict=True) if r == ROLE_INPUT]

    @property
    def params(self) -> list[str]:
        return [n for n, r in zip(self._arg_names, self._arg_roles, strict=True) if r == ROLE_PARAM]

    @property
    def states(self) -> list[str]:
        """The names of the states, in order of declaration."""
        return [n for n, r in zip(self._arg_names, self._arg_roles, strict=True) if r == ROLE_STATE]

    # ------------------------------------------------------------------ module

    def to_module(self) -> ModuleOp:
        """A fresh `builtin.module` holding the graph as one `func.func` (safe to mutate)."""
        if not self._outputs:
            raise GraphError(f"graph {self.name!r} has no output: call g.output(...) first")
        ret = func.ReturnOp(*(v.ssa for v in self._outputs))
        self._block.add_op(ret)
        try:
            fn = func.FuncOp(
                self.name,
                FunctionType.from_lists(
                    [a.type for a in self._block.args], [v.ssa.type for v in self._outputs]
                ),
                Region(self._block),
                arg_attrs=ArrayAttr(
                    [
                        DictionaryAttr({ARG_NAME: StringAttr(n), ARG_ROLE: StringAttr(r),
                                        **self._dims_entry(shape), **self._arg_extra.get(n, {})})
                        for n, r, shape in zip(self._arg_names, self._arg_roles,
                                               self._arg_shapes, strict=True)
                    ]
                ),
                res_attrs=self._result_attrs(),
            )
            if self._cache_dims is not None:
                fn.attributes[CACHE_DIMS] = DictionaryAttr({CACHE_SYMBOL: dims_attr(self._cache_dims)})
            module = ModuleOp([fn, *self._private_functions()]).clone()
        finally:
            fn.body.detach_block(self._block)
            ret.detach()
            ret.erase()
        return module

    @staticmethod
    def _dims_entry(shape: rules.Shape) -> dict[str, Attribute]:
        """`{rlx.dims = [...]}` for a symbolic shape, nothing for a static one."""
        return {} if rules.is_static_shape(shape) else {ARG_DIMS: dims_attr(shape)}

    def _result_attrs(self) -> ArrayAttr | None:
        """`rlx.name` of each result, only when some result is named (the default names
        out0, out1, ... are implied, so unnamed graphs print as before), and `rlx.dims`
        of each symbolic result."""
        named = self._output_names != [f"out{i}" for i in range(len(self._outputs))]
        symbolic = not all(rules.is_static_shape(v.shape) for v in self._outputs)
        if not named and not symbolic:
            return None
        return ArrayAttr([
            DictionaryAttr({**({ARG_NAME: StringAttr(n)} if named else {}), **self._dims_entry(v.shape)})
            for n, v in zip(self._output_names, self._outputs, strict=True)
        ])

    def to_mlir(self) -> str:
        """The module's text in custom syntax (what `rlx-opt` parses), each op followed by
        its location, `loc("layer3.attention")` (the `g.scope` names, else the method and
        a counter), so a module saved as text keeps its provenance (`rlx-run --profile`)."""
        import io

        out = io.StringIO()
        Printer(stream=out, print_debuginfo=True).print_op(self.to_module())
        return out.getvalue() + "\n"

    def op_count(self) -> int:
        """How many ops the graph holds so far (it only grows)."""
        return len(self._block.ops)

    # ------------------------------------------------------------------ plumbing

    def _own(self, name: str, value: Any) -> Value:
        if not isinstance(value, Value):
            raise GraphError(f"{name}: expected a graph Value, got {type(value).__name__}")
        if value.graph is not self:
            raise GraphError(f"{name}: the Value belongs to graph {value.graph.name!r}, not {self.name!r}")
        if self._updated.get(value.ssa) == "cache_append":
            state = self._arg_names[value.ssa.index]  # pyright: ignore[reportAttributeAccessIssue]
            raise GraphError(
                f"{name}: the cache {state!r} was appended to (in place); use the rows "
                "cache_append returned, and read the cache only before its append"
            )
        return value

    def _emit(self, op_cls: type[IRDLOperation], operands: Sequence[Value | None],
              shape: rules.Shape, dtype: str = "f32",
              properties: dict[str, Attribute | None] | None = None) -> Value:
        op = op_cls.build(
            operands=[None if v is None else v.ssa for v in operands],
            result_types=[tensor_type(shape, dtype)],
            properties={k: v for k, v in (properties or {}).items() if v is not None},
        )
        return self._append(op, shape, dtype)

    def _op(self, method: str, op_cls: type[VerifiesSignature], result_shape: rules.Shape | None = None,
            **arguments: Any) -> Value:
        """The one result of `op_cls` built from `arguments` (`_op_results`)."""
        (value,) = self._op_results(method, op_cls, result_shape, **arguments)
        return value

    def _op_results(self, method: str, op_cls: type[VerifiesSignature],
                    result_shape: rules.Shape | None = None, **arguments: Any) -> tuple[Value, ...]:
        """Build `op_cls` from `arguments` by its operand and property names: operands as
        Values (or SSA values; None when absent, a list for a variadic one), properties
        as Python values or attributes. The op's shape rule on the Values' symbolic
        shapes gives the results' shapes (its errors prefixed with `method`; an op
        without a rule takes `result_shape`), its `ELEMENT_TYPES` their dtypes; the op is
        built by its keyword constructor. Returns a Value per result present (an optional
        one the rule gives no shape, such as a sequence op's final state without
        `return_state`, is absent)."""
        operand_names = {name for name, _ in op_cls.get_irdl_definition().operands}
        shapes: dict[str, Any] = {}
        dtypes: dict[str, str | None] = {}
        values: dict[str, Any] = {}
        properties: dict[str, Any] = {}
        for name, argument in arguments.items():
            if name not in operand_names:
                properties[name] = argument
                continue
            items = argument if isinstance(argument, list) else [argument]
            shapes[name] = [_shape(v) for v in items] if isinstance(argument, list) else _shape(argument)
            dtypes[name] = next((v.dtype for v in items if isinstance(v, Value)), None)
            ssa = [v.ssa if isinstance(v, Value) else v for v in items]
            values[name] = ssa if isinstance(argument, list) else ssa[0]
        with _context(method):
            if result_shape is None:
                result_shapes = op_cls.rule_shapes(shapes, properties)
            else:
                result_shapes = [result_shape]
            result_dtypes = op_cls.result_dtypes(dtypes)
        results = [(shape, dtype) for shape, dtype in zip(result_shapes, result_dtypes, strict=True)
                   if shape is not None]
        types = [None if shape is None else tensor_type(shape, dtype)
                 for shape, dtype in zip(result_shapes, result_dtypes, strict=True)]
        if len(types) == 1:
            op = op_cls(**values, **properties, result_type=types[0])
        else:
            op = op_cls(**values, **properties, result_types=types)
        self._add_located(op)
        return tuple(Value(self, ssa, tuple(shape), dtype)
                     for ssa, (shape, dtype) in zip(op.results, results, strict=True))

    def _append(self, op: Operation, shape: rules.Shape, dtype: str) -> Value:
        self._add_located(op)
        return Value(self, op.results[0], tuple(shape), dtype)

    def _add_located(self, op: Operation) -> None:
        """Add `op` to the graph's body with its location (see `scope`)."""
        op.location = self._location(op)
        self._block.add_op(op)

    @contextmanager
    def scope(self, name: str) -> Iterator[None]:
        """Name the user's block the ops built inside come from: their MLIR locations
        (and every kernel made from them) read `name.method`, e.g. `layer3.attention`;
        scopes nest (`model.layer3.attention`). Outside any scope an op's location is
        its method and a counter (`attention#0`)."""
        if not isinstance(name, str) or not name:
            raise GraphError(f"scope: expected a non-empty string, got {name!r}")
        self._scopes.append(name)
        try:
            yield
        finally:
            self._scopes.pop()

    def _location(self, op: Operation) -> NameLoc:
        """`scope.method` (a counter from the second on), or `method#n` outside scopes."""
        method = op.name.split(".", 1)[-1]
        base = ".".join([*self._scopes, method]) if self._scopes else method
        count = self._located.get(base, 0)
        self._located[base] = count + 1
        if self._scopes:
            return name_loc(base if count == 0 else f"{base}#{count}")
        return name_loc(f"{base}#{count}")

    def _operand(self, name: str, value: Value | Scalar, like: Value | None = None) -> Value:
        """A Value, or a Python scalar made a rank-0 constant of `like`'s dtype."""
        if isinstance(value, Value):
            return self._own(name, value)
        if isinstance(value, bool) or not isinstance(value, int | float | np.number):
            raise GraphError(f"{name}: expected a Value or a Python scalar, got {type(value).__name__}")
        dtype = like.dtype if like is not None else "f32"
        if dtype != "f32" and not float(value).is_integer():
            raise DTypeError(f"{name}: a float scalar {value} cannot combine with a {dtype} tensor")
        return self.constant(np.asarray(value, dtype=numpy_type(dtype)))

    def _f32_operands(self, method: str, names: Sequence[str], values: Sequence[Value | None]) -> None:
        for name, v in zip(names, values, strict=True):
            if v is not None:
                self._own(name, v)
                with _context(method):
                    _check_dtype(name, v, ("f32",))

    # ------------------------------------------------------------------ constants

    def constant(self, array: Any) -> Value:
        """A constant tensor from a numpy array or Python scalar (f32, i32, i64 or ui8)."""
        arr = np.asarray(array)
        if arr.dtype.kind == "f":
            arr, dtype = arr.astype(np.float32), "f32"
        elif arr.dtype == np.int32:
            dtype = "i32"
        elif arr.dtype.kind in "iu" and arr.dtype != np.uint8:
            arr, dtype = arr.astype(np.int64), "i64"
        elif arr.dtype == np.uint8:
            dtype = "ui8"
        else:
            raise DTypeError(f"constant: expected a float or integer array, got dtype {arr.dtype}")
        with _context("constant"):
            shape = rules.check_shape("value", arr.shape)
        ty = tensor_type(shape, dtype)
        flat = arr.reshape(-1).tolist()
        if dtype == "f32":
            dense = DenseIntOrFPElementsAttr.from_list(ty, flat)
        else:
            dense = DenseIntOrFPElementsAttr.from_list(ty, [int(v) for v in flat])
        op = mir.ConstantOp.build(result_types=[ty], properties={"value": dense})
        return self._append(op, shape, dtype)

    # ------------------------------------------------------------------ elementwise

    def _binary(self, method: str, op_cls: type[IRDLOperation], a: Value | Scalar, b: Value | Scalar) -> Value:
        if not isinstance(a, Value) and not isinstance(b, Value):
            raise GraphError(f"{method}: at least one operand must be a graph Value")
        like = a if isinstance(a, Value) else b
        lhs = self._operand("lhs", a, like)
        rhs = self._operand("rhs", b, like)
        with _context(method):
            _check_dtype("lhs", lhs, ("f32",))
            _check_dtype("rhs", rhs, ("f32",))
        return self._op(method, op_cls, lhs=lhs, rhs=rhs)

    def add(self, a: Value | Scalar, b: Value | Scalar) -> Value:
        """a + b with numpy broadcasting."""
        return self._binary("add", mir.AddOp, a, b)

    def sub(self, a: Value | Scalar, b: Value | Scalar) -> Value:
        """a - b with numpy broadcasting."""
        return self._binary("sub", mir.SubOp, a, b)

    def mul(self, a: Value | Scalar, b: Value | Scalar) -> Value:
        """a * b with numpy broadcasting."""
        return self._binary("mul", mir.MulOp, a, b)

    def div(self, a: Value | Scalar, b: Value | Scalar) -> Value:
        """a / b with numpy broadcasting."""
        return self._binary("div", mir.DivOp, a, b)

    def maximum(self, a: Value | Scalar, b: Value | Scalar) -> Value:
        """Elementwise max with numpy broadcasting."""
        return self._binary("maximum", mir.MaxOp, a, b)

    def minimum(self, a: Value | Scalar, b: Value | Scalar) -> Value:
        """Elementwise min with numpy broadcasting."""
        return self._binary("minimum", mir.MinOp, a, b)

    def pow(self, a: Value | Scalar, b: Value | Scalar) -> Value:
        """a ** b with numpy broadcasting."""
        return self._binary("pow", mir.PowOp, a, b)

    def _unary(self, method: str, op_cls: type[IRDLOperation], x: Value) -> Value:
        self._f32_operands(method, ["x"], [x])
        return self._op(method, op_cls, input=x)

    def neg(self, x: Value) -> Value:
        return self._unary("neg", mir.NegOp, x)

    def exp(self, x: Value) -> Value:
        return self._unary("exp", mir.ExpOp, x)

    def log(self, x: Value) -> Value:
        return self._unary("log", mir.LogOp, x)

    def sqrt(self, x: Value) -> Value:
        return self._unary("sqrt", mir.SqrtOp, x)

    def rsqrt(self, x: Value) -> Value:
        return self._unary("rsqrt", mir.RsqrtOp, x)

    def tanh(self, x: Value) -> Value:
        return self._unary("tanh", mir.TanhOp, x)

    def sigmoid(self, x: Value) -> Value:
        return self._unary("sigmoid", mir.SigmoidOp, x)

    def silu(self, x: Value) -> Value:
        """x * sigmoid(x)."""
        return self._unary("silu", mir.SiluOp, x)

    def gelu(self, x: Value) -> Value:
        """The exact (erf) GELU."""
        return self._unary("gelu", mir.GeluOp, x)

    def gelu_tanh(self, x: Value) -> Value:
        """The tanh approximation of GELU."""
        return self._unary("gelu_tanh", mir.GeluTanhOp, x)

    def relu(self, x: Value) -> Value:
        return self._unary("relu", mir.ReluOp, x)

    def abs(self, x: Value) -> Value:
        return self._unary("abs", mir.AbsOp, x)

    def softplus(self, x: Value) -> Value:
        """log(1 + exp(x)), computed stably (no overflow for large x)."""
        return self._unary("softplus", mir.SoftplusOp, x)

    # ------------------------------------------------------------------ linear algebra

    def matmul(self, a: Value, b: Value) -> Value:
        """np.matmul: 1-D operands promoted, batch dimensions broadcast."""
        self._f32_operands("matmul", ["lhs", "rhs"], [a, b])
        return self._op("matmul", mir.MatmulOp, lhs=a, rhs=b)

    def linear(self, x: Value, w: Value, b: Value | None = None,
               activation: str | None = None) -> Value:
        """x[..., K] @ w[K, N] (+ b[N]), then the activation (relu gelu gelu_tanh silu sigmoid tanh)."""
        self._f32_operands("linear", ["x", "w", "b"], [x, w, b])
        with _context("linear"):
            act = None if activation is None else _enum(Activation, ActivationAttr, activation, "activation")
        return self._op("linear", hir.LinearOp, x=x, w=w, bias=b, activation=act)

    def swiglu_ffn(self, x: Value, up: Value, gate: Value, down: Value) -> Value:
        """(silu(x @ gate) * (x @ up)) @ down. Note the order `up, gate, down`, unlike
        `llama_decoder_block(..., gate_w, up_w, down_w)` (docs/semantics.md "Blocks")."""
        self._f32_operands("swiglu_ffn", ["x", "up", "gate", "down"], [x, up, gate, down])
        return self._op("swiglu_ffn", hir.SwigluFfnOp, x=x, up=up, gate=gate, down=down)

    def dequant_matmul(self, x: Value, w: Value, scheme: str, activations: str = "f32") -> Value:
        """x[..., K] @ dequant(w)^T for raw GGUF data w: ui8[N, K/values · bytes] of one of the
        schemes f16, bf16, q8_0, q4_0, q4_1, q5_0, q5_1, iq4_nl (32-value blocks), q4_k, q5_k,
        q6_k, q2_k, q3_k, iq4_xs (256-value blocks); K must be a multiple of the scheme's block.

        `activations="f32"` multiplies x as given; `"q8"` first quantizes x as llama.cpp's
        CPU dot products do (ggml's `vec_dot_type` of the scheme: q8_0, q8_1 or q8_K, with
        ggml's rounding), for the block-quantized schemes only (docs/semantics.md)."""
        self._own("x", x)
        self._own("w", w)
        with _context("dequant_matmul"):
            _check_dtype("x", x, ("f32",))
            _check_dtype("w", w, ("ui8",))
            attr = _enum(QuantScheme, QuantSchemeAttr, scheme, "scheme")
            form = _enum(QuantActivations, QuantActivationsAttr, activations, "activations")
            if form.data == QuantActivations.Q8 and scheme not in VEC_DOT_TYPES:
                raise GraphError(f"activations: 'q8' needs a block-quantized scheme "
                                 f"({', '.join(VEC_DOT_TYPES)}), got scheme {scheme!r}")
        return self._op("dequant_matmul", hir.DequantMatmulOp, x=x, w=w, scheme=attr,
                        activations=form)

    # ------------------------------------------------------------------ shared input, fused linear

    def shared_linear_pair(self, x: Value, w_first: Value, w_second: Value) -> tuple[Value, Value]:
        """(x[..., K] @ w_first[K, N_1], x @ w_second[K, N_2]) as one op whose kernel reads x
        once (gate/up, k/v); f32. mir-fuse forms the same op from sibling matmuls on one x
        under `FusionPolicy(shared_input=True)` (the default)."""
        self._f32_operands("shared_linear_pair", ["x", "w_first", "w_second"], [x, w_first, w_second])
        first, second = self._op_results("shared_linear_pair", hir.SharedLinearPairOp, x=x,
                                         w_first=w_first, w_second=w_second)
        return first, second

    def linear_fused(self, x: Value, w: Value, b: Value | None = None,
                     activation: str | None = None) -> Value:
        """activation(x[..., K] @ w[K, N] + b[N]) as `linear`, but always one fused matmul
        kernel (bias and activation in its epilogue), whatever the fusion policy."""
        self._f32_operands("linear_fused", ["x", "w", "b"], [x, w, b])
        with _context("linear_fused"):
            act = None if activation is None else _enum(Activation, ActivationAttr, activation, "activation")
        return self._op("linear_fused", hir.LinearFusedOp, x=x, w=w, bias=b, activation=act)

    # ------------------------------------------------------------------ reductions, norms

    def _reduce(self, method: str, kind: ReduceKind, x: Value, axes: int | Sequence[int],
                keepdim: bool) -> Value:
        self._f32_operands(method, ["x"], [x])
        with _context(method):
            if not isinstance(axes, int) and not all(isinstance(a, int) for a in axes):
                raise RlxError(f"axes: expected an int or a tuple of ints, got {axes!r}")
            norm = rules.normalize_axes("axes", axes, x.rank)
        return self._op(method, mir.ReduceOp, input=x, kind=kind, axes=norm, keepdim=keepdim)

    def reduce_sum(self, x: Value, axes: int | Sequence[int], keepdim: bool = False) -> Value:
        return self._reduce("reduce_sum", ReduceKind.SUM, x, axes, keepdim)

    def reduce_max(self, x: Value, axes: int | Sequence[int], keepdim: bool = False) -> Value:
        return self._reduce("reduce_max", ReduceKind.MAX, x, axes, keepdim)

    def reduce_min(self, x: Value, axes: int | Sequence[int], keepdim: bool = False) -> Value:
        return self._reduce("reduce_min", ReduceKind.MIN, x, axes, keepdim)

    def reduce_mean(self, x: Value, axes: int | Sequence[int], keepdim: bool = False) -> Value:
        return self._reduce("reduce_mean", ReduceKind.MEAN, x, axes, keepdim)

    def softmax(self, x: Value, axis: int = -1) -> Value:
        """Numerically stable softmax along `axis`."""
        self._f32_operands("softmax", ["x"], [x])
        with _context("softmax"):
            ax = rules.normalize_axis("axis", axis, x.rank)
        return self._op("softmax", mir.SoftmaxOp, input=x, axis=ax)

    def _eps(self, eps: float) -> FloatAttr:
        return f32_attr(_finite("eps", eps, positive=True))

    def rms_norm(self, x: Value, gamma: Value, beta: Value | None = None, eps: float = 1e-5) -> Value:
        """x / sqrt(mean(x^2, -1) + eps) * gamma (+ beta)."""
        self._f32_operands("rms_norm", ["x", "gamma", "beta"], [x, gamma, beta])
        with _context("rms_norm"):
            eps_attr = self._eps(eps)
        return self._op("rms_norm", hir.RmsNormOp, x=x, gamma=gamma, beta=beta, eps=eps_attr)

    def residual_rms_norm(self, x: Value, residual: Value, gamma: Value,
                          beta: Value | None = None, eps: float = 1e-5) -> Value:
        """rms_norm(x + residual, gamma, beta, eps) (the normalized value only)."""
        names = ["x", "residual", "gamma", "beta"]
        self._f32_operands("residual_rms_norm", names, [x, residual, gamma, beta])
        with _context("residual_rms_norm"):
            eps_attr = self._eps(eps)
        return self._op("residual_rms_norm", hir.ResidualRmsNormOp, x=x, residual=residual,
                        gamma=gamma, beta=beta, eps=eps_attr)

    def layer_norm(self, x: Value, gamma: Value, beta: Value, eps: float = 1e-5) -> Value:
        """Layer normalization over the last axis (population variance)."""
        self._f32_operands("layer_norm", ["x", "gamma", "beta"], [x, gamma, beta])
        with _context("layer_norm"):
            if beta is None:
                raise RlxError("beta: layer_norm needs a beta Value, got None")
            eps_attr = self._eps(eps)
        return self._op("layer_norm", hir.LayerNormOp, x=x, gamma=gamma, beta=beta, eps=eps_attr)

    # ------------------------------------------------------------------ data movement

    def reshape(self, x: Value, shape: Sequence[int]) -> Value:
        """Same elements, new shape; at most one -1 (inferred). `()` for one element."""
        self._own("x", x)
        with _context("reshape"):
            if isinstance(shape, int | np.integer):
                raise ShapeError(f"shape: expected a tuple or list of ints, got {shape!r}")
            new = rules.reshape(x.shape, _dims("shape", shape, infer=True,
                                                symbols=self._graph_symbols()))
        return self._op("reshape", mir.ReshapeOp, new, input=x)

    def transpose(self, x: Value, perm: Sequence[int]) -> Value:
        """Permute the axes (entries may be negative)."""
        self._own("x", x)
        with _context("transpose"):
            rules.transpose(x.shape, perm)  # the user's perm in its messages
            norm = [rules.normalize_axis("perm", p, x.rank) for p in perm]
        return self._op("transpose", mir.TransposeOp, input=x, perm=norm)

    def narrow(self, x: Value, axis: int, start: int, length: int) -> Value:
        """The slice [start, start + length) along `axis`."""
        self._own("x", x)
        with _context("narrow"):
            ax = rules.normalize_axis("axis", axis, x.rank)
        return self._op("narrow", mir.NarrowOp, input=x, axis=ax, start=start, length=length)

    def concat(self, values: Sequence[Value], axis: int) -> Value:
        """Join tensors of the same dtype along `axis`. Along a symbolic axis one input may
        be symbolic, the others static: the result is `S+k` (a row prepended to a
        sequence), which later ops take as any symbol."""
        values = list(values)
        for i, v in enumerate(values):
            self._own(f"values[{i}]", v)
        with _context("concat"):
            shape = rules.concat([v.shape for v in values], axis)  # its errors first
            ax = rules.normalize_axis("axis", axis, values[0].rank)
            if shape[ax] == rules.UNKNOWN:
                symbolic = [f"values[{i}] {rules.fmt(v.shape)}" for i, v in enumerate(values)
                            if not rules.is_static(v.shape[ax])]
                raise ShapeError(
                    f"along axis {ax} expected one symbolic input (the result is S+k), got "
                    f"{len(symbolic)}: {', '.join(symbolic)}"
                )
            for i, v in enumerate(values):
                rules.check_dtype(f"values[{i}]", v.dtype, (values[0].dtype,))
        return self._op("concat", mir.ConcatOp, inputs=values, axis=ax)

    def broadcast_to(self, x: Value, shape: Sequence[int]) -> Value:
        """numpy.broadcast_to."""
        self._own("x", x)
        with _context("broadcast_to"):
            target = rules.broadcast_to(x.shape, _dims("shape", shape, symbols=self._graph_symbols()),
                                        keep_symbols=True)
        return self._op("broadcast_to", mir.BroadcastToOp, target, input=x)

    def gather(self, x: Value, indices: Value, axis: int = 0) -> Value:
        """np.take(x, indices, axis); out-of-range indices are a call-time error."""
        self._own("x", x)
        self._own("indices", indices)
        with _context("gather"):
            _check_dtype("indices", indices, rules.INDEX_DTYPES)
            ax = rules.normalize_axis("axis", axis, x.rank)
        return self._op("gather", mir.GatherOp, input=x, indices=indices, axis=ax)

    def scatter_add(self, updates: Value, indices: Value, axis: int, dim_size: int) -> Value:
        """The transpose of `gather`: zeros of shape `updates.shape[:axis] + (dim_size,) +
        updates.shape[axis + indices.rank:]` with each row of `updates` (f32) added at its
        index (i32/i64) along `axis` of the result; repeated indices accumulate (the
        gradient of a gather or an embedding lookup). Out-of-range indices are a call-time
        error."""
        self._f32_operands("scatter_add", ["updates"], [updates])
        self._own("indices", indices)
        with _context("scatter_add"):
            _check_dtype("indices", indices, rules.INDEX_DTYPES)
            ax = rules.normalize_axis("axis", axis, updates.rank - indices.rank + 1)
        return self._op("scatter_add", mir.ScatterAddOp, updates=updates, indices=indices,
                        axis=ax, dim_size=dim_size)

    def embedding(self, table: Value, ids: Value, scheme: str | None = None) -> Value:
        """table[V, D] looked up at ids (i32/i64) -> [..., D]. With `scheme` (a
        dequant_matmul scheme), `table` is a quantized GGUF table, ui8 [V, D/values ·
        bytes] of raw blocks, and only the rows looked up are dequantized
        (`mir.dequant_gather`)."""
        self._own("table", table)
        self._own("ids", ids)
        with _context("embedding"):
            _check_dtype("ids", ids, rules.INDEX_DTYPES)
            if scheme is not None:
                _check_dtype("table", table, ("ui8",))
                attr = _enum(QuantScheme, QuantSchemeAttr, scheme, "scheme")
            else:
                _check_dtype("table", table, ("f32",))
        if scheme is not None:
            return self._op("embedding", mir.DequantGatherOp, table=table, ids=ids, scheme=attr)
        return self._op("embedding", hir.EmbeddingOp, table=table, ids=ids)

    # ------------------------------------------------------------------ transformer blocks

    def rope(self, x: Value, cos: Value, sin: Value, head_dim: int, n_rot: int | None = None,
             style: str = "half") -> Value:
        """Rotary position embedding of every head of x[S, H*D] or x[B, S, H*D]; cos/sin
        are [S, n_rot/2], row s for position s; styles "half" (HF) and "interleaved"
        (GGML), see docs/semantics.md "Rotary embedding"."""
        self._f32_operands("rope", ["x", "cos", "sin"], [x, cos, sin])
        with _context("rope"):
            style_attr = _enum(RopeStyle, RopeStyleAttr, style, "style")
        return self._op("rope", hir.RopeOp, x=x, cos=cos, sin=sin, head_dim=head_dim,
                        n_rot=n_rot, style=style_attr)

    def attention(self, q: Value, k: Value, v: Value, mask: Value | None = None, *,
                  num_heads: int, head_dim: int, num_kv_heads: int | None = None,
                  mask_kind: str = "none", scale: float | None = None,
                  window: int | None = None) -> Value:
        """Grouped-query attention with heads packed in the last axis: query head h reads kv
        head h // (num_heads / num_kv_heads); masks, causal offset and scale as in
        docs/semantics.md ("Grouped-query attention"). `window` W (an int >= 1, with
        mask_kind "causal"): sliding-window attention, query i sees the keys j with
        i + (T−S) − W < j ≤ i + (T−S) (llama.cpp's n_swa, HF's sliding_window); the
        kernel reads only those keys."""
        self._f32_operands("attention", ["q", "k", "v", "mask"], [q, k, v, mask])
        # The rule checks mask_kind (a string) before the constructor makes it an attribute.
        with _context("attention"):
            scale = None if scale is None else _finite("scale", scale)
        return self._op("attention", hir.AttentionOp, q=q, k=k, v=v, mask=mask,
                        num_heads=num_heads, head_dim=head_dim, num_kv_heads=num_kv_heads,
                        mask_kind=mask_kind, scale=scale, window=window)

    def slot_attention(self, q: Value, keys: Value, values: Value, slots: Value,
                       positions: Value, *, num_heads: int, head_dim: int,
                       num_kv_heads: int | None = None, scale: float | None = None,
                       window: int | None = None) -> Value:
        """Batched decoding's attention: row r of q [R, H·D] (f32) attends the keys and
        values [n_slots, capacity, Hkv·D] of slot slots[r] (i32 [R]) at the positions j in
        [lo, positions[r]] (i32 [R]), lo = 0, or with `window` W (an int >= 1)
        max(0, positions[r] − W + 1); query head h reads kv head h // (H / Hkv), scores
        scaled by `scale` (1/sqrt(head_dim)). keys and values are the results of
        `cache_append(..., slots=, positions=)`; a row never reads past its position, and
        a slot or position out of range fails the call (an RlxError). Returns [R, H·D].
        q [B, S, H·D] with slots and positions [B, S] is the B·S rows in order."""
        self._f32_operands("slot_attention", ["q", "keys", "values"], [q, keys, values])
        for name, value in (("slots", slots), ("positions", positions)):
            self._own(name, value)
            with _context("slot_attention"):
                _check_dtype(name, value, ("i32",))
        with _context("slot_attention"):
            scale = None if scale is None else _finite("scale", scale)
        return self._op("slot_attention", mir.SlotAttentionOp, q=q, keys=keys, values=values,
                        slots=slots, positions=positions, num_heads=num_heads,
                        head_dim=head_dim, num_kv_heads=num_kv_heads, scale=scale,
                        window=window)

    def depthwise_conv1d_causal(self, x: Value, w: Value, left_pad: Value | None = None,
                                return_state: bool = False) -> Value | tuple[Value, Value]:
        """Causal depthwise conv over time: x[B, S, C], w[K, C], left_pad[B, K-1, C] (zeros
        when absent). With `return_state`, returns (y, window): the window [B, K-1, C] is
        the last K-1 rows of concat(left_pad, x) over time, for any S (symbolic, or below
        K-1: then rows of left_pad among them), the next call's `left_pad` (keep it in a
        `g.state`, write it back with `g.assign`)."""
        self._f32_operands("depthwise_conv1d_causal", ["x", "w", "left_pad"], [x, w, left_pad])
        results = self._op_results("depthwise_conv1d_causal", hir.DepthwiseConv1dCausalOp,
                                   x=x, w=w, left_pad=left_pad, return_state=return_state)
        if not return_state:
            return results[0]
        y, window = results
        return y, window

    # ------------------------------------------------------------------ sequence ops

    def selective_scan(self, x: Value, delta: Value, A: Value, B: Value, C: Value,
                       initial_state: Value | None = None,
                       return_state: bool = False) -> Value | tuple[Value, Value]:
        """Mamba's selective scan (docs/semantics.md): x, delta [b, s, h], A [h, n],
        B, C [b, s, n] -> y [b, s, h]; the state [b, h, n] starts at `initial_state`
        (zeros when absent). With `return_state`, returns (y, final_state)."""
        self._f32_operands("selective_scan", ["x", "delta", "A", "B", "C", "initial_state"],
                           [x, delta, A, B, C, initial_state])
        results = self._op_results("selective_scan", mir.SelectiveScanOp, x=x, delta=delta, a=A,
                                   b=B, c=C, initial_state=initial_state,
                                   return_state=return_state)
        if not return_state:
            return results[0]
        out, final_state = results
        return out, final_state

    def gated_delta_net(self, q: Value, k: Value, v: Value, g: Value, beta: Value,
                        initial_state: Value | None = None,
                        return_state: bool = False) -> Value | tuple[Value, Value]:
        """The gated delta rule (docs/semantics.md): q, k [b, s, H, n], v [b, s, H, m]
        (m = n in Qwen3.5), g, beta [b, s, H] -> out [b, s, H, m]; the state
        [b, H, n, m] starts at `initial_state` (zeros when absent). q and k are used as
        given (Qwen3.5 l2-normalizes both and scales q by 1/sqrt(n) before). With
        `return_state`, returns (out, final_state)."""
        self._f32_operands("gated_delta_net", ["q", "k", "v", "g", "beta", "initial_state"],
                           [q, k, v, g, beta, initial_state])
        results = self._op_results("gated_delta_net", mir.GatedDeltaNetOp, q=q, k=k, v=v, g=g,
                                   beta=beta, initial_state=initial_state,
                                   return_state=return_state)
        if not return_state:
            return results[0]
        out, final_state = results
        return out, final_state

    def selective_scan_backward(self, x: Value, delta: Value, A: Value, B: Value, C: Value,
                                dy: Value, d_final_state: Value,
                                initial_state: Value | None = None) -> tuple[Value, ...]:
        """The reverse pass of `selective_scan` (a native reversed recurrence; the VJP rule
        of `selective_scan` builds it): the forward's operands, the cotangents of its
        output `dy` [b, s, h] and of its final state `d_final_state` [b, h, n] (zeros when
        the forward did not return it) -> (dx, d_delta, dA, dB, dC), and
        d_initial_state after them when `initial_state` is given."""
        self._f32_operands("selective_scan_backward",
                           ["x", "delta", "A", "B", "C", "dy", "d_final_state", "initial_state"],
                           [x, delta, A, B, C, dy, d_final_state, initial_state])
        results = self._op_results("selective_scan_backward", mir.SelectiveScanBackwardOp,
                                   x=x, delta=delta, a=A, b=B, c=C, dy=dy,
                                   d_final_state=d_final_state, initial_state=initial_state)
        dx, d_delta, d_a_rows, d_b, d_c, _, *d_initial = results  # _: the saved states
        return (dx, d_delta, self.reduce_sum(d_a_rows, (0,)), d_b, d_c, *d_initial)

    def gated_delta_net_backward(self, q: Value, k: Value, v: Value, g: Value, beta: Value,
                                 do: Value, d_final_state: Value,
                                 initial_state: Value | None = None) -> tuple[Value, ...]:
        """The reverse pass of `gated_delta_net` (a native reversed recurrence; the VJP
        rule of `gated_delta_net` builds it): the forward's operands, the cotangents of
        its output `do` [b, s, H, m] and of its final state `d_final_state` [b, H, n, m]
        (zeros when the forward did not return it) -> (dq, dk, dv, dg, dbeta), and
        d_initial_state after them when `initial_state` is given."""
        self._f32_operands("gated_delta_net_backward",
                           ["q", "k", "v", "g", "beta", "do", "d_final_state", "initial_state"],
                           [q, k, v, g, beta, do, d_final_state, initial_state])
        results = self._op_results("gated_delta_net_backward", mir.GatedDeltaNetBackwardOp,
                                   q=q, k=k, v=v, g=g, beta=beta, do=do,
                                   d_final_state=d_final_state, initial_state=initial_state)
        return (*results[:5], *results[6:])  # results[5]: the saved states, the kernel's

    def scan(self, init: Value, body: Graph, length: int, xs: Sequence[Value] = (),
             consts: Sequence[Value] = (), trajectory: bool = False,
             checkpoint_every: int | None = None) -> Value | tuple[Value, Value]:
        """A bounded loop: `body` (a Graph whose inputs are the carry, one slice of each of
        `xs` along axis 0, then each of `consts`, and whose one output is the next carry)
        runs `length` times from `init`. Returns the final carry, and with `trajectory`
        also every carry, [length, *init.shape]. `mir.scan` in the IR, a native loop.

        `checkpoint_every=k` (for `rlx.grad`): the loop runs as length // k segments of k
        steps (a scan of scans, then a scan of the length % k left), so the backward keeps
        only the carry at each segment's start and recomputes a segment's carries while
        it reverses it: memory O(length/k + k) instead of O(length). With `trajectory`
        every carry is kept anyway and k changes nothing."""
        if checkpoint_every is not None and not trajectory:
            return self._checkpointed_scan(init, body, length, list(xs), list(consts),
                                           checkpoint_every)
        xs, consts = list(xs), list(consts)
        self._own("init", init)
        for i, v in enumerate(xs):
            self._own(f"xs[{i}]", v)
        for i, v in enumerate(consts):
            self._own(f"consts[{i}]", v)
        with _context("scan"):
            if not isinstance(body, Graph):
                raise GraphError(f"body: expected an rlx_mlir.Graph, got {type(body).__name__}")
            shape = rules.scan(init.shape, [x.shape for x in xs], length, trajectory)
            region = body._scan_body(init, xs, consts)
        op = mir.ScanOp(init.ssa, [x.ssa for x in xs], [c.ssa for c in consts], length, region,
                        trajectory)
        result = self._append(op, shape, init.dtype)
        if not trajectory:
            return result
        last = self.reshape(self.narrow(result, 0, length - 1, 1), init.shape)
        return last, result

    def _checkpointed_scan(self, init: Value, body: Graph, length: int, xs: list[Value],
                           consts: list[Value], every: int) -> Value:
        """`scan` as segments of `every` steps (see `scan`'s `checkpoint_every`)."""
        if isinstance(every, bool) or not isinstance(every, int) or not 1 <= every <= length:
            raise GraphError(f"scan: checkpoint_every: expected an int in [1, length={length}], "
                             f"got {every!r}")
        segments, tail = divmod(length, every)
        outer = Graph(f"{body.name}_every_{every}")
        carry = outer.input("carry", init.shape, init.dtype)
        slices = [outer.input(f"xs{i}", (every, *x.shape[1:]), x.dtype) for i, x in enumerate(xs)]
        inner = [outer.input(f"c{i}", c.shape, c.dtype) for i, c in enumerate(consts)]
        outer.output(outer.scan(carry, body, every, xs=slices, consts=inner))
        head = [self.reshape(self.narrow(x, 0, 0, segments * every) if tail else x,
                             (segments, every, *x.shape[1:])) for x in xs]
        result = self.scan(init, outer, segments, xs=head, consts=consts)
        if tail:
            rest = [self.narrow(x, 0, segments * every, tail) for x in xs]
            result = self.scan(result, body, tail, xs=rest, consts=consts)
        assert isinstance(result, Value)
        return result

    def _scan_body(self, init: Value, xs: list[Value], consts: list[Value]) -> Region:
        """This graph as the body region of a scan over `init`, `xs` and `consts` (a copy;
        the graph stays usable): its inputs must match them, one output of init's type."""
        if self.params or self.states:
            raise GraphError(f"body: graph {self.name!r} has params or states; a scan body takes "
                             "only inputs (pass weights as consts)")
        expected = [("carry", init.shape, init.dtype),
                    *((f"xs[{i}] slice", x.shape[1:], x.dtype) for i, x in enumerate(xs)),
                    *((f"consts[{i}]", c.shape, c.dtype) for i, c in enumerate(consts))]
        args = list(self._block.args)
        if len(args) != len(expected):
            raise GraphError(f"body: graph {self.name!r} has {len(args)} inputs, expected "
                             f"{len(expected)} (carry, {len(xs)} xs slices, {len(consts)} consts)")
        for name, arg, (what, shape, dtype) in zip(self._arg_names, args, expected, strict=True):
            want = tensor_type(shape, dtype)
            if arg.type != want:
                raise ShapeError(f"body: input {name!r} (the {what}): expected {want}, got {arg.type}")
        if len(self._outputs) != 1 or self._outputs[0].ssa.type != args[0].type:
            got = ", ".join(str(v.ssa.type) for v in self._outputs) or "none"
            raise ShapeError(f"body: graph {self.name!r} must have one output of the carry's "
                             f"type {args[0].type}, got {got}")
        fn = self.to_module().body.block.first_op
        assert isinstance(fn, func.FuncOp)
        block = fn.body.block
        ret = block.last_op
        assert isinstance(ret, func.ReturnOp)
        ret.detach()
        block.add_op(mir.YieldOp(*ret.arguments))
        ret.erase()
        return fn.body.clone()

    def qwen35_mtp_head(self, *operands: Value | None, num_heads: int, num_kv_heads: int,
                        head_dim: int, n_rot: int, eps: float = 1e-6,
                        schemes: Mapping[str, str] | None = None, activations: str = "f32",
                        **named: Value | None) -> Value:
        """The Qwen3.5 multi-token-prediction head (docs/semantics.md): logits [B, V] of
        the token after `last_token_idx[b]`. The operands, positionally or by name, are
        those of `hir.qwen35_mtp_head` in its order: h_pre_norm, input_ids, cos, sin,
        last_token_idx, embed_w, hnorm_w, hnorm_b, enorm_w, enorm_b, eh_w, attn_norm_w,
        attn_norm_b, q_gate_w, k_w, v_w, q_norm_w, q_norm_b, k_norm_w, k_norm_b, o_w,
        post_norm_w, post_norm_b, gate_w, up_w, down_w, head_norm_w, head_norm_b,
        lm_head_w. Weights are [in, out]; the norms multiply by their gamma as given
        (Qwen3.5 stores 1 + gamma: pass 1 + w); the betas `*_b` may be None.

        `schemes` keeps matrices in a GGUF file's quantization: `{"lm_head_w": "q6_k",
        ...}` makes each named matrix (embed_w, eh_w, q_gate_w, k_w, v_w, o_w, gate_w,
        up_w, down_w, lm_head_w) the raw rows of a tensor of that `dequant_matmul` scheme,
        ui8 [out, in/values · bytes] (the file's [out, in] layout, not transposed; embed_w
        [V, d/values · bytes]), multiplied by `dequant_matmul` and looked up by the
        dequantizing `embedding`. `activations="q8"` quantizes the activations of the
        block-quantized ones as llama.cpp does (f16/bf16 multiply f32)."""
        op_cls = hir.Qwen35MtpHeadOp
        values = _bind_operands("qwen35_mtp_head", op_cls, operands, named)
        raw = dict(schemes or {})
        with _context("qwen35_mtp_head"):
            scheme_attrs = {name: _enum(QuantScheme, QuantSchemeAttr, scheme, f"schemes: {name}")
                            for name, scheme in raw.items()}
            form = _enum(QuantActivations, QuantActivationsAttr, activations, "activations")
            for name in raw:
                if name not in rules.QWEN35_MTP_MATRICES:
                    raise GraphError(f"schemes: {name!r} is no matrix operand (expected some "
                                     f"of {', '.join(rules.QWEN35_MTP_MATRICES)})")
        for name, value in values.items():
            if value is not None:
                self._own(name, value)
                with _context("qwen35_mtp_head"):
                    _check_dtype(name, value, ("ui8",) if name in raw
                                 else op_cls.ELEMENT_TYPES.allowed_for(name))
        with _context("qwen35_mtp_head"):
            eps_attr = self._eps(eps)
        return self._op("qwen35_mtp_head", op_cls, **values, num_heads=num_heads,
                        num_kv_heads=num_kv_heads, head_dim=head_dim, n_rot=n_rot, eps=eps_attr,
                        schemes=DictionaryAttr(scheme_attrs) if scheme_attrs else None,
                        activations=form)

    def llama_decoder_block(
        self, x: Value, ln1_g: Value, ln1_b: Value | None, q_w: Value, k_w: Value, v_w: Value,
        o_w: Value, ln2_g: Value, ln2_b: Value | None, gate_w: Value, up_w: Value,
        down_w: Value, cos: Value, sin: Value, mask: Value | None = None, *, num_heads: int,
        head_dim: int, num_kv_heads: int | None = None, eps: float = 1e-5,
        mask_kind: str = "causal", rope_style: str = "half",
        kv_cache: tuple[Value, Value] | None = None,
    ) -> Value:
        """The pre-norm Llama decoder block (docs/semantics.md "Blocks"; matches HF
        LlamaDecoderLayer with weights as [in, out]).

        The FFN weights come as `gate_w, up_w, down_w` (HF's LlamaMLP order), unlike
        `swiglu_ffn(x, up, gate, down)`; both orders stay, pass by keyword when unsure.

        `kv_cache=(k_state, v_state)` decodes with KV caches: states [capacity, Hkv*D];
        x is [S, D], k and v after rope are appended at the model's position P (as
        `cache_append`) and attention reads the rows [0, P+S), causal with query i
        seeing keys j <= i + P; cos/sin hold the rows of positions P ... P+S-1."""
        operands = dict(x=x, ln1_g=ln1_g, ln1_b=ln1_b, q_w=q_w, k_w=k_w, v_w=v_w, o_w=o_w,
                        ln2_g=ln2_g, ln2_b=ln2_b, gate_w=gate_w, up_w=up_w, down_w=down_w,
                        cos=cos, sin=sin, mask=mask)
        self._f32_operands("llama_decoder_block", list(operands), list(operands.values()))
        num_kv_heads = num_heads if num_kv_heads is None else num_kv_heads
        method = "llama_decoder_block"
        with _context(method):
            # the block's rule first (as the op's constructor would), then the caches
            hir.LlamaDecoderBlockOp.rule_shape(
                {k: None if v is None else v.shape for k, v in operands.items()},
                {"num_heads": num_heads, "head_dim": head_dim, "num_kv_heads": num_kv_heads,
                 "mask_kind": mask_kind})
            eps_attr = self._eps(eps)
            style = _enum(RopeStyle, RopeStyleAttr, rope_style, "rope_style")
            caches = None if kv_cache is None else self._kv_cache(x, kv_cache, num_kv_heads,
                                                                  head_dim, mask_kind)
        k_cache, v_cache, position = caches or (None, None, None)
        result = self._op(method, hir.LlamaDecoderBlockOp, **operands, k_cache=k_cache,
                          v_cache=v_cache, position=position, num_heads=num_heads,
                          head_dim=head_dim, num_kv_heads=num_kv_heads, eps=eps_attr,
                          mask_kind=mask_kind, rope_style=style)
        if kv_cache is not None:
            for state in kv_cache:
                self._updated[state.ssa] = "cache_append"
        return result

    def _kv_cache(self, x: Value, kv_cache: Any, num_kv_heads: int, head_dim: int,
                  mask_kind: str) -> tuple[SSAValue, SSAValue, SSAValue]:
        """The (k_cache, v_cache, position) operands of a decoding block, checked."""
        if not isinstance(kv_cache, tuple | list) or len(kv_cache) != 2:
            raise GraphError(f"kv_cache: expected a pair (k_state, v_state), got {kv_cache!r}")
        k_state, v_state = kv_cache
        for what, state in (("kv_cache[0]", k_state), ("kv_cache[1]", v_state)):
            self._own(what, state)
            name = self._state_name(what, state)
            self._check_not_updated(name, state)
            _check_dtype(what, state, ("f32",))
        if k_state.ssa is v_state.ssa:
            raise GraphError("kv_cache: expected two different states, got the same one twice")
        rules.llama_kv_cache(x.shape, k_state.shape, v_state.shape, num_kv_heads=num_kv_heads,
                             head_dim=head_dim, mask_kind=mask_kind)
        name = self._state_name("kv_cache[0]", k_state)
        self._check_cache_dims(name, (x.shape[0], k_state.shape[1]), k_state.shape)
        return k_state.ssa, v_state.ssa, self._position_argument()


    # ------------------------------------------------------------------ sampling

    def argmax(self, x: Value) -> Value:
        """The index (i32) of the largest value along the last axis of `x` (f32):
        `x.shape[:-1]`; ties to the lower index, a NaN larger than every number."""
        self._own("x", x)
        with _context("argmax"):
            _check_dtype("x", x, ("f32",))
        return self._op("argmax", mir.ArgmaxOp, input=x)

    def top_k(self, x: Value, k: int) -> tuple[Value, Value]:
        """(values f32, indices i32) [..., k]: the `k` largest values of `x` along the last
        axis (1 <= k <= its size), sorted descending, ties to the lower index."""
        self._own("x", x)
        with _context("top_k"):
            _check_dtype("x", x, ("f32",))
        values, indices = self._op_results("top_k", mir.TopKOp, input=x, k=k)
        return values, indices

    def sample(self, logits: Value, *, temperature: float | Value = 1.0, top_k: int | Value = 0,
               top_p: float | Value = 1.0, seed: int | Value = 0,
               positions: Value | None = None) -> Value:
        """One token id (i32) per row of `logits` [..., V]: `logits.shape[:-1]`
        (docs/modules.md "Sampling ops"). Greedy (the argmax) at temperature 0; else the
        filters in llama.cpp's order: the `top_k` largest (0 keeps all), then the smallest
        set of most likely tokens whose softmax mass (of the raw logits) reaches `top_p`
        (1 keeps all), then the softmax at `temperature`, drawn with Philox4x32-10 keyed by
        `seed` and counted by the row and the graph's position (the model's position when
        a `cache_append` was built before this call; else 0, the same draws every call),
        so a seed reproduces a run on any thread count. Each parameter is a Python
        number (checked here, made a constant) or a rank-0 Value (f32 temperature, i32
        top_k, f32 top_p, i64 seed; read at run time, so one compiled graph serves every
        setting).

        Batched decoding (2-D logits [R, V], one row per sequence): a parameter may also be
        a Value [R], one setting per row (mixed with rank-0 ones as needed), and
        `positions`, an i64 Value [R], counts row r's draw as row 0 at position
        positions[r] instead of by the row and the graph's position: row r then gets what
        a one-row call at that position with row r's parameters gets (the 64-bit value is
        the counter as it is; a negative one is its two's complement)."""
        self._own("logits", logits)
        with _context("sample"):
            _check_dtype("logits", logits, ("f32",))
            params = {
                "temperature": self._sampling_param("temperature", temperature, "f32"),
                "top_k": self._sampling_param("top_k", top_k, "i32"),
                "top_p": self._sampling_param("top_p", top_p, "f32"),
                "seed": self._sampling_param("seed", seed, "i64"),
            }
            if positions is not None:
                self._own("positions", positions)
                _check_dtype("positions", positions, ("i64",))
                two_d = len(logits.shape) == 2
                if not (two_d and len(positions.shape) == 1
                        and rules.dims_match(positions.shape[0], logits.shape[0])):
                    rows = rules.fmt(logits.shape[:1]) if two_d else "[R]"
                    raise ShapeError(f"positions: expected {rows} (one per row of 2-D logits "
                                     f"[R, V]; got logits {rules.fmt(logits.shape)}), got "
                                     f"{rules.fmt(positions.shape)}")
        if positions is not None:
            return self._op("sample", mir.SampleOp, logits=logits, **params,
                            row_positions=positions)
        return self._op("sample", mir.SampleOp, logits=logits, **params, position=self._position)

    def _sampling_param(self, name: str, value: Any, dtype: str) -> Value:
        """A Value of `dtype` for a sampling parameter: a Value as it is (dtype checked),
        a Python number checked against its range and made a constant."""
        if isinstance(value, Value):
            self._own(name, value)
            _check_dtype(name, value, (dtype,))
            return value  # rank-0 or one per row: the op's shape rule checks
        is_int = isinstance(value, int | np.integer) and not isinstance(value, bool)
        is_number = is_int or (isinstance(value, float | np.floating))
        checks = {
            "temperature": (is_number and math.isfinite(value) and value >= 0,
                            "a finite number >= 0 (0 is greedy)"),
            "top_k": (is_int and 0 <= value < 2**31, "an int in [0, 2^31) (0 keeps every token)"),
            "top_p": (is_number and 0 < value <= 1, "a number in (0, 1] (1 keeps every token)"),
            "seed": (is_int and 0 <= value < 2**63, "an int in [0, 2^63)"),
        }
        ok, expected = checks[name]
        if not ok:
            raise ArgumentError(f"{name}: expected {expected}, got {value!r}")
        return self.constant(np.asarray(value, numpy_type(dtype)))

    # ------------------------------------------------------------------ state

    def cache_append(self, cache: Value, rows: Value, *, slots: Value | None = None,
                     positions: Value | None = None) -> Value:
        """Append `rows` [S, *tail] (S a symbol or an int) to the KV cache `cache`, a state
        [capacity, *tail]: the rows go to positions [P, P+S) and the result is the rows
        [0, P+S), shaped ("T", *tail), T bound per call to P+S. P is the model's position,
        shared by every cache of the graph, so every append of a graph adds the same S to
        caches of one capacity (docs/semantics.md "State").

        With `slots` and `positions` (both i32 [R]; batched decoding), `cache` is a slot
        cache [n_slots, capacity, *tail] and `rows` [R, *tail] (or [B, S, *tail] with
        slots and positions [B, S]): see `_slot_cache_append`."""
        if slots is not None or positions is not None:
            return self._slot_cache_append(cache, rows, slots, positions)
        self._own("cache", cache)
        self._own("rows", rows)
        with _context("cache_append"):
            name = self._state_name("cache", cache)
            self._check_not_updated(name, cache)
            if rows.dtype != cache.dtype:
                raise DTypeError(
                    f"rows: expected dtype {cache.dtype} (of cache {name!r}), got {rows.dtype}"
                )
            rules.insert_rows(cache.shape, rows.shape)
            self._check_cache_dims(name, rows.shape, cache.shape)
        position = self._position_argument()
        inserted = mir.InsertRowsOp(rows.ssa, cache.ssa, position)
        self._add_located(inserted)
        self._add_located(mir.AssignOp(inserted.result, cache.ssa))
        self._updated[cache.ssa] = "cache_append"
        shape = (CACHE_SYMBOL, *cache.shape[1:])
        return self._append(mir.ExtractRowsOp(inserted.result, CACHE_SYMBOL), shape, cache.dtype)

    def assign(self, state: Value, value: Value) -> None:
        """After the call, `state` holds `value` (same static shape and dtype): a recurrent
        state, the last rows of a convolution. `state` keeps its old value in the graph
        (reads after the assign see the value the call started with); one assign per state."""
        self._own("state", state)
        self._own("value", value)
        with _context("assign"):
            name = self._state_name("state", state)
            self._check_not_updated(name, state)
            if value.shape != state.shape:
                raise ShapeError(
                    f"value {rules.fmt(value.shape)}: expected the shape of state {name!r} "
                    f"{rules.fmt(state.shape)}, got {rules.fmt(value.shape)}"
                )
            if value.dtype != state.dtype:
                raise DTypeError(
                    f"value: expected dtype {state.dtype} (of state {name!r}), got {value.dtype}"
                )
        self._add_located(mir.AssignOp(value.ssa, state.ssa))
        self._updated[state.ssa] = "assign"

    def _state_name(self, what: str, value: Value) -> str:
        """The name of the state `value` is (GraphError if it is not a state argument)."""
        arg = value.ssa
        if isinstance(arg, BlockArgument) and arg.block is self._block:
            if self._arg_roles[arg.index] == ROLE_STATE:
                return self._arg_names[arg.index]
            got = f"the {self._arg_roles[arg.index]} {self._arg_names[arg.index]!r}"
        else:
            got = f"a computed value {rules.fmt(value.shape)}"
        raise GraphError(f"{what}: expected a state (declared with g.state), got {got}")

    def _check_not_updated(self, name: str, state: Value) -> None:
        if (how := self._updated.get(state.ssa)) is not None:
            raise GraphError(f"state {name!r} was already updated by {how}; a graph updates "
                             "each state once")

    def _check_cache_dims(self, name: str, rows: rules.Shape, cache: rules.Shape) -> None:
        """Every append of a graph adds the same rows to caches of one capacity (one T)."""
        appended, capacity = rows[0], cache[0]
        if not rules.is_static(appended) and not rules.is_symbol(appended):
            raise ShapeError(
                f"rows {rules.fmt(rows)}: expected a first dim that is an int or an input's "
                f"symbol, got {appended}"
            )
        if CACHE_SYMBOL in self._symbols:
            raise GraphError(
                f"the symbol {CACHE_SYMBOL!r} of an input is the one cache_append defines (the "
                "rows a cache holds); name the input's dimension otherwise"
            )
        if self._cache_dims is None:
            self._cache_dims = (appended, capacity)  # pyright: ignore[reportAttributeAccessIssue]
        elif self._cache_dims != (appended, capacity):
            known, cap = self._cache_dims
            raise GraphError(
                f"cache {name!r}: every cache_append of a graph appends the same rows into caches "
                f"of one capacity (all share the position and {CACHE_SYMBOL}); expected {known} "
                f"rows into capacity {cap}, got {appended} rows into capacity {capacity}"
            )

    def _position_argument(self) -> BlockArgument:
        """The graph's `index` position argument, added at the first cache_append."""
        if self._position is None:
            if POSITION_NAME in self._arg_names:
                raise GraphError(
                    f"the argument {POSITION_NAME!r} is the model's position once a cache is "
                    "appended to; name the other argument otherwise"
                )
            self._position = self._block.insert_arg(IndexType(), len(self._block.args))
            self._position.name_hint = POSITION_NAME
            self._arg_names.append(POSITION_NAME)
            self._arg_roles.append(ROLE_POSITION)
            self._arg_shapes.append(())
        return self._position

    def _slot_cache_append(self, cache: Value, rows: Value, slots: Value | None,
                           positions: Value | None) -> Value:
        """`cache_append(cache, rows, slots=..., positions=...)`: row r of `rows` [R, *tail]
        (R an int or a symbol) is written to cache[slots[r], positions[r]] of the slot cache
        `cache`, a state [n_slots, capacity, *tail]; returns the whole updated cache
        (n_slots, capacity, *tail), for `slot_attention`. Rows [B, S, *tail] with slots and
        positions [B, S] (a rectangle of sequences) are the B·S rows in order. The graph
        takes no position: the caller owns each sequence's positions (rows past a
        sequence's length are never read by `slot_attention`). A slot or position out of range fails the call (an
        RlxError); rows written before the check failed may stay written (nothing of a
        slot cache is snapshot or restored, and `reset()` keeps it)."""
        self._own("cache", cache)
        self._own("rows", rows)
        with _context("cache_append"):
            if slots is None or positions is None:
                missing = "positions" if positions is None else "slots"
                raise ArgumentError(f"{missing}: slots and positions go together (a slot "
                                    f"cache append), got only "
                                    f"{'slots' if positions is None else 'positions'}")
            self._own("slots", slots)
            self._own("positions", positions)
            name = self._state_name("cache", cache)
            self._check_not_updated(name, cache)
            if rows.dtype != cache.dtype:
                raise DTypeError(
                    f"rows: expected dtype {cache.dtype} (of cache {name!r}), got {rows.dtype}"
                )
            _check_dtype("slots", slots, ("i32",))
            _check_dtype("positions", positions, ("i32",))
        scattered = self._op("cache_append", mir.CacheScatterOp, rows=rows, cache=cache,
                             slots=slots, positions=positions)
        self._add_located(mir.AssignOp(scattered.ssa, cache.ssa))
        self._updated[cache.ssa] = "cache_append"
        return scattered

    # ------------------------------------------------------------------ custom functions

    def custom_fn(self, fn: Callable[..., Any], inputs: Sequence[Value], name: str,
                  vjp: Callable[..., Any] | None = None) -> Value | tuple[Value, ...]:
        """Call `fn` as one named function: `fn(g2, *values)` builds its body with `g2` (a
        Graph building into a private `func.func @name`, whose arguments `values` have the
        shapes and dtypes of `inputs`) and returns a Value of `g2` or a tuple of them. The
        graph gets `func.call @name(inputs)`; returns its result, or a tuple of results
        when `fn` returned a tuple (or list). The call stays a call through hir and mir and
        is inlined before bufferization (`mir-inline-functions`), its ops located under
        the function's name as a scope (`name.matmul#0`).

        The body sees only its arguments: a Value of the calling graph used inside is a
        GraphError naming the function; `g2` has no params, states or caches of its own
        (pass weights as inputs). Bodies may call custom functions themselves (not
        recursively). A second call with the same `name`, the same `fn` and the same input
        shapes and dtypes calls the function built by the first (`fn` is not run again);
        another `fn` or other shapes under a used name are a GraphError.

        `vjp` (a user VJP) replaces the derived gradient of the function under `rlx.grad`:
        `vjp(g, inputs, outputs, cotangents)` builds into the graph being differentiated
        and returns one cotangent Value (of the input's shape) or None per input;
        `cotangents` has one Value per output (zeros where no gradient reaches it)."""
        what = f"custom_fn {name!r}"
        if not isinstance(name, str) or not name.isidentifier():
            raise GraphError(f"custom_fn: name: expected a Python identifier, got {name!r}")
        if vjp is not None and not callable(vjp):
            raise GraphError(f"{what}: vjp: expected a callable vjp(g, inputs, outputs, "
                             f"cotangents) or None, got {type(vjp).__name__}")
        if not callable(fn):
            raise GraphError(f"{what}: fn: expected a callable fn(g2, *values), got "
                             f"{type(fn).__name__}")
        if isinstance(inputs, Value):
            inputs = (inputs,)
        values = [self._own(f"{what}: inputs[{i}]", v) for i, v in enumerate(inputs)]
        signature = tuple((v.shape, v.dtype) for v in values)
        function = self._custom_function(fn, name, signature, vjp)
        call = func.CallOp(name, [v.ssa for v in values],
                           [tensor_type(shape, dtype) for shape, dtype in function.results])
        call.location = self._call_location(name)
        self._block.add_op(call)
        results = tuple(Value(self, ssa, shape, dtype)
                        for ssa, (shape, dtype) in zip(call.results, function.results, strict=True))
        return results if function.returns_tuple else results[0]

    def _custom_function(self, fn: Callable[..., Any], name: str,
                         signature: tuple[tuple[rules.Shape, str], ...],
                         vjp: Callable[..., Any] | None = None) -> _CustomFunction:
        """The function `name` of `signature`: built by `fn` at its first call."""
        what = f"custom_fn {name!r}"
        if name == self._root_name():
            raise GraphError(f"{what}: the graph itself is named {name!r}; name the function "
                             "otherwise")
        if name in self._functions:
            known = self._functions[name]
            if known is None:
                raise GraphError(f"{what}: the function calls itself (recursion is not supported)")
            if known.signature != signature:
                raise GraphError(f"{what}: the name is taken by a function of inputs "
                                 f"{_signature_text(known.signature)}, got inputs "
                                 f"{_signature_text(signature)}; name this one otherwise")
            if known.fn is not fn:  # another body under a used name would be dropped silently
                raise GraphError(f"{what}: the name is taken by another fn "
                                 f"({_fn_text(known.fn)}), got {_fn_text(fn)}; pass the same "
                                 "callable to call the function again, or name this one otherwise")
            if known.vjp is not vjp:
                raise GraphError(f"{what}: the function was called with another vjp "
                                 f"({_fn_text(known.vjp) if known.vjp else None}), got "
                                 f"{_fn_text(vjp) if vjp else None}; pass the same vjp")
            return known
        self._functions[name] = None  # building: a nested call of `name` is recursion
        try:
            function = _body_builder(type(self))(name, self).build(fn, signature)
        except BaseException:
            del self._functions[name]
            raise
        self._functions[name] = function = replace(function, fn=fn, vjp=vjp)
        return function

    def _root_name(self) -> str:
        """The name of the graph whose module holds the custom functions."""
        return self.name

    def _call_location(self, name: str) -> NameLoc:
        """The call's location: the function's name as a scope inside the current scopes,
        `layer3.mlp`, with a counter from the second call on (`mlp#1`)."""
        base = ".".join([*self._scopes, name])
        count = self._located.get(base, 0)
        self._located[base] = count + 1
        return name_loc(base if count == 0 else f"{base}#{count}")

    def _private_functions(self) -> list[func.FuncOp]:
        """Copies of the custom functions, for the module (the graph keeps its own)."""
        return [f.op.clone() for f in self._functions.values() if f is not None]

    # ------------------------------------------------------------------ for transformations
    # What a graph transformation (`rlx.grad`) reads and builds besides the builder methods.

    def arguments(self) -> list[tuple[str, str, BlockArgument, rules.Shape]]:
        """(name, role, SSA value, symbolic shape) of every argument, in order (the
        position, added by a cache append, has the shape ())."""
        return list(zip(self._arg_names, self._arg_roles, self._block.args, self._arg_shapes,
                        strict=True))

    def body_ops(self) -> list[Operation]:
        """The ops built so far, in order."""
        return list(self._block.ops)

    def add_op(self, op: Operation) -> None:
        """Append an op built outside the builder methods (its operands values of this
        graph), located as the builder's ops are (`scope`)."""
        self._add_located(op)

    def custom_function(self, name: str) -> _CustomFunction | None:
        """The custom function `name` (`custom_fn`): its private `func.func` (`.op`) and
        user VJP (`.vjp`); None when there is none of that name."""
        return self._functions.get(name)

    def duplicate(self) -> tuple[Graph, dict[SSAValue, SSAValue]]:
        """A copy of the graph without its outputs (same arguments, ops cloned, custom
        functions shared), and the map from this graph's SSA values to the copy's."""
        new = copy.copy(self)
        block = Block(arg_types=[arg.type for arg in self._block.args])
        mapping: dict[SSAValue, SSAValue] = {}
        for old, arg in zip(self._block.args, block.args, strict=True):
            arg.name_hint = old.name_hint
            mapping[old] = arg
        for op in self._block.ops:
            block.add_op(op.clone(value_mapper=mapping))
        new._block = block
        new._arg_names, new._arg_roles = list(self._arg_names), list(self._arg_roles)
        new._arg_shapes, new._symbols = list(self._arg_shapes), dict(self._symbols)
        new._outputs, new._output_names = [], []
        new._position = None if self._position is None else mapping[self._position]  # pyright: ignore[reportAttributeAccessIssue]
        new._updated = {mapping[k]: v for k, v in self._updated.items()}
        new._scopes, new._located = [], dict(self._located)
        new._functions = dict(self._functions)
        new._arg_extra = dict(self._arg_extra)
        new._shapes = {mapping[k]: v for k, v in self._shapes.items() if k in mapping}
        return new, mapping

    def _remember_shape(self, ssa: SSAValue, shape: rules.Shape) -> None:
        """Keep a Value's symbolic shape (the IR's type says only `?`) for `shape_of`."""
        if rules.UNKNOWN not in shape:
            self._shapes.setdefault(ssa, tuple(shape))

    def shape_of(self, ssa: SSAValue) -> rules.Shape:
        """The symbolic shape of a value of the graph: the one it was built with, else (an
        op added by `add_op`) its op's shape rule on its operands' symbolic shapes, else
        its type's (`?` for a symbolic dim)."""
        known = self._shapes.get(ssa)
        if known is not None:
            return known
        owner = ssa.owner
        if isinstance(owner, VerifiesSignature) and len(owner.results) == 1:
            for operand in owner.operands:
                if isinstance(operand.type, TensorType):
                    self.shape_of(operand)
            try:
                with named_shapes(self._shapes):
                    shape = tuple(owner.infer_shape())
            except (RlxError, VerifyException, AssertionError):
                shape = None
            if shape is not None and rules.UNKNOWN not in shape:
                self._shapes[ssa] = shape
                return shape
        return shape_of(ssa)


@dataclass(frozen=True)
class _CustomFunction:
    """A function built by `Graph.custom_fn`: its private `func.func`, its inputs' and
    results' (shape, dtype), and whether `fn` returned a tuple."""

    op: func.FuncOp
    signature: tuple[tuple[rules.Shape, str], ...]
    results: tuple[tuple[rules.Shape, str], ...]
    returns_tuple: bool
    fn: Callable[..., Any] | None = None
    """The callable that built the body: only it may call the function again."""
    vjp: Callable[..., Any] | None = None
    """The user VJP (`custom_fn(..., vjp=...)`), or None: `rlx.grad` derives it."""


def _fn_text(fn: Callable[..., Any]) -> str:
    return getattr(fn, "__qualname__", None) or repr(fn)


def _signature_text(signature: Sequence[tuple[rules.Shape, str]]) -> str:
    return "(" + ", ".join(f"{dtype}{list(shape)}" for shape, dtype in signature) + ")"


class _FunctionGraph(Graph):
    """The builder `fn` of a `custom_fn` gets: a Graph whose inputs are the function's
    arguments (declared here, not by `fn`), with no params, states or caches, sharing the
    calling graph's custom functions (so bodies call functions too)."""

    def __init__(self, name: str, caller: Graph):
        super().__init__(name)
        self._functions = caller._functions
        self._root = caller._root_name()

    def _root_name(self) -> str:
        return self._root

    def build(self, fn: Callable[..., Any], signature: tuple[tuple[rules.Shape, str], ...]
              ) -> _CustomFunction:
        """Run `fn` on the arguments; its Value or tuple of Values is what it returns."""
        what = f"custom_fn {self.name!r}"
        args = [self._argument(f"arg{i}", shape, dtype, ROLE_INPUT)
                for i, (shape, dtype) in enumerate(signature)]
        with _context(what):
            returned = fn(self, *args)
        returns_tuple = isinstance(returned, tuple | list)
        results = list(returned) if returns_tuple else [returned]
        if not results or not all(isinstance(v, Value) for v in results):
            got = type(returned).__name__ if not returns_tuple else \
                "(" + ", ".join(type(v).__name__ for v in results) + ")"
            raise GraphError(f"{what}: fn must return a Value of the function's graph or a "
                             f"non-empty tuple of them, got {got}")
        for i, v in enumerate(results):
            if v.graph is not self:
                raise GraphError(f"{what}: result {i} is a Value of graph {v.graph.name!r}, not "
                                 f"of the function's; build every result from the function's "
                                 "arguments")
        Graph.output(self, *results)
        op = self.to_module().body.block.first_op
        assert isinstance(op, func.FuncOp)
        op.detach()
        op.sym_visibility = StringAttr("private")
        op.arg_attrs = None
        op.res_attrs = None
        return _CustomFunction(op, signature, tuple((v.shape, v.dtype) for v in results),
                               returns_tuple)

    def _private_functions(self) -> list[func.FuncOp]:
        return []  # the calling graph's module holds them all

    def _own(self, name: str, value: Any) -> Value:
        if isinstance(value, Value) and value.graph is not self:
            raise GraphError(f"{name}: a Value of graph {value.graph.name!r} is used inside the "
                             f"custom function {self.name!r}, which sees only its arguments; "
                             "pass it in the inputs of custom_fn")
        return super()._own(name, value)

    def _refuse(self, what: str) -> GraphError:
        return GraphError(f"custom_fn {self.name!r}: {what} inside a custom function is not "
                          "supported: a function's values are its arguments (pass weights "
                          "and states as inputs)")

    def input(self, name: str, shape: Sequence[int | str], dtype: Any = "f32") -> Value:
        raise self._refuse("g2.input")

    def param(self, name: str, shape: Sequence[int], dtype: Any = "f32") -> Value:
        raise self._refuse("g2.param")

    def state(self, name: str, shape: Sequence[int], dtype: Any = "f32") -> Value:
        raise self._refuse("g2.state")

    def output(self, *values: Value, names: Sequence[str] | None = None, **named: Value) -> None:
        raise GraphError(f"custom_fn {self.name!r}: g2.output: return the results from fn instead")

    def _position_argument(self) -> BlockArgument:
        raise self._refuse("a KV cache append")


@cache
def _body_builder(caller: type[Graph]) -> type[_FunctionGraph]:
    """The builder of a body called from a graph of class `caller`: a `_FunctionGraph`
    that keeps the caller's own rules (a MIR module's builder refuses hir blocks in its
    bodies too)."""
    if issubclass(caller, _FunctionGraph) or caller is Graph:
        return caller if issubclass(caller, _FunctionGraph) else _FunctionGraph
    return type(f"_FunctionGraph_{caller.__name__}", (_FunctionGraph, caller), {})


def numpy_dtype(dtype: str) -> type[np.generic]:
    """The numpy scalar type of an rlx dtype name."""
    return numpy_type(dtype)


__all__ = ["ARG_NAME", "ARG_ROLE", "Graph", "Value", "dtype_name", "numpy_dtype"]
