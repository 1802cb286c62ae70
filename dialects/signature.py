"""One verifier for the ops of hir, mir and lir: an op declares its signature, the
`VerifiesSignature` base checks it.

An op declares
- `ELEMENT_TYPES`: which element types each operand and result accepts, and which of them
  share one element type (`ElementTypes`);
- `infer_shape()`: the shape its rule of `rlx_mlir.core.shape_inference` infers for the
  value named `RESULT` (the result, or `out` for a destination-passing lir kernel);
- for an op with several results (an lir kernel with several outs), `EXTRA_RESULTS`
  (the optional further results or outs, by name) and `infer_shapes()`: the shape of
  each value the op must have, by name (the results it lacks are absent);
- `verify_attributes()`, optionally: property checks the shape rule does not cover.

`VerifiesSignature.verify_` then checks, in this order, every value's shape (every
dimension >= 1; lir kernels also check the buffer layout), the element types, the
properties named `eps` and `scale` (the same meaning at every level) and
`verify_attributes`, and last that the op has exactly the results `infer_shapes` names,
each of the inferred shape. Messages name the op,
the operand (`inputs[1]` inside a variadic), what was expected and what it got.
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, ClassVar, NamedTuple

from xdsl.dialects import func
from xdsl.dialects.builtin import AnyFloatConstr, IndexType, IntegerType, ShapedType
from xdsl.ir import Attribute, Block, SSAValue
from xdsl.irdl import (
    IRDLOperation,
    OptionalDef,
    OptOperandDef,
    OptPropertyDef,
    OptResultDef,
    VarOperandDef,
    operand_def,
    opt_operand_def,
    opt_prop_def,
    opt_result_def,
    prop_def,
    result_def,
    var_operand_def,
)
from xdsl.irdl.operations import _RegionFieldDef  # pyright: ignore[reportPrivateUsage]
from xdsl.utils.exceptions import VerifyException

from rlx_mlir.core import shape_inference as rules
from rlx_mlir.core.abi import ARG_DIMS
from rlx_mlir.core.errors import RlxError
from rlx_mlir.core.shape_inference import Shape
from rlx_mlir.dialects.common import (
    dims_from_attr,
    dtype_of,
    named_shapes,
    rule_errors,
    shape_of,
    verify_dtype,
    verify_eps,
    verify_result,
    verify_scale,
)

FLOAT: tuple[str, ...] = ("f32",)
"""Compute operands and results."""
NUMERIC: tuple[str, ...] = ("f32", "i32", "i64")
"""Operands of the elementwise ops that also take integers."""
ANY_DTYPE: tuple[str, ...] = rules.DTYPES
"""Every rlx element type (f32, i32, i64, ui8): the data movement ops."""
INDEX: tuple[str, ...] = rules.INDEX_DTYPES
"""Index operands (gather indices, embedding ids)."""
UI8: tuple[str, ...] = ("ui8",)
"""Raw GGUF block bytes."""



class Operand(NamedTuple):
    """The values of one operand (or result) definition, each with the label messages
    use: `name`, or `name[i]` inside a variadic (none for an absent optional operand)."""

    name: str
    values: list[tuple[str, SSAValue]]
    variadic: bool


def named_values(op: IRDLOperation) -> list[Operand]:
    """The operands then the results of `op`, by definition name."""
    op_def = op.get_irdl_definition()
    named: list[Operand] = []
    for name, definition in [*op_def.operands, *op_def.results]:
        value = getattr(op, name)
        if isinstance(definition, VarOperandDef) and not isinstance(definition, OptionalDef):
            labelled = [(f"{name}[{i}]", v) for i, v in enumerate(value)]
            named.append(Operand(name, labelled, True))
        else:
            named.append(Operand(name, [] if value is None else [(name, value)], False))
    return named


@dataclass(frozen=True)
class ElementTypes:
    """The element types an op accepts, by operand/result name.

    `allowed[name]` (or `default` when not listed) constrains every value of `name`,
    except the members of `same` after the first: those must have the element type of
    the first value of `same[0]` (so `same=("lhs", "rhs", "result")` checks `lhs`
    against `allowed` and then `rhs` and `result` against `lhs`).
    """

    allowed: Mapping[str, tuple[str, ...]] = field(default_factory=dict[str, tuple[str, ...]])
    same: tuple[str, ...] = ()
    default: tuple[str, ...] = FLOAT

    def allowed_for(self, name: str) -> tuple[str, ...]:
        return self.allowed.get(name, self.default)

    def renamed(self, old: str, new: str) -> ElementTypes:
        """The same rule with the value `old` called `new` (mir `result` -> lir `out`)."""

        def rename(name: str) -> str:
            return new if name == old else name

        return ElementTypes(
            {rename(n): dtypes for n, dtypes in self.allowed.items()},
            tuple(rename(n) for n in self.same),
            self.default,
        )

    def verify(self, op: IRDLOperation, named: list[Operand]) -> None:
        followers = set(self.same[1:])
        for operand in named:
            if operand.name not in followers:
                for label, value in operand.values:
                    verify_dtype(op, label, value, self.allowed_for(operand.name))
        by_name = {operand.name: operand.values for operand in named}
        leader = by_name.get(self.same[0], []) if self.same else []
        if not leader:
            return
        reference_label, reference = leader[0]
        want = dtype_of(reference)
        for name in self.same:
            for label, value in by_name.get(name, []):
                got = dtype_of(value)
                if got != want:
                    raise VerifyException(
                        f"'{op.name}': {label}: expected element type {want} "
                        f"(as {reference_label}), got {got}"
                    )


ATTRIBUTE_CHECKS: dict[str, Callable[[IRDLOperation, Attribute], None]] = {
    "eps": verify_eps,  # pyright: ignore[reportAssignmentType]
    "scale": verify_scale,  # pyright: ignore[reportAssignmentType]
}
"""Checks of the properties that mean the same at every level, by property name."""


class VerifiesSignature(IRDLOperation, ABC):
    """Base of the hir, mir and lir ops: `verify_` checks the declared signature (see the
    module docstring); subclasses only declare it."""

    ELEMENT_TYPES: ClassVar[ElementTypes] = ElementTypes()
    RESULT: ClassVar[str] = "result"
    """The (first) result, or the first out of an lir kernel: `infer_shape` gives its shape."""
    EXTRA_RESULTS: ClassVar[tuple[str, ...]] = ()
    """Further optional results (outs), present when `infer_shapes` names them (a sequence
    op's final state with `return_state`)."""
    EMPTY_VARIADICS: ClassVar[tuple[str, ...]] = ()
    """Variadic operands that may have no value (a scan's xs and consts)."""

    @abstractmethod
    def infer_shape(self) -> Shape:
        """The shape of `RESULT` by the op's shape rule (raises the rule's RlxError)."""

    def infer_shapes(self) -> dict[str, Shape]:
        """The shape of every result (out) the op must have, by name: `RESULT`'s by
        `infer_shape`, and those of `EXTRA_RESULTS` the op's properties ask for (an op
        with several results overrides)."""
        return {self.RESULT: self.infer_shape()}

    def result_names(self) -> tuple[str, ...]:
        """`RESULT`, then `EXTRA_RESULTS`: every result (out) definition, in order."""
        return (self.RESULT, *self.EXTRA_RESULTS)

    def verify_attributes(self) -> None:
        """Property checks the shape rule does not cover (none by default)."""

    def verify_regions(self) -> None:
        """Checks of the op's regions, after the shape (none by default)."""

    def declared_shape(self) -> Shape:
        """The shape `RESULT` declares (a rule that takes a target shape reads it)."""
        return shape_of(getattr(self, self.RESULT))

    def verify_value(self, label: str, value: SSAValue) -> None:
        """One operand or result: every dimension >= 1."""
        with rule_errors(self):
            rules.check_shape(label, shape_of(value))

    def verify_element_types(self, named: list[Operand]) -> None:
        """The declared `ELEMENT_TYPES` (an op whose rule depends on a property overrides)."""
        self.ELEMENT_TYPES.verify(self, named)

    def verify_(self) -> None:
        """Values, element types, eps/scale and `verify_attributes`, the shape of
        `RESULT`, then `verify_regions`; the first failure raises a VerifyException."""
        named = named_values(self)
        for operand in named:
            if operand.variadic and not operand.values and operand.name not in self.EMPTY_VARIADICS:
                raise VerifyException(
                    f"'{self.name}': {operand.name}: expected at least one input, got none"
                )
            for label, value in operand.values:
                self.verify_value(label, value)
        self.verify_element_types(named)
        for prop, check in ATTRIBUTE_CHECKS.items():
            if (attr := self.properties.get(prop)) is not None:
                check(self, attr)
        self.verify_attributes()
        self.verify_results()
        self.verify_regions()

    def verify_results(self) -> None:
        """Exactly the results (outs) `infer_shapes` names, each of its inferred shape."""
        with rule_errors(self):
            shapes = self.infer_shapes()
        for name in self.result_names():
            value = getattr(self, name)
            if name not in shapes:
                if value is not None:
                    raise VerifyException(
                        f"'{self.name}': {name}: expected none (the properties ask for no "
                        f"{name}), got a value of type {value.type}"
                    )
                continue
            if value is None:
                raise VerifyException(
                    f"'{self.name}': {name}: expected a value of shape "
                    f"{rules.fmt(shapes[name])}, got none"
                )
            verify_result(self, value, lambda name=name: shapes[name], name)


# ----------------------------------------------------------------------------- symbolic shapes


def symbolic_shapes(fn: func.FuncOp) -> dict[SSAValue, Shape]:
    """The symbolic shape of each value of `fn` with `?` dims that the symbols of its
    arguments (`rlx.dims`) determine: every op's own shape rule, run on its operands'
    symbolic shapes (`named_shapes`), refined by the declared type. A `?` no rule names
    stays `UNKNOWN`. A malformed `rlx.dims` is an RlxError naming the argument."""
    shapes: dict[SSAValue, Shape] = {}
    if fn.is_declaration:
        return shapes
    arg_attrs = fn.arg_attrs.data if fn.arg_attrs is not None else ()
    for i, (arg, attrs) in enumerate(zip(fn.body.block.args, arg_attrs, strict=False)):
        if (dims := attrs.data.get(ARG_DIMS)) is not None:
            what = f"@{fn.sym_name.data}: argument {i}: {ARG_DIMS}"
            shape = dims_from_attr(dims, what)
            declared = shape_of(arg)
            if len(shape) != len(declared) or not all(map(rules.dims_match, shape, declared)):
                raise RlxError(f"{what} {rules.fmt(shape)} does not describe its type {arg.type}")
            shapes[arg] = tuple(map(rules.unify, declared, shape))
    with named_shapes(shapes):
        for op in fn.body.block.ops:
            if not isinstance(op, VerifiesSignature) or not op.results:
                continue
            if all(rules.is_static_shape(shape_of(r)) for r in op.results):
                continue
            try:
                inferred = op.infer_shapes()
            except RlxError:
                continue
            for name, shape in inferred.items():
                value = getattr(op, name, None)
                if not isinstance(value, SSAValue) or value not in op.results:
                    continue
                declared = shape_of(value)
                if not rules.is_static_shape(declared) and len(shape) == len(declared):
                    shapes[value] = tuple(map(rules.unify, declared, shape))
    return shapes


# ----------------------------------------------------------------------------- twins


def twin(
    source: type[VerifiesSignature],
    base: type[VerifiesSignature],
    *,
    dialect: str,
    value_type: type[Attribute],
    destination: bool = False,
    outs: tuple[str, ...] = ("out",),
    defaults: Mapping[str, Attribute | None] | None = None,
) -> type[VerifiesSignature]:
    """The base class of `source`'s twin op in `dialect`, to subclass with the twin's
    docstring, syntax and constructor (and decorate with `irdl_op_definition`).

    The twin is `source` at another level: its operands (same names and kinds: single,
    optional, variadic) and results hold `value_type` values, and it takes from `source`
    the property and region definitions, `ELEMENT_TYPES`, `infer_shape`,
    `verify_attributes` and `verify_regions`, so the two cannot drift. With `destination`
    the results become trailing operands named `outs` (destination-passing style, as `lir`
    kernels: one `out` per result, optional where the result is) and the properties lose
    their defaults; `defaults` overrides a property's default. `MIR_OP` names `source`.
    """
    op_def = source.get_irdl_definition()
    fields: dict[str, Any] = {}
    for name, operand in op_def.operands:
        if isinstance(operand, OptOperandDef):
            fields[name] = opt_operand_def(value_type)
        elif isinstance(operand, VarOperandDef):
            fields[name] = var_operand_def(value_type)
        else:
            fields[name] = operand_def(value_type)
    element_types = source.ELEMENT_TYPES
    names = [name for name, _ in op_def.results]
    if destination:
        assert len(outs) == len(names), f"{op_def.name}: expected {len(names)} out names"
        for (result, definition), out in zip(op_def.results, outs, strict=True):
            optional = isinstance(definition, OptResultDef)
            fields[out] = (opt_operand_def if optional else operand_def)(value_type)
            element_types = element_types.renamed(result, out)
        names = list(outs)
    else:
        for name, definition in op_def.results:
            optional = isinstance(definition, OptResultDef)
            fields[name] = (opt_result_def if optional else result_def)(value_type)
    for name, region in op_def.regions:
        fields[name] = _RegionFieldDef(type(region), region.entry_args)
    for name, prop in op_def.properties.items():
        default = None if destination else prop.default_value
        default = (defaults or {}).get(name, default)
        factory = opt_prop_def if isinstance(prop, OptPropertyDef) else prop_def
        fields[name] = factory(prop.constr, default)
    namespace: dict[str, Any] = {
        "__annotations__": {"MIR_OP": ClassVar[type], "ELEMENT_TYPES": ClassVar[ElementTypes],
                            "RESULT": ClassVar[str], "EXTRA_RESULTS": ClassVar[tuple[str, ...]]},
        "name": f"{dialect}.{op_def.name.split('.', 1)[1]}",
        "MIR_OP": source,
        "ELEMENT_TYPES": element_types,
        "RESULT": names[0],
        "EXTRA_RESULTS": tuple(names[1:]),
        "infer_shape": source.infer_shape,
        "infer_shapes": source.infer_shapes,
        "verify_attributes": source.verify_attributes,
        "verify_regions": source.verify_regions,
        **fields,
    }
    return type(f"{source.__name__}Twin", (base,), namespace)


# ----------------------------------------------------------------------------- scalar bodies

BODY_DIALECTS: tuple[str, ...] = ("arith", "math")
"""Dialects whose scalar ops may appear in a fused elementwise body (mir and lir)."""


def fused_elementwise_shape(inputs: Sequence[SSAValue], out: Shape) -> Shape:
    """The shape rule of a fused elementwise op: every input broadcasts to `out` (whose
    `?` dims take the symbols of the inputs, under `named_shapes`)."""
    for i, value in enumerate(inputs):
        try:
            out = rules.broadcast_to(shape_of(value), out)
        except rules.ShapeError as err:
            raise rules.ShapeError(f"inputs[{i}]: {err}") from err
    return out


def is_scalar(ty: Attribute) -> bool:
    return isinstance(ty, IntegerType | IndexType) or AnyFloatConstr.verifies(ty)


def verify_scalar_body(
    op: IRDLOperation, block: Block, inputs: list[SSAValue], result: SSAValue, yield_name: str
) -> None:
    """The body of a fused elementwise op (mir or lir): one block argument per input of its
    element type, scalar arith/math ops, then one `yield_name` of the result's element type."""

    def fail(message: str) -> VerifyException:
        return VerifyException(f"'{op.name}': body: {message}")

    args = block.args
    if len(args) != len(inputs):
        raise fail(f"expected {len(inputs)} block arguments (one per input), got {len(args)}")
    for i, (arg, value) in enumerate(zip(args, inputs, strict=True)):
        want = _element_type(value)
        if arg.type != want:
            raise fail(
                f"block argument {i}: expected {want} (element type of inputs[{i}]), got {arg.type}"
            )
    last = block.last_op
    if last is None or last.name != yield_name:
        got = "nothing" if last is None else repr(last.name)
        raise fail(f"expected to end in '{yield_name}', got {got}")
    for body_op in block.ops:
        if body_op is last:
            break
        if body_op.dialect_name() not in BODY_DIALECTS:
            raise fail(f"expected only arith and math ops, got '{body_op.name}'")
        for res in body_op.results:
            if not is_scalar(res.type):
                raise fail(f"'{body_op.name}' must compute a scalar, got a value of type {res.type}")
    want = _element_type(result)
    yielded = [v.type for v in last.operands]
    if yielded != [want]:
        raise fail(
            f"'{yield_name}' expected one value of type {want} (element type of "
            f"{_result_label(op, result)}), got ({', '.join(map(str, yielded))})"
        )


def _element_type(value: SSAValue) -> Attribute:
    ty = value.type
    assert isinstance(ty, ShapedType), ty
    return ty.get_element_type()  # pyright: ignore[reportAttributeAccessIssue]


def _result_label(op: IRDLOperation, result: SSAValue) -> str:
    return "result" if result in op.results else "out"
