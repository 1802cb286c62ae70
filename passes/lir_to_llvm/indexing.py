"""Kernels of `lir.gather`, `lir.scatter_add`, `lir.depthwise_conv1d` and `lir.insert_rows`
as llvm-dialect functions.

`gather` is `np.take` along one axis: it first checks every index (0 ≤ id < dim, an
unsigned compare so negative ids fail too) and, if one is bad, returns the i32
status 1 without reading any row; otherwise it copies each selected contiguous inner
row with vector loads/stores and returns 0; `scatter_add`, its transpose, checks the
same way, zeroes the result and adds each row of updates at its index, in order.
`depthwise_conv1d` is a valid
convolution over time of a pre-padded [B, S+K-1, C] input, vectorized along C with
one FMA per tap. `insert_rows` copies S rows (S read at run time when symbolic) to
the cache at row P (the position, an i64 argument).
"""

from __future__ import annotations

from collections.abc import Sequence

from xdsl.dialects import llvm
from xdsl.dialects.builtin import f32, i1, i32, i64
from xdsl.ir import Attribute, Operation, SSAValue

from rlx_mlir.core.abi import STATUS_INDEX_OUT_OF_RANGE, STATUS_OK, STATUS_SLOT_OUT_OF_RANGE
from rlx_mlir.core.dtypes import llvm_element
from rlx_mlir.core.shape_inference import numel
from rlx_mlir.dialects import lir
from rlx_mlir.dialects.common import shape_of
from rlx_mlir.passes.lir_to_llvm.builder import PTR, KernelBuilder, Value
from rlx_mlir.passes.lir_to_llvm.dynamic import (
    DynamicKernelError,
    RuntimeDims,
    is_dynamic,
    kernel_symbols,
)
from rlx_mlir.passes.lir_to_llvm.record import kernel

UNROLL_TAPS = 16
"""Convolutions with at most this many taps unroll the tap loop in the kernel."""



def copy_elements(kb: KernelBuilder, src: SSAValue, dst: SSAValue, count: Value,
                  element: Attribute = f32) -> None:
    """dst[0:count] = src[0:count] for a `count` known at compile time (int) or read at
    run time (an i64): a vector loop of W elements, then a scalar tail."""

    def copy(i: SSAValue, vector: bool) -> None:
        kb.store(kb.load(src, i, vector=vector, element=element), dst, i, element=element)

    kb.sweep(0, count, copy)


def load_index(kb: KernelBuilder, ids: SSAValue, position: Value, element: Attribute) -> SSAValue:
    """ids[position] as an i64 (i32 ids are sign-extended, so negatives stay negative)."""
    value = kb.load(ids, position, element=element)
    return value if element == i64 else kb.sext(value, i64)


def _mul(kb: KernelBuilder, a: Value, b: Value) -> Value:
    return a * b if isinstance(a, int) and isinstance(b, int) else kb.mul(a, b)


def _product(kb: KernelBuilder, dims: Sequence[Value]) -> Value:
    """The product of static and run-time dims (a Python int when all are static)."""
    result: Value = 1
    for d in dims:
        result = _mul(kb, result, d)
    return result


@kernel(lir.GatherOp, runtime_dims=True, checked=True)
def build_gather(op: Operation, name: str, vector_width: int) -> llvm.FuncOp:
    """out[o, i, :] = input[o, indices[i], :] (np.take along `axis`), returning an i32
    status: 1 as soon as any index is outside [0, dim) (nothing is read or written
    then), else 0."""
    assert isinstance(op, lir.GatherOp)
    element = llvm_element(op.input.type.get_element_type())
    id_element = llvm_element(op.indices.type.get_element_type())
    symbols = kernel_symbols(op)
    kb = KernelBuilder(name, [PTR, PTR, PTR] + [i64] * len(symbols), vector_width=vector_width,
                       result_type=i32)
    x, ids, out = kb.args[:3]
    # ? dims (a table of S rows, S ids) are read at run time: sizes are products of them
    dims = RuntimeDims.of(op, kb.args[3:])
    x_shape, ids_shape = dims.shape(0), dims.shape(1)
    axis = op.axis.value.data % len(x_shape)
    inner = numel(shape_of(op.input)[axis + 1:])
    if any(isinstance(d, SSAValue) for d in x_shape[axis + 1:]):
        raise DynamicKernelError(f"{op.name}: a ? dim after the gather axis is not supported "
                                 f"(table {list(shape_of(op.input))})")
    outer, dim, count = _product(kb, x_shape[:axis]), x_shape[axis], _product(kb, ids_shape)

    # Check every id first; as an unsigned compare, a negative id is out of range too.
    with kb.loop(0, count, carried=[kb.constant(0, i1)]) as check:
        bad = kb.icmp("uge", load_index(kb, ids, check.iv, id_element), dim)
        check.yield_(kb.or_(check.carried[0], bad))
    any_bad = check.results[0]

    # With a bad id the copy runs zero times: no row is read, `out` stays untouched.
    rows = kb.select(any_bad, kb.index(0), kb.index(outer))
    with kb.loop(0, rows) as o_loop:
        src_base = kb.mul(o_loop.iv, _mul(kb, dim, inner))
        dst_base = kb.mul(o_loop.iv, _mul(kb, count, inner))
        with kb.loop(0, count) as i_loop:
            row = load_index(kb, ids, i_loop.iv, id_element)
            src = kb.gep(x, kb.add(src_base, kb.mul(row, inner)), element)
            dst = kb.gep(out, kb.add(dst_base, kb.mul(i_loop.iv, inner)), element)
            copy_elements(kb, src, dst, inner, element)
    kb.ret(kb.select(any_bad, kb.constant(STATUS_INDEX_OUT_OF_RANGE, i32), kb.constant(STATUS_OK, i32)))
    return kb.finish()


@kernel(lir.ScatterAddOp, runtime_dims=True, checked=True)
def build_scatter_add(op: Operation, name: str, vector_width: int) -> llvm.FuncOp:
    """out[o] = 0, then out[o, indices[i], :] += updates[o, i, :] for i in order (the
    transpose of `build_gather`: repeated indices accumulate), returning an i32 status: 1
    as soon as any index is outside [0, dim_size) (nothing is written then), else 0."""
    assert isinstance(op, lir.ScatterAddOp)
    id_element = llvm_element(op.indices.type.get_element_type())
    symbols = kernel_symbols(op)
    kb = KernelBuilder(name, [PTR, PTR, PTR] + [i64] * len(symbols), vector_width=vector_width,
                       result_type=i32)
    updates, ids, out = kb.args[:3]
    dims = RuntimeDims.of(op, kb.args[3:])
    out_shape, ids_shape = dims.shape(2), dims.shape(1)
    axis = op.axis.value.data % len(out_shape)
    if any(isinstance(d, SSAValue) for d in out_shape[axis + 1:]):
        raise DynamicKernelError(f"{op.name}: a ? dim after the scatter axis is not supported "
                                 f"(result {list(shape_of(op.out))})")
    inner = numel(shape_of(op.out)[axis + 1:])
    outer, dim, count = _product(kb, out_shape[:axis]), out_shape[axis], _product(kb, ids_shape)

    with kb.loop(0, count, carried=[kb.constant(0, i1)]) as check:
        bad = kb.icmp("uge", load_index(kb, ids, check.iv, id_element), dim)
        check.yield_(kb.or_(check.carried[0], bad))
    any_bad = check.results[0]

    def accumulate(src: SSAValue, dst: SSAValue) -> None:
        def add(j: SSAValue, vector: bool) -> None:
            total = kb.fadd(kb.load(dst, j, vector=vector), kb.load(src, j, vector=vector))
            kb.store(total, dst, j)

        kb.sweep(0, inner, add)

    def zero(j: SSAValue, vector: bool) -> None:
        kb.store(kb.vconst(0.0) if vector else kb.fconst(0.0), out_block, j)

    rows = kb.select(any_bad, kb.index(0), kb.index(outer))
    with kb.loop(0, rows) as o_loop:
        out_block = kb.gep(out, kb.mul(o_loop.iv, _mul(kb, dim, inner)))
        kb.sweep(0, _mul(kb, dim, inner), zero)
        src_base = kb.mul(o_loop.iv, _mul(kb, count, inner))
        with kb.loop(0, count) as i_loop:
            row = load_index(kb, ids, i_loop.iv, id_element)
            src = kb.gep(updates, kb.add(src_base, kb.mul(i_loop.iv, inner)))
            accumulate(src, kb.gep(out_block, kb.mul(row, inner)))
    kb.ret(kb.select(any_bad, kb.constant(STATUS_INDEX_OUT_OF_RANGE, i32), kb.constant(STATUS_OK, i32)))
    return kb.finish()


@kernel(lir.DepthwiseConv1dOp, runtime_dims=True)
def build_depthwise_conv1d(op: Operation, name: str, vector_width: int) -> llvm.FuncOp:
    """out[b, t, c] = Σₖ weight[k, c]·input[b, t+k, c] over the pre-padded input
    [B, S+K-1, C]: rows of out in order, W channels at a time with one FMA per tap,
    then a scalar tail of channels; with `state_out`, then the window: its last K-1 rows
    (`_copy_window`). Takes `(input, weight, out[, state_out][, sizes])`."""
    assert isinstance(op, lir.DepthwiseConv1dOp)
    taps = shape_of(op.weight)[0]
    w = vector_width
    symbols = kernel_symbols(op) if is_dynamic(op) else ()
    pointers = 3 if op.state_out is None else 4
    kb = KernelBuilder(name, [PTR] * pointers + [i64] * len(symbols), vector_width=w)
    x, weight, out = kb.args[:3]
    batch: Value
    padded: Value
    steps: Value
    if symbols:  # over `?` dims: B, S+K-1 and S read at run time (input, then out)
        dims = RuntimeDims.of(op, kb.args[pointers:])
        batch, padded, channels = dims.shape(0)
        steps = dims.dim(2, 1)
        if not isinstance(channels, int):
            raise DynamicKernelError(f"{op.name}: the channels must be static, got "
                                     f"{dims.shapes[0]}")
    else:
        batch, padded, channels = shape_of(op.input)
        steps = padded - taps + 1

    def convolve(row: SSAValue, out_row: SSAValue, c: SSAValue, vector: bool) -> None:
        """out_row[c:c+(W|1)] = Σₖ weight[k, c:...] · row[k·C + c:...]."""

        def tap(k: Value, acc: SSAValue | None) -> SSAValue:
            if isinstance(k, SSAValue):
                offset = kb.add(kb.mul(k, channels), c)
            else:
                offset = kb.add(c, k * channels) if k else c
            wk = kb.load(weight, offset, vector=vector)
            xk = kb.load(row, offset, vector=vector)
            return kb.fmul(wk, xk) if acc is None else kb.fma(wk, xk, acc)

        if taps <= UNROLL_TAPS:
            acc = None
            for k in range(taps):
                acc = tap(k, acc)
        else:
            zero = kb.vconst(0.0) if vector else kb.fconst(0.0)
            with kb.loop(0, taps, carried=[zero]) as k_loop:
                k_loop.yield_(tap(k_loop.iv, k_loop.carried[0]))
            acc = k_loop.results[0]
        assert acc is not None
        kb.store(acc, out_row, c)

    with kb.loop(0, batch) as b_loop:
        with kb.loop(0, steps) as t_loop:
            row = kb.gep(x, kb.mul(kb.add(kb.mul(b_loop.iv, padded), t_loop.iv), channels))
            out_row = kb.gep(out, kb.mul(kb.add(kb.mul(b_loop.iv, steps), t_loop.iv), channels))
            kb.sweep(0, channels, lambda c, vector: convolve(row, out_row, c, vector=vector))
    if op.state_out is not None:
        _copy_window(kb, x, kb.args[3], batch, padded, taps - 1, channels)
    kb.ret()
    return kb.finish()


def _copy_window(kb: KernelBuilder, x: SSAValue, window: SSAValue, batch: Value,
                 padded: Value, rows: int, channels: int) -> None:
    """window[b] = x[b, padded-rows : padded] for each b: the last `rows` rows over time
    of the padded input [B, padded, C] (contiguous per b), copied after the convolution
    has read x (x is the padding concat's own buffer, never the state the window is
    assigned to, so the order only matters for clarity)."""
    size = rows * channels
    with kb.loop(0, batch) as b_loop:
        first = kb.sub(kb.mul(kb.add(b_loop.iv, 1), padded), rows)  # row (b+1)·padded − rows
        src = kb.gep(x, kb.mul(first, channels))
        copy_elements(kb, src, kb.gep(window, kb.mul(b_loop.iv, size)), size)


@kernel(lir.InsertRowsOp, partitioned=True, runtime_dims=True)
def build_insert_rows(op: Operation, name: str, vector_width: int,
                      partitioned: bool = False) -> llvm.FuncOp:
    """out[P·row : (P+S)·row] = rows[0 : S·row], row = the elements of one row (the
    product of the trailing dims): appending S rows to a KV cache at position P. The
    function takes `(ptr rows, ptr out, i64 P[, i64 S][, i64 part, i64 parts])`
    (dynamic.py's ABI: S when the rows' first dim is a symbol); part p copies rows
    [S·p/parts, S·(p+1)/parts), as a row-driven kernel splits them. The caller guarantees
    P + S <= capacity."""
    assert isinstance(op, lir.InsertRowsOp)
    symbols = kernel_symbols(op)
    element = llvm_element(op.rows.type.get_element_type())
    kb = KernelBuilder(name, [PTR, PTR, i64, *[i64] * len(symbols), *[i64] * (2 * partitioned)],
                       vector_width=vector_width)
    rows, out, position, *sizes = kb.args[:3 + len(symbols)]
    rows_shape = RuntimeDims.of(op, sizes).shape(0)
    row = numel(rows_shape[1:])
    first, last = (kb.part_range(rows_shape[0], *kb.args[-2:]) if partitioned
                   else (kb.index(0), rows_shape[0]))
    count = kb.mul(kb.sub(last, first), row) if partitioned else kb.fold_mul(last, row)
    src = kb.gep(rows, kb.mul(first, row), element) if partitioned else rows
    dst = kb.gep(out, kb.mul(kb.add(position, first), row), element)
    copy_elements(kb, src, dst, count, element)
    kb.ret()
    return kb.finish()


def slot_out_of_range(kb: KernelBuilder, slots: SSAValue, positions: SSAValue, count: Value,
                      n_slots: int, capacity: int) -> SSAValue:
    """An i1: whether some row r < `count` has slots[r] outside [0, n_slots) or
    positions[r] outside [0, capacity) (i32 entries; unsigned compares, so negatives are
    out of range too)."""
    with kb.loop(0, count, carried=[kb.constant(0, i1)]) as check:
        bad = kb.or_(kb.icmp("uge", load_index(kb, slots, check.iv, i32), n_slots),
                     kb.icmp("uge", load_index(kb, positions, check.iv, i32), capacity))
        check.yield_(kb.or_(check.carried[0], bad))
    return check.results[0]


@kernel(lir.CacheScatterOp, runtime_dims=True, checked=True)
def build_cache_scatter(op: Operation, name: str, vector_width: int) -> llvm.FuncOp:
    """out[slots[r], positions[r]] = rows[r] for r < R (R read at run time when symbolic):
    the rows of a ragged batch written into a slot cache [n_slots, capacity, *tail]
    (rows [B, S, *tail] with slots and positions [B, S]: the B·S rows in order).
    Takes `(ptr rows, ptr slots, ptr positions, ptr out[, i64 R])` and returns an i32
    status: STATUS_SLOT_OUT_OF_RANGE, writing nothing, when any slot or position is out
    of range, else STATUS_OK."""
    assert isinstance(op, lir.CacheScatterOp)
    symbols = kernel_symbols(op)
    element = llvm_element(op.rows.type.get_element_type())
    kb = KernelBuilder(name, [PTR] * 4 + [i64] * len(symbols), vector_width=vector_width,
                       result_type=i32)
    rows, slots, positions, out = kb.args[:4]
    n_slots, capacity, *tail = shape_of(op.out)
    rows_shape = RuntimeDims.of(op, kb.args[4:]).shape(0)
    count = kb.product(rows_shape[:len(rows_shape) - len(tail)])  # [R] or [B, S] rows
    row = numel(tail)
    any_bad = slot_out_of_range(kb, slots, positions, count, n_slots, capacity)
    with kb.loop(0, kb.select(any_bad, kb.index(0), kb.index(count))) as r_loop:
        slot = load_index(kb, slots, r_loop.iv, i32)
        position = load_index(kb, positions, r_loop.iv, i32)
        dst = kb.gep(out, kb.mul(kb.add(kb.mul(slot, capacity), position), row), element)
        copy_elements(kb, kb.gep(rows, kb.mul(r_loop.iv, row), element), dst, row, element)
    kb.ret(kb.select(any_bad, kb.constant(STATUS_SLOT_OUT_OF_RANGE, i32),
                     kb.constant(STATUS_OK, i32)))
    return kb.finish()
