"""Kernels over buffers with `?` dims: their sizes arrive at run time as i64 arguments.

A kernel op with `?` in an operand type is built from its operands' *symbolic* shapes,
which convert-lir-to-llvm puts on the op before calling the builder (the attribute
`rlx.operand_dims`: one `rlx.dims` array per memref operand, in operand order, e.g.
`[["S", 64], [64, 128], ["S", 128]]`). The built function takes

    (ptr memref operand..., i64 index operand..., i64 size of each symbol of
     `kernel_symbols(op)`..., [i64 part, i64 parts])

so one function serves every binding of the symbols. A static op keeps the old signature
(no size arguments). Two ways to build a dynamic kernel (`kernels.reads_dims` decides):

* natively: the builder is declared `@kernel(..., runtime_dims=True)` and
  reads the sizes with `RuntimeDims` (loop bounds, tails and thread shares computed from
  them; tile choices may depend on the static dims and the bounds); a builder also
  declared `along_symbols=True` (reductions, softmax, norms, the map family) does so only
  where the op is not row-separable (`row_prefix(op) < 0`);
* by rows (`row_separable`): every `?` dim leads its shape and the op computes each row
  of those leading dims from the same rows of its inputs (elementwise, norms, softmax and
  reductions over trailing axes, rope, gather, copies): convert-lir-to-llvm builds the
  kernel for one row and calls it in a loop over the run-time rows (see
  `build_row_driver`).
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from dataclasses import dataclass

from xdsl.dialects import llvm
from xdsl.dialects.builtin import ArrayAttr, IntegerAttr, MemRefType, i8, i32, i64
from xdsl.ir import Block, Operation, SSAValue

from rlx_mlir.core import shape_inference as si
from rlx_mlir.core.dtypes import element_bytes
from rlx_mlir.core.errors import RlxError
from rlx_mlir.dialects.common import dims_attr, dims_from_attr
from rlx_mlir.dialects.lir import KernelOp
from rlx_mlir.passes.lir_to_llvm.builder import PTR, Index, KernelBuilder, Span

OPERAND_DIMS = "rlx.operand_dims"
"""Kernel-op attribute during lowering: the symbolic shape of each memref operand."""


def memref_operands(op: Operation) -> list[SSAValue]:
    """The operands a kernel takes pointers for (every memref operand, in order)."""
    return [v for v in op.operands if isinstance(v.type, MemRefType)]


def out_count(op: Operation) -> int:
    """How many buffers `op` writes: its outs, the last memref operands (one for an op
    that is not an lir kernel)."""
    return len(op.outs) if isinstance(op, KernelOp) else 1


def operand_shapes(op: Operation) -> list[si.Shape]:
    """The symbolic shape of each memref operand of `op` (the declared static shapes when
    the op has no `rlx.operand_dims`)."""
    attr = op.attributes.get(OPERAND_DIMS)
    operands = memref_operands(op)
    if attr is None:
        return [tuple(v.type.get_shape()) for v in operands]
    assert isinstance(attr, ArrayAttr) and len(attr.data) == len(operands), (
        f"{op.name}: {OPERAND_DIMS} must hold one shape per memref operand")
    return [dims_from_attr(entry, f"{op.name}: {OPERAND_DIMS}") for entry in attr.data]


def set_operand_shapes(op: Operation, shapes: Sequence[si.Shape]) -> None:
    """Record the symbolic shapes of `op`'s memref operands for its kernel builder."""
    op.attributes[OPERAND_DIMS] = ArrayAttr([dims_attr(s) for s in shapes])


def kernel_symbols(op: Operation) -> tuple[str, ...]:
    """The symbols whose sizes the kernel of `op` takes, sorted by name (empty: static);
    an offset symbol `S+2` counts as `S`."""
    return tuple(sorted({si.split_symbol(d)[0] for shape in operand_shapes(op) for d in shape
                         if isinstance(d, str)}))


def is_dynamic(op: Operation) -> bool:
    """Whether an operand of `op` has a `?` dim."""
    return any(not si.is_static_shape(tuple(v.type.get_shape())) for v in memref_operands(op))


@dataclass
class RuntimeDims:
    """The sizes of a dynamic kernel's operands: Python ints for static dims, the i64
    arguments of the kernel for symbols."""

    shapes: list[si.Shape]
    sizes: dict[str, SSAValue]

    @classmethod
    def of(cls, op: Operation, size_args: Sequence[SSAValue]) -> RuntimeDims:
        """`size_args` are the kernel's i64 arguments, one per `kernel_symbols(op)`."""
        symbols = kernel_symbols(op)
        assert len(size_args) == len(symbols), f"{op.name}: expected {len(symbols)} sizes"
        return cls(operand_shapes(op), dict(zip(symbols, size_args, strict=True)))

    def shape(self, index: int) -> tuple[Index, ...]:
        """The dims of memref operand `index` (ints, or i64 values for symbols)."""
        return tuple(self.size(d) if isinstance(d, str) else d for d in self.shapes[index])

    def size(self, symbol: str) -> SSAValue:
        """The run-time size of a symbol, or of an offset symbol `S+2` (computed once, at
        the top of the kernel, where the size arguments are defined)."""
        if symbol not in self.sizes:
            name, offset = si.split_symbol(symbol)
            base = self.sizes[name]
            block = base.owner
            assert isinstance(block, Block), "sizes are arguments of the kernel's entry block"
            const = llvm.ConstantOp(IntegerAttr(offset, i64), i64)
            add = llvm.AddOp(base, const.result)
            if block.first_op is None:
                block.add_ops([const, add])
            else:
                block.insert_ops_before([const, add], block.first_op)
            self.sizes[symbol] = add.res
        return self.sizes[symbol]

    def dim(self, index: int, axis: int) -> Index:
        return self.shape(index)[axis]


def leading_symbols(shape: si.Shape) -> int:
    """How many leading dims of `shape` hold all its symbols (symbols and 1s, up to the
    last symbol), if no symbol comes after a static dim > 1 (else -1)."""
    symbols = [i for i, d in enumerate(shape) if isinstance(d, str)]
    if not symbols:
        return 0
    count = symbols[-1] + 1
    return count if all(isinstance(d, str) or d == 1 for d in shape[:count]) else -1


class DynamicKernelError(RlxError):
    """A kernel cannot read a `?` dim where the op has it (named in the message)."""


# ----------------------------------------------------------------------------- row driver


def _axes(op: Operation) -> list[int]:
    """The axes an op's property names (axis, axes; transposed axes for perm), as given."""
    if (axis := op.properties.get("axis")) is not None:
        return [axis.value.data]
    if (axes := op.properties.get("axes")) is not None:
        return list(axes.get_values())
    if (perm := op.properties.get("perm")) is not None:
        return [i for i, p in enumerate(perm.get_values()) if p != i]
    return []


def row_prefix(op: Operation, shapes: Sequence[si.Shape] | None = None) -> int:
    """How many leading symbolic dims the rows of `op`'s kernel span, when the op computes
    each row of them from the same rows of its operands (every operand has that prefix or
    no symbol at all, and no axis the op works along lies in the prefix); -1 otherwise.
    `shapes`: the operands' symbolic shapes (default: `operand_shapes(op)`)."""
    shapes = operand_shapes(op) if shapes is None else shapes
    outs = out_count(op)
    out = shapes[-outs]
    prefix = leading_symbols(out)
    if prefix <= 0:
        return -1
    for i, shape in enumerate(shapes):
        if si.is_static_shape(shape):
            if i >= len(shapes) - outs:
                return -1  # an out every row would write whole
            continue
        if len(shape) < prefix or tuple(shape[:prefix]) != tuple(out[:prefix]):
            return -1
        if any(isinstance(d, str) for d in shape[prefix:]):
            return -1
    if si.is_static_shape(shapes[0]):
        return prefix  # the op's axes are the first operand's (a gather's table)
    rank = len(out)
    for axis in _axes(op):
        if (axis + rank if axis < 0 else axis) < prefix:
            return -1
    return prefix


def _row_shape(shape: si.Shape, prefix: int) -> tuple[int, ...]:
    """The shape of one row: the prefix dims of a dynamic operand become 1."""
    if si.is_static_shape(shape):
        return tuple(shape)
    return (1,) * prefix + tuple(shape[prefix:])


def row_op(op: Operation, prefix: int) -> Operation:
    """A detached copy of `op` over one row: its memref operands retyped to the row
    shapes (their prefix dims 1), for a static kernel builder to read."""
    block = Block()
    values = iter(operand_shapes(op))
    operands = []
    for operand in op.operands:
        ty = operand.type
        if isinstance(ty, MemRefType):
            ty = MemRefType(ty.element_type, _row_shape(next(values), prefix))
        operands.append(block.insert_arg(ty, len(block.args)))
    attributes = {k: v for k, v in op.attributes.items() if k != OPERAND_DIMS}
    return type(op).create(operands=operands, result_types=[], properties=dict(op.properties),
                           attributes=attributes, regions=[r.clone() for r in op.regions])


def build_row_driver(op: Operation, name: str, vector_width: int, row_kernel: llvm.FuncOp,
                     partitioned: bool) -> llvm.FuncOp:
    """`name(ptr..., i64 index..., i64 sizes..., [part, parts])`: calls `row_kernel` (the
    static kernel of `row_op(op, prefix)`) once per row of the run-time rows, each operand
    advanced by its row bytes (operands without symbols stay put: they broadcast or are
    read whole, like a gather's table). A partitioned driver runs rows
    [rows·part/parts, rows·(part+1)/parts). A checked kernel returns the OR of the rows'
    statuses."""
    prefix = row_prefix(op)
    shapes = operand_shapes(op)
    memrefs = memref_operands(op)
    indices = [v for v in op.operands if not isinstance(v.type, MemRefType)]
    symbols = kernel_symbols(op)
    checked = not isinstance(row_kernel.function_type.output, llvm.LLVMVoidType)
    arg_types = [PTR] * len(memrefs) + [i64] * (len(indices) + len(symbols))
    kb = KernelBuilder(name, arg_types + [i64, i64] * partitioned, vector_width=vector_width,
                       result_type=i32 if checked else None)
    pointers = kb.args[:len(memrefs)]
    index_args = kb.args[len(memrefs):len(memrefs) + len(indices)]
    dims = RuntimeDims.of(op, kb.args[len(memrefs) + len(indices):len(arg_types)])
    rows: SSAValue = kb.index(1)
    for d in shapes[-out_count(op)][:prefix]:
        if isinstance(d, str):  # a leading 1 joins the prefix
            rows = kb.mul(rows, dims.size(d))
    lo, hi = kb.index(0), rows
    if partitioned:
        part, parts = kb.args[-2:]
        lo = kb.sdiv(kb.mul(rows, part), parts)
        hi = kb.sdiv(kb.mul(rows, kb.add(part, 1)), parts)
    row_bytes = [0 if si.is_static_shape(s) else
                 si.numel(s[prefix:]) * element_bytes(v.type.get_element_type())
                 for s, v in zip(shapes, memrefs, strict=True)]
    carried = [kb.constant(0, i32)] if checked else []
    with kb.loop(lo, hi, carried=carried) as loop:
        args = [kb.gep(p, kb.mul(loop.iv, size), i8) if size else p
                for p, size in zip(pointers, row_bytes, strict=True)]
        status = kb.call(row_kernel.sym_name.data, [*args, *index_args], i32 if checked else None)
        if checked:
            loop.yield_(kb.insert(llvm.OrOp(loop.carried[0], status)))
    kb.ret(loop.results[0] if checked else None)
    return kb.finish()


# ----------------------------------------------------------------------------- run-time rows
# (of the products over static weights: matmul.py, dequant.py, quant_dot.py)


RowsCase = Callable[[Index], None]
"""Emits the kernel's work for a row count (a run-time i64, or the static 1)."""


def runtime_rows(kb: KernelBuilder, shape: Sequence[Index]) -> Index:
    """The product of `shape` (ints and run-time i64 sizes): a kernel's M, an i64 when a
    dim is a run-time size."""
    static = math.prod(d for d in shape if isinstance(d, int))
    dynamic = [d for d in shape if not isinstance(d, int)]
    if not dynamic:
        return static
    total = dynamic[0]
    for d in dynamic[1:]:
        total = kb.mul(total, d)
    return total if static == 1 else kb.mul(total, static)


def rows_classes(kb: KernelBuilder, m: SSAValue, single: RowsCase, few: RowsCase | None,
                 many: RowsCase, few_max: int = 0) -> None:
    """Branch on the run-time row count: m == 1 → single(1) (the static code of one row),
    1 < m ≤ few_max → few(m) (matmul's decode plan; `few` None: `many` takes them),
    m > few_max → many(m)."""
    with kb.if_(kb.icmp("eq", m, 1)):
        single(1)
    if few is None:
        with kb.if_(kb.icmp("sgt", m, 1)):
            many(m)
        return
    with kb.if_(kb.insert(llvm.AndOp(kb.icmp("sgt", m, 1), kb.icmp("sle", m, few_max)))):
        few(m)
    with kb.if_(kb.icmp("sgt", m, few_max)):
        many(m)


def part_spans(kb: KernelBuilder, rows: tuple[int, Index], cols: tuple[int, Index],
               by_cols: bool | SSAValue, part: SSAValue, parts: SSAValue,
               body: Callable[[Span, Span], None]) -> None:
    """body(row span, column span) of part `part` of `parts`: the whole units of one axis
    (`rows` and `cols` are (unit, length) pairs) split evenly, the other axis whole; the
    split axis is the columns when `by_cols` holds (decided at build or run time). A part
    without units does nothing."""
    (row_unit, m), (col_unit, n) = rows, cols
    if isinstance(by_cols, bool):
        unit, length = cols if by_cols else rows
        lo, hi = kb.part_range(kb.ceil_div(length, unit), part, parts)
        with kb.if_(kb.icmp("slt", lo, hi)):
            span = (kb.mul(lo, unit), kb.fold_min(kb.mul(hi, unit), kb.index(length)))
            body((0, m), span) if by_cols else body(span, (0, n))
        return
    total = kb.select(by_cols, kb.index(kb.ceil_div(n, col_unit)),
                      kb.index(kb.ceil_div(m, row_unit)))
    unit = kb.select(by_cols, kb.index(col_unit), kb.index(row_unit))
    length = kb.select(by_cols, kb.index(n), kb.index(m))
    lo, hi = kb.part_range(total, part, parts)
    with kb.if_(kb.icmp("slt", lo, hi)):
        start, stop = kb.mul(lo, unit), kb.fold_min(kb.mul(hi, unit), length)
        zero = kb.index(0)
        body((kb.select(by_cols, zero, start), kb.select(by_cols, kb.index(m), stop)),
             (kb.select(by_cols, start, zero), kb.select(by_cols, stop, kb.index(n))))


def row_operands(op: Operation) -> list[si.Shape]:
    """The symbolic operand shapes of a matmul-family op (a product over weights) whose `?` dims may only be the
    leading (row) dims of its first operand: M is read at run time, K, N and the
    weights stay static. Anything else is a DynamicKernelError naming the op."""
    shapes = operand_shapes(op)
    lhs, *others = shapes
    where = f"{op.name} {[si.fmt(s) for s in shapes]}"
    if any(not si.is_static(d) and not isinstance(d, str) for s in shapes for d in s):
        raise DynamicKernelError(f"{where}: a `?` dim without its symbol "
                                 f"(the op needs rlx.operand_dims)")
    if len(lhs) < 2 or not si.is_static(lhs[-1]):
        raise DynamicKernelError(f"{where}: only the rows of the lhs may be symbolic "
                                 f"(K = {lhs[-1]} must be static)")
    inputs = memref_operands(op)[1:len(shapes) - out_count(op)]
    # the inputs with x's rows: a residual (the out's rows), a fused rope's cos and sin
    row_inputs = [value for name in ("residual", "rope_cos", "rope_sin")
                  if (value := getattr(op, name, None)) is not None]
    weights = [shape for shape, value in zip(others, inputs, strict=False)
               if value not in row_inputs]
    for shape in weights:
        if not si.is_static_shape(shape):
            raise DynamicKernelError(f"{where}: the weight operands must be static, got "
                                     f"{si.fmt(shape)}")
    return shapes


# ----------------------------------------------------------------------------- products
# (several weights on one x, one out each: `lir.shared_input_matmul`; their columns —
# a weight's N, or its weight rows — are one virtual range [0, N_0 + N_1 + ...))


ColumnsCase = Callable[[int, Span], None]
"""Emits product `p`'s work over a span of its columns."""


def product_spans(kb: KernelBuilder, ns: Sequence[int], unit: int, lo: Index,
                  hi: Index) -> list[tuple[Span, SSAValue | None]]:
    """Each product's columns in the units [lo, hi) of the products' virtual column
    range (the `ns` columns of each product cut into units of `unit`, a product's first
    unit starting a new one), with the i1 test that its span is not empty (None for a
    single product, whose span never is when lo < hi)."""
    if len(ns) == 1:
        return [((kb.mul(lo, unit), kb.fold_min(kb.mul(hi, unit), kb.index(ns[0]))), None)]
    spans: list[tuple[Span, SSAValue | None]] = []
    offset = 0
    for n in ns:
        count = -(-n // unit)
        first = kb.fold_min(kb.fold_max(kb.sub(lo, offset), 0), count)
        last = kb.fold_min(kb.fold_max(kb.sub(hi, offset), 0), count)
        spans.append(((kb.mul(first, unit), kb.fold_min(kb.mul(last, unit), kb.index(n))),
                      kb.icmp("slt", first, last)))
        offset += count
    return spans


def product_columns(kb: KernelBuilder, ns: Sequence[int], unit: int,
                    share: Sequence[SSAValue] | None, product: ColumnsCase) -> None:
    """product(p, columns) for every product over all of its columns or, with `share`
    (part, parts), over this part's share of the virtual column range: whole units of
    `unit` columns split evenly (a product whose columns the part does not own is
    skipped)."""
    if share is None:
        for p, n in enumerate(ns):
            product(p, (0, n))
        return
    lo, hi = kb.part_range(sum(-(-n // unit) for n in ns), *share)
    with kb.if_(kb.icmp("slt", lo, hi)):
        for p, (span, present) in enumerate(product_spans(kb, ns, unit, lo, hi)):
            if present is None:
                product(p, span)
            else:
                with kb.if_(present):
                    product(p, span)
