"""convert-lir-to-llvm: planned lir becomes llvm-dialect functions of SIMD loops.

Every lir kernel op becomes a call to an `llvm.func` built for its exact shapes and
properties by the kernel builders of `rlx_mlir.passes.lir_to_llvm` (vectorized over
`vector<W x f32>`, W from the target or the `vector-width` option); identical kernels
are built once. The graph function becomes the entry point

    llvm.func @graph(ptr %input..., ptr %param..., ptr %output..., ptr %arena,
                     i64 %part, i64 %parts, ptr %sync) -> i32

whose arguments keep their `rlx.name`/`rlx.role` attributes plus `rlx.type` (the
memref type they stand for); `lir.slot`s and `lir.view`s become GEPs into the arena or
their source. It returns 0, or the status of a failing checked kernel (an out-of-range
gather index, see `rlx_mlir.core.abi.ERROR_MESSAGES`).

Threads: every thread of a call runs the entry with its id `part` of `parts`. Kernels
that `lir-parallelize` marked `rlx.parallel` are built partitioned and compute their
share; the others run on thread 0 through a serial wrapper; each `lir.barrier` becomes a
call of `rlx_barrier`, and an entry with barriers gets its native worker loop (see
`rlx_mlir.passes.lir_to_llvm.parallel`). A module that did not go through
lir-parallelize lowers to a serial entry. With `parts = 1` every entry is a plain
serial call.

The patterns keep memref-typed uses valid with `builtin.unrealized_conversion_cast`s,
which `reconcile-unrealized-casts` removes at the end: afterwards only llvm and builtin
ops remain.
"""

from __future__ import annotations

from dataclasses import dataclass

from xdsl.context import Context
from xdsl.dialects import func, llvm
from xdsl.dialects.builtin import (
    ArrayAttr,
    DictionaryAttr,
    IndexType,
    IntegerAttr,
    MemRefType,
    ModuleOp,
    StringAttr,
    UnitAttr,
    UnrealizedConversionCastOp,
    i8,
    i32,
    i64,
)
from xdsl.ir import Operation, SSAValue
from xdsl.passes import ModulePass
from xdsl.pattern_rewriter import (
    GreedyRewritePatternApplier,
    PatternRewriter,
    PatternRewriteWalker,
    RewritePattern,
    op_type_rewrite_pattern,
)
from xdsl.transforms.reconcile_unrealized_casts import reconcile_unrealized_casts
from xdsl.utils.exceptions import PassFailedException

from rlx_mlir.core import shape_inference as si
from rlx_mlir.core.abi import (
    ARENA_BYTES,
    ARG_BOUND,
    ARG_NAME,
    ARG_ROLE,
    ARG_TYPE,
    ARG_UPDATE,
    BARRIER,
    CACHE_DIMS,
    ENTRY_EXTRA_ROLES,
    MAX_DIMS,
    NAIVE_BYTES,
    ROLE_ARENA,
    ROLE_DIM,
    ROLE_PART,
    ROLE_PARTS,
    ROLE_STATE,
    ROLE_SYNC,
    SERIAL_SUFFIX,
    UPDATE_APPEND,
    UPDATE_ASSIGN,
)
from rlx_mlir.core.dtypes import element_bytes
from rlx_mlir.core.errors import RlxError
from rlx_mlir.core.target import TARGET_ATTR, parse_target, target_of
from rlx_mlir.dialects import lir
from rlx_mlir.passes.lir_parallelize import is_parallel
from rlx_mlir.passes.lir_plan_arena import planned_bytes
from rlx_mlir.passes.lir_to_llvm.builder import PTR
from rlx_mlir.passes.lir_to_llvm.dynamic import (
    OPERAND_DIMS,
    build_row_driver,
    is_dynamic,
    kernel_symbols,
    memref_operands,
    operand_shapes,
    row_op,
    row_prefix,
    set_operand_shapes,
)
from rlx_mlir.passes.lir_to_llvm.kernels import (
    KernelBuilderFn,
    is_checked,
    kernel_record,
    reads_dims,
)
from rlx_mlir.passes.lir_to_llvm.parallel import (
    BARRIER_MODES,
    build_barrier,
    build_serial_wrapper,
    build_worker_loop,
)
from rlx_mlir.passes.lir_to_llvm.profile import instrument_entries, mark_site, name_origins
from rlx_mlir.passes.lir_to_llvm.quant_dot import mark_int8_dots
from rlx_mlir.passes.lir_to_llvm.scan import CarryScanStatus, LowerScan, incoming_status
from rlx_mlir.passes.phases import name_phases
from rlx_mlir.passes.provenance import Derive, with_provenance
from rlx_mlir.passes.utils import fn_symbols, require_lowered


def _cast(rewriter: PatternRewriter, value: SSAValue, ty) -> SSAValue:
    cast = UnrealizedConversionCastOp.get([value], [ty])
    rewriter.insert(cast)
    return cast.results[0]


def _graph_function(op: Operation) -> llvm.FuncOp | func.FuncOp:
    parent = op.parent_op()
    while parent is not None and not isinstance(parent, llvm.FuncOp | func.FuncOp):
        parent = parent.parent_op()
    assert parent is not None, f"{op.name} outside a function"
    return parent


class LowerGraphFunction(RewritePattern):
    """func.func over memrefs -> llvm.func over pointers plus the arena pointer."""

    @op_type_rewrite_pattern
    def match_and_rewrite(self, op: func.FuncOp, rewriter: PatternRewriter, /):
        block = op.body.block
        if op.function_type.outputs.data:
            raise PassFailedException(
                f"convert-lir-to-llvm: @{op.sym_name.data} still returns values; "
                "run convert-mir-to-lir first (outputs become arguments)"
            )
        old_attrs = op.arg_attrs.data if op.arg_attrs is not None else [DictionaryAttr({})] * len(block.args)
        new_attrs = []
        updates = _state_updates(op)
        for arg, attrs in zip(list(block.args), old_attrs, strict=True):
            if isinstance(arg.type, MemRefType):
                extra = {ARG_UPDATE: StringAttr(updates[arg.index])} if arg.index in updates else {}
                new_attrs.append(DictionaryAttr({**attrs.data, ARG_TYPE: arg.type,
                                                 "llvm.noalias": UnitAttr(), **extra}))
                lowered = PTR
            elif isinstance(arg.type, IndexType):  # the position
                new_attrs.append(attrs)
                lowered = i64
            else:
                raise PassFailedException(
                    f"convert-lir-to-llvm: argument {arg.index} of @{op.sym_name.data}: "
                    f"expected a memref or an index, got {arg.type}"
                )
            replacement = block.insert_arg(lowered, arg.index)
            cast = UnrealizedConversionCastOp.get([replacement], [arg.type])
            block.insert_op_before(cast, block.first_op)
            rewriter.replace_all_uses_with(arg, cast.results[0])
            block.erase_arg(arg)
        bounds = _planned_bounds(op)
        for symbol in fn_symbols(op):  # run-time sizes, sorted by name
            block.insert_arg(i64, len(block.args))
            attrs = {ARG_ROLE: StringAttr(ROLE_DIM), ARG_NAME: StringAttr(symbol)}
            if symbol in bounds:
                attrs[ARG_BOUND] = IntegerAttr(bounds[symbol], i64)
            new_attrs.append(DictionaryAttr(attrs))
        arena_bytes, naive_bytes = _arena_sizes(op)
        for ty, role in zip((PTR, i64, i64, PTR), ENTRY_EXTRA_ROLES, strict=True):
            block.insert_arg(ty, len(block.args))
            attrs = {ARG_ROLE: StringAttr(role)}
            if role == ROLE_ARENA:  # so llvm-stage text alone says how big an arena to pass
                attrs |= {ARENA_BYTES: IntegerAttr(arena_bytes, i64),
                          NAIVE_BYTES: IntegerAttr(naive_bytes, i64)}
            new_attrs.append(DictionaryAttr(attrs))
        body = rewriter.move_region_contents_to_new_regions(op.body)
        new = llvm.FuncOp(
            op.sym_name.data,
            llvm.LLVMFunctionType([a.type for a in block.args], i32),
            linkage=llvm.LinkageAttr("external"),
            body=body,
            other_props={"arg_attrs": ArrayAttr(new_attrs)},
        )
        if CACHE_DIMS in op.attributes:  # what T is, for a caller of the llvm entry alone
            new.attributes[CACHE_DIMS] = op.attributes[CACHE_DIMS]
        rewriter.replace(op, new)


def _planned_bounds(fn: func.FuncOp) -> dict[str, int]:
    """The symbol bounds lir-plan-arena planned the function for (`rlx.max_dims`)."""
    attr = fn.attributes.get(MAX_DIMS)
    if not isinstance(attr, DictionaryAttr):
        return {}
    return {k: v.value.data for k, v in attr.data.items() if isinstance(v, IntegerAttr)}


def _state_updates(fn: func.FuncOp) -> dict[int, str]:
    """How a call changes each state argument (by index): rows appended in place
    (`lir.insert_rows`, or scattered into slots by `lir.cache_scatter`: neither is
    snapshot whole) or the whole state assigned (an `lir.copy` into it)."""
    args = list(fn.body.block.args)
    roles = [a.data.get(ARG_ROLE) for a in fn.arg_attrs.data] if fn.arg_attrs else []
    updates: dict[int, str] = {}
    for op in fn.body.block.ops:
        written = [(UPDATE_APPEND, cache) for cache in lir.appended_caches(op)]
        if isinstance(op, lir.CopyOp):
            written.append((UPDATE_ASSIGN, op.out))
        for kind, root in written:
            while isinstance(root.owner, lir.ViewOp):
                root = root.owner.source
            index = next((i for i, a in enumerate(args) if a is root), None)
            if index is not None and index < len(roles) and roles[index] == StringAttr(ROLE_STATE):
                updates.setdefault(index, kind)
    return updates


def _arena_sizes(fn: func.FuncOp) -> tuple[int, int]:
    arena, naive, _ = planned_bytes(fn)
    return arena, naive


class LowerReturn(RewritePattern):
    """func.return -> llvm.return of the OR of the statuses of the checked kernels."""

    @op_type_rewrite_pattern
    def match_and_rewrite(self, op: func.ReturnOp, rewriter: PatternRewriter, /):
        status: SSAValue = _constant(rewriter, 0, i32)
        incoming = incoming_status(op.parent_block())  # the checked calls of scans before
        if incoming is not None:
            combined = llvm.OrOp(status, incoming)
            rewriter.insert(combined)
            status = combined.results[0]
        for call in op.parent_block().ops:
            if isinstance(call, llvm.CallOp) and call.returned is not None:
                combined = llvm.OrOp(status, call.returned)
                rewriter.insert(combined)
                status = combined.results[0]
        rewriter.replace(op, llvm.ReturnOp(status))


def _constant(rewriter: PatternRewriter, value: int, ty) -> SSAValue:
    const = llvm.ConstantOp(IntegerAttr(value, ty), ty)
    rewriter.insert(const)
    return const.results[0]


def _offset(rewriter: PatternRewriter, base: SSAValue, offset: int, element) -> SSAValue:
    """&base[offset]; static GEP indices are i32, so large offsets go through an i64 value."""
    index: int | SSAValue = offset if offset < 2**31 else _constant(rewriter, offset, i64)
    gep = llvm.GEPOp.from_mixed_indices(base, [index], element, inbounds=True)
    rewriter.insert(gep)
    return gep.result


class LowerArena(RewritePattern):
    """lir.arena -> the entry function's arena pointer argument."""

    @op_type_rewrite_pattern
    def match_and_rewrite(self, op: lir.ArenaOp, rewriter: PatternRewriter, /):
        if (entry := _lowered_entry(op)) is not None:
            arena = _entry_arg(entry, ROLE_ARENA)
            rewriter.replace(op, UnrealizedConversionCastOp.get([arena], [op.results[0].type]))


class LowerSlot(RewritePattern):
    """lir.slot %arena[offset] -> a GEP of `offset` bytes into the arena."""

    @op_type_rewrite_pattern
    def match_and_rewrite(self, op: lir.SlotOp, rewriter: PatternRewriter, /):
        address = _offset(rewriter, _cast(rewriter, op.arena, PTR), op.offset.value.data, i8)
        rewriter.replace(op, UnrealizedConversionCastOp.get([address], [op.results[0].type]))


class LowerView(RewritePattern):
    """lir.view %source[offset] -> a GEP of `offset` elements into the source."""

    @op_type_rewrite_pattern
    def match_and_rewrite(self, op: lir.ViewOp, rewriter: PatternRewriter, /):
        element = op.source.type.get_element_type()
        address = _offset(rewriter, _cast(rewriter, op.source, PTR), op.offset.value.data, element)
        rewriter.replace(op, UnrealizedConversionCastOp.get([address], [op.results[0].type]))


def _lowered_entry(op: Operation) -> llvm.FuncOp | None:
    """The llvm entry holding `op`, or None while its function is still a func.func."""
    fn = _graph_function(op)
    return fn if isinstance(fn, llvm.FuncOp) else None


def _entry_arg(entry: llvm.FuncOp, role: str) -> SSAValue:
    """The entry's argument of one of the roles it has after the graph's own arguments."""
    entry_block = entry.body.blocks.first  # a scan's loop adds blocks after it
    assert entry_block is not None
    return entry_block.args[ENTRY_EXTRA_ROLES.index(role) - len(ENTRY_EXTRA_ROLES)]


def _symbol_arg(entry: llvm.FuncOp, symbol: str) -> SSAValue:
    """The entry's i64 argument holding the run-time size of `symbol`."""
    for arg, attrs in zip(entry.body.block.args, entry.arg_attrs.data, strict=True):
        if (attrs.data.get(ARG_ROLE) == StringAttr(ROLE_DIM)
                and attrs.data.get(ARG_NAME) == StringAttr(symbol)):
            return arg
    raise PassFailedException(
        f"convert-lir-to-llvm: no run-time size for the symbol {symbol!r} in "
        f"@{entry.sym_name.data} (a buffer names a symbol no argument or op declares)")


class LowerBarrier(RewritePattern):
    """lir.barrier -> a call of `rlx_barrier(sync, part, parts, mode)` (returns at once
    when parts = 1; mode: the barrier's kind, `BARRIER_MODES`)."""

    @op_type_rewrite_pattern
    def match_and_rewrite(self, op: lir.BarrierOp, rewriter: PatternRewriter, /):
        if (entry := _lowered_entry(op)) is not None:
            mode = _constant(rewriter, BARRIER_MODES[op.kind.data if op.kind else None], i64)
            rewriter.replace(op, llvm.CallOp(BARRIER, _entry_arg(entry, ROLE_SYNC),
                                             _entry_arg(entry, ROLE_PART),
                                             _entry_arg(entry, ROLE_PARTS), mode))


class RejectAlloc(RewritePattern):
    """An lir.alloc has no storage: lir-plan-arena must have turned it into a slot."""

    @op_type_rewrite_pattern
    def match_and_rewrite(self, op: lir.AllocOp, rewriter: PatternRewriter, /):
        raise PassFailedException(
            "convert-lir-to-llvm: found 'lir.alloc' (an unplanned buffer); run lir-plan-arena first"
        )


@dataclass
class LowerKernel(RewritePattern):
    """Any lir kernel op -> a call of the llvm.func built for it (built once per signature)."""

    vector_width: int
    built: dict[str, str]
    """Kernel key -> function name, so identical kernels share one function."""
    in_place: set[Operation]
    """Kernels whose operands share memory (in-place reuse): their pointers are not noalias."""
    profile: bool = False
    """Mark each call with what it runs, for `instrument_entries` (the profiled build)."""

    def match_and_rewrite(self, op: Operation, rewriter: PatternRewriter, /):
        if not isinstance(op, lir.KernelOp):
            return
        graph = _graph_function(op)
        name = self._kernel(op, graph, is_parallel(op))
        part, parts = _entry_arg(graph, ROLE_PART), _entry_arg(graph, ROLE_PARTS)
        pointers = [_cast(rewriter, v, PTR) for v in memref_operands(op)]
        indices = [_cast(rewriter, v, i64) for v in op.operands if not isinstance(v.type, MemRefType)]
        sizes = [_symbol_arg(graph, symbol) for symbol in kernel_symbols(op)]
        checked = is_checked(op)
        call = llvm.CallOp(name, *pointers, *indices, *sizes, part, parts,
                           return_type=i32 if checked else None)
        if self.profile:
            mark_site(call, op)
        rewriter.replace(op, call, new_results=[])

    def _kernel(self, op: Operation, graph: Operation, parallel: bool) -> str:
        """The function to call with (pointers..., part, parts), built on first use."""
        aliased = op in self.in_place
        key = _kernel_key(op) + ("&aliased" if aliased else "") + ("&parallel" if parallel else "")
        if key not in self.built:
            base = f"{graph.sym_name.data}__{op.name.split('.')[1]}_{len(self.built)}"
            if is_dynamic(op) and not reads_dims(op):
                functions = _row_driven(op, base, self.vector_width, parallel)
            elif parallel:
                functions = [_partitioned_builder(op)(op, base, self.vector_width)]
            else:
                kernel = _serial_builder(op)(op, base, self.vector_width)
                functions = [kernel, build_serial_wrapper(base + SERIAL_SUFFIX, kernel)]
            for function in functions:
                if aliased:
                    _drop_noalias(function)
                graph.parent_block().insert_op_before(function, graph)
            self.built[key] = functions[-1].sym_name.data
        return self.built[key]


def _serial_builder(op: Operation) -> KernelBuilderFn:
    record = kernel_record(type(op))
    if record is None:
        raise PassFailedException(f"convert-lir-to-llvm: no kernel builder for '{op.name}'")
    return record.build


def _row_driven(op: Operation, base: str, width: int, parallel: bool) -> list[llvm.FuncOp]:
    """The kernel of a dynamic op without a run-time-size builder: its static kernel over
    one row and a driver looping over the run-time rows (see `dynamic.build_row_driver`)."""
    prefix = row_prefix(op)
    if prefix < 0:
        shapes = ", ".join(si.fmt(s) for s in operand_shapes(op))
        raise PassFailedException(
            f"convert-lir-to-llvm: '{op.name}' with operands {shapes}: no kernel reads these "
            "? dims at run time (symbols must lead every shape, and the op must not work "
            "along them)")
    row_kernel = _serial_builder(op)(row_op(op, prefix), base + "_row", width)
    if parallel:
        return [row_kernel, build_row_driver(op, base, width, row_kernel, partitioned=True)]
    driver = build_row_driver(op, base, width, row_kernel, partitioned=False)
    return [row_kernel, driver, build_serial_wrapper(base + SERIAL_SUFFIX, driver)]


def _partitioned_builder(op: Operation) -> KernelBuilderFn:
    """The partitioned builder of a kernel lir-parallelize marked."""
    record = kernel_record(type(op))
    if record is None or not record.partitioned:
        raise PassFailedException(
            f"convert-lir-to-llvm: '{op.name}' is marked rlx.parallel but has no partitioned "
            "builder (lir-parallelize marks only kernels that have one)"
        )
    return record.build_partitioned()


def _drop_noalias(kernel: llvm.FuncOp) -> None:
    attrs = [DictionaryAttr({k: v for k, v in a.data.items() if k != "llvm.noalias"})
             for a in kernel.arg_attrs.data]
    kernel.properties["arg_attrs"] = ArrayAttr(attrs)


def _byte_range(value: SSAValue) -> tuple[SSAValue, int, int]:
    """(base buffer, first byte, end byte) of a buffer value, through slots and views
    (a buffer with `?` dims at the bounds of its symbols)."""
    owner = value.owner
    size = lir.byte_size(value.type, lir.buffer_dims(value), {})
    if isinstance(owner, lir.SlotOp):
        start = owner.offset.value.data
        return owner.arena, start, start + owner.bounded_bytes()
    if isinstance(owner, lir.ViewOp):
        base, start, _ = _byte_range(owner.source)
        start += owner.offset.value.data * element_bytes(value.type.get_element_type())
        return base, start, start + size
    return value, 0, size


def in_place_kernels(module: ModuleOp) -> set[Operation]:
    """Kernels two of whose operands share bytes (the planner's in-place reuse)."""
    found = set()
    for op in module.walk():
        if isinstance(op, lir.KernelOp):
            ranges = [_byte_range(v) for v in memref_operands(op)]
            for i, (base_a, start_a, end_a) in enumerate(ranges):
                if any(base_a is base_b and start_a < end_b and start_b < end_a
                       for base_b, start_b, end_b in ranges[i + 1 :]):
                    found.add(op)
    return found


def _kernel_key(op: Operation) -> str:
    """Ops with the same key compile to the same function (regions are never shared)."""
    if op.regions:
        return f"{op.name}@{id(op)}"
    types = ",".join(str(o.type) for o in op.operands)
    props = ",".join(f"{k}={v}" for k, v in sorted(op.properties.items()))
    return f"{op.name}({types}){{{props}}}{op.attributes.get(OPERAND_DIMS, '')}"


@dataclass(frozen=True)
class ConvertLirToLlvmPass(ModulePass):
    """Lower planned lir to llvm-dialect functions of SIMD kernels (see module docstring)."""

    name = "convert-lir-to-llvm"

    vector_width: int = 0
    """Lanes of f32 per vector (16, 8 or 4); 0 takes the target's."""
    profile: bool = False
    """Time stamps around every kernel call of the entry (see lir_to_llvm/profile.py)."""
    target: str = ""
    """The CPU to lower for, `cpu` or `cpu:+feat,-feat` (see rlx_mlir/core/target.py);
    "" takes the module's `rlx.target` attribute, else the generic x86-64 (SSE, 4 lanes).
    The pass never reads the host: the drivers pass RLX_TARGET_CPU or the host's. The
    output records the target it was lowered for as its `rlx.target`."""

    def __post_init__(self) -> None:
        if self.target:
            parse_target(self.target)  # a bad spec fails when the pipeline is built

    def apply(self, ctx: Context, op: ModuleOp) -> None:
        require_lowered(op, self.name, "hir", "mir", "lir.alloc")
        try:
            target = target_of(op, self.target)
        except RlxError as err:
            raise PassFailedException(f"{self.name}: {err}") from None
        width = self.vector_width or target.vector_width
        if width not in (4, 8, 16):
            raise PassFailedException(f"convert-lir-to-llvm: vector-width must be 4, 8 or 16, got {width}")
        mark_int8_dots(op, target, width)  # the `activations q8` ops VNNI can run
        in_place = in_place_kernels(op)
        name_symbolic_operands(op)
        if self.profile:
            name_origins(op)
            name_phases(op)  # a module written at the lir stage has none yet
        for patterns in (
            [LowerGraphFunction(), RejectAlloc()],
            [LowerScan()],  # loops around the body kernels, lowered by the next group
            [LowerArena(), LowerSlot(), LowerView(), LowerBarrier(), LowerKernel(width, {}, in_place, self.profile)],
            [LowerReturn(), CarryScanStatus()],
        ):
            PatternRewriteWalker(  # a kernel's call keeps the kernel op's location
                with_provenance(GreedyRewritePatternApplier(patterns, dce_enabled=False), Derive.KEEP),
                apply_recursively=False,
            ).rewrite_module(op)
        reconcile_unrealized_casts(op)
        if self.profile:
            instrument_entries(op)
        add_thread_support(op)
        _check_only_llvm(op)
        op.attributes[TARGET_ATTR] = StringAttr(target.spec)  # what the kernels were built for


def name_symbolic_operands(module: ModuleOp) -> None:
    """Put on every kernel with `?` dims the symbolic shapes of its operands (read while
    they are still lir buffers), for its builder and the sizes its call passes."""
    for op in module.walk():
        if isinstance(op, lir.KernelOp) and is_dynamic(op):
            set_operand_shapes(op, [lir.buffer_dims(v) for v in memref_operands(op)])


def add_thread_support(module: ModuleOp) -> None:
    """For every entry that calls `rlx_barrier` (it splits work across threads): its
    native worker loop; then, once, the barrier function itself."""
    barriers = False
    for entry in list(module.ops):
        if isinstance(entry, llvm.FuncOp) and _calls_barrier(entry):
            module.body.block.add_op(build_worker_loop(entry))
            barriers = True
    if barriers:
        module.body.block.add_ops(build_barrier())


def _calls_barrier(fn: llvm.FuncOp) -> bool:
    return any(isinstance(op, llvm.CallOp) and op.callee.string_value() == BARRIER
               for op in fn.body.walk())


def _check_only_llvm(module: ModuleOp) -> None:
    for op in module.walk():
        if op is not module and not op.name.startswith("llvm."):
            raise PassFailedException(
                f"convert-lir-to-llvm: '{op.name}' is left after lowering (only llvm ops may remain)"
            )


