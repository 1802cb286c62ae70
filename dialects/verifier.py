"""The one verifier and keyword constructor of the ops of hir, mir and lir: an op declares
its signature once, the `VerifiesSignature` base checks it and builds the op from it.

An op declares
- its operands, results and properties (IRDL fields);
- `RULE`: its shape rule in `rlx_mlir.core.shape_inference`, whose parameters are named
  exactly as the op's operands and properties (a rule's `**operands` takes every operand
  it does not name); the rule gives the shape of the value named `RESULT` (the result,
  or `out` for a destination-passing lir kernel), or, for an op with several results,
  one shape per result (None for an optional result the properties do not ask for);
- for an op with several results (an lir kernel with several outs), `EXTRA_RESULTS`:
  the optional further results or outs, by name (a sequence op's final state);
- `ELEMENT_TYPES`: which element types each operand and result accepts, and which of them
  share one element type (`ElementTypes`);
- `DERIVED`, optionally: how a property left out is computed from the others
  (`num_kv_heads` = `num_heads`);
- `verify_attributes()`, optionally: property checks the shape rule does not cover.

From this, `VerifiesSignature` gives
- `infer_shape()`: the rule applied to the op's operand shapes and property values (the
  shape of `RESULT`), and `infer_shapes()`: the shape of every result (out) the op must
  have, by name (the results it lacks are absent);
- `verify_()`: checks, in this order, every value's shape (every dimension >= 1; lir
  kernels also check the buffer layout), the element types, the properties named `eps`
  and `scale` (the same meaning at every level) and `verify_attributes`, and last that
  the op has exactly the results `infer_shapes` names, each of the inferred shape.
  Messages name the op, the operand (`inputs[1]` inside a variadic), what was expected
  and what it got;
- a keyword constructor: `mir.RmsNormOp(x, gamma, eps=1e-6)` binds its arguments to the
  op's definition (`constructor_parameters`: required operands, optional operands,
  properties, then `result_type` or `result_types`), turns Python values into property
  attributes, and infers the result types by `RULE` and `ELEMENT_TYPES` when none are
  given (an optional result the rule gives no shape is absent).
"""

from __future__ import annotations

import inspect
from abc import ABC
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, ClassVar, NamedTuple

from xdsl.dialects import func
from xdsl.dialects.builtin import (
    AnyFloatConstr,
    DenseArrayBase,
    DictionaryAttr,
    FloatAttr,
    IndexType,
    IntegerAttr,
    IntegerType,
    ShapedType,
    StringAttr,
    UnitAttr,
)
from xdsl.dialects.utils import EnumAttribute
from xdsl.ir import Attribute, Block, SSAValue
from xdsl.irdl import (
    AttrSizedOperandSegments,
    IRDLOperation,
    OptionalDef,
    OptOperandDef,
    OptPropertyDef,
    OptResultDef,
    PropertyDef,
    VarOperandDef,
    VarResultDef,
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
    enum_attr,
    f32_attr,
    i64_array_attr,
    i64_attr,
    named_shapes,
    rule_errors,
    shape_of,
    tensor_type,
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
        if (isinstance(definition, VarOperandDef | VarResultDef)
                and not isinstance(definition, OptionalDef)):
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


# ----------------------------------------------------------------------------- building from the definition

Rule = Callable[..., Any]
"""A shape rule of `rlx_mlir.core.shape_inference`: keyword parameters named as the op's
operands (shapes; None for an absent optional one, a list for a variadic one) and
properties (Python values), returning the result's shape (one per result, None for an
absent optional one, for an op with several)."""


class OpBuildError(RlxError, TypeError):
    """An op constructor called with arguments its definition does not take."""


def plain(value: Any) -> Any:
    """The Python value of a property as a shape rule reads it: an int, a float, a str
    (enums, strings), a tuple of ints (dense arrays), True (a unit attribute), a dict of
    these (a dictionary attribute). A Python value (or None) stays as it is."""
    match value:
        case IntegerAttr() | FloatAttr():
            return value.value.data
        case DenseArrayBase():
            return tuple(value.get_values())
        case EnumAttribute():
            return str(value.data.value)  # pyright: ignore[reportUnknownMemberType]
        case StringAttr():
            return value.data
        case UnitAttr():
            return True
        case DictionaryAttr():
            return {name: plain(attr) for name, attr in value.data.items()}
        case _:
            return value


def to_property(op_name: str, name: str, definition: PropertyDef, value: Any) -> Attribute | None:
    """The attribute of property `name` for a Python value (an attribute stays as it is):
    by the property's constraint, an i64 IntegerAttr, f32 FloatAttr, i64 dense array (an
    int is one entry), enum attribute, StringAttr, or UnitAttr (None when false)."""
    if value is None or isinstance(value, Attribute):
        return value
    bases = definition.constr.get_bases() or set()
    base = next(iter(bases)) if len(bases) == 1 else None
    if base is UnitAttr:
        return UnitAttr() if value else None
    if base is IntegerAttr:
        return i64_attr(value)
    if base is FloatAttr:
        return f32_attr(value)
    if base is DenseArrayBase:
        return i64_array_attr([value] if isinstance(value, int) else value)
    if base is StringAttr:
        return StringAttr(value)
    if base is not None and issubclass(base, EnumAttribute):
        return enum_attr(base, value)  # pyright: ignore[reportUnknownArgumentType]
    raise OpBuildError(f"'{op_name}': {name}: cannot make a property of {value!r}")


SEGMENTS = AttrSizedOperandSegments.attribute_name
"""The property xDSL keeps the variadic operand sizes in (not a constructor argument)."""

_PARAMETERS: dict[type, tuple[str, ...]] = {}


def constructor_parameters(op: type[IRDLOperation]) -> tuple[str, ...]:
    """The parameters of `op`'s keyword constructor, in positional order: required operands
    (variadic ones included; an lir kernel's `out` last of them) and optional operands in
    definition order, the properties in definition order, then `result_type` (one result)
    or `result_types` (several)."""
    if (cached := _PARAMETERS.get(op)) is not None:
        return cached
    op_def = op.get_irdl_definition()
    required = [n for n, d in op_def.operands if not isinstance(d, OptOperandDef)]
    optional = [n for n, d in op_def.operands if isinstance(d, OptOperandDef)]
    props = [n for n in op_def.properties if n != SEGMENTS]
    results = {0: [], 1: ["result_type"]}.get(len(op_def.results), ["result_types"])
    params = (*required, *optional, *props, *results)
    _PARAMETERS[op] = params
    return params


_RULE_PARAMETERS: dict[Rule, list[inspect.Parameter]] = {}


def rule_arguments(rule: Rule, op_name: str, shapes: Mapping[str, Any],
                   properties: Mapping[str, Any]) -> dict[str, Any]:
    """The keyword arguments of `rule` for an op: each parameter takes the operand shape
    or property value of its name; a `**operands` parameter takes the operands no
    parameter names. A parameter without a default that names nothing of the op is an
    OpBuildError (the rule and the op disagree)."""
    params = _RULE_PARAMETERS.get(rule)
    if params is None:
        params = _RULE_PARAMETERS[rule] = list(inspect.signature(rule).parameters.values())
    kwargs: dict[str, Any] = {}
    rest = False
    for param in params:
        if param.kind is inspect.Parameter.VAR_KEYWORD:
            rest = True
        elif param.name in shapes:
            kwargs[param.name] = shapes[param.name]
        elif param.name in properties:
            kwargs[param.name] = plain(properties[param.name])
        elif param.default is inspect.Parameter.empty and param.kind is not inspect.Parameter.VAR_POSITIONAL:
            raise OpBuildError(f"'{op_name}': its shape rule {rule.__name__} takes {param.name!r}, "
                               f"which is no operand or property of the op")
    if rest:
        kwargs.update((name, shape) for name, shape in shapes.items() if name not in kwargs)
    return kwargs


def grouped_operands(op: IRDLOperation) -> list[SSAValue | Sequence[SSAValue] | None]:
    """The operands of `op` grouped by their definitions (None for an absent optional
    operand, a tuple for a variadic one), as `build` takes them: to build an op's twin
    at another level."""
    return [getattr(op, name) for name, _ in type(op).get_irdl_definition().operands]


def _value_shape(value: SSAValue | None) -> Shape | None:
    """A shaped value's shape, None for an absent operand or an `index`."""
    return None if value is None or isinstance(value.type, IndexType) else shape_of(value)


def _value_dtype(value: SSAValue | Sequence[SSAValue] | None) -> str | None:
    if isinstance(value, Sequence):
        value = value[0] if value else None
    if value is None or isinstance(value.type, IndexType):
        return None
    return dtype_of(value)


class VerifiesSignature(IRDLOperation, ABC):
    """Base of the hir, mir and lir ops: `verify_` checks the declared signature, the
    constructor builds the op from it (see the module docstring); subclasses only
    declare it."""

    RULE: ClassVar[Rule | None] = None
    """The shape rule (None: the op overrides `infer_shape`, its result type is given)."""
    DERIVED: ClassVar[Mapping[str, Callable[[Mapping[str, Any]], Any]]] = {}
    """Properties a constructor computes when left out, from the other arguments'
    Python values by name."""
    ELEMENT_TYPES: ClassVar[ElementTypes] = ElementTypes()
    RESULT: ClassVar[str] = "result"
    """The (first) result, or the first out of an lir kernel: `infer_shape` gives its shape."""
    EXTRA_RESULTS: ClassVar[tuple[str, ...]] = ()
    """Further optional results (outs), present when `infer_shapes` names them (a sequence
    op's final state with `return_state`)."""
    ABSENT_VALUES: ClassVar[Mapping[str, Any]] = {}
    """Optional properties whose given value is this one are left absent (the value
    they mean when absent: dequant_matmul's `activations` f32)."""
    EMPTY_VARIADICS: ClassVar[tuple[str, ...]] = ()
    """Variadic operands that may have no value (a scan's xs and consts)."""

    def __init__(self, *args: Any, **kwargs: Any):
        """Build the op from its operands and properties, positionally in the order of
        `constructor_parameters` or by name. Properties take Python values or attributes;
        one left out takes its `DERIVED` value or its default; without `result_type`,
        the result type is inferred by `RULE` and `ELEMENT_TYPES`."""
        cls = type(self)
        op_def = cls.get_irdl_definition()
        names = constructor_parameters(cls)
        if len(args) > len(names):
            raise OpBuildError(f"'{op_def.name}': expected at most {len(names)} positional "
                               f"arguments ({', '.join(names)}), got {len(args)}")
        bound: dict[str, Any] = dict(zip(names, args, strict=False))
        for key, value in kwargs.items():
            if key not in names or key in bound:
                why = "given twice" if key in bound else f"expected one of {', '.join(names)}"
                raise OpBuildError(f"'{op_def.name}': argument {key!r}: {why}")
            bound[key] = value
        operands: dict[str, SSAValue | list[SSAValue] | None] = {}
        for name, definition in op_def.operands:
            value = bound.get(name)
            if isinstance(definition, OptOperandDef):
                operands[name] = None if value is None else SSAValue.get(value)
            elif isinstance(definition, VarOperandDef):
                operands[name] = [SSAValue.get(v) for v in (value or ())]
            elif value is None:
                raise OpBuildError(f"'{op_def.name}': missing the operand {name!r}")
            else:
                operands[name] = SSAValue.get(value)
        properties = cls.complete_properties(bound)
        result_types = bound.get("result_types")
        if result_types is None and op_def.results:
            given = bound.get("result_type")
            result_types = [given] if given is not None else cls.infer_result_types(operands, properties)
        IRDLOperation.__init__(self, operands=list(operands.values()),
                               result_types=result_types or [], properties=properties)

    @classmethod
    def complete_properties(cls, given: Mapping[str, Any]) -> dict[str, Attribute]:
        """The property attributes of the arguments `given` by name: Python values made
        attributes, left-out ones `DERIVED` from the others (a missing property without
        a default is an OpBuildError)."""
        op_def = cls.get_irdl_definition()
        props: dict[str, Attribute] = {}
        missing: list[str] = []
        for name, definition in op_def.properties.items():
            if name == SEGMENTS:
                continue  # xDSL's builder sets it from the operands
            attr = to_property(op_def.name, name, definition, given.get(name))
            if name in cls.ABSENT_VALUES and attr == to_property(
                    op_def.name, name, definition, cls.ABSENT_VALUES[name]):
                attr = None  # the IR states only the other values of this property
            if attr is not None:
                props[name] = attr
            else:
                missing.append(name)
        values = {name: plain(value) for name, value in {**given, **props}.items()}
        for name in missing:
            definition = op_def.properties[name]
            if name in cls.DERIVED:
                attr = to_property(op_def.name, name, definition, cls.DERIVED[name](values))
                if attr is not None:
                    props[name] = attr
                    values[name] = plain(attr)
                    continue
            if not isinstance(definition, OptPropertyDef) and definition.default_value is None:
                raise OpBuildError(f"'{op_def.name}': missing the property {name!r}")
        return props

    @classmethod
    def rule_shape(cls, shapes: Mapping[str, Any], properties: Mapping[str, Any]) -> Any:
        """`RULE` applied to operand `shapes` (symbolic ones too: the Graph builder's) and
        `properties` (attributes or Python values) by name; a left-out property takes its
        `DERIVED` value or its default first."""
        rule = cls.RULE
        if rule is None:
            raise OpBuildError(f"'{cls.get_irdl_definition().name}': has no shape rule; "
                               f"give its result_type")
        props: dict[str, Any] = dict(properties)
        op_def = cls.get_irdl_definition()
        for name, definition in op_def.properties.items():
            if props.get(name) is None and definition.default_value is not None:
                props[name] = definition.default_value
        values = {name: plain(value) for name, value in props.items()}
        for name, derive in cls.DERIVED.items():
            if values.get(name) is None:
                values[name] = plain(derive(values))
        return rule(**rule_arguments(rule, op_def.name, shapes, values))

    @classmethod
    def rule_shapes(cls, shapes: Mapping[str, Any], properties: Mapping[str, Any]
                    ) -> list[Shape | None]:
        """`rule_shape` as one shape per result (per out of an lir kernel), in order: None
        for an optional one the properties do not ask for."""
        inferred = cls.rule_shape(shapes, properties)
        count = len(cls.get_irdl_definition().results) or len(cls.result_names())
        return [inferred] if count == 1 else list(inferred)

    @classmethod
    def result_names(cls) -> tuple[str, ...]:
        """`RESULT`, then `EXTRA_RESULTS`: every result (out) definition, in order."""
        return (cls.RESULT, *cls.EXTRA_RESULTS)

    @classmethod
    def result_dtypes(cls, dtypes: Mapping[str, str | None]) -> list[str]:
        """The element type of each result, by `ELEMENT_TYPES`, from the operands'
        `dtypes` by name: a result in `same` takes the leader's, another the one type it
        allows."""
        element_types = cls.ELEMENT_TYPES
        out: list[str] = []
        for name, _ in cls.get_irdl_definition().results:
            leader = element_types.same[0] if name in element_types.same else None
            allowed = element_types.allowed_for(name)
            if leader is not None and leader != name and dtypes.get(leader) is not None:
                out.append(dtypes[leader])  # pyright: ignore[reportArgumentType]
            elif len(allowed) == 1:
                out.append(allowed[0])
            else:
                raise OpBuildError(f"'{cls.get_irdl_definition().name}': the element type of "
                                   f"{name} is not inferred; give its result_type")
        return out

    @classmethod
    def infer_result_types(cls, operands: Mapping[str, Any],
                           properties: Mapping[str, Attribute]) -> list[Attribute]:
        """Tensor result types from the operand values and the property attributes."""
        shapes = {name: [shape_of(v) for v in value] if isinstance(value, list) else
                  _value_shape(value) for name, value in operands.items()}
        shape_list = cls.rule_shapes(shapes, properties)
        dtypes = cls.result_dtypes({name: _value_dtype(v) for name, v in operands.items()})
        return [None if shape is None else tensor_type(shape, dtype)
                for shape, dtype in zip(shape_list, dtypes, strict=True)]

    def infer_shape(self) -> Shape:
        """The shape of `RESULT` by `RULE` (raises the rule's RlxError); an op without a
        rule overrides this."""
        shape = self._rule_shapes()[0]
        assert shape is not None, self.name
        return shape

    def infer_shapes(self) -> dict[str, Shape]:
        """The shape of every result (out) the op must have, by name: `RESULT`'s by
        `infer_shape`, and those of `EXTRA_RESULTS` the rule gives a shape (the ones the
        properties ask for)."""
        if type(self).RULE is None or not self.EXTRA_RESULTS:
            return {self.RESULT: self.infer_shape()}
        named = zip(self.result_names(), self._rule_shapes(), strict=True)
        return {name: shape for name, shape in named if shape is not None}

    def _rule_shapes(self) -> list[Shape | None]:
        """`RULE` on this op's operand shapes and properties, one shape per result."""
        op_def = self.get_irdl_definition()
        shapes: dict[str, Any] = {}
        for name, definition in op_def.operands:
            value = getattr(self, name)
            if isinstance(definition, VarOperandDef) and not isinstance(definition, OptOperandDef):
                shapes[name] = [shape_of(v) for v in value]
            else:
                shapes[name] = _value_shape(value)
        properties = {name: getattr(self, name) for name in op_def.properties if name != SEGMENTS}
        return type(self).rule_shapes(shapes, properties)

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
        """Values, element types, eps/scale and `verify_attributes`, the results
        (`verify_results`), then `verify_regions`; the first failure raises a
        VerifyException."""
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
                value = _named_result(op, name)
                if not isinstance(value, SSAValue) or value not in op.results:
                    continue
                declared = shape_of(value)
                if not rules.is_static_shape(declared) and len(shape) == len(declared):
                    shapes[value] = tuple(map(rules.unify, declared, shape))
    return shapes


def _named_result(op: IRDLOperation, name: str) -> Any:
    """The result `name` of `op`, or `name[i]`: the i-th of a variadic result."""
    base, _, index = name.partition("[")
    value = getattr(op, base, None)
    if index and isinstance(value, Sequence):
        position = int(index.rstrip("]"))
        return value[position] if position < len(value) else None
    return value


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
    docstring and syntax (and decorate with `irdl_op_definition`); its keyword
    constructor is `VerifiesSignature`'s.

    The twin is `source` at another level: its operands (same names and kinds: single,
    optional, variadic) and results hold `value_type` values, and it takes from `source`
    the property and region definitions, `RULE`, `DERIVED`, `ABSENT_VALUES`, `ELEMENT_TYPES`,
    `infer_shape`,
    `infer_shapes`, `verify_attributes` and `verify_regions`, so the two cannot drift.
    With `destination` the results become trailing operands named `outs`
    (destination-passing style, as `lir` kernels: one `out` per result, optional where
    the result is) and the properties lose their defaults (their constructor still fills
    them in); `defaults` overrides a property's default. `MIR_OP` names `source`.
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
    derived = dict(source.DERIVED)
    for name, prop in op_def.properties.items():
        default = None if destination else prop.default_value
        default = (defaults or {}).get(name, default)
        if default is None and prop.default_value is not None and name not in derived:
            derived[name] = lambda _, value=prop.default_value: value  # the constructor's default
        factory = opt_prop_def if isinstance(prop, OptPropertyDef) else prop_def
        fields[name] = factory(prop.constr, default)
    namespace: dict[str, Any] = {
        "__annotations__": {"MIR_OP": ClassVar[type], "ELEMENT_TYPES": ClassVar[ElementTypes],
                            "RULE": ClassVar[Any], "DERIVED": ClassVar[Any],
                            "ABSENT_VALUES": ClassVar[Any],
                            "RESULT": ClassVar[str], "EXTRA_RESULTS": ClassVar[tuple[str, ...]]},
        "name": f"{dialect}.{op_def.name.split('.', 1)[1]}",
        "MIR_OP": source,
        "RULE": source.RULE,
        "DERIVED": derived,
        "ABSENT_VALUES": source.ABSENT_VALUES,
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
