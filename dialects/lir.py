"""The `lir` dialect: buffers and destination-passing kernels on builtin memrefs.

LIR is what `convert-mir-to-lir` produces by bufferizing MIR and what
`convert-lir-to-llvm` lowers to llvm.  Every value is a builtin `MemRefType` with
a static shape and the identity layout; element types are f32 (compute), i32/i64
(indices) and ui8 (GGUF blocks), plus i8 for the arena bytes.

Buffers come from `lir.alloc` (one buffer each) or, after `lir-plan-arena`, from
`lir.slot`s of one `lir.arena`; `lir.view` aliases a contiguous part of a buffer.
The kernels are the MIR ops in destination-passing style, like linalg's named
ops with buffer semantics: they read their `ins(...)` and write their `outs(...)`
buffer and have no results.  A kernel is defined by its mir op: `kernel_twin(mir.XOp)`
gives it the mir op's operands (as memrefs, then `out`), properties, element types,
shape rule and checks (`MIR_OP` names it), so the two levels cannot drift; the lir
class adds its docstring and Python constructor.  `lir.elementwise` (one kernel for
every mir elementwise op, by `fn`), `lir.copy` and `lir.constant` are written out, with
the rules of their mir ops.

The `lir.arena` verifier proves an arena plan safe: every slot lies inside the
arena, is aligned, and no two slots whose live ranges overlap share a byte, except an
in-place pair: an elementwise kernel at position k (the index of the op in the arena's
block, the arena being 0) writes its `out` slot over an input slot of the same offset and
memref type whose live range ends at k where out's starts.
"""

from __future__ import annotations

from abc import ABC
from collections.abc import Collection, Mapping, Sequence
from typing import Any, ClassVar, cast

from xdsl.dialects.builtin import (
    I64,
    ArrayAttr,
    DenseArrayBase,
    DenseIntOrFPElementsAttr,
    DictionaryAttr,
    Float32Type,
    FloatAttr,
    IndexType,
    IntegerAttr,
    MemRefType,
    NoneAttr,
    StringAttr,
    UnitAttr,
    i8,
    i64,
)
from xdsl.dialects.utils import AbstractYieldOperation
from xdsl.ir import Attribute, Dialect, Operation, Region, SSAValue
from xdsl.irdl import (
    AttrSizedOperandSegments,
    IRDLOperation,
    OptOperandDef,
    OptPropertyDef,
    OptResultDef,
    VarOperandDef,
    irdl_op_definition,
    operand_def,
    opt_operand_def,
    opt_prop_def,
    prop_def,
    result_def,
    traits_def,
    var_operand_def,
)
from xdsl.irdl.declarative_assembly_format import (
    AttributeVariable,
    CustomDirective,
    ParsingState,
    PrintingState,
    irdl_custom_directive,
)
from xdsl.irdl.operations import _PropertyFieldDef  # pyright: ignore[reportPrivateUsage]
from xdsl.parser import Parser
from xdsl.printer import Printer
from xdsl.traits import HasParent, IsolatedFromAbove, IsTerminator, Pure
from xdsl.utils.exceptions import VerifyException

from rlx_mlir.core import shape_inference as si
from rlx_mlir.core.abi import ARG_DIMS
from rlx_mlir.core.dtypes import dtype_of_element, element_bytes, element_name
from rlx_mlir.core.packing import BLOCK_FIELDS
from rlx_mlir.core.shape_inference import Shape
from rlx_mlir.dialects import mir
from rlx_mlir.dialects.common import (
    defined_ops,
    dims_attr,
    dims_from_attr,
    dtype_of,
    i64_attr,
    rule_errors,
    shape_of,
    verify_dims,
    verify_dtype,
    verify_same_dtype,
)
from rlx_mlir.dialects.rlx import (
    ActivationAttr,
    ArenaStrategy,
    ArenaStrategyAttr,
    ElementwiseFn,
    ElementwiseFnAttr,
    QuantActivations,
    QuantActivationsAttr,
    QuantScheme,
    QuantSchemeAttr,
    RopeStyleAttr,
)
from rlx_mlir.dialects.verifier import (
    BODY_DIALECTS,
    ElementTypes,
    Operand,
    VerifiesSignature,
    twin,
)

# ----------------------------------------------------------------------------- helpers

RLX_DTYPES = si.DTYPES
"""Element types an lir buffer may hold."""



def byte_size(memref: MemRefType, dims: Shape | None = None,
              bounds: Mapping[str, int] | None = None) -> int:
    """Bytes of a memref: number of elements times element bytes. A memref with `?` dims
    takes its symbolic shape `dims` with each symbol at its bound (`bounds`, else
    `si.DEFAULT_SYMBOL_BOUND`): the most bytes any binding can need."""
    element = memref.get_element_type()
    if dtype_of_element(element) is None and element != i8:
        raise ValueError(f"no byte size for element type {element}")
    shape = memref.get_shape()
    if dims is not None and not si.is_static_shape(shape):
        shape = si.bounded_shape(dims, bounds or {})
    return si.numel(shape) * element_bytes(element)


def buffer_dims(value: SSAValue) -> Shape:
    """The symbolic shape of an lir buffer: its type's shape with the symbol of each `?`,
    from the `dims` of the op that defines it (alloc, slot, view) or the `rlx.dims` of
    the function argument it is; `?` where nothing names it."""
    shape = shape_of(value)
    if si.is_static_shape(shape):
        return shape
    attr = None
    owner = value.owner
    if isinstance(owner, Operation):
        attr = owner.properties.get("dims")
    else:
        fn = owner.parent_op()
        arg_attrs = getattr(fn, "arg_attrs", None)
        if arg_attrs is not None and value.index < len(arg_attrs.data):
            attr = arg_attrs.data[value.index].data.get(ARG_DIMS)
    if attr is None:
        return shape
    return tuple(map(si.unify, shape, dims_from_attr(attr, ARG_DIMS)))


def is_static_buffer(value: SSAValue) -> bool:
    """Whether a buffer's type has no `?` dim."""
    return si.is_static_shape(shape_of(value))


def arena_bounds(arena: Operation) -> dict[str, int]:
    """The symbol bounds an `lir.arena` was planned for (`max_dims`), empty when static."""
    attr = arena.properties.get("max_dims")
    if not isinstance(attr, DictionaryAttr):
        return {}
    return {name: value.value.data for name, value in attr.data.items()
            if isinstance(value, IntegerAttr)}


def check_buffer(
    op: Operation, name: str, value: SSAValue, dtypes: Sequence[str] = RLX_DTYPES,
    *, static: bool = False,
) -> None:
    """An lir buffer: identity layout, every dim >= 1 or `?` (only static with `static`:
    arena slots), allowed element type."""
    ty = value.type
    assert isinstance(ty, MemRefType), ty
    if not isinstance(ty.layout, NoneAttr):
        raise VerifyException(f"'{op.name}': {name}: expected the identity layout, got {ty}")
    shape = shape_of(value)
    if static and not si.is_static_shape(shape):
        raise VerifyException(f"'{op.name}': {name}: expected a static shape, got {ty}")
    with rule_errors(op):
        si.check_shape(name, shape)
    verify_dtype(op, name, value, tuple(dtypes))


def _int(attr: IntegerAttr) -> int:
    return attr.value.data


def _require(op: Operation, ok: bool, message: str) -> None:
    if not ok:
        raise VerifyException(f"'{op.name}': {message}")


def _inout(ins: str) -> str:
    """The format of `ins(...)`; `ins` lists the operands, `:`, then their types."""
    return f"`ins` `(` {ins} `)` "


def _out_format(props: str = "", optional_outs: tuple[str, ...] = (),
                required: Collection[str] = ()) -> str:
    """`outs(%o : T)` (with `optional_outs`, `outs(%o, %s : T, U)` where they are present;
    those in `required` always are) then the properties and the attribute dictionary."""
    values = "".join(f" `,` ${name}" if name in required else f" (`,` ${name}^)?"
                     for name in optional_outs)
    types = "".join(f" `,` type(${name})" if name in required else f" (`,` type(${name})^)?"
                    for name in optional_outs)
    return f"`outs` `(` $out{values} `:` type($out){types} `)` {props} attr-dict"


# ----------------------------------------------------------------------------- buffers


@irdl_op_definition
class AllocOp(IRDLOperation):
    """A fresh buffer of the result type (`lir-plan-arena` turns it into an arena slot).
    A buffer with `?` dims names them in `dims` (a symbol of the graph, or `?` when the
    IR does not say which), so a planner can size it from the symbols' bounds.

    ```mlir
    %b = lir.alloc : memref<4x8xf32>
    %d = lir.alloc dims ["S", 8] : memref<?x8xf32>
    ```
    """

    name = "lir.alloc"

    result = result_def(MemRefType)
    dims = opt_prop_def(ArrayAttr)
    """The symbolic shape of a dynamic buffer: sizes and symbol names."""

    assembly_format = "(`dims` $dims^)? attr-dict `:` type($result)"

    def __init__(self, result_type: MemRefType, dims: Shape | None = None):
        properties = {} if dims is None else {"dims": dims_attr(dims)}
        super().__init__(result_types=[result_type], properties=properties)

    def verify_(self) -> None:
        check_buffer(self, "result", self.result)
        _verify_symbolic(self)


def _verify_symbolic(op: AllocOp | SlotOp | ViewOp) -> None:
    """`dims` describes the result type, and a result with `?` dims has them."""
    if op.dims is not None:
        verify_dims(op, "dims", op.dims, op.result.type)
    elif not si.is_static_shape(shape_of(op.result)):
        raise VerifyException(
            f"'{op.name}': dims: a buffer with ? dims needs its symbolic dims "
            f"({op.name} dims [...]), got {op.result.type} without"
        )


@irdl_op_definition
class ArenaOp(IRDLOperation):
    """The planned bytes of all intermediates: a 1-D i8 buffer of `size` bytes whose
    uses are `lir.slot`s; the verifier proves the plan safe.

    ```mlir
    %a = lir.arena size 4096 alignment 64 strategy "greedy-by-size" max_live_bytes 3072 : memref<4096xi8>
    ```
    """

    name = "lir.arena"

    result = result_def(MemRefType)

    size = prop_def(IntegerAttr[I64])
    """The arena's bytes (equal to the result's dimension)."""
    alignment = prop_def(IntegerAttr[I64])
    """Every slot offset is a multiple of it (a power of two)."""
    strategy = prop_def(ArenaStrategyAttr)
    """How the planner assigned the offsets."""
    max_live_bytes = opt_prop_def(IntegerAttr[I64])
    """The planner's lower bound: the most bytes live at once."""
    max_dims = opt_prop_def(DictionaryAttr)
    """The bound of each symbol the plan holds for (slots with `?` dims are sized at it)."""

    assembly_format = (
        "`size` $size `alignment` $alignment `strategy` $strategy "
        "(`max_live_bytes` $max_live_bytes^)? (`max_dims` $max_dims^)? attr-dict `:` type($result)"
    )

    def __init__(
        self,
        size: int,
        alignment: int = 64,
        strategy: ArenaStrategy | str = ArenaStrategy.GREEDY_BY_SIZE,
        max_live_bytes: int | None = None,
        max_dims: Mapping[str, int] | None = None,
    ):
        properties: dict[str, Attribute] = {
            "size": i64_attr(size),
            "alignment": i64_attr(alignment),
            "strategy": ArenaStrategyAttr(ArenaStrategy(strategy)),
        }
        if max_live_bytes is not None:
            properties["max_live_bytes"] = i64_attr(max_live_bytes)
        if max_dims:
            properties["max_dims"] = DictionaryAttr({k: i64_attr(v) for k, v in sorted(max_dims.items())})
        super().__init__(result_types=[MemRefType(i8, [size])], properties=properties)

    def verify_(self) -> None:
        size, alignment = _int(self.size), _int(self.alignment)
        check_buffer(self, "result", self.result, ("i8",), static=True)
        _require(self, size >= 1, f"size: expected >= 1, got {size}")
        shape = shape_of(self.result)
        _require(
            self,
            shape == (size,),
            f"result: expected memref<{size}xi8> (size {size}), got {self.result.type}",
        )
        _require(
            self,
            alignment >= 1 and alignment & (alignment - 1) == 0,
            f"alignment: expected a power of two >= 1, got {alignment}",
        )
        for symbol, bound in (self.max_dims.data.items() if self.max_dims else ()):
            ok = isinstance(bound, IntegerAttr) and bound.value.data >= 1
            _require(self, ok, f"max_dims: expected an integer bound >= 1 for {symbol}, got {bound}")
        if self.max_live_bytes is not None:
            peak = _int(self.max_live_bytes)
            _require(
                self,
                0 <= peak <= size,
                f"max_live_bytes: expected a value in [0, size={size}], got {peak}",
            )
        self._verify_plan(size, alignment)

    def _verify_plan(self, size: int, alignment: int) -> None:
        """Every use is an in-bounds, aligned slot; slots live together share no byte,
        except an in-place pair (`_is_inplace_pair`)."""
        # (live_start, live_end, offset, end, use number, slot)
        slots: list[tuple[int, int, int, int, int, SlotOp]] = []
        for number, use in enumerate(self.result.uses):
            user = use.operation
            if not isinstance(user, SlotOp):
                raise VerifyException(
                    f"'{self.name}': every use of the arena must be an lir.slot, got {user.name}"
                )
            check_buffer(user, "result", user.result)
            offset = _int(user.offset)
            end = offset + user.bounded_bytes()
            slots.append((_int(user.live_start), _int(user.live_end), offset, end, number, user))
        slots.sort(key=lambda slot: slot[:5])
        for _, _, offset, end, _, _ in slots:
            _require(
                self,
                end <= size,
                f"slot at bytes [{offset}, {end}) lies outside the arena of {size} bytes",
            )
            _require(
                self,
                offset % alignment == 0,
                f"slot at offset {offset} is not a multiple of the alignment {alignment}",
            )
        schedule: list[Operation] | None = None  # the ops by position, built on demand
        # Sweep over the schedule: `active` holds the slots still live at `start`.
        active: list[tuple[int, int, int, int, int, SlotOp]] = []
        for slot in slots:
            start, stop, offset, end, _, op = slot
            active = [a for a in active if a[1] >= start]
            for a_start, a_stop, a_offset, a_end, _, a_op in active:
                if a_offset < end and offset < a_end:
                    if schedule is None:
                        schedule = self._schedule()
                    if self._is_inplace_pair(a_op, op, schedule) or self._is_inplace_pair(
                        op, a_op, schedule
                    ):
                        continue
                    raise VerifyException(
                        f"'{self.name}': slots overlap: bytes [{a_offset}, {a_end}) live "
                        f"[{a_start}, {a_stop}] and bytes [{offset}, {end}) live "
                        f"[{start}, {stop}] share bytes [{max(offset, a_offset)}, "
                        f"{min(end, a_end)}) while both are live"
                    )
            active.append(slot)

    def _schedule(self) -> list[Operation]:
        """The ops of the arena's parent block from the arena on: position k is op k (the
        arena is position 0, as `lir-plan-arena` numbers the live ranges)."""
        block = self.parent_block()
        if block is None:
            return [self]
        ops = list(block.ops)
        return ops[ops.index(self) :]

    @staticmethod
    def _is_inplace_pair(src: SlotOp, dst: SlotOp, schedule: list[Operation]) -> bool:
        """`dst` may share the bytes of `src` (in-place reuse): `src` ends where `dst` starts,
        at position k; both have one offset and one memref type; op k is an elementwise
        kernel writing `dst` from inputs that include `src` and no other view of `src`.
        The index maps of `src` and `out` are then identical, so element i is read before
        it is overwritten and nothing else reads those bytes at k."""
        step = _int(src.live_end)
        if (
            step != _int(dst.live_start)
            or _int(src.offset) != _int(dst.offset)
            or src.result.type != dst.result.type
            or buffer_dims(src.result) != buffer_dims(dst.result)
            or not 0 <= step < len(schedule)
        ):
            return False
        kernel = schedule[step]
        if not isinstance(kernel, ElementwiseOp | FusedElementwiseOp):
            return False
        if kernel.out is not dst.result or src.result not in kernel.inputs:
            return False
        return all(v is src.result or _view_root(v) is not src.result for v in kernel.operands)


def _view_root(value: SSAValue) -> SSAValue:
    """The buffer a chain of `lir.view`s aliases (the value itself when not a view)."""
    while isinstance(owner := value.owner, ViewOp):
        value = owner.source
    return value


@irdl_op_definition
class SlotOp(IRDLOperation):
    """A typed view of the `arena` bytes at byte `offset`, live over the inclusive
    schedule range [live_start, live_end].

    ```mlir
    %s = lir.slot %a[128] live [2, 5] : memref<4096xi8> -> memref<4x8xf32>
    ```
    """

    name = "lir.slot"

    arena = operand_def(MemRefType)
    result = result_def(MemRefType)

    offset = prop_def(IntegerAttr[I64])
    """Byte offset of the slot in the arena."""
    live_start = prop_def(IntegerAttr[I64])
    """Index of the first op of the schedule that uses the slot."""
    live_end = prop_def(IntegerAttr[I64])
    """Index of the last op of the schedule that uses the slot (inclusive)."""
    dims = opt_prop_def(ArrayAttr)
    """The symbolic shape of a slot with `?` dims (sized at the arena's `max_dims`)."""

    assembly_format = (
        "$arena `[` $offset `]` `live` ` ` `[` $live_start `,` $live_end `]` "
        "(`dims` $dims^)? attr-dict `:` type($arena) `->` type($result)"
    )

    def __init__(
        self,
        arena: SSAValue | Operation,
        result_type: MemRefType,
        offset: int,
        live_start: int,
        live_end: int,
        dims: Shape | None = None,
    ):
        properties = {
            "offset": i64_attr(offset),
            "live_start": i64_attr(live_start),
            "live_end": i64_attr(live_end),
        }
        if dims is not None:
            properties["dims"] = dims_attr(dims)
        super().__init__(operands=[arena], result_types=[result_type], properties=properties)

    def bounded_bytes(self) -> int:
        """The slot's bytes with every symbol at the arena's bound."""
        bounds = arena_bounds(owner) if isinstance(owner := self.arena.owner, ArenaOp) else {}
        return byte_size(self.result.type, buffer_dims(self.result), bounds)

    def verify_(self) -> None:
        check_buffer(self, "arena", self.arena, ("i8",), static=True)
        _require(
            self,
            len(shape_of(self.arena)) == 1,
            f"arena: expected a 1-D memref of i8, got {self.arena.type}",
        )
        check_buffer(self, "result", self.result)
        _verify_symbolic(self)
        offset, start, end = _int(self.offset), _int(self.live_start), _int(self.live_end)
        _require(self, offset >= 0, f"offset: expected >= 0, got {offset}")
        _require(
            self,
            0 <= start <= end,
            f"live range: expected 0 <= live_start <= live_end, got [{start}, {end}]",
        )
        arena_bytes = shape_of(self.arena)[0]
        stop = offset + self.bounded_bytes()
        _require(
            self,
            stop <= arena_bytes,
            f"result: bytes [{offset}, {stop}) lie outside the arena of {arena_bytes} bytes",
        )


@irdl_op_definition
class ViewOp(IRDLOperation):
    """A contiguous alias of `source` starting `offset` elements in (a reshape or a
    contiguous narrow; no copy).

    ```mlir
    %v = lir.view %b[16] : memref<4x8xf32> -> memref<2x8xf32>
    ```
    """

    name = "lir.view"

    source = operand_def(MemRefType)
    result = result_def(MemRefType)

    offset = prop_def(IntegerAttr[I64])
    """Offset of the view in `source`, in elements."""
    dims = opt_prop_def(ArrayAttr)
    """The symbolic shape of a view with `?` dims."""

    assembly_format = (
        "$source `[` $offset `]` (`dims` $dims^)? attr-dict `:` type($source) `->` type($result)"
    )

    def __init__(self, source: SSAValue | Operation, result_type: MemRefType, offset: int = 0,
                 dims: Shape | None = None):
        properties = {"offset": i64_attr(offset)}
        if dims is not None:
            properties["dims"] = dims_attr(dims)
        super().__init__(operands=[source], result_types=[result_type], properties=properties)

    def verify_(self) -> None:
        check_buffer(self, "source", self.source)
        check_buffer(self, "result", self.result)
        _verify_symbolic(self)
        verify_same_dtype(self, ["source", "result"], [self.source, self.result])
        offset = _int(self.offset)
        _require(self, offset >= 0, f"offset: expected >= 0, got {offset}")
        source, result = shape_of(self.source), shape_of(self.result)
        if not (si.is_static_shape(source) and si.is_static_shape(result)):
            # A view of a dynamic buffer is a reshape keeping each `?` a whole dim.
            _require(self, offset == 0, f"offset: a view with ? dims must start at 0, got {offset}")
            if si.is_static_shape(source) and result[1:] == source[1:] and len(result) > 1:
                return  # the first rows of a static buffer (a KV cache's: mir.extract_rows)
            with rule_errors(self):
                si.reshape(source, result)
            return
        total, count = si.numel(source), si.numel(result)
        _require(
            self,
            offset + count <= total,
            f"result: offset {offset} + {count} elements exceed the {total} elements of source",
        )


BARRIER_KINDS = ("gather", "release")
"""The one-sided barriers; a `lir.barrier` without a kind is a full one."""


@irdl_op_definition
class BarrierOp(IRDLOperation):
    """Threads of a call wait here for each other, so that what a kernel before it wrote is
    visible to the kernels after it. Placed by `lir-parallelize` between kernels whose
    work is split across threads; a no-op in a serial call. A full barrier (no kind) holds
    every thread until all have arrived. `gather` holds thread 0 alone until all have
    arrived (before a serial kernel: only thread 0 runs next); `release` holds the other
    threads until thread 0 arrives (after serial kernels: only thread 0 wrote since the
    last barrier).

    ```mlir
    lir.barrier
    lir.barrier "gather"
    ```
    """

    name = "lir.barrier"

    kind = opt_prop_def(StringAttr)

    assembly_format = "($kind^)? attr-dict"

    def __init__(self, kind: str | None = None):
        super().__init__(properties={"kind": StringAttr(kind)} if kind is not None else {})

    def verify_(self) -> None:
        _require(self, self.kind is None or self.kind.data in BARRIER_KINDS,
                 f"kind: expected one of {', '.join(BARRIER_KINDS)} or none (a full "
                 f"barrier), got {self.kind.data if self.kind else None!r}")


# ----------------------------------------------------------------------------- kernels


class KernelOp(VerifiesSignature, ABC):
    """Base of the destination-passing kernels: operands are the inputs, then `out` (and
    the further outs `EXTRA_RESULTS` of a kernel with several, such as a sequence op's
    `state_out`): the kernel writes every out and reads the inputs.

    The verifier (`VerifiesSignature`) checks every operand as an lir buffer
    (`check_buffer`), the element types, and that each out has the shape `infer_shapes`
    computes with the MIR rule.
    """

    RESULT: ClassVar[str] = "out"

    def verify_value(self, label: str, value: SSAValue) -> None:
        check_buffer(self, label, value)

    @property
    def outs(self) -> tuple[SSAValue, ...]:
        """The buffers the kernel writes (`out`, then the extra outs present), the last
        operands."""
        named = (getattr(self, name) for name in self.result_names())
        return tuple(v for v in named if v is not None)


def kernel_twin(
    mir_op: type[VerifiesSignature],
    *,
    leading: tuple[str, ...] = (),
    extra_properties: Mapping[str, Any] | None = None,
    outs: tuple[str, ...] = ("out",),
) -> type[KernelOp]:
    """The base of the destination-passing twin of `mir_op` (see `verifier.twin`): the mir
    op's operands as memrefs, then one buffer per result, named `outs` (`out`, then the
    optional ones of a mir op with several results); its properties, element types, shape
    rule, attribute checks and keyword constructor. `extra_properties` are lir-only property definitions
    (after the mir ones). The custom syntax states every property:

        lir.<name> <leading properties> ins(<operands> : <types>) outs(<outs> : <types>) <properties>

    with every other property as `name value` (an optional one only when present).
    """
    cls = twin(mir_op, KernelOp, dialect="lir", value_type=MemRefType, destination=True,
               outs=outs)
    op_def = mir_op.get_irdl_definition()
    # The outs after `out` are optional (present when the properties ask for the result),
    # or required where the mir result is (a backward op's further gradients).
    required = {out for (_, d), out in zip(op_def.results[1:], outs[1:], strict=True)
                if not isinstance(d, OptResultDef)}
    if len(outs) > 1 and any(isinstance(d, VarOperandDef) for _, d in op_def.operands):
        # Several optional operands (initial_state, state_out): record which are present.
        cls.irdl_options = (AttrSizedOperandSegments(as_property=True),)
    for name, prop in (extra_properties or {}).items():
        setattr(cls, name, prop)
    values: list[str] = []
    types: list[str] = []
    for i, (name, operand) in enumerate(op_def.operands):
        comma = "`,` " if i else ""
        if isinstance(operand, OptOperandDef):
            values.append(f"({comma}${name}^)?")
            types.append(f"({comma}type(${name})^)?")
        else:
            values.append(f"{comma}${name}")
            types.append(f"{comma}type(${name})")
    optional = {
        name: isinstance(prop, OptPropertyDef) for name, prop in op_def.properties.items()
    } | {name: _is_optional(prop) for name, prop in (extra_properties or {}).items()}
    trailing = [
        f"(`{name}` ${name}^)?" if is_optional else f"`{name}` ${name}"
        for name, is_optional in optional.items()
        if name not in leading
    ]
    cls.assembly_format = (
        "".join(f"${name} " for name in leading)
        + _inout(" ".join(values) + " `:` " + " ".join(types))
        + _out_format(" ".join(trailing), outs[1:], required)
    )
    return cast(type[KernelOp], cls)


def _is_optional(field: Any) -> bool:
    return isinstance(field, _PropertyFieldDef) and issubclass(field.cls, OptPropertyDef)


@irdl_op_definition
class ElementwiseOp(KernelOp):
    """Applies `fn` elementwise to `inputs` (one, or two with numpy broadcasting),
    writing `out`; `fn` names the mir elementwise op it stands for, whose element types
    it accepts (`ELEMENTWISE_MIR_OPS`).

    ```mlir
    lir.elementwise add ins(%a, %b : memref<4x8xf32>, memref<8xf32>) outs(%o : memref<4x8xf32>)
    ```
    """

    name = "lir.elementwise"

    inputs = var_operand_def(MemRefType)
    out = operand_def(MemRefType)

    fn = prop_def(ElementwiseFnAttr)

    assembly_format = "$fn " + _inout("$inputs `:` type($inputs)") + _out_format()

    def __init__(
        self,
        fn: ElementwiseFn | str,
        inputs: Sequence[SSAValue | Operation],
        out: SSAValue | Operation,
    ):
        IRDLOperation.__init__(self,
            operands=[inputs, out], properties={"fn": ElementwiseFnAttr(ElementwiseFn(fn))}
        )

    @property
    def mir_op(self) -> type[VerifiesSignature]:
        """The mir op `fn` stands for."""
        return ELEMENTWISE_MIR_OPS[self.fn.data]

    def verify_element_types(self, named: list[Operand]) -> None:
        """Inputs and out share one element type, one the mir op takes."""
        mir_op = self.mir_op
        first_operand = mir_op.get_irdl_definition().operands[0][0]
        allowed = mir_op.ELEMENT_TYPES.allowed_for(first_operand)
        ElementTypes({"inputs": allowed}, same=("inputs", "out")).verify(self, named)

    def infer_shape(self) -> Shape:
        fn = self.fn.data
        arity = len(self.mir_op.get_irdl_definition().operands)
        if len(self.inputs) != arity:
            raise si.ShapeError(
                f"inputs: {fn} takes {arity} input{'s' if arity > 1 else ''}, "
                f"got {len(self.inputs)}"
            )
        if arity == 1:
            return shape_of(self.inputs[0])
        return si.broadcast(
            shape_of(self.inputs[0]), shape_of(self.inputs[1]), ("inputs[0]", "inputs[1]")
        )


ELEMENTWISE_MIR_OPS: dict[ElementwiseFn, type[VerifiesSignature]] = {
    ElementwiseFn(op.name.removeprefix("mir.")): op
    for op in (*mir.BINARY_ELEMENTWISE_OPS, *mir.UNARY_ELEMENTWISE_OPS)
}
"""The mir elementwise op each `lir.elementwise` fn stands for."""
assert set(ELEMENTWISE_MIR_OPS) == set(ElementwiseFn), "an lir.elementwise fn without a mir op"


FUSED_BODY_DIALECTS = BODY_DIALECTS
"""Dialects whose scalar ops may appear in a `lir.fused_elementwise` body."""


@irdl_op_definition
class FusedElementwiseOp(kernel_twin(mir.FusedElementwiseOp)):
    """Runs the scalar `body` at every element of `out`, its block arguments taken from
    the (broadcast) `inputs` at that position; the yielded value is written to `out`.

    ```mlir
    lir.fused_elementwise ins(%a, %b : memref<8xf32>, memref<8xf32>) outs(%o : memref<8xf32>) {
    ^bb0(%x: f32, %y: f32):
      %s = arith.addf %x, %y : f32
      lir.yield %s : f32
    }
    ```
    """

    traits = traits_def(IsolatedFromAbove())

    assembly_format = (
        _inout("$inputs `:` type($inputs)") + "`outs` `(` $out `:` type($out) `)` $body attr-dict"
    )

    def __init__(
        self,
        inputs: Sequence[SSAValue | Operation],
        out: SSAValue | Operation,
        body: Region,
    ):
        IRDLOperation.__init__(self, operands=[inputs, out], regions=[body])


class RegionOp(VerifiesSignature, ABC):
    """Base of the destination-passing lir ops with a region of lir ops (not kernels: no
    single kernel function computes them, convert-lir-to-llvm lowers them to control flow
    around the kernels of their body). `out` is the last operand."""

    RESULT: ClassVar[str] = "out"

    def verify_value(self, label: str, value: SSAValue) -> None:
        check_buffer(self, label, value)


@irdl_op_definition
class ScanOp(
    twin(mir.ScanOp, RegionOp, dialect="lir", value_type=MemRefType, destination=True)
):
    """`mir.scan` on buffers: `body` runs `length` times on (the carry, a view of the
    step's slice of each of `xs`, each of `consts`) and yields the buffer holding the next
    carry, which is copied to `out` (without `trajectory`: `out` is the carry, the step-0
    carry is `init`) or to row t of `out` [length, *carry] (with `trajectory`: the carry of
    step t > 0 is row t - 1). The body's buffers are planned in the arena like any others.

    ```mlir
    lir.scan ins(%init : memref<4xf32>) xs(%x : memref<3x4xf32>) outs(%o : memref<4xf32>) length 3 {
    ^bb0(%c: memref<4xf32>, %xt: memref<4xf32>):
      %n = lir.alloc : memref<4xf32>
      lir.elementwise add ins(%c, %xt : memref<4xf32>, memref<4xf32>) outs(%n : memref<4xf32>)
      lir.yield %n : memref<4xf32>
    }
    ```
    """

    irdl_options = (AttrSizedOperandSegments(as_property=True),)
    EMPTY_VARIADICS: ClassVar[tuple[str, ...]] = ("xs", "consts")

    assembly_format = (
        "`ins` `(` $init `:` type($init) `)` (`xs` `(` $xs^ `:` type($xs) `)`)?"
        " (`consts` `(` $consts^ `:` type($consts) `)`)? `outs` `(` $out `:` type($out) `)`"
        " `length` $length (`trajectory` $trajectory^)? attr-dict-with-keyword $body"
    )

    def __init__(
        self,
        init: SSAValue | Operation,
        xs: Sequence[SSAValue | Operation],
        consts: Sequence[SSAValue | Operation],
        out: SSAValue | Operation,
        length: int,
        body: Region,
        trajectory: bool = False,
    ):
        properties: dict[str, Attribute] = {"length": IntegerAttr(length, i64)}
        if trajectory:
            properties["trajectory"] = UnitAttr()
        IRDLOperation.__init__(self, operands=[init, xs, consts, out], properties=properties,
                         regions=[body])


@irdl_op_definition
class YieldOp(AbstractYieldOperation[Attribute]):
    """Ends the body of `lir.fused_elementwise` (the scalar it computes) and of `lir.scan`
    (the buffer of the next carry)."""

    name = "lir.yield"

    traits = traits_def(IsTerminator(), HasParent(FusedElementwiseOp, ScanOp), Pure())


def _verify_packed_rhs(op: MatmulOp | FusedMatmulOp) -> None:
    """`packed_rhs`: the rhs is a 2-D weight [K, N] whose buffer holds it in the
    prepacked panel layout (`rlx_mlir.core.packing.pack_rhs`), so it must be 2-D."""
    rank = len(shape_of(op.rhs))
    if op.packed_rhs is not None and rank != 2:
        raise VerifyException(f"'{op.name}': packed_rhs needs a 2-D rhs [K, N], got rank {rank}")


PACKED_RHS = {"packed_rhs": opt_prop_def(UnitAttr)}
"""The lir-only property of the matmuls: the rhs buffer holds a prepacked weight."""

INTERLEAVED = {"interleaved": opt_prop_def(IntegerAttr[I64])}
"""The lir-only property of the q8 block matmuls: each weight buffer holds its blocks
interleaved this many rows at a time (`rlx_mlir.core.packing.interleave_blocks`)."""


def verify_interleaved(op: DequantMatmulOp | SharedInputMatmulOp | DequantGatherOp) -> None:
    """`interleaved W`: W is a vector width (8 or 16), the scheme has an interleaved layout
    and the activations of a matmul are q8 (only the int8 kernels read the layout)."""
    if op.interleaved is None:
        return
    width = op.interleaved.value.data
    scheme = op.scheme.data.value if op.scheme is not None else None
    if width not in (8, 16):
        raise VerifyException(f"'{op.name}': interleaved expects 8 or 16 rows, got {width}")
    if scheme not in BLOCK_FIELDS:
        raise VerifyException(f"'{op.name}': interleaved expects a scheme of "
                              f"{', '.join(BLOCK_FIELDS)}, got {scheme}")
    if not isinstance(op, DequantGatherOp) and mir.activations_of(op) != QuantActivations.Q8:
        raise VerifyException(f"'{op.name}': interleaved expects activations q8 (the int8 "
                              "kernels read that layout), got f32")


@irdl_op_definition
class MatmulOp(kernel_twin(mir.MatmulOp, extra_properties=PACKED_RHS)):
    """out = lhs @ rhs (np.matmul: 1-D operands promoted, batch dims broadcast);
    `packed_rhs`: the 2-D rhs buffer holds the weight prepacked at bind time (panel layout).

    ```mlir
    lir.matmul ins(%a, %b : memref<4x8xf32>, memref<8x16xf32>) outs(%o : memref<4x16xf32>)
    ```
    """

    def verify_attributes(self) -> None:
        _verify_packed_rhs(self)


@irdl_op_definition
class FusedMatmulOp(kernel_twin(mir.FusedMatmulOp, extra_properties=PACKED_RHS)):
    """out = activation(lhs @ rhs + bias), with `bias` ([N]) and `activation` optional;
    `packed_rhs` as for `lir.matmul`.

    ```mlir
    lir.fused_matmul ins(%a, %b, %c : memref<4x8xf32>, memref<8x16xf32>, memref<16xf32>) outs(%o : memref<4x16xf32>) activation gelu
    ```
    """

    def verify_attributes(self) -> None:
        _verify_packed_rhs(self)


@irdl_op_definition
class ReduceOp(kernel_twin(mir.ReduceOp, leading=("kind",))):
    """out = the `kind` reduction (sum, max, min, mean) of `input` over `axes`,
    reduced dims kept as 1 with `keepdim` (all axes without it: a rank-0 out).

    ```mlir
    lir.reduce sum ins(%x : memref<4x8xf32>) outs(%o : memref<4xf32>) axes [1]
    ```
    """

@irdl_op_definition
class SoftmaxOp(kernel_twin(mir.SoftmaxOp)):
    """out = softmax of `input` along `axis` (max-subtracted, numerically stable).

    ```mlir
    lir.softmax ins(%x : memref<4x8xf32>) outs(%o : memref<4x8xf32>) axis -1
    ```
    """

@irdl_op_definition
class RmsNormOp(kernel_twin(mir.RmsNormOp)):
    """out = x / sqrt(mean(x², -1) + eps) * gamma (+ beta).

    ```mlir
    lir.rms_norm ins(%x, %g : memref<4x8xf32>, memref<8xf32>) outs(%o : memref<4x8xf32>) eps 1.000000e-05
    ```
    """

@irdl_op_definition
class LayerNormOp(kernel_twin(mir.LayerNormOp)):
    """out = (x - mean) / sqrt(var + eps) * gamma + beta over the last axis
    (population variance).

    ```mlir
    lir.layer_norm ins(%x, %g, %b : memref<4x8xf32>, memref<8xf32>, memref<8xf32>) outs(%o : memref<4x8xf32>) eps 1.000000e-05
    ```
    """

@irdl_op_definition
class RopeOp(kernel_twin(mir.RopeOp)):
    """out = `x` ([S, H·D] or [B, S, H·D]) with the first `n_rot` dims of every head
    rotated by `cos`/`sin` ([S, n_rot/2]), pairs chosen by `style`.

    ```mlir
    lir.rope ins(%x, %c, %s : memref<4x16xf32>, memref<4x4xf32>, memref<4x4xf32>) outs(%o : memref<4x16xf32>) head_dim 8 n_rot 8 style half
    ```
    """

@irdl_op_definition
class AttentionOp(kernel_twin(mir.AttentionOp)):
    """out = grouped-query attention of `q` over `k`/`v` (heads packed in the last axis),
    scores scaled by `scale` and masked by `mask_kind` (with `mask` for custom|bias); with
    `window` W (causal) a query reads only the W keys ending at its own.

    ```mlir
    lir.attention ins(%q, %k, %v : memref<4x16xf32>, memref<4x8xf32>, memref<4x8xf32>) outs(%o : memref<4x16xf32>) num_heads 2 head_dim 8 num_kv_heads 1 mask_kind causal scale 3.535534e-01
    lir.attention ins(%q, %k, %v : memref<4x16xf32>, memref<4x8xf32>, memref<4x8xf32>) outs(%o : memref<4x16xf32>) num_heads 2 head_dim 8 num_kv_heads 1 mask_kind causal scale 3.535534e-01 window 2
    ```
    """

@irdl_op_definition
class TransposeOp(kernel_twin(mir.TransposeOp)):
    """out = `input` with its dimensions permuted by `perm` (out dim i = input dim perm[i]).

    ```mlir
    lir.transpose ins(%x : memref<4x8xf32>) outs(%o : memref<8x4xf32>) perm [1, 0]
    ```
    """

@irdl_op_definition
class NarrowOp(kernel_twin(mir.NarrowOp)):
    """out = `input`[..., start:start+length, ...] along `axis` (a strided copy; a
    contiguous narrow is an `lir.view` instead).

    ```mlir
    lir.narrow ins(%x : memref<4x8xf32>) outs(%o : memref<4x2xf32>) axis 1 start 3 length 2
    ```
    """

@irdl_op_definition
class ConcatOp(kernel_twin(mir.ConcatOp)):
    """out = `inputs` joined along `axis`.

    ```mlir
    lir.concat ins(%a, %b : memref<4x8xf32>, memref<2x8xf32>) outs(%o : memref<6x8xf32>) axis 0
    ```
    """

@irdl_op_definition
class BroadcastToOp(kernel_twin(mir.BroadcastToOp)):
    """out = `input` broadcast (numpy rules) to out's shape.

    ```mlir
    lir.broadcast_to ins(%x : memref<8xf32>) outs(%o : memref<4x8xf32>)
    ```
    """

@irdl_op_definition
class GatherOp(kernel_twin(mir.GatherOp)):
    """out = np.take(`input`, `indices`, `axis`) with i32 or i64 `indices`.

    ```mlir
    lir.gather ins(%t, %ids : memref<100x8xf32>, memref<4xi32>) outs(%o : memref<4x8xf32>) axis 0
    ```
    """

@irdl_op_definition
class DequantGatherOp(kernel_twin(mir.DequantGatherOp, leading=("scheme",),
                                   extra_properties=INTERLEAVED)):
    """out = the rows `ids` of the raw GGUF `table` of `scheme`, dequantized (only the rows
    it reads); an id outside [0, V) is a run-time error (a checked kernel).

    ```mlir
    lir.dequant_gather q8_0 ins(%t, %ids : memref<100x34xui8>, memref<4xi32>) outs(%o : memref<4x32xf32>)
    ```

    `interleaved W` (lir-pack-weights): the table holds its blocks interleaved W rows at a
    time (a table tied to an output projection the int8 kernels read).
    """

    def verify_attributes(self) -> None:
        verify_interleaved(self)


@irdl_op_definition
class ScatterAddOp(kernel_twin(mir.ScatterAddOp)):
    """out = zeros with the rows of `updates` added at `indices` along `axis` (the
    transpose of `lir.gather`); an index outside [0, dim_size) is a run-time error (a
    checked kernel).

    ```mlir
    lir.scatter_add ins(%g, %ids : memref<4x8xf32>, memref<4xi32>) outs(%o : memref<100x8xf32>) axis 0 dim_size 100
    ```
    """

@irdl_op_definition
class ConstantOp(KernelOp):
    """Writes the elements of `value` into `out` (same shape and element type).

    ```mlir
    lir.constant dense<[1.0, 2.0]> : tensor<2xf32> outs(%o : memref<2xf32>)
    ```
    """

    name = "lir.constant"

    out = operand_def(MemRefType)

    value = prop_def(DenseIntOrFPElementsAttr)

    assembly_format = "$value " + _out_format()

    MIR_OP: ClassVar[type] = mir.ConstantOp

    def __init__(self, value: DenseIntOrFPElementsAttr, out: SSAValue | Operation):
        IRDLOperation.__init__(self, operands=[out], properties={"value": value})

    def verify_element_types(self, named: list[Operand]) -> None:
        want = element_name(self.value.get_element_type())
        got = dtype_of(self.out)
        _require(
            self,
            want == got,
            f"out: expected element type {want} (the value's), got {got}",
        )

    infer_shape = mir.ConstantOp.infer_shape


@irdl_op_definition
class InsertRowsOp(KernelOp):
    """out[position : position + S] = `rows` [S, *tail]: appends to a KV cache in place
    (`out` is the cache's state buffer [capacity, *tail]; `mir.insert_rows` bufferized).
    The caller guarantees position + S <= capacity ("cache full" is a call-time error).

    ```mlir
    lir.insert_rows ins(%rows, %position : memref<?x64xf32>, index) outs(%cache : memref<2048x64xf32>)
    ```
    """

    name = "lir.insert_rows"

    rows = operand_def(MemRefType)
    position = operand_def(IndexType)
    out = operand_def(MemRefType)

    assembly_format = _inout("$rows `,` $position `:` type($rows) `,` type($position)") + _out_format()

    ELEMENT_TYPES: ClassVar[ElementTypes] = ElementTypes({"rows": RLX_DTYPES}, same=("rows", "out"))

    def verify_value(self, label: str, value: SSAValue) -> None:
        if not isinstance(value.type, IndexType):
            check_buffer(self, label, value)

    def verify_element_types(self, named: list[Operand]) -> None:
        self.ELEMENT_TYPES.verify(self, [o for o in named if o.name != "position"])

    def infer_shape(self) -> Shape:
        return si.insert_rows(shape_of(self.out), shape_of(self.rows))


@irdl_op_definition
class CopyOp(KernelOp):
    """out = `input` (same shape and element type).

    ```mlir
    lir.copy ins(%x : memref<4x8xf32>) outs(%o : memref<4x8xf32>)
    ```
    """

    name = "lir.copy"

    input = operand_def(MemRefType)
    out = operand_def(MemRefType)

    assembly_format = _inout("$input `:` type($input)") + _out_format()

    ELEMENT_TYPES: ClassVar[ElementTypes] = mir.DATA_MOVEMENT.renamed("result", "out")

    def infer_shape(self) -> Shape:
        return shape_of(self.input)


@irdl_op_definition
class DequantMatmulOp(kernel_twin(mir.DequantMatmulOp, leading=("scheme",),
                                   extra_properties=INTERLEAVED)):
    """out = `x`[..., K] @ dequant(`w`)ᵀ with `w` the ui8 GGUF blocks [N, K/values·bytes]
    of `scheme`; `activations q8`: x quantized as ggml does (absent: f32).

    ```mlir
    lir.dequant_matmul q8_0 ins(%x, %w : memref<4x64xf32>, memref<16x68xui8>) outs(%o : memref<4x16xf32>)
    lir.dequant_matmul q4_1 ins(%x, %w : memref<4x64xf32>, memref<16x40xui8>) outs(%o : memref<4x16xf32>) activations q8
    ```

    `interleaved W` (lir-pack-weights): `w` holds its blocks interleaved W rows at a time.
    A `residual` (mir-fuse) is added to the product as the kernel stores it (q8 only):

    ```mlir
    lir.dequant_matmul q4_1 ins(%x, %w, %h : memref<1x64xf32>, memref<16x40xui8>, memref<1x16xf32>) outs(%o : memref<1x16xf32>) activations q8
    ```
    """

    def verify_attributes(self) -> None:
        super().verify_attributes()
        verify_interleaved(self)

def _given_state_out(arguments: Mapping[str, Any]) -> bool:
    """A sequence kernel's `return_state` when left out: whether a `state_out` is given
    (its constructor's arguments by name)."""
    return arguments.get("state_out") is not None


@irdl_op_definition
class DepthwiseConv1dOp(kernel_twin(mir.DepthwiseConv1dOp, outs=("out", "state_out"))):
    """out[b, t, c] = Σₖ weight[k, c]·input[b, t+k, c]: a valid depthwise convolution
    over time of the pre-padded `input` [B, S+K-1, C] with `weight` [K, C]; with
    `return_state`, the input's last K-1 rows go to `state_out` [B, K-1, C].

    ```mlir
    lir.depthwise_conv1d ins(%x, %w : memref<1x10x8xf32>, memref<3x8xf32>) outs(%o : memref<1x8x8xf32>)
    lir.depthwise_conv1d ins(%x, %w : memref<1x10x8xf32>, memref<3x8xf32>) outs(%o, %s : memref<1x8x8xf32>, memref<1x2x8xf32>) return_state
    ```
    """

    DERIVED: ClassVar = {"return_state": _given_state_out}

@irdl_op_definition
class SelectiveScanOp(kernel_twin(mir.SelectiveScanOp, outs=("out", "state_out"))):
    """out = Mamba's selective scan of `x` with `delta`, `a`, `b`, `c` from
    `initial_state` (zeros when absent); with `return_state`, the final state goes to
    `state_out`.

    ```mlir
    lir.selective_scan ins(%x, %d, %a, %b, %c : memref<1x4x8xf32>, memref<1x4x8xf32>, memref<8x3xf32>, memref<1x4x3xf32>, memref<1x4x3xf32>) outs(%o, %s : memref<1x4x8xf32>, memref<1x8x3xf32>) return_state
    ```
    """

    DERIVED: ClassVar = {"return_state": _given_state_out}


@irdl_op_definition
class GatedDeltaNetOp(kernel_twin(mir.GatedDeltaNetOp, outs=("out", "state_out"))):
    """out = the gated delta rule over `q`, `k`, `v`, `g`, `beta` from `initial_state`
    (zeros when absent); with `return_state`, the final state goes to `state_out`.

    ```mlir
    lir.gated_delta_net ins(%q, %k, %v, %g, %b : memref<1x4x2x8xf32>, memref<1x4x2x8xf32>, memref<1x4x2x8xf32>, memref<1x4x2xf32>, memref<1x4x2xf32>) outs(%o : memref<1x4x2x8xf32>)
    ```
    """

    DERIVED: ClassVar = {"return_state": _given_state_out}


@irdl_op_definition
class SelectiveScanBackwardOp(kernel_twin(
        mir.SelectiveScanBackwardOp,
        outs=("out", "d_delta_out", "d_a_out", "d_b_out", "d_c_out", "states_out",
              "d_initial_state_out"))):
    """The reverse pass of `lir.selective_scan`: out = dx, then d_delta, dA (per batch
    row), dB, dC, the
    forward's state before each step (`states_out` [b, s, h, n], the kernel's scratch)
    and, with `initial_state`, d_initial_state.

    ```mlir
    lir.selective_scan_backward ins(%x, %d, %a, %b, %c, %dy, %df : memref<1x4x8xf32>, memref<1x4x8xf32>, memref<8x3xf32>, memref<1x4x3xf32>, memref<1x4x3xf32>, memref<1x4x8xf32>, memref<1x8x3xf32>) outs(%dx, %dd, %da, %db, %dc, %st : memref<1x4x8xf32>, memref<1x4x8xf32>, memref<1x8x3xf32>, memref<1x4x3xf32>, memref<1x4x3xf32>, memref<1x4x8x3xf32>)
    ```
    """


@irdl_op_definition
class GatedDeltaNetBackwardOp(kernel_twin(
        mir.GatedDeltaNetBackwardOp,
        outs=("out", "d_k_out", "d_v_out", "d_g_out", "d_beta_out", "states_out",
              "d_initial_state_out"))):
    """The reverse pass of `lir.gated_delta_net`: out = dq, then dk, dv, dg, dbeta, the
    forward's state before each step (`states_out` [b, s, H, n, m], the kernel's scratch)
    and, with `initial_state`, d_initial_state.

    ```mlir
    lir.gated_delta_net_backward ins(%q, %k, %v, %g, %b, %do, %df : memref<1x4x2x8xf32>, memref<1x4x2x8xf32>, memref<1x4x2x8xf32>, memref<1x4x2xf32>, memref<1x4x2xf32>, memref<1x4x2x8xf32>, memref<1x2x8x8xf32>) outs(%dq, %dk, %dv, %dg, %db, %st : memref<1x4x2x8xf32>, memref<1x4x2x8xf32>, memref<1x4x2x8xf32>, memref<1x4x2xf32>, memref<1x4x2xf32>, memref<1x4x2x8x8xf32>)
    ```
    """


@irdl_op_definition
class ArgmaxOp(kernel_twin(mir.ArgmaxOp)):
    """out = the index (i32) of the largest value along the last axis of `input`.

    ```mlir
    lir.argmax ins(%x : memref<2x10xf32>) outs(%o : memref<2xi32>)
    ```
    """


@irdl_op_definition
class TopKOp(kernel_twin(mir.TopKOp, outs=("out", "indices_out"))):
    """out, indices_out = the `k` largest values along the last axis of `input`,
    descending, and their indices (i32).

    ```mlir
    lir.top_k ins(%x : memref<2x10xf32>) outs(%v, %i : memref<2x3xf32>, memref<2x3xi32>) k 3
    ```
    """


@irdl_op_definition
class SampleOp(kernel_twin(mir.SampleOp)):
    """out = one sampled token id (i32) per row of `logits` (`mir.sample`); `position`
    (an index, the model's) is passed to the kernel as an i64 after the pointers; the
    optional `row_positions` buffer (i64 [R]) is written after `ins`, as its own group.

    ```mlir
    lir.sample ins(%l, %t, %k, %p, %s, %pos : memref<1x50xf32>, memref<f32>, memref<i32>, memref<f32>, memref<i64>, index) outs(%o : memref<1xi32>)
    lir.sample ins(%l, %t, %k, %p, %s : memref<3x50xf32>, memref<3xf32>, memref<i32>, memref<f32>, memref<3xi64>) row_positions(%rp : memref<3xi64>) outs(%o : memref<3xi32>)
    ```
    """

    # The twin makes every operand a memref; the position stays an index. (Redefined in
    # order: xDSL lists a subclass's own fields first.)
    logits = operand_def(MemRefType)
    temperature = operand_def(MemRefType)
    top_k = operand_def(MemRefType)
    top_p = operand_def(MemRefType)
    seed = operand_def(MemRefType)
    position = opt_operand_def(IndexType)
    row_positions = opt_operand_def(MemRefType)
    out = operand_def(MemRefType)

    irdl_options = (AttrSizedOperandSegments(as_property=True),)
    # Two optional operands in one `ins` list would be ambiguous: row_positions has its own.
    assembly_format = (
        "`ins` `(` $logits `,` $temperature `,` $top_k `,` $top_p `,` $seed (`,` $position^)?"
        " `:` type($logits) `,` type($temperature) `,` type($top_k) `,` type($top_p) `,`"
        " type($seed) (`,` type($position)^)? `)`"
        " (`row_positions` `(` $row_positions^ `:` type($row_positions) `)`)?"
        " `outs` `(` $out `:` type($out) `)` attr-dict"
    )

    def verify_value(self, label: str, value: SSAValue) -> None:
        if not isinstance(value.type, IndexType):
            check_buffer(self, label, value)

    def verify_element_types(self, named: list[Operand]) -> None:
        self.ELEMENT_TYPES.verify(self, [o for o in named if o.name != "position"])


@irdl_custom_directive
class SchemeIns(CustomDirective):
    """`[scheme] ins`: an optional leading scheme, then the keyword `ins` (the declarative
    `($scheme^)? `ins`` cannot parse an absent enum: it reads `ins` as a scheme)."""

    scheme: AttributeVariable

    def parse(self, parser: Parser, state: ParsingState) -> None:
        if parser.parse_optional_keyword("ins") is None:
            self.scheme.set(state, QuantSchemeAttr(parser.parse_str_enum(QuantScheme)))
            parser.parse_keyword("ins")

    def print(self, printer: Printer, state: PrintingState, op: IRDLOperation) -> None:
        state.print_whitespace(printer)
        scheme = self.scheme.get(op)
        printer.print_string(f"{scheme.data.value} ins" if isinstance(scheme, QuantSchemeAttr)
                             else "ins")


@irdl_op_definition
class SharedInputMatmulOp(KernelOp):
    """out[i] = `x` @ `weights`[i] (f32 [K, N_i]) or, with a `scheme`, x @ dequant(w_i)ᵀ
    (ui8 GGUF blocks [N_i, K/values·bytes], `activations q8`: x quantized once) for every
    weight: one kernel that reads (and quantizes) x once (`mir.shared_input_matmul`);
    `packed_rhs` (f32 weights): every weight buffer is prepacked, as `lir.matmul`'s rhs.

    ```mlir
    lir.shared_input_matmul q4_0 ins(%x, %wg, %wu : memref<1x64xf32>, memref<8x36xui8>, memref<8x36xui8>) outs(%g, %u : memref<1x8xf32>, memref<1x8xf32>) activations q8
    lir.shared_input_matmul q4_0 ins(%x, %wg, %wu : memref<1x64xf32>, memref<8x36xui8>, memref<8x36xui8>) outs(%a, %u : memref<1x8xf32>, memref<1x8xf32>) activations q8 glu silu
    lir.shared_input_matmul q4_0 ins(%h, %wg, %wu : memref<1x64xf32>, memref<8x36xui8>, memref<8x36xui8>) norm(%gamma : memref<64xf32>) eps 1.0e-05 outs(%g, %u : memref<1x8xf32>, memref<1x8xf32>) activations q8
    ```

    `norm(...)` (mir-fuse's rms_norm prologue, `mir.shared_input_matmul`'s norm_weight):
    the kernel RMS-normalizes each row of x with that gamma before quantizing it.
    `residual(%h, %g1) eps` before it (Gemma 3's sandwich norm): each row of x first
    becomes h + rms_norm(x, g1), which one part writes to the last out (the next
    residual), then the norm and quantization take that sum. `glu act`
    (mir-fuse's gated linear unit): two weights of one N; each part computes the same
    columns of both products and stores act(out[0]) * out[1] into out[0]. `rope(...)`
    (mir-fuse's rope epilogue): the listed outs are rotated, a tile at a time as it is
    stored. `into [i, ...] at %p` (mir-fuse's cache inserts, bufferized in place): those
    outs are the caches' state buffers [capacity, N_i], written at rows p..p+S.

    ```mlir
    lir.shared_input_matmul q8_0 ins(%x, %wq, %wk, %wv : memref<1x64xf32>, memref<16x68xui8>, memref<8x68xui8>, memref<8x68xui8>) rope(%cos, %sin : memref<1x4xf32>, memref<1x4xf32>) [0, 1] head_dim 8 n_rot 8 style interleaved outs(%q, %kc, %vc : memref<1x16xf32>, memref<64x8xf32>, memref<64x8xf32>) into [1, 2] at %pos activations q8
    ```
    """

    name = "lir.shared_input_matmul"
    RULE = si.shared_input_matmul
    MIR_OP: ClassVar = mir.SharedInputMatmulOp

    x = operand_def(MemRefType)
    weights = var_operand_def(MemRefType)
    residual = opt_operand_def(MemRefType)
    """q8 only, with a norm_weight: x's rows become residual + rms_norm(x,
    residual_norm_weight, residual_eps), written to the last out, before the norm."""
    residual_norm_weight = opt_operand_def(MemRefType)
    norm_weight = opt_operand_def(MemRefType)
    """q8 only: x's rows are RMS-normalized with this gamma [K] and `norm_eps` before they
    are quantized (the kernel's prologue)."""
    rope_cos = opt_operand_def(MemRefType)
    rope_sin = opt_operand_def(MemRefType)
    position = opt_operand_def(IndexType)
    """With `cache_products`: the first cache row the listed products are written at."""
    out = var_operand_def(MemRefType)

    scheme = opt_prop_def(QuantSchemeAttr)
    activations = opt_prop_def(QuantActivationsAttr)
    norm_eps = opt_prop_def(FloatAttr[Float32Type])
    residual_eps = opt_prop_def(FloatAttr[Float32Type])
    glu = opt_prop_def(ActivationAttr)
    """q8 only: out[0] = act(x @ w_0) * (x @ w_1), out[1] = x @ w_1."""
    rope_products = opt_prop_def(DenseArrayBase.constr(i64))
    """q8 only: these outs are rotated (`mir.rope` by rope_cos/rope_sin and the rope_ props)."""
    rope_head_dim = opt_prop_def(IntegerAttr[I64])
    rope_n_rot = opt_prop_def(IntegerAttr[I64])
    rope_style = opt_prop_def(RopeStyleAttr)
    cache_products = opt_prop_def(DenseArrayBase.constr(i64))
    """q8 only: these outs are caches [capacity, N_i], written at rows position.."""
    packed_rhs = PACKED_RHS["packed_rhs"]
    """f32 weights only: every weight buffer holds its weight prepacked (as `lir.matmul`'s)."""
    interleaved = INTERLEAVED["interleaved"]
    """q8 block weights only: every weight buffer holds its blocks interleaved (as
    `lir.dequant_matmul`'s)."""

    irdl_options = (AttrSizedOperandSegments(as_property=True),)
    ABSENT_VALUES: ClassVar[Mapping[str, Any]] = {"activations": QuantActivations.F32}
    custom_directives = (SchemeIns,)

    assembly_format = (
        "custom<SchemeIns>($scheme) `(` $x `,` $weights `:` type($x) `,` type($weights) `)`"
        " (`residual` `(` $residual^ `,` $residual_norm_weight `:` type($residual) `,`"
        " type($residual_norm_weight) `)` `eps` $residual_eps)?"
        " (`norm` `(` $norm_weight^ `:` type($norm_weight) `)` `eps` $norm_eps)?"
        " (`rope` `(` $rope_cos^ `,` $rope_sin `:` type($rope_cos) `,` type($rope_sin) `)`"
        " $rope_products `head_dim` $rope_head_dim `n_rot` $rope_n_rot `style` $rope_style)?"
        " `outs` `(` $out `:` type($out) `)` (`into` $cache_products^ `at` $position)?"
        " (`activations` $activations^)? (`glu` $glu^)?"
        " (`packed_rhs` $packed_rhs^)? (`interleaved` $interleaved^)? attr-dict"
    )

    def verify_value(self, label: str, value: SSAValue) -> None:
        if not isinstance(value.type, IndexType):
            check_buffer(self, label, value)

    @property
    def outs(self) -> tuple[SSAValue, ...]:
        return tuple(self.out)

    def infer_shape(self) -> Shape:
        return self.infer_shapes()["out[0]"]

    def infer_shapes(self) -> dict[str, Shape]:
        return mir.shared_products_shapes(self, "out")

    def declared_shape(self) -> Shape:
        return shape_of(self.out[0])

    def verify_element_types(self, named: list[Operand]) -> None:
        mir.verify_shared_dtypes(self, self.out, "out")

    def verify_attributes(self) -> None:
        mir.verify_shared_activations(self)
        if self.packed_rhs is not None and self.scheme is not None:
            raise VerifyException(f"'{self.name}': packed_rhs needs f32 weights, got scheme "
                                  f"{self.scheme.data.value}")
        verify_interleaved(self)

    def verify_results(self) -> None:
        mir.verify_shared_products(self, self.out, "out")



@irdl_op_definition
class CacheScatterOp(KernelOp):
    """out[slots[r], positions[r]] = `rows`[r] for every row r: writes the rows of a ragged
    batch into a slot cache in place (`out` is the cache's state buffer [n_slots,
    capacity, *tail]; `mir.cache_scatter` bufferized; rows [B, S, *tail] are the B·S rows
    in order). The kernel checks every slot and
    position first and writes nothing when one is out of range (a call-time error).

    ```mlir
    lir.cache_scatter ins(%rows, %slots, %positions : memref<?x64xf32>, memref<?xi32>, memref<?xi32>) outs(%cache : memref<4x2048x64xf32>)
    ```
    """

    name = "lir.cache_scatter"

    rows = operand_def(MemRefType)
    slots = operand_def(MemRefType)
    positions = operand_def(MemRefType)
    out = operand_def(MemRefType)

    assembly_format = _inout(
        "$rows `,` $slots `,` $positions `:` type($rows) `,` type($slots) `,` type($positions)"
    ) + _out_format()

    ELEMENT_TYPES: ClassVar[ElementTypes] = ElementTypes(
        {"rows": RLX_DTYPES, "slots": ("i32",), "positions": ("i32",)}, same=("rows", "out"))

    def infer_shape(self) -> Shape:
        return si.cache_scatter(shape_of(self.rows), shape_of(self.out), shape_of(self.slots),
                                shape_of(self.positions))


@irdl_op_definition
class SlotAttentionOp(kernel_twin(mir.SlotAttentionOp)):
    """out[r] = attention of `q`[r] over the keys/values of slot slots[r] at positions
    [lo, positions[r]] (lo = 0, or positions[r] − window + 1 clamped at 0), grouped-query.

    ```mlir
    lir.slot_attention ins(%q, %k, %v, %s, %p : memref<3x16xf32>, memref<4x32x8xf32>, memref<4x32x8xf32>, memref<3xi32>, memref<3xi32>) outs(%o : memref<3x16xf32>) num_heads 2 head_dim 8 num_kv_heads 1 scale 3.535534e-01
    ```
    """

KERNEL_OPS: tuple[type[KernelOp], ...] = defined_ops(globals(), "lir.", KernelOp)
"""Every destination-passing kernel op (the last operands are its outs: `KernelOp.outs`)."""

LIR = Dialect("lir", list(defined_ops(globals(), "lir.")), [])


def appended_caches(op: Operation) -> list[SSAValue]:
    """The cache buffers (mir values, or lir buffers through their views) that `op`
    appends rows to in place: an insert_rows' or cache_scatter's cache, a q8
    shared_input_matmul's caches (`cache_products`)."""
    if isinstance(op, mir.InsertRowsOp | mir.CacheScatterOp):
        return [op.cache]
    if isinstance(op, InsertRowsOp | CacheScatterOp):
        return [view_root(op.out)]
    if isinstance(op, mir.SharedInputMatmulOp):
        return list(op.caches)
    if isinstance(op, SharedInputMatmulOp):
        return [view_root(op.out[i]) for i in mir.indices_of(op, "cache_products")]
    return []


def view_root(value: SSAValue) -> SSAValue:
    """The buffer `value` is a view of (through any `lir.view`s), or `value` itself."""
    while isinstance(owner := value.owner, ViewOp):
        value = owner.source
    return value
