"""Kernels of the "map" family: `lir.elementwise`, `lir.fused_elementwise`, `lir.broadcast_to`,
`lir.copy`, `lir.constant`, `lir.transpose`, `lir.narrow` and `lir.concat`.

Each builder is `build_X(op, name, vector_width) -> llvm.FuncOp` over one pointer per memref
operand (the `out` buffer last); shapes are static and baked in.

All of them but `constant` are one shared N-D *strided map* (`strided_map`): `out` is
visited over an iteration shape in row-major order, and every operand (out included) has
a base offset and one stride per iteration dim, in elements: 0 where an input broadcasts,
permuted for `transpose`, the source's strides plus a start offset for `narrow`, the
destination's strides plus a slice offset for `concat`. Before emitting loops the map is
canonicalized: size-1 dims are dropped and adjacent dims merge when every operand is
contiguous across them, so a same-shape op is one flat loop over numel and
[4, 8, 32] + [32] is a 32 × 32 nest. The innermost dim is vectorized (vector<W x T> loop,
then a scalar tail) when out's and every input's innermost stride is 1 or 0; an input
with stride 0 there is loaded once per row (and splat). Otherwise (a transpose) the
innermost loop is scalar with strided loads, blocked TILE x TILE with the outer dim along
which the input is contiguous, so both the reads and the writes of a block hit the cache.

With `?` dims the map ops are row-driven (dynamic.py) where every symbol leads every
shape; otherwise (`exp` of [4, S], a transpose of [S, 4]) `runtime_map` walks out's
run-time shape with run-time strides, without canonicalizing (a transpose-like map is
still blocked TILE x TILE).

Partitioned variants (`partitioned=True`, for multi-threaded graphs) take two more i64
arguments `(part, parts)` and run the same map on a share of it: the canonical
iteration space is cut into units of W consecutive elements of a row (a row shorter than
W is one unit) — whole rows, or column ranges starting at multiples of W when rows are
long or few — and part p gets units [U·p/parts, U·(p+1)/parts), so the shares are
balanced, disjoint and stay vector-aligned within each row; a tiled (transpose) map
splits into (outer index, TILE-row block) items instead. The serial kernel is the same
code with constant bounds.

Element functions are scalar bodies of arith/math ops, translated op by op (`translate_ops`)
once for the vector body and once for the scalar tail: `fused_elementwise` its region,
`elementwise` the body of its fn, defined once in `rlx_mlir.dialects.elementwise_fns`
(or, for sigmoid/silu/gelu/gelu_tanh on f32, a more accurate dedicated primitive,
`DEDICATED`). math ops become the polynomials of `rlx_mlir.passes.lir_to_llvm.vmath`
(exp/log/tanh/erf/...), so no loop calls libm.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass

import numpy as np
from xdsl.dialects import arith, llvm
from xdsl.dialects import math as xmath
from xdsl.dialects.builtin import (
    DenseIntOrFPElementsAttr,
    FloatAttr,
    IndexType,
    IntegerAttr,
    f32,
    i1,
    i8,
    i32,
    i64,
)
from xdsl.ir import Attribute, Block, Operation, SSAValue
from xdsl.traits import IsTerminator

from rlx_mlir.core.dtypes import llvm_element
from rlx_mlir.dialects import lir
from rlx_mlir.dialects.common import shape_of
from rlx_mlir.dialects.elementwise_fns import BODIES, ElementwiseFn, ScalarBody, scalar_block
from rlx_mlir.passes.lir_to_llvm import vmath
from rlx_mlir.passes.lir_to_llvm.builder import PTR, KernelBuilder, Value, vector_type
from rlx_mlir.passes.lir_to_llvm.dynamic import (
    RuntimeDims,
    is_dynamic,
    kernel_symbols,
    memref_operands,
    runtime_rows,
)
from rlx_mlir.passes.lir_to_llvm.record import kernel

# ----------------------------------------------------------------------------- types


def row_major_strides(shape: Sequence[int]) -> list[int]:
    strides, step = [], 1
    for dim in reversed(shape):
        strides.append(step)
        step *= dim
    return strides[::-1]


def broadcast_strides(shape: Sequence[int], target: Sequence[int]) -> list[int]:
    """Strides (in elements) of a row-major `shape` broadcast numpy-style to `target`."""
    own = row_major_strides(shape)
    lead = len(target) - len(shape)
    return [0] * lead + [0 if dim == 1 else stride for dim, stride in zip(shape, own, strict=True)]


# ----------------------------------------------------------------------------- the strided map


@dataclass
class Operand:
    """A buffer visited by a strided map: element (i, j, ...) of the iteration space is
    `ptr[offset + i·strides[0] + j·strides[1] + ...]`."""

    ptr: SSAValue
    strides: list[int]
    offset: int = 0
    element: Attribute = f32


ElementFn = Callable[[list[SSAValue], bool], SSAValue]
"""(the inputs' values at one position, vector?) -> out's value there; the values are
scalars, or vectors of W lanes when `vector`."""


def canonicalize(shape: Sequence[int],
                 strides: Sequence[Sequence[int]]) -> tuple[list[int], list[list[int]]]:
    """Drop size-1 dims and merge adjacent dims over which every operand is contiguous
    (stride[d] == stride[d+1]·size[d+1]); returns the new shape and per-operand strides."""
    keep = [d for d, size in enumerate(shape) if size != 1]
    dims = [shape[d] for d in keep]
    per = [[s[d] for d in keep] for s in strides]
    d = len(dims) - 1
    while d > 0:
        if all(s[d - 1] == s[d] * dims[d] for s in per):
            dims[d - 1 : d + 1] = [dims[d - 1] * dims[d]]
            for s in per:
                s[d - 1 : d + 1] = [s[d]]
        d -= 1
    return dims, per


def _offset(kb: KernelBuilder, base: SSAValue | int, index: SSAValue,
            stride: int) -> SSAValue | int:
    if stride == 0:
        return base
    step = index if stride == 1 else kb.mul(index, stride)
    return step if isinstance(base, int) and base == 0 else kb.add(base, step)


Share = tuple[SSAValue, SSAValue]
"""The runtime (part, parts) of a partitioned kernel: 0 <= part < parts."""



def strided_map(kb: KernelBuilder, shape: Sequence[int], out: Operand, inputs: Sequence[Operand],
                fn: ElementFn, share: Share | None = None) -> None:
    """out[p] = fn(inputs[p]) for every position p of `shape` (see the module docstring);
    with `share` = (part, parts) only part's share of the positions."""
    operands = [*inputs, out]
    dims, strides = canonicalize(shape, [op.strides for op in operands])
    if not dims:  # a single element
        dims, strides = [1], [[0] for _ in operands]
    bases: list[SSAValue | int] = [op.offset for op in operands]
    k = tile_dim(dims, strides)
    if k is None:
        if share is None:
            _outer_loops(kb, dims[:-1], strides, bases, lambda row_bases: _map_row(
                kb, dims[-1], [s[-1] for s in strides], operands, row_bases, fn))
        else:
            _map_share(kb, dims, strides, operands, bases, fn, share)
        return
    # a transpose-like map: visit dim k and the innermost dim in TILE x TILE blocks
    order = [d for d in range(len(dims) - 1) if d != k] + [k, len(dims) - 1]
    dims = [dims[d] for d in order]
    strides = [[s[d] for d in order] for s in strides]
    if share is None:
        _outer_loops(kb, dims[:-2], strides, bases, lambda block_bases: _row_blocks(
            kb, dims, strides, operands, block_bases, fn))
    else:
        _tiles_share(kb, dims, strides, operands, bases, fn, share)


TILE = 16
"""Block edge of transpose-like maps (reads and writes of a block stay in L1)."""


def tile_dim(dims: Sequence[Value], strides: Sequence[Sequence[Value]]) -> int | None:
    """When an input is read with a stride other than 0 or 1 along the innermost dim (a
    transpose), an outer dim along which that input is contiguous, if it and the
    innermost dim are both at least TILE long (a run-time size counts as long); else
    None."""
    def long(d: Value) -> bool:
        return not isinstance(d, int) or d >= TILE

    last = len(dims) - 1
    for s in strides[:-1]:
        if not (isinstance(s[last], int) and s[last] in (0, 1)):
            for k in range(last - 1, -1, -1):
                if isinstance(s[k], int) and s[k] == 1 and long(dims[k]) and long(dims[last]):
                    return k
            return None
    return None


def _block_end(kb: KernelBuilder, start: SSAValue, n: Value) -> SSAValue:
    end = kb.add(start, TILE)
    if isinstance(n, int) and n % TILE == 0:
        return end
    return vmath.select(kb, kb.icmp("slt", end, n), end, kb.index(n))


def _outer_loops(kb: KernelBuilder, outer: Sequence[int], strides: list[list[int]],
                 bases: list[SSAValue | int], body: Callable[[list[SSAValue | int]], None],
                 level: int = 0) -> None:
    """Nested loops over the `outer` (leading) dims, outermost first; in the innermost
    one, `body(bases)` with every operand's base advanced to that position."""
    if level == len(outer):
        body(bases)
        return
    with kb.loop(0, outer[level]) as loop:
        inner = [_offset(kb, b, loop.iv, s[level]) for b, s in zip(bases, strides, strict=True)]
        _outer_loops(kb, outer, strides, inner, body, level + 1)


def _row_blocks(kb: KernelBuilder, dims: list[int], strides: list[list[int]],
                operands: list[Operand], bases: list[SSAValue | int], fn: ElementFn) -> None:
    """TILE x TILE blocks of the last two dims, scalar inside, TILE rows at a time."""
    with kb.loop(0, dims[-2], TILE) as row_block:
        _tile_row_block(kb, dims[-2:], strides, operands, bases, fn, row_block.iv)


def _tile_row_block(kb: KernelBuilder, sizes: Sequence[int], strides: list[list[int]],
                    operands: list[Operand], bases: list[SSAValue | int], fn: ElementFn,
                    row_start: SSAValue) -> None:
    """Rows [row_start, row_start + TILE) of the last two dims (clipped), TILE x TILE
    blocks along the columns, scalar inside."""
    rows, cols = sizes
    *ins, out = operands
    row_end = _block_end(kb, row_start, rows)
    with kb.loop(0, cols, TILE) as col_block:
        col_end = _block_end(kb, col_block.iv, cols)
        with kb.loop(row_start, row_end) as row:
            row_bases = [_offset(kb, b, row.iv, s[-2]) for b, s in zip(bases, strides, strict=True)]
            with kb.loop(col_block.iv, col_end) as col:
                at = [_offset(kb, b, col.iv, s[-1])
                      for b, s in zip(row_bases, strides, strict=True)]
                values = [kb.load(op.ptr, a, element=op.element)
                          for op, a in zip(ins, at[:-1], strict=True)]
                kb.store(fn(values, False), out.ptr, at[-1], element=out.element)


def _tiles_share(kb: KernelBuilder, dims: list[int], strides: list[list[int]],
                 operands: list[Operand], bases: list[SSAValue | int], fn: ElementFn,
                 share: Share) -> None:
    """The tiled map on part's share of the (outer index, TILE-row block) items."""
    *outer, rows, _ = dims
    blocks = -(-rows // TILE)
    first, last = kb.part_range(math.prod(outer) * blocks, *share)
    with kb.loop(first, last) as item:
        row_bases = bases
        if outer:
            row_bases = _row_bases(kb, kb.sdiv(item.iv, blocks), outer, strides, bases)
        block = kb.srem(item.iv, blocks) if outer else item.iv
        _tile_row_block(kb, dims[-2:], strides, operands, row_bases, fn, kb.mul(block, TILE))


def _row_bases(kb: KernelBuilder, row: SSAValue, outer: Sequence[int], strides: list[list[int]],
               bases: list[SSAValue | int]) -> list[SSAValue | int]:
    """The operands' offsets at flat index `row` of the (row-major) outer dims."""
    rest = row
    for d in range(len(outer) - 1, -1, -1):
        index = rest if d == 0 else kb.srem(rest, outer[d])
        if d:
            rest = kb.sdiv(rest, outer[d])
        bases = [_offset(kb, b, index, s[d]) for b, s in zip(bases, strides, strict=True)]
    return bases


def _map_share(kb: KernelBuilder, dims: list[int], strides: list[list[int]],
               operands: list[Operand], bases: list[SSAValue | int], fn: ElementFn,
               share: Share) -> None:
    """The map on part's share of units of W columns (see the module docstring)."""
    *outer, n = dims
    inner = [s[-1] for s in strides]
    w = kb.vector_width
    per_row = -(-n // w)
    rows = math.prod(outer)
    first, last = kb.part_range(rows * per_row, *share)
    if rows == 1:  # one row: a column range
        hi = vmath.select(kb, kb.icmp("eq", last, per_row), kb.index(n), kb.mul(last, w))
        _map_row(kb, n, inner, operands, bases, fn, kb.mul(first, w), hi)
        return
    if per_row == 1:  # short rows: whole rows
        with kb.loop(first, last) as row:
            _map_row(kb, n, inner, operands, _row_bases(kb, row.iv, outer, strides, bases), fn)
        return
    # rows [row0, ceil(last / per_row)); the first and the last may be partial
    row0, row1 = kb.sdiv(first, per_row), kb.sdiv(last, per_row)
    col0, col1 = (kb.mul(kb.srem(u, per_row), w) for u in (first, last))
    with kb.loop(row0, kb.sdiv(kb.add(last, per_row - 1), per_row)) as row:
        lo = vmath.select(kb, kb.icmp("eq", row.iv, row0), col0, kb.index(0))
        hi = vmath.select(kb, kb.icmp("eq", row.iv, row1), col1, kb.index(n))
        _map_row(kb, n, inner, operands, _row_bases(kb, row.iv, outer, strides, bases), fn,
                 lo, hi)


def _map_row(kb: KernelBuilder, n: Value, inner_strides: list[int], operands: list[Operand],
             bases: list[SSAValue | int], fn: ElementFn, lo: Value = 0,
             hi: Value | None = None) -> None:
    """Positions [lo, hi) (default: all n) of one innermost row: a vector loop when every
    operand is contiguous or constant along it, then a scalar tail. `n` and the strides
    may be run-time values (`runtime_map`; a run-time stride is never vectorized)."""
    hi = n if hi is None else hi
    *ins, out = operands
    *in_bases, out_base = bases
    *in_strides, out_stride = inner_strides
    # inputs constant along the innermost dim: one load per row, hoisted out of the loop
    hoisted = {i: kb.load(op.ptr, b, element=op.element)
               for i, (op, b, s) in enumerate(zip(ins, in_bases, in_strides, strict=True))
               if s == 0}
    w = kb.vector_width
    vectorize = (out_stride == 1 and all(isinstance(s, int) and s in (0, 1) for s in in_strides)
                 and (not isinstance(n, int) or n >= w))
    vector_end: Value = lo
    if vectorize:
        if isinstance(lo, int) and isinstance(hi, int):
            vector_end = lo + (hi - lo) // w * w
        else:
            vector_end = kb.sub(hi, kb.srem(kb.sub(hi, lo), w))
        splats = {i: kb.splat(v, w) for i, v in hoisted.items()}
        with kb.loop(lo, vector_end, w) as loop:
            values = [splats[i] if i in splats else
                      kb.load(op.ptr, _offset(kb, b, loop.iv, 1), vector=True, element=op.element)
                      for i, (op, b) in enumerate(zip(ins, in_bases, strict=True))]
            kb.store(fn(values, True), out.ptr, _offset(kb, out_base, loop.iv, 1),
                     element=out.element)
    if not (isinstance(vector_end, int) and isinstance(hi, int) and vector_end >= hi):
        with kb.loop(vector_end, hi) as loop:
            values = [hoisted[i] if i in hoisted else
                      kb.load(op.ptr, _offset(kb, b, loop.iv, s), element=op.element)
                      for i, (op, b, s) in enumerate(zip(ins, in_bases, in_strides, strict=True))]
            kb.store(fn(values, False), out.ptr, _offset(kb, out_base, loop.iv, out_stride),
                     element=out.element)


# ----------------------------------------------------------------------------- run-time sizes

InputStrides = Callable[[KernelBuilder, Sequence[Value], Sequence[Value]],
                        tuple[list[Value], Value]]
"""(kb, an input's run-time shape, out's run-time shape) -> the input's strides along
out's dims and its base offset, in elements."""


def runtime_row_major(kb: KernelBuilder, shape: Sequence[Value]) -> list[Value]:
    """Row-major strides of a shape with run-time sizes (ints where they fold)."""
    strides: list[Value] = []
    step: Value = 1
    for dim in reversed(shape):
        strides.append(step)
        step = runtime_rows(kb, [step, dim])
    return strides[::-1]


def runtime_broadcast(kb: KernelBuilder, shape: Sequence[Value],
                      target: Sequence[Value]) -> tuple[list[Value], Value]:
    """`broadcast_strides` over run-time sizes (only a static 1 broadcasts), offset 0."""
    own = runtime_row_major(kb, shape)
    lead = len(target) - len(shape)
    return [0] * lead + [0 if isinstance(dim, int) and dim == 1 else stride
                         for dim, stride in zip(shape, own, strict=True)], 0


def runtime_map(op: Operation, name: str, vector_width: int, partitioned: bool,
                input_strides: InputStrides,
                element_fn: Callable[[KernelBuilder], ElementFn]) -> llvm.FuncOp:
    """The strided map of an op whose `?` dims do not all lead its shapes, so that the row
    driver cannot serve it (dynamic.py; e.g. exp of [4, S], a transpose of [S, 4]): the
    kernel takes the size of each symbol (dynamic.py's ABI) and walks out's run-time
    shape, every operand's strides computed from the sizes. Static size-1 dims are
    dropped, no dims merge; the innermost dim is vectorized where every stride along it
    is a static 0 or 1, and a transpose-like map is blocked TILE x TILE as `strided_map`
    does (`tile_dim`). A partitioned kernel splits the outermost dim (a 2-D tiled map:
    its TILE-row blocks)."""
    memrefs = memref_operands(op)
    count, symbols = len(memrefs), kernel_symbols(op)
    kb = KernelBuilder(name, [PTR] * count + [i64] * len(symbols) + [i64, i64] * partitioned,
                       vector_width=vector_width)
    dims = RuntimeDims.of(op, kb.args[count:count + len(symbols)])
    out_shape = dims.shape(count - 1)
    elements = [llvm_element(v.type.get_element_type()) for v in memrefs]
    operands = [Operand(kb.args[i], *input_strides(kb, dims.shape(i), out_shape), elements[i])
                for i in range(count - 1)]
    operands.append(Operand(kb.args[count - 1], runtime_row_major(kb, out_shape), 0,
                            elements[-1]))
    keep = [d for d, size in enumerate(out_shape) if not (isinstance(size, int) and size == 1)]
    sizes = [out_shape[d] for d in keep]
    strides = [[o.strides[d] for d in keep] for o in operands]
    bases: list[SSAValue | int] = [o.offset for o in operands]
    fn = element_fn(kb)
    k = tile_dim(sizes, strides) if len(sizes) > 1 else None
    if k is not None:
        order = [d for d in range(len(sizes) - 1) if d != k] + [k, len(sizes) - 1]
        sizes = [sizes[d] for d in order]
        strides = [[s[d] for d in order] for s in strides]
        _runtime_tiles(kb, sizes, strides, operands, bases, fn,
                       (kb.args[-2], kb.args[-1]) if partitioned else None)
        kb.ret()
        return kb.finish()

    def row(row_bases: list[SSAValue | int], lo: Value = 0, hi: Value | None = None) -> None:
        _map_row(kb, sizes[-1], [s[-1] for s in strides], operands, row_bases, fn, lo, hi)

    if not partitioned:
        _outer_loops(kb, sizes[:-1], strides, bases, row)
    elif len(sizes) == 1:
        row(bases, *kb.part_range(sizes[0], *kb.args[-2:]))
    else:
        with kb.loop(*kb.part_range(sizes[0], *kb.args[-2:])) as first:
            start = [_offset(kb, b, first.iv, s[0]) for b, s in zip(bases, strides, strict=True)]
            _outer_loops(kb, sizes[1:-1], [s[1:] for s in strides], start, row)
    kb.ret()
    return kb.finish()


def _runtime_tiles(kb: KernelBuilder, sizes: list[Value], strides: list[list[Value]],
                   operands: list[Operand], bases: list[SSAValue | int], fn: ElementFn,
                   share: Share | None) -> None:
    """The tiled (transpose-like) map over run-time sizes: TILE x TILE blocks of the last
    two dims in loops over the others; a share splits the first outer dim, or with none
    the TILE-row blocks."""
    def blocks(block_bases: list[SSAValue | int]) -> None:
        _row_blocks(kb, sizes, strides, operands, block_bases, fn)  # type: ignore[arg-type]

    if share is None:
        _outer_loops(kb, sizes[:-2], strides, bases, blocks)  # type: ignore[arg-type]
    elif len(sizes) > 2:
        with kb.loop(*kb.part_range(sizes[0], *share)) as first:
            start = [_offset(kb, b, first.iv, s[0]) for b, s in zip(bases, strides, strict=True)]
            _outer_loops(kb, sizes[1:-2], [s[1:] for s in strides], start, blocks)  # type: ignore[arg-type]
    else:
        with kb.loop(*kb.part_range(kb.ceil_div(sizes[0], TILE), *share)) as block:
            _tile_row_block(kb, sizes, strides, operands, bases, fn,  # type: ignore[arg-type]
                            kb.mul(block.iv, TILE))


def _same_strides(kb: KernelBuilder, shape: Sequence[Value],
                  out: Sequence[Value]) -> tuple[list[Value], Value]:
    return runtime_row_major(kb, shape), 0


def _copy_fn(kb: KernelBuilder) -> ElementFn:
    return lambda values, _: values[0]


# ----------------------------------------------------------------------------- element functions

DEDICATED: dict[ElementwiseFn, Callable[[KernelBuilder, SSAValue], SSAValue]] = {
    ElementwiseFn.SIGMOID: vmath.sigmoid,
    ElementwiseFn.SILU: vmath.silu,
    ElementwiseFn.GELU: vmath.gelu,
    ElementwiseFn.GELU_TANH: vmath.gelu_tanh,
}
"""The f32 functions whose `lir.elementwise` kernel calls a vector-math primitive instead
of translating the scalar body of `elementwise_fns.BODIES`: the same function, computed
more accurately than its composition, in its tails (sigmoid's and silu's negative tail
through e^-|x|, x folded into e^x before its last scaling; gelu's erfc tail and
gelu_tanh's argument carried in double-f32; see vmath.py's docstrings). A fused body
keeps the plain composition: cheaper, and as accurate outside those tails."""


def element_function(kb: KernelBuilder, fn: ElementwiseFn,
                     arg_types: Sequence[Attribute]) -> ElementFn:
    """The code of `fn` on operands of `arg_types` (llvm scalar types) for `strided_map`:
    its dedicated primitive on f32 where it has one, else its scalar body (elementwise_fns)
    translated as a fused body is. A DTypeError where `fn` has no form for the types."""
    block, result = scalar_block(fn, arg_types)
    dedicated = DEDICATED.get(fn) if all(ty == f32 for ty in arg_types) else None
    if dedicated is not None:
        return lambda values, _: dedicated(kb, *values)
    return lambda values, vector: translate_ops(kb, block.ops, result,
                                                dict(zip(block.args, values, strict=True)),
                                                vector)


GluFn = Callable[[SSAValue, SSAValue, bool], SSAValue]
"""glu(gate, up, vector): act(gate) * up on f32 scalars, or on vectors of W lanes."""


def glu_function(kb: KernelBuilder, act: ElementwiseFn) -> GluFn:
    """act(gate) * up as the `lir.fused_elementwise` of mir-fuse's tree of the two ops
    computes it: their scalar bodies (`BODIES`, the plain composition, not `DEDICATED`) in
    one body, translated as a fused body is; so a q8 kernel's glu epilogue gives the bits
    of that kernel."""
    block = Block(arg_types=[f32, f32])
    body = ScalarBody(block)
    gate, up = block.args
    result = BODIES[ElementwiseFn.MUL](body, BODIES[act](body, gate), up)
    return lambda g, u, vector: translate_ops(kb, block.ops, result, {gate: g, up: u}, vector)


# ----------------------------------------------------------------------------- builders


def _kernel(op: Operation, name: str, vector_width: int, partitioned: bool = False,
            ) -> tuple[KernelBuilder, list[SSAValue], Share | None]:
    """A kernel over one pointer per operand of `op`; partitioned, also (part, parts)."""
    count = len(op.operands)
    kb = KernelBuilder(name, [PTR] * count + [i64, i64] * partitioned, vector_width=vector_width)
    args = list(kb.args)
    return kb, args[:count], (args[count], args[count + 1]) if partitioned else None


def _broadcast_inputs(kb_args: Sequence[SSAValue], values: Sequence[SSAValue],
                      out_shape: Sequence[int]) -> list[Operand]:
    return [Operand(ptr, broadcast_strides(shape_of(v), out_shape), 0, llvm_element(v.type.get_element_type()))
            for ptr, v in zip(kb_args, values, strict=True)]


def _out_operand(ptr: SSAValue, value: SSAValue) -> Operand:
    return Operand(ptr, row_major_strides(shape_of(value)), 0, llvm_element(value.type.get_element_type()))


@kernel(lir.ElementwiseOp, partitioned=True, runtime_dims=True, along_symbols=True)
def build_elementwise(op: Operation, name: str, vector_width: int,
                      partitioned: bool = False) -> llvm.FuncOp:
    """out = fn(inputs...) with the inputs broadcast numpy-style to out's shape."""
    assert isinstance(op, lir.ElementwiseOp)
    types = [llvm_element(v.type.get_element_type()) for v in op.inputs]
    if is_dynamic(op):
        return runtime_map(op, name, vector_width, partitioned, runtime_broadcast,
                           lambda kb: element_function(kb, ElementwiseFn(op.fn.data), types))
    kb, args, share = _kernel(op, name, vector_width, partitioned)
    fn = element_function(kb, ElementwiseFn(op.fn.data), types)
    out_shape = shape_of(op.out)
    inputs = _broadcast_inputs(args[:-1], list(op.inputs), out_shape)
    strided_map(kb, out_shape, _out_operand(args[-1], op.out), inputs, fn, share)
    kb.ret()
    return kb.finish()


def _copy_map(op: Operation, name: str, vector_width: int,
              input_strides: Callable[[Sequence[int], Sequence[int]], tuple[list[int], int]],
              partitioned: bool) -> llvm.FuncOp:
    """out = input viewed through (strides, offset) = input_strides(input shape, out shape)."""
    kb, (src, dst), share = _kernel(op, name, vector_width, partitioned)
    source, out = op.operands
    strides, offset = input_strides(shape_of(source), shape_of(out))
    strided_map(kb, shape_of(out), _out_operand(dst, out),
                [Operand(src, strides, offset, llvm_element(source.type.get_element_type()))], lambda v, _: v[0],
                share)
    kb.ret()
    return kb.finish()


@kernel(lir.BroadcastToOp, partitioned=True, runtime_dims=True, along_symbols=True)
def build_broadcast_to(op: Operation, name: str, vector_width: int,
                       partitioned: bool = False) -> llvm.FuncOp:
    """out = input broadcast (numpy rules) to out's shape."""
    assert isinstance(op, lir.BroadcastToOp)
    if is_dynamic(op):
        return runtime_map(op, name, vector_width, partitioned, runtime_broadcast, _copy_fn)
    return _copy_map(op, name, vector_width, lambda s, o: (broadcast_strides(s, o), 0),
                     partitioned)


@kernel(lir.CopyOp, partitioned=True, runtime_dims=True, along_symbols=True)
def build_copy(op: Operation, name: str, vector_width: int,
               partitioned: bool = False) -> llvm.FuncOp:
    """out = input (one flat vector loop)."""
    assert isinstance(op, lir.CopyOp)
    if is_dynamic(op):
        return runtime_map(op, name, vector_width, partitioned, _same_strides, _copy_fn)
    return _copy_map(op, name, vector_width, lambda s, o: (row_major_strides(s), 0),
                     partitioned)


@kernel(lir.TransposeOp, partitioned=True, runtime_dims=True, along_symbols=True)
def build_transpose(op: Operation, name: str, vector_width: int,
                    partitioned: bool = False) -> llvm.FuncOp:
    """out = input with its dims permuted: out dim i walks input dim perm[i]."""
    assert isinstance(op, lir.TransposeOp)
    rank = len(shape_of(op.input))
    perm = [p % rank for p in op.perm.get_values()] if rank else []
    if is_dynamic(op):
        def permuted(kb: KernelBuilder, shape: Sequence[Value],
                     _: Sequence[Value]) -> tuple[list[Value], Value]:
            own = runtime_row_major(kb, shape)
            return [own[p] for p in perm], 0
        return runtime_map(op, name, vector_width, partitioned, permuted, _copy_fn)

    def strides(shape: Sequence[int], _: Sequence[int]) -> tuple[list[int], int]:
        own = row_major_strides(shape)
        return [own[p] for p in perm], 0

    return _copy_map(op, name, vector_width, strides, partitioned)


@kernel(lir.NarrowOp, partitioned=True, runtime_dims=True, along_symbols=True)
def build_narrow(op: Operation, name: str, vector_width: int,
                 partitioned: bool = False) -> llvm.FuncOp:
    """out = input[..., start:start+length, ...] along `axis` (a strided copy)."""
    assert isinstance(op, lir.NarrowOp)
    shape = shape_of(op.input)
    axis = op.axis.value.data % len(shape)
    start = op.start.value.data
    if is_dynamic(op):
        def sliced(kb: KernelBuilder, shape: Sequence[Value],
                   _: Sequence[Value]) -> tuple[list[Value], Value]:
            own = runtime_row_major(kb, shape)
            return own, runtime_rows(kb, [start, own[axis]])
        return runtime_map(op, name, vector_width, partitioned, sliced, _copy_fn)

    def strides(shape: Sequence[int], _: Sequence[int]) -> tuple[list[int], int]:
        own = row_major_strides(shape)
        return own, start * own[axis]

    return _copy_map(op, name, vector_width, strides, partitioned)


@kernel(lir.ConcatOp, partitioned=True, runtime_dims=True)
def build_concat(op: Operation, name: str, vector_width: int,
                 partitioned: bool = False) -> llvm.FuncOp:
    """out = inputs joined along `axis`: each input is copied into its slice of out."""
    assert isinstance(op, lir.ConcatOp)
    if is_dynamic(op):
        return _build_dynamic_concat(op, name, vector_width, partitioned)
    kb, args, share = _kernel(op, name, vector_width, partitioned)
    out_shape = shape_of(op.out)
    axis = op.axis.value.data % len(out_shape)
    out_strides = row_major_strides(out_shape)
    element = llvm_element(op.out.type.get_element_type())
    position = 0
    for ptr, value in zip(args[:-1], op.inputs, strict=True):
        shape = shape_of(value)
        target = Operand(args[-1], out_strides, position * out_strides[axis], element)
        strided_map(kb, shape, target,
                    [Operand(ptr, row_major_strides(shape), 0, element)], lambda v, _: v[0],
                    share)
        position += shape[axis]
    kb.ret()
    return kb.finish()


def _build_dynamic_concat(op: lir.ConcatOp, name: str, vector_width: int,
                          partitioned: bool) -> llvm.FuncOp:
    """A concat over `?` dims (dynamic.py's ABI), the concat axis symbolic too (the causal
    conv's padding along S): row-major, out is `outer` blocks (the dims before the axis),
    each the inputs' blocks (their length along the axis x the dims after it) in order,
    every count read from the run-time sizes; a partitioned kernel splits the outer
    blocks."""
    count = len(op.operands)
    symbols = kernel_symbols(op)
    kb = KernelBuilder(name, [PTR] * count + [i64] * len(symbols) + [i64, i64] * partitioned,
                       vector_width=vector_width)
    pointers = kb.args[:count]
    dims = RuntimeDims.of(op, kb.args[count:count + len(symbols)])
    out_shape = dims.shape(count - 1)
    axis = op.axis.value.data % len(out_shape)
    element = llvm_element(op.out.type.get_element_type())

    product = kb.product
    outer, inner = product(out_shape[:axis]), product(out_shape[axis + 1:])
    blocks = [product([dims.dim(i, axis), inner]) for i in range(count - 1)]
    out_block = product([out_shape[axis], inner])
    first, last = (0, outer) if not partitioned else kb.part_range(outer, *kb.args[-2:])
    with kb.loop(first, last) as o_loop:
        offset: Value = 0
        for pointer, block in zip(pointers[:-1], blocks, strict=True):
            src = kb.gep(pointer, kb.mul(o_loop.iv, block), element)
            dst = kb.gep(pointers[-1], kb.add(kb.mul(o_loop.iv, out_block), offset), element)
            _copy_run_time(kb, src, dst, block, element)
            offset = offset + block if isinstance(offset, int) and isinstance(block, int) \
                else kb.add(offset, block)
    kb.ret()
    return kb.finish()


def _copy_run_time(kb: KernelBuilder, src: SSAValue, dst: SSAValue, count: Value,
                   element: Attribute) -> None:
    """dst[0:count] = src[0:count]: W elements at a time, then a scalar tail."""
    w = kb.vector_width
    vector_end: Value = count // w * w if isinstance(count, int) else kb.mul(kb.sdiv(count, w), w)
    with kb.loop(0, vector_end, w) as loop:
        kb.store(kb.load(src, loop.iv, vector=True, element=element), dst, loop.iv,
                 element=element)
    with kb.loop(vector_end, count) as loop:
        kb.store(kb.load(src, loop.iv, element=element), dst, loop.iv, element=element)


_NUMPY_BITS = {f32: np.int32, i32: np.int32, i64: np.int64, i8: np.int8}
_BIT_TYPES = {f32: i32, i32: i32, i64: i64, i8: i8}


@kernel(lir.ConstantOp)
def build_constant(op: Operation, name: str, vector_width: int) -> llvm.FuncOp:
    """out = the op's dense value: a fill loop for a splat, else the value's bit patterns
    stored W elements at a time from vector constants (the data lives in the code)."""
    assert isinstance(op, lir.ConstantOp)
    kb, (dst,), _ = _kernel(op, name, vector_width)
    element = llvm_element(op.out.type.get_element_type())
    bits_type = _BIT_TYPES[element]
    data = np.frombuffer(op.value.data.data, dtype=_NUMPY_BITS[element]).ravel()
    shape = shape_of(op.out)
    if data.size and (data == data[0]).all():
        value = int(data[0])
        strided_map(kb, shape, Operand(dst, row_major_strides(shape), 0, bits_type), [],
                    lambda _, vector: kb.constant(value, _lane_type(kb, bits_type, vector)))
    else:
        w = vector_width
        vec = vector_type(w, bits_type)
        chunks: dict[bytes, SSAValue] = {}
        full = data.size // w * w
        for start in range(0, full, w):
            chunk = data[start : start + w]
            key = chunk.tobytes()
            if key not in chunks:
                attr = DenseIntOrFPElementsAttr.from_list(vec, [int(v) for v in chunk])
                chunks[key] = kb.insert(llvm.ConstantOp(attr, vec))
            kb.store(chunks[key], dst, start, element=bits_type)
        for start in range(full, data.size):
            kb.store(kb.constant(int(data[start]), bits_type), dst, start, element=bits_type)
    kb.ret()
    return kb.finish()


# ----------------------------------------------------------------------------- fused_elementwise


def _lane_type(kb: KernelBuilder, scalar: Attribute, vector: bool) -> Attribute:
    if isinstance(scalar, IndexType):
        scalar = i64
    return vector_type(kb.vector_width, scalar) if vector else scalar


def _cmpf(kb: KernelBuilder, op: arith.CmpfOp, a: SSAValue, b: SSAValue) -> SSAValue:
    predicate = arith.CMPF_COMPARISON_OPERATIONS[op.predicate.value.data]
    if predicate in ("false", "true"):
        return vmath.const(kb, int(predicate == "true"), vmath.mask_type(a.type))
    return vmath.fcmp(kb, predicate, a, b)


def _cmpi(kb: KernelBuilder, op: arith.CmpiOp, a: SSAValue, b: SSAValue) -> SSAValue:
    return vmath.icmp(kb, arith.CMPI_COMPARISON_OPERATIONS[op.predicate.value.data], a, b)


def _int_neg(kb: KernelBuilder, a: SSAValue) -> SSAValue:
    return kb.sub(vmath.const(kb, 0, a.type), a)


def _int_max(kb: KernelBuilder, a: SSAValue, b: SSAValue) -> SSAValue:
    return vmath.select(kb, vmath.icmp(kb, "sgt", a, b), a, b)


def _int_min(kb: KernelBuilder, a: SSAValue, b: SSAValue) -> SSAValue:
    return vmath.select(kb, vmath.icmp(kb, "slt", a, b), a, b)


def _int_abs(kb: KernelBuilder, a: SSAValue) -> SSAValue:
    return vmath.select(kb, vmath.icmp(kb, "slt", a, 0), _int_neg(kb, a), a)


BODY_OPS: dict[type[Operation], Callable[..., SSAValue]] = {
    arith.AddfOp: KernelBuilder.fadd,
    arith.SubfOp: KernelBuilder.fsub,
    arith.MulfOp: KernelBuilder.fmul,
    arith.DivfOp: KernelBuilder.fdiv,
    arith.NegfOp: KernelBuilder.fneg,
    arith.MaximumfOp: KernelBuilder.fmax,
    arith.MinimumfOp: KernelBuilder.fmin,
    arith.MaxnumfOp: lambda kb, a, b: kb.intrinsic("llvm.maxnum", [a, b], a.type),
    arith.MinnumfOp: lambda kb, a, b: kb.intrinsic("llvm.minnum", [a, b], a.type),
    arith.AddiOp: KernelBuilder.add,
    arith.SubiOp: KernelBuilder.sub,
    arith.MuliOp: KernelBuilder.mul,
    arith.MaxSIOp: _int_max,
    arith.MinSIOp: _int_min,
    arith.SelectOp: vmath.select,
    xmath.ExpOp: vmath.exp,
    xmath.LogOp: vmath.log,
    xmath.SqrtOp: vmath.sqrt,
    xmath.RsqrtOp: vmath.rsqrt,
    xmath.TanhOp: vmath.tanh,
    xmath.ErfOp: vmath.erf,
    xmath.PowFOp: vmath.pow,
    xmath.AbsFOp: KernelBuilder.fabs,
    xmath.AbsIOp: _int_abs,
    xmath.FmaOp: vmath.muladd,
}
"""How each scalar arith/math op of a body is emitted (on scalars or vectors; IEEE
max/min propagate NaN as numpy's, integers wrap like numpy's fixed-width ones)."""

BODY_OPS_WITH_OP: dict[type[Operation], Callable[..., SSAValue]] = {
    arith.CmpfOp: _cmpf,
    arith.CmpiOp: _cmpi,
}
"""Ops whose emission also needs the op itself (the comparison predicate)."""


def translate_ops(kb: KernelBuilder, ops: Iterable[Operation], result: SSAValue,
                  env: dict[SSAValue, SSAValue], vector: bool) -> SSAValue:
    """Emit the scalar arith/math `ops` with their operands looked up in `env` (the
    values of the body's arguments: scalars, or vectors of W lanes when `vector`, then
    every op works on vectors and constants become splats); returns `result`'s value.
    A terminator among `ops` ends the translation."""
    for body_op in ops:
        if body_op.has_trait(IsTerminator):
            break
        args = [env[v] for v in body_op.operands]
        if isinstance(body_op, arith.ConstantOp):
            attr = body_op.value
            assert isinstance(attr, FloatAttr | IntegerAttr), attr
            ty = _lane_type(kb, body_op.result.type, vector)
            value = attr.value.data
            if isinstance(attr, IntegerAttr) and body_op.result.type == i1:
                value = int(bool(value))
            env[body_op.results[0]] = vmath.const(kb, value, ty)
        elif type(body_op) in BODY_OPS:
            env[body_op.results[0]] = BODY_OPS[type(body_op)](kb, *args)
        elif type(body_op) in BODY_OPS_WITH_OP:
            env[body_op.results[0]] = BODY_OPS_WITH_OP[type(body_op)](kb, body_op, *args)
        else:
            raise NotImplementedError(f"no vector code generation for '{body_op.name}'")
    return env[result]


def translate_body(kb: KernelBuilder, block: Block, values: Sequence[SSAValue],
                   vector: bool) -> SSAValue:
    """Emit the scalar body `block` (arith/math ops, ending in a yield) on `values`, the
    block arguments' values (see `translate_ops`). Returns the yielded value."""
    assert block.last_op is not None, "a verified fused_elementwise body ends in lir.yield"
    return translate_ops(kb, block.ops, block.last_op.operands[0],
                         dict(zip(block.args, values, strict=True)), vector)


@kernel(lir.FusedElementwiseOp, partitioned=True, runtime_dims=True, along_symbols=True)
def build_fused_elementwise(op: Operation, name: str, vector_width: int,
                            partitioned: bool = False) -> llvm.FuncOp:
    """out = body(inputs...) at every element, the inputs broadcast to out's shape."""
    assert isinstance(op, lir.FusedElementwiseOp)
    if is_dynamic(op):
        block = op.body.block
        return runtime_map(op, name, vector_width, partitioned, runtime_broadcast,
                           lambda kb: lambda values, vector: translate_body(kb, block, values,
                                                                            vector))
    kb, args, share = _kernel(op, name, vector_width, partitioned)
    out_shape = shape_of(op.out)
    inputs = _broadcast_inputs(args[:-1], list(op.inputs), out_shape)
    block = op.body.block
    strided_map(kb, out_shape, _out_operand(args[-1], op.out), inputs,
                lambda values, vector: translate_body(kb, block, values, vector), share)
    kb.ret()
    return kb.finish()
