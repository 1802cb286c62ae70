"""A small structured builder for kernels in the llvm dialect.

Kernels are `llvm.func`s over raw pointers. This builder hides the block plumbing of
loops (a header block whose arguments are the induction variable and the carried
values, a body, an exit block whose arguments are the results) and gives short names
to the llvm ops a kernel needs, typed for `f32`, `vector<W x f32>` and `i64` index math:

```python
kb = KernelBuilder("axpy", [PTR, PTR], vector_width=16)
x, y = kb.args
with kb.loop(0, n // 16 * 16, 16) as i:
    kb.store(kb.fma(kb.vconst(2.0), kb.load(x, i, vector=True), kb.load(y, i, vector=True)), y, i)
kb.ret()
func = kb.finish()
```
Every load and store carries an explicit alignment (element alignment unless the
caller proves more), so numpy buffers need no 64-byte alignment.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass, field

from xdsl.builder import Builder, InsertPoint
from xdsl.dialects import llvm
from xdsl.dialects.builtin import (
    ArrayAttr,
    DenseArrayBase,
    DenseIntOrFPElementsAttr,
    DictionaryAttr,
    FloatAttr,
    IntegerAttr,
    IntegerType,
    UnitAttr,
    VectorType,
    f32,
    i32,
    i64,
)
from xdsl.ir import Attribute, Block, Operation, Region, SSAValue

from rlx_mlir.core.dtypes import element_bytes
from rlx_mlir.dialects.llvm_vector import VectorFCmpOp, VectorSelectOp

PTR = llvm.LLVMPointerType()
"""The opaque pointer type of kernel arguments."""

Value = SSAValue | int | float
"""An SSA value, or a Python number turned into a constant of the other operand's type."""

Index = SSAValue | int
"""An i64 SSA value or a Python int folded at build time."""

Span = tuple[Index, Index]
"""A half-open range [lo, hi) of rows or columns, bounds as Python ints or run-time i64."""

ChunkBody = Callable[[SSAValue, bool], None]
"""Emits the work on W (vector) or 1 (scalar) consecutive elements at an offset."""

Tile = Callable[[Index, int], None]
"""Emits one tile of a static size at a start index."""

_FAST = llvm.FastMathAttr([llvm.FastMathFlag.ALLOW_CONTRACT])
"""Scalar fadd/fmul may contract into an FMA; everything else keeps IEEE semantics."""


def vector_type(width: int, element: Attribute = f32) -> VectorType:
    return VectorType(element, [width])


@dataclass
class Loop:
    """A counted loop under construction: `iv` is the induction variable, `carried` the
    values threaded through iterations; after the `with` block `results` holds their
    final values."""

    iv: SSAValue
    carried: list[SSAValue]
    next_values: list[SSAValue] | None = None
    results: list[SSAValue] = field(default_factory=list)

    def yield_(self, *values: SSAValue) -> None:
        """The carried values for the next iteration (default: unchanged)."""
        self.next_values = list(values)


class KernelBuilder:
    """Builds one `llvm.func` with structured loops and typed arithmetic helpers."""

    def __init__(self, name: str, arg_types: Sequence[Attribute], *, vector_width: int,
                 result_type: Attribute | None = None, noalias: Sequence[bool] | None = None):
        self.name = name
        self.vector_width = vector_width
        self.vec = vector_type(vector_width)
        self.result_type = result_type
        self.entry = Block(arg_types=list(arg_types))
        self.region = Region(self.entry)
        self.builder = Builder(InsertPoint.at_end(self.entry))
        self._constants: dict[tuple[object, Attribute], SSAValue] = {}
        self._prologue_tail: Operation | None = None
        self._arg_attrs = [
            DictionaryAttr({"llvm.noalias": UnitAttr()} if is_noalias and ty == PTR else {})
            for ty, is_noalias in zip(arg_types, noalias or [True] * len(arg_types), strict=True)
        ]

    # ------------------------------------------------------------------ structure

    @property
    def args(self) -> tuple[SSAValue, ...]:
        return tuple(self.entry.args)

    def insert(self, op: Operation) -> SSAValue:
        self.builder.insert(op)
        return op.results[0] if op.results else None  # type: ignore[return-value]

    def finish(self) -> llvm.FuncOp:
        """The finished function (every path must have ended in `ret`)."""
        fn_type = llvm.LLVMFunctionType(
            [a.type for a in self.entry.args],
            self.result_type if self.result_type is not None else llvm.LLVMVoidType(),
        )
        return llvm.FuncOp(
            self.name, fn_type, linkage=llvm.LinkageAttr("external"), body=self.region,
            other_props={"arg_attrs": ArrayAttr(self._arg_attrs)},
        )

    def ret(self, value: SSAValue | None = None) -> None:
        self.insert(llvm.ReturnOp(value) if value is not None else llvm.ReturnOp())

    def new_block(self, arg_types: Sequence[Attribute] = ()) -> Block:
        """A new block at the end of the function, for control flow `loop`/`if_` do not cover."""
        block = Block(arg_types=list(arg_types))
        self.region.add_block(block)
        return block

    def move_to(self, block: Block) -> None:
        """Continue inserting at the end of `block`."""
        self.builder = Builder(InsertPoint.at_end(block))

    def for_each(self, count: Index, body: Callable[[Index], None]) -> None:
        """body(i) for i in [0, count): one inline call when count is the constant 1,
        else a loop."""
        if isinstance(count, int) and count == 1:
            body(0)
        else:
            with self.loop(0, count) as loop:
                body(loop.iv)

    @contextmanager
    def loop(self, start: Value, stop: Value, step: int = 1,
             carried: Sequence[SSAValue] = ()) -> Iterator[Loop]:
        """for iv in range(start, stop, step) with loop-carried values (step > 0)."""
        start_v, stop_v = self.index(start), self.index(stop)
        header = self.new_block([i64, *(c.type for c in carried)])
        body = self.new_block()
        exit_ = self.new_block([c.type for c in carried])
        self.insert(llvm.BrOp(header, start_v, *carried))
        self.move_to(header)
        iv, *state = header.args
        cond = self.icmp("slt", iv, stop_v)
        self.insert(llvm.CondBrOp(cond, body, [], exit_, list(state)))
        self.move_to(body)
        loop = Loop(iv, list(state))
        yield loop
        next_values = loop.next_values if loop.next_values is not None else loop.carried
        self.insert(llvm.BrOp(header, self.add(iv, step), *next_values))
        self.move_to(exit_)
        loop.results = list(exit_.args)

    @contextmanager
    def if_(self, cond: SSAValue) -> Iterator[None]:
        """Run the body only when `cond` (an i1) holds."""
        then, merge = self.new_block(), self.new_block()
        self.insert(llvm.CondBrOp(cond, then, [], merge, []))
        self.move_to(then)
        yield
        self.insert(llvm.BrOp(merge))
        self.move_to(merge)

    # ------------------------------------------------------------------ constants

    def constant(self, value: int | float, ty: Attribute) -> SSAValue:
        """A constant of type `ty` (a vector type gives a splat), made once per kernel in
        the entry block so that every later block may use it."""
        key = (repr(value), ty)  # repr keeps -0.0 apart from 0.0
        if key not in self._constants:
            if isinstance(ty, VectorType) and not isinstance(ty.element_type, IntegerType):
                # xDSL prints some f32 splats as hex bits that it parses back as an
                # integer value (dense<0x4B400000> -> 1.26e9), so splat a scalar instead.
                scalar = self.constant(value, ty.element_type)
                undef = llvm.UndefOp(ty)
                one = llvm.InsertElementOp(undef, scalar, self.constant(0, i32))
                mask = DenseArrayBase.from_list(i32, [0] * ty.get_shape()[0])
                ops: list[Operation] = [undef, one, llvm.ShuffleVectorOp(one, one, mask, ty)]
            elif isinstance(ty, VectorType):
                ops = [llvm.ConstantOp(DenseIntOrFPElementsAttr.from_list(ty, [int(value)]), ty)]
            elif isinstance(ty, IntegerType):
                ops = [llvm.ConstantOp(IntegerAttr(int(value), ty), ty)]
            else:
                ops = [llvm.ConstantOp(FloatAttr(float(value), ty), ty)]
            for op in ops:
                self._add_to_entry_prologue(op)
            self._constants[key] = ops[-1].results[0]
        return self._constants[key]

    def _add_to_entry_prologue(self, op: Operation) -> None:
        """Append to the run of constants at the top of the entry block (creation order)."""
        if self._prologue_tail is None:
            first = self.entry.first_op
            if first is None:
                self.entry.add_op(op)
            else:
                self.entry.insert_op_before(op, first)
        else:
            self.entry.insert_op_after(op, self._prologue_tail)
        self._prologue_tail = op

    def index(self, value: Value) -> SSAValue:
        return value if isinstance(value, SSAValue) else self.constant(int(value), i64)

    def fconst(self, value: float) -> SSAValue:
        return self.constant(float(value), f32)

    def vconst(self, value: float) -> SSAValue:
        """A constant vector<W x f32> with every lane `value`."""
        return self.constant(float(value), self.vec)

    def _like(self, value: Value, other: SSAValue) -> SSAValue:
        if isinstance(value, SSAValue):
            return value
        ty = other.type
        if isinstance(ty, VectorType):
            return self.constant(float(value) if ty.element_type == f32 else int(value), ty)
        if isinstance(ty, IntegerType):
            return self.constant(int(value), ty)
        return self.constant(float(value), ty)

    def pair(self, a: Value, b: Value) -> tuple[SSAValue, SSAValue]:
        """Two operands of one type: a Python number becomes a constant of the other's type."""
        if isinstance(a, SSAValue):
            return a, self._like(b, a)
        assert isinstance(b, SSAValue), "at least one operand must be an SSA value"
        return self._like(a, b), b

    # ------------------------------------------------------------------ integer (index) math

    def add(self, a: Value, b: Value) -> SSAValue:
        return self.insert(llvm.AddOp(*self.pair(a, b)))

    def sub(self, a: Value, b: Value) -> SSAValue:
        return self.insert(llvm.SubOp(*self.pair(a, b)))

    def mul(self, a: Value, b: Value) -> SSAValue:
        return self.insert(llvm.MulOp(*self.pair(a, b)))

    def product(self, sizes: Sequence[Index]) -> Index:
        """The product of `sizes` (ints fold; an i64 value when any is one)."""
        total: Index = 1
        for size in sizes:
            total = total * size if isinstance(total, int) and isinstance(size, int) \
                else self.mul(total, size)
        return total

    def sdiv(self, a: Value, b: Value) -> SSAValue:
        return self.insert(llvm.SDivOp(*self.pair(a, b)))

    def srem(self, a: Value, b: Value) -> SSAValue:
        return self.insert(llvm.SRemOp(*self.pair(a, b)))

    def icmp(self, predicate: str, a: Value, b: Value) -> SSAValue:
        lhs, rhs = self.pair(a, b)
        pred = IntegerAttr(llvm.ICmpPredicateFlag(predicate).to_int(), i64)
        return self.insert(llvm.ICmpOp(lhs, rhs, pred))

    def or_(self, a: SSAValue, b: SSAValue) -> SSAValue:
        return self.insert(llvm.OrOp(a, b))

    def sext(self, value: SSAValue, ty: Attribute = i64) -> SSAValue:
        return self.insert(llvm.SExtOp(value, ty))

    # ------------------------------------------------------------------ float math (scalar or vector)

    def fadd(self, a: Value, b: Value) -> SSAValue:
        return self.insert(llvm.FAddOp(*self.pair(a, b), _FAST))

    def fsub(self, a: Value, b: Value) -> SSAValue:
        return self.insert(llvm.FSubOp(*self.pair(a, b), _FAST))

    def fmul(self, a: Value, b: Value) -> SSAValue:
        return self.insert(llvm.FMulOp(*self.pair(a, b), _FAST))

    def fdiv(self, a: Value, b: Value) -> SSAValue:
        return self.insert(llvm.FDivOp(*self.pair(a, b)))

    def fneg(self, a: SSAValue) -> SSAValue:
        return self.insert(llvm.FNegOp(a))

    def fma(self, a: Value, b: Value, c: Value) -> SSAValue:
        """a * b + c: one fused instruction where the target has FMA (`llvm.fmuladd`, so a
        CPU without FMA gets a multiply and an add instead of a libm `fmaf` call)."""
        ref = next(v for v in (a, b, c) if isinstance(v, SSAValue))
        args = [self._like(a, ref), self._like(b, ref), self._like(c, ref)]
        return self.intrinsic("llvm.fmuladd", args, ref.type)

    def fcmp(self, predicate: str, a: Value, b: Value) -> SSAValue:
        """Compare floats (`olt`, `uge`, `uno`, ...): an i1, or a vector<W x i1> mask."""
        lhs, rhs = self.pair(a, b)
        return self.insert(VectorFCmpOp(lhs, rhs, predicate))

    def select(self, cond: SSAValue, a: Value, b: Value) -> SSAValue:
        """cond ? a : b (lane by lane for a mask)."""
        lhs, rhs = self.pair(a, b)
        return self.insert(VectorSelectOp(cond, lhs, rhs))

    def fmax(self, a: Value, b: Value) -> SSAValue:
        """max(a, b) propagating NaN like numpy.maximum."""
        lhs, rhs = self.pair(a, b)
        return self.intrinsic("llvm.maximum", [lhs, rhs], lhs.type)

    def fmin(self, a: Value, b: Value) -> SSAValue:
        """min(a, b) propagating NaN like numpy.minimum."""
        lhs, rhs = self.pair(a, b)
        return self.intrinsic("llvm.minimum", [lhs, rhs], lhs.type)

    # xDSL 0.74 has `llvm.FAbsOp`/`FSqrtOp` (and `FCopySignOp`, `VectorFMaxOp`, ...), but
    # its LLVM-IR converter declares them unmangled (`@llvm.fabs`), so a module using one
    # on both f32 and vector<16xf32> (every kernel with a scalar tail) fails to translate
    # (llvmlite: "Type of #1 arg mismatch"). Only `llvm.FMAOp` is declared per type; the
    # others stay calls of the type-mangled intrinsic.

    def fabs(self, a: SSAValue) -> SSAValue:
        return self.intrinsic("llvm.fabs", [a], a.type)

    def sqrt(self, a: SSAValue) -> SSAValue:
        return self.intrinsic("llvm.sqrt", [a], a.type)

    def floor(self, a: SSAValue) -> SSAValue:
        return self.intrinsic("llvm.floor", [a], a.type)

    def intrinsic(self, name: str, args: Sequence[SSAValue], result_type: Attribute) -> SSAValue:
        """Call an overloaded LLVM intrinsic; the type suffix is added from `result_type`."""
        return self.insert(llvm.CallIntrinsicOp(f"{name}.{mangle(result_type)}", args, [result_type]))

    def bitcast(self, value: SSAValue, ty: Attribute) -> SSAValue:
        return self.insert(llvm.BitcastOp(value, ty))

    def sitofp(self, value: SSAValue, ty: Attribute) -> SSAValue:
        return self.insert(llvm.SIToFPOp(value, ty))

    # ------------------------------------------------------------------ vectors

    def shuffle(self, a: SSAValue, b: SSAValue, lanes: Sequence[int]) -> SSAValue:
        """shufflevector(a, b, lanes): lanes index the concatenation of a and b; the result
        has len(lanes) lanes of their element type."""
        ty = vector_type(len(lanes), a.type.element_type)  # pyright: ignore[reportAttributeAccessIssue]
        return self.insert(llvm.ShuffleVectorOp(a, b, DenseArrayBase.from_list(i32, list(lanes)), ty))

    def splat(self, scalar: SSAValue, width: int | None = None) -> SSAValue:
        """Broadcast a scalar (f32 or an integer) into every lane of a vector<width x type>
        (width: the kernel's W unless given)."""
        width = width or self.vector_width
        one = self.insert(llvm.InsertElementOp(self.insert(llvm.UndefOp(vector_type(width, scalar.type))),
                                               scalar, self.constant(0, i32)))
        return self.shuffle(one, one, [0] * width)

    def hsum(self, v: SSAValue) -> SSAValue:
        """The sum of the lanes of a vector, as a tree of halving shuffles (not 16 serial adds)."""
        return self._horizontal(v, self.fadd)

    def hmax(self, v: SSAValue) -> SSAValue:
        return self._horizontal(v, self.fmax)

    def hmin(self, v: SSAValue) -> SSAValue:
        return self._horizontal(v, self.fmin)

    def _horizontal(self, v: SSAValue, combine) -> SSAValue:
        width = v.type.get_shape()[0]
        while width > 1:
            half = width // 2
            lo, hi = self.shuffle(v, v, range(half)), self.shuffle(v, v, range(half, width))
            v, width = combine(lo, hi), half
        return self.bitcast(v, f32)

    # ------------------------------------------------------------------ memory

    def gep(self, ptr: SSAValue, index: Value, element: Attribute = f32) -> SSAValue:
        """&ptr[index] for elements of type `element`."""
        return self.insert(llvm.GEPOp.from_mixed_indices(ptr, [self.index(index)], element, inbounds=True))

    def load(self, ptr: SSAValue, index: Value = 0, *, vector: bool = False,
             element: Attribute = f32, align: int | None = None) -> SSAValue:
        """ptr[index] (a scalar, or W consecutive elements when `vector`)."""
        ty = vector_type(self.vector_width, element) if vector else element
        address = ptr if (isinstance(index, int) and index == 0) else self.gep(ptr, index, element)
        return self.insert(llvm.LoadOp(address, ty, alignment=align or element_bytes(element)))

    def store(self, value: SSAValue, ptr: SSAValue, index: Value = 0, *,
              element: Attribute = f32, align: int | None = None) -> None:
        address = ptr if (isinstance(index, int) and index == 0) else self.gep(ptr, index, element)
        self.insert(llvm.StoreOp(value, address, alignment=align or element_bytes(element)))

    def call(self, callee: str, args: Sequence[SSAValue], result_type: Attribute | None = None) -> SSAValue | None:
        return self.insert(llvm.CallOp(callee, *args, return_type=result_type))

    def alloca(self, count: int, element: Attribute = f32, align: int = 64) -> SSAValue:
        """A stack buffer of `count` elements, allocated once in the entry block (an
        alloca inside a loop would grow the stack every iteration). Keep it small."""
        size = self.index(count)
        op = llvm.AllocaOp(size, element, alignment=align)
        self.entry.insert_op_after(op, size.owner)  # right after its size constant
        # xDSL converts an alloca to a typed `float*` in llvmlite, which refuses to store
        # vectors through it (also after a GEP); a ptr -> ptr bitcast makes it opaque.
        address = llvm.BitcastOp(op.results[0], PTR)
        self.entry.insert_op_after(address, op)
        return address.results[0]


    # ------------------------------------------------------------------ index folding
    # Index math over Python ints folds at build time; over i64 values it emits ops.

    def fold_add(self, a: Index, b: Index) -> Index:
        """a + b (an int when both are; no op for a constant 0)."""
        if isinstance(a, int) and isinstance(b, int):
            return a + b
        if isinstance(b, int) and b == 0:
            return a
        if isinstance(a, int) and a == 0:
            return b
        return self.add(a, b)

    def fold_mul(self, a: Index, b: int) -> Index:
        """a · b (an int for an int a; no op for b == 1)."""
        if isinstance(a, int):
            return a * b
        if b == 1:
            return a
        return self.mul(a, b)

    def fold_min(self, a: Index, b: Index) -> Index:
        if isinstance(a, int) and isinstance(b, int):
            return min(a, b)
        return self.select(self.icmp("slt", a, b), a, b)

    def fold_max(self, a: Index, b: Index) -> Index:
        if isinstance(a, int) and isinstance(b, int):
            return max(a, b)
        return self.select(self.icmp("sgt", a, b), a, b)

    def round_down(self, value: Index, unit: int) -> Index:
        """value // unit · unit (value ≥ 0)."""
        if isinstance(value, int):
            return value // unit * unit
        return value if unit == 1 else self.sub(value, self.srem(value, unit))

    def ceil_div(self, value: Index, unit: int) -> Index:
        """⌈value / unit⌉ (value ≥ 0)."""
        if isinstance(value, int):
            return -(-value // unit)
        return value if unit == 1 else self.sdiv(self.add(value, unit - 1), unit)

    def address(self, base: SSAValue, offset: Index, element: Attribute = f32) -> SSAValue:
        """&base[offset] (no GEP for a constant 0)."""
        if isinstance(offset, int) and offset == 0:
            return base
        return self.gep(base, offset, element)

    def part_range(self, total: Index, part: SSAValue, parts: SSAValue) -> tuple[SSAValue, SSAValue]:
        """Part `part`'s units [total·part/parts, total·(part+1)/parts) of `total` units:
        disjoint, covering, and balanced to within one unit (empty when total < parts)."""
        first = self.sdiv(self.mul(part, total), parts)
        last = self.sdiv(self.mul(self.add(part, 1), total), parts)
        return first, last

    # ------------------------------------------------------------------ masked vectors, prefetch

    def lane_mask(self, lanes: int) -> SSAValue:
        """vector<W x i1> with the first `lanes` lanes set (constant-folded by LLVM)."""
        iota = self.insert(llvm.UndefOp(self.vec))
        for t in range(self.vector_width):
            iota = self.insert(llvm.InsertElementOp(iota, self.fconst(float(t)), self.constant(t, i32)))
        return self.fcmp("olt", iota, self.vconst(lanes - 0.5))

    def vload(self, base: SSAValue, offset: Index, mask: SSAValue | None = None) -> SSAValue:
        """W floats at base[offset]; with a mask only its lanes are read (the others are 0)."""
        if mask is None:
            return self.load(base, offset, vector=True)
        args = [self.address(base, offset), self.constant(4, i32), mask, self.vconst(0.0)]
        return self.insert(llvm.CallIntrinsicOp(f"llvm.masked.load.v{self.vector_width}f32.p0",
                                                args, [self.vec]))

    def vstore(self, value: SSAValue, base: SSAValue, offset: Index,
               mask: SSAValue | None = None) -> None:
        """W floats to base[offset]; with a mask only its lanes are written."""
        if mask is None:
            self.store(value, base, offset)
            return
        args = [value, self.address(base, offset), self.constant(4, i32), mask]
        self.insert(llvm.CallIntrinsicOp(f"llvm.masked.store.v{self.vector_width}f32.p0", args, []))

    def prefetch(self, base: SSAValue, offset: Index, element: Attribute = f32) -> None:
        """Software prefetch (for reading, into L1) of the cache line holding base[offset]
        (`offset` counted in `element`s, as `address`: i8 for a byte offset)."""
        args = [self.address(base, offset, element), self.constant(0, i32),
                self.constant(3, i32), self.constant(1, i32)]
        self.insert(llvm.CallIntrinsicOp("llvm.prefetch.p0", args, []))

    # ------------------------------------------------------------------ sweeps

    def sweep(self, start: Index, stop: Index, body: ChunkBody, *, vectors: bool = True) -> None:
        """body(offset, vector) over [start, stop): whole vectors of W elements, then one
        element at a time. Static bounds emit only the non-empty loops; with run-time
        bounds both loops run (`vectors=False`: no vector loop, where the static upper
        bound of the length is below W)."""
        w = self.vector_width
        if isinstance(start, int) and isinstance(stop, int):
            vector_end: Index = start + (stop - start) // w * w
            if vector_end != start:
                with self.loop(start, vector_end, w) as loop:
                    body(loop.iv, True)
            if vector_end != stop:
                with self.loop(vector_end, stop) as loop:
                    body(loop.iv, False)
            return
        if isinstance(start, int) and start == 0:
            vector_end = self.mul(self.sdiv(stop, w), w)
        else:
            vector_end = self.sub(stop, self.srem(self.sub(stop, start), w))
        if vectors:
            with self.loop(start, vector_end, w) as loop:
                body(loop.iv, True)
        with self.loop(vector_end, stop) as loop:
            body(loop.iv, False)

    def sweep_sum(self, count: int, term: Callable[[SSAValue, bool], SSAValue]) -> SSAValue:
        """Σ over [0, count) of term(offset, vector): vector partial sums, reduced once,
        plus the scalar tail."""
        w = self.vector_width
        vector_end = count // w * w
        total = self.fconst(0.0)
        if vector_end:
            with self.loop(0, vector_end, w, carried=[self.vconst(0.0)]) as loop:
                loop.yield_(self.fadd(loop.carried[0], term(loop.iv, True)))
            total = self.hsum(loop.results[0])
        if vector_end < count:
            with self.loop(vector_end, count, carried=[total]) as loop:
                loop.yield_(self.fadd(loop.carried[0], term(loop.iv, False)))
            total = loop.results[0]
        return total

    def when(self, hi: Index, bound: int, body: Callable[[], None]) -> None:
        """body() if hi > bound (a static test for a Python int)."""
        if isinstance(hi, int):
            if hi > bound:
                body()
            return
        with self.if_(self.icmp("sgt", hi, bound)):
            body()

    def tile_sweep(self, span: Span, full: Index, total: Index, unit: int, tile: Tile) -> None:
        """tile(start, size) over a non-empty span [lo, hi) of an axis of `total` elements:
        whole `unit`s below `full` (= total // unit · unit) in a loop, then the rest
        (total - full) when the span reaches past `full`: one static tile, or for a
        run-time `total` static tiles of its binary digits (`binary_tail`).
        `lo` is a multiple of `unit`, `hi` a multiple of it or `total`."""
        lo, hi = span
        stop = self.fold_min(hi, full)
        if isinstance(lo, int) and isinstance(stop, int):
            if stop - lo == unit:
                tile(lo, unit)
            elif stop > lo:
                with self.loop(lo, stop, unit) as loop:
                    tile(loop.iv, unit)
        else:
            with self.loop(lo, stop, unit) as loop:
                tile(loop.iv, unit)
        if isinstance(total, int):
            if total > full:
                self.when(hi, full, lambda: tile(full, total - full))
        elif unit > 1:
            with self.if_(self.icmp("sgt", hi, full)):
                self.binary_tail(full, self.sub(total, full), unit, tile)

    def binary_tail(self, start: Index, rest: SSAValue, unit: int, tile: Tile) -> None:
        """tile(...) over the run-time `rest` (< unit) elements from `start` as static tiles
        of the powers of two in its binary form, largest first (5 rows: 4 + 1): log2(unit)
        tile variants instead of unit - 1, so a kernel over a run-time count compiles a few
        tile sizes more than the static one, not one per possible rest."""
        sizes = [1 << bit for bit in reversed(range((unit - 1).bit_length()))]
        for size in sizes:
            with self.if_(self.icmp("ne", self.insert(llvm.AndOp(rest, self.index(size))), 0)):
                above = self.insert(llvm.AndOp(rest, self.index(-2 * size)))  # of larger tiles
                tile(self.fold_add(start, above), size)


def mangle(ty: Attribute) -> str:
    """LLVM's overload suffix of a type: f32, v16f32, i64, v8i32, ..."""
    if isinstance(ty, VectorType):
        return f"v{ty.get_shape()[0]}{mangle(ty.element_type)}"
    if isinstance(ty, IntegerType):
        return f"i{ty.width.data}"
    if ty == f32:
        return "f32"
    raise ValueError(f"no LLVM mangling for {ty}")
