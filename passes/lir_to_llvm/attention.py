"""Kernels of `lir.attention` and `lir.rope` as llvm-dialect functions.

Attention is fused per query row (batch b, position s, head h) with an online
softmax, flash-attention style: the row keeps a running max `m`, a running sum `total`
and an accumulator `acc[D]` (vector registers, or the row of `out` when D is very large),
and never materializes the S×T scores.  Keys arrive in blocks of W:

* W dot products q·k_j, vectorized along D; their W partial vectors are reduced with
  a transpose-add tree into ONE vector of W scores (instead of W horizontal sums);
* scores are scaled, masked (custom: a 0 drops the key; bias: added, −inf allowed;
  causal: keys past i + (T − S) are not visited, or masked off in the last block; a
  sliding window W: keys up to i + (T − S) − W are not visited either, the blocks start
  at max(0, i + (T − S) − W + 1), so a row costs about W keys, not T),
  then `p = exp(scores − m_new)` is ONE vector exp, and `exp(m_old − m_new)` one
  scalar exp rescales `total` and `acc`;
* acc = acc·alpha + Σ_j p_j·v_j with vector FMAs along D.

A dropped key has p = 0 exactly, so a row whose keys are all dropped keeps total = 0
and yields zeros.  Query head h reads kv head h // (H / Hkv) by indexing (grouped-query).

Slot attention (`lir.slot_attention`, batched decoding) reuses the same row code: row r's
keys are the rows [lo, positions[r]] of slot slots[r] of a [n_slots, capacity, Hkv·D]
cache (`_SlotAttention`); its last partial block ends at the row's own position, so a
row never reads a stale key past it.

Rope rotates the first n_rot dims of every head: `half` pairs (x[i], x[i + n_rot/2]),
vectorized along i; `interleaved` pairs (x[2i], x[2i+1]), vectorized by
de-interleaving 2W elements with shuffles and interleaving the results back.

Partitioned variants (`partitioned=True`, for multi-threaded graphs) take two more i64
arguments `(part, parts)`; part p runs the serial row code on items
[count·p/parts, count·(p+1)/parts) of a flat item index. Attention items are query rows
ordered (batch, head, position): whole (batch, head) pairs when there are many (each
part reads few kv heads; decode, S = 1, splits the heads), consecutive positions of one
pair otherwise. Causal rows are visited in the zig-zag order 0, S−1, 1, S−2, … so
that any run of them costs about the same (row s sees s + T − S + 1 keys). Rope items
are heads of one position, (batch, position, head) in memory order.

Attention is natively dynamic (`runtime_dims=True`, ABI in `dynamic.py`): over `?` dims the
kernel takes one i64 per symbol after the pointers and reads S, T (and a symbolic batch)
at run time. Strides, the causal offset T − S and the item count of a part come from
those sizes; the keys run in full blocks up to a multiple of W, then the last partial
block is one block of W overlapping the previous ones (keys already seen dropped by the
window) when T ≥ W, else keys one at a time, so no key row ≥ T is ever read. Rope is
natively dynamic too (B and S as loop bounds and item counts). A static op builds
exactly the static kernel.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from dataclasses import dataclass

from xdsl.dialects import llvm
from xdsl.dialects.builtin import (
    DenseIntOrFPElementsAttr,
    f32,
    i32,
    i64,
)
from xdsl.ir import Operation, SSAValue

from rlx_mlir.core import shape_inference as si
from rlx_mlir.core.abi import STATUS_OK, STATUS_SLOT_OUT_OF_RANGE
from rlx_mlir.dialects import lir
from rlx_mlir.dialects.common import shape_of
from rlx_mlir.dialects.rlx import MaskKind, RopeStyle
from rlx_mlir.passes.lir_to_llvm import vmath
from rlx_mlir.passes.lir_to_llvm.builder import PTR, KernelBuilder, Value
from rlx_mlir.passes.lir_to_llvm.dynamic import (
    OPERAND_DIMS,
    DynamicKernelError,
    Index,
    RuntimeDims,
    is_dynamic,
    kernel_symbols,
    operand_shapes,
)
from rlx_mlir.passes.lir_to_llvm.indexing import copy_elements, load_index, slot_out_of_range
from rlx_mlir.passes.lir_to_llvm.record import kernel

MAX_REGISTER_CHUNKS = 32
"""Head dims of at most this many vectors keep q and acc in registers (unrolled along D);
larger ones loop along D and accumulate in the row of `out`."""

NEG_INF = -math.inf


# ----------------------------------------------------------------------------- vector helpers


def lane(kb: KernelBuilder, v: SSAValue, index: int) -> SSAValue:
    """Lane `index` of a vector as a scalar (shuffle to one lane, then bitcast)."""
    return kb.bitcast(kb.shuffle(v, v, [index]), f32)


def lane_splat(kb: KernelBuilder, v: SSAValue, index: int) -> SSAValue:
    """A vector with every lane equal to lane `index` of `v`."""
    return kb.shuffle(v, v, [index] * kb.vector_width)


def insert_lane(kb: KernelBuilder, v: SSAValue, scalar: SSAValue, index: int) -> SSAValue:
    return kb.insert(llvm.InsertElementOp(v, scalar, kb.constant(index, i32)))


def vector_constant(kb: KernelBuilder, values: list[float]) -> SSAValue:
    """A constant vector<W x f32> with the given lanes (splats go through kb.vconst)."""
    if len(set(values)) == 1:
        return kb.vconst(values[0])
    attr = DenseIntOrFPElementsAttr.from_list(kb.vec, values)
    return kb.insert(llvm.ConstantOp(attr, kb.vec))


def transpose_add(kb: KernelBuilder, partials: list[SSAValue | None]) -> SSAValue:
    """W vectors -> one vector whose lane j is the sum of the lanes of partials[j].

    Pairs are combined as soon as both exist (a binary counter), so at most
    log2(W) + 1 vectors are live: combine(x, y) halves every segment of x and y and
    concatenates them, so after log2(W) levels each lane holds one whole sum, in order.
    """
    w = kb.vector_width
    zero = kb.vconst(0.0)
    stack: list[tuple[int, SSAValue]] = []  # (segment length, vector)
    for partial in partials:
        item = (w, partial if partial is not None else zero)
        while stack and stack[-1][0] == item[0]:
            seg, x = stack.pop()
            y = item[1]
            half, count = seg // 2, w // seg
            lo = [s * seg + i for s in range(count) for i in range(half)]
            hi = [s * seg + half + i for s in range(count) for i in range(half)]
            item = (half, kb.fadd(kb.shuffle(x, y, lo + [w + j for j in lo]),
                                  kb.shuffle(x, y, hi + [w + j for j in hi])))
        stack.append(item)
    assert len(stack) == 1 and stack[0][0] == 1, [s for s, _ in stack]
    return stack[0][1]


# ----------------------------------------------------------------------------- sizes


def _product(kb: KernelBuilder, a: Index, b: Index) -> Index:
    """a·b: a Python int when both are, else an i64 op."""
    return a * b if isinstance(a, int) and isinstance(b, int) else kb.mul(a, b)


def _plus(kb: KernelBuilder, a: Index, b: Index) -> Index:
    return a + b if isinstance(a, int) and isinstance(b, int) else kb.add(a, b)


def _minus(kb: KernelBuilder, a: Index, b: Index) -> Index:
    return a - b if isinstance(a, int) and isinstance(b, int) else kb.sub(a, b)


def _may_exceed_one(size: Index) -> bool:
    """Whether a size may be more than 1 (a run-time size may)."""
    return not isinstance(size, int) or size > 1


def _compatible(a: si.Shape, b: si.Shape) -> bool:
    """Whether two symbolic shapes can be the same layout (a symbol matches any size; the
    kernel takes the layout of one for both)."""
    return len(a) == len(b) and all(
        x == y or isinstance(x, str) or isinstance(y, str) for x, y in zip(a, b, strict=True))


def _runtime_shapes(op: lir.AttentionOp, sizes: Sequence[SSAValue]) -> list[tuple[Index, ...]]:
    """The shapes of q, k (and mask) of a dynamic attention, with the kernel's size
    arguments for symbols; DynamicKernelError where the kernel cannot take a symbol."""
    dims = RuntimeDims.of(op, sizes)
    symbolic = operand_shapes(op)
    q, k, v = symbolic[:3]
    mask = symbolic[3] if op.mask is not None else None
    out = symbolic[-1]

    def refuse(what: str, expected: str, got: object) -> DynamicKernelError:
        return DynamicKernelError(f"{op.name}: {what} must be {expected}, got {got}")

    if any(isinstance(d, int) and d < 0 for shape in symbolic for d in shape):
        raise refuse(f"every ? dim (attribute {OPERAND_DIMS})", "named by a symbol", symbolic)
    for name, shape in (("q", q), ("k", k)):
        if not isinstance(shape[-1], int):
            raise refuse(f"the width of {name}", "static (heads × head_dim)", shape)
    if not _compatible(v, k):
        raise refuse("v's shape", f"compatible with k's shape {k}", v)
    if not _compatible(out, q):
        raise refuse("out's shape", f"compatible with q's shape {q}", out)
    if mask is not None and len(mask) == 4:
        batch = q[0] if len(q) == 3 else 1
        if not isinstance(mask[1], int):
            raise refuse("the head dim of the mask", "static (1 or num_heads)", mask)
        if isinstance(mask[0], str) and mask[0] != batch:
            raise refuse("the batch dim of the mask", f"static or q's batch {batch!r}", mask)
    shapes = [dims.shape(0), dims.shape(1)]
    return shapes + ([dims.shape(3)] if mask is not None else [])


# ----------------------------------------------------------------------------- attention


@dataclass
class _RowState:
    """The online-softmax state of one query row: running max `m`, running sum `total`,
    and the accumulator chunks (None when acc lives in the row of `out`)."""

    m: SSAValue
    total: SSAValue
    acc: list[SSAValue] | None

    def values(self) -> list[SSAValue]:
        return [self.m, self.total, *(self.acc or [])]

    def like(self, values: list[SSAValue]) -> _RowState:
        m, total, *acc = values
        return _RowState(m, total, acc if self.acc is not None else None)


class _Attention:
    """The code generator of one `lir.attention` kernel: static sizes are baked in, the
    `?` sizes of a dynamic op are the kernel's i64 size arguments."""

    def __init__(self, op: lir.AttentionOp, name: str, vector_width: int,
                 partitioned: bool = False):
        self.head_parameters(op, vector_width)
        w = vector_width
        self.kind = MaskKind(op.mask_kind.data)

        n_ptrs = 5 if op.mask is not None else 4
        dynamic = is_dynamic(op)
        symbols = kernel_symbols(op) if dynamic else ()
        self.kb = kb = KernelBuilder(
            name, [PTR] * n_ptrs + [i64] * len(symbols) + [i64, i64] * partitioned,
            vector_width=w)
        self.q, self.k, self.v, *rest = kb.args[:n_ptrs]
        self.mask = rest[0] if op.mask is not None else None
        self.out = rest[-1]
        sizes = kb.args[n_ptrs:n_ptrs + len(symbols)]
        self.share = kb.args[n_ptrs + len(symbols):] if partitioned else None

        shapes = _runtime_shapes(op, sizes) if dynamic else [
            shape_of(v) for v in (op.q, op.k) + ((op.mask,) if op.mask is not None else ())]
        q_shape, k_shape = shapes[0], shapes[1]
        self.batch: Index = q_shape[0] if len(q_shape) == 3 else 1
        self.seq_q: Index = q_shape[-2]
        self.seq_k: Index = k_shape[-2]
        self.mask_shape: tuple[Index, ...] | None = None if op.mask is None else shapes[2]
        # Loop-invariant sizes, as Python ints when static (then no op is emitted).
        self.kv_batch_stride = _product(kb, self.seq_k, self.kv_heads * self.dim)
        self.causal_offset: Index = 0  # row s sees keys j < s + causal_offset
        if self.kind == MaskKind.CAUSAL:
            self.causal_offset = _plus(kb, _minus(kb, self.seq_k, self.seq_q), 1)

    def head_parameters(self, op: lir.AttentionOp | lir.SlotAttentionOp,
                        vector_width: int) -> None:
        """The heads, scale and window of `op`, and how a head's D splits into vectors."""
        self.w = vector_width
        self.heads = op.num_heads.value.data
        self.dim = op.head_dim.value.data
        self.kv_heads = op.num_kv_heads.value.data
        self.group = self.heads // self.kv_heads
        self.scale = op.scale.value.data
        self.window: int | None = None if op.window is None else op.window.value.data
        self.n_vec, self.d_tail = divmod(self.dim, vector_width)
        self.in_registers = self.n_vec <= MAX_REGISTER_CHUNKS

    # --------------------------------------------------------------- structure

    def build(self) -> llvm.FuncOp:
        kb = self.kb
        if self.share is None:
            with kb.loop(0, self.batch) as b_loop:
                with kb.loop(0, self.seq_q) as s_loop:
                    with kb.loop(0, self.heads) as h_loop:
                        self.row(b_loop.iv, s_loop.iv, h_loop.iv)
        else:
            count = _product(kb, _product(kb, self.batch, self.heads), self.seq_q)
            first, last = kb.part_range(count, *self.share)  # pyright: ignore[reportArgumentType]
            with kb.loop(first, last) as item:
                self.row(*self.item_row(item.iv))
        kb.ret()
        return kb.finish()

    def item_row(self, item: SSAValue) -> tuple[SSAValue, SSAValue, SSAValue]:
        """(b, s, h) of a flat item index over (batch, head, position); positions of a
        causal pair go in zig-zag order (see the module docstring)."""
        kb, seq = self.kb, self.seq_q
        several = _may_exceed_one(seq)
        pair, j = (kb.sdiv(item, seq), kb.srem(item, seq)) if several else (item, kb.index(0))
        if _may_exceed_one(self.batch):
            b, h = kb.sdiv(pair, self.heads), kb.srem(pair, self.heads)
        else:
            b, h = kb.index(0), pair
        s = j
        if self.kind == MaskKind.CAUSAL and several:
            half = kb.sdiv(j, 2)
            even = kb.icmp("eq", kb.srem(j, 2), 0)
            s = vmath.select(kb, even, half, kb.sub(_minus(kb, seq, 1), half))
        return b, s, h

    def row(self, b: SSAValue, s: SSAValue, h: SSAValue) -> None:
        """out[b, s, h·D:(h+1)·D] = softmax(scale·q·Kᵀ + mask)·V for one query row."""
        kb, dim, seq_k = self.kb, self.dim, self.seq_k
        q_offset = kb.mul(kb.add(kb.mul(kb.add(kb.mul(b, self.seq_q), s), self.heads), h), dim)
        kv_offset = kb.add(kb.mul(b, self.kv_batch_stride),
                           kb.mul(kb.sdiv(h, self.group), dim))
        self.mask_row = None if self.mask is None else kb.gep(self.mask, self.mask_offset(b, s, h))
        state = self.start_row(q_offset, kv_offset)
        if isinstance(seq_k, int):
            state = self.static_keys(s, seq_k, state)
        else:
            state = self.runtime_keys(s, seq_k, state)
        self.finish_row(state)

    def start_row(self, q_offset: SSAValue, kv_offset: SSAValue) -> _RowState:
        """Point at the row's q and out (`q_offset`) and its kv head (`kv_offset`), load q
        (when it stays in registers) and zero the accumulator: the row's initial state."""
        kb = self.kb
        self.q_row = kb.gep(self.q, q_offset)
        self.out_row = kb.gep(self.out, q_offset)
        self.k_base, self.v_base = kb.gep(self.k, kv_offset), kb.gep(self.v, kv_offset)
        self.q_chunks = self.load_q() if self.in_registers else None
        if self.in_registers:
            acc = [kb.vconst(0.0)] * self.n_vec + [kb.fconst(0.0)] * self.d_tail
        else:
            acc = None
            self.for_chunks(lambda c, vector: kb.store(
                kb.vconst(0.0) if vector else kb.fconst(0.0), self.out_row, c))
        return _RowState(kb.fconst(NEG_INF), kb.fconst(0.0), acc)

    def static_keys(self, s: SSAValue, seq_k: int, state: _RowState) -> _RowState:
        """Feed the keys row s sees into its state, T known at compile time."""
        kb, w = self.kb, self.w
        if self.kind == MaskKind.CAUSAL:
            # Query s sees keys first <= j < s + (T - S) + 1 (>= 1 since S <= T; first = 0
            # without a sliding window): full blocks up to a multiple of W from first,
            # then one block masked to [full_end, visible).
            visible = kb.add(s, self.causal_offset)
            first, full_end = self.visible_blocks(visible)
            state = self.block_loop(full_end, state, first)
            if seq_k >= w:
                start = vmath.select(kb, kb.icmp("slt", full_end, seq_k - w), full_end,
                                     kb.index(seq_k - w))
                state = self.block(start, w, state, (full_end, visible))
            else:
                lo = kb.index(0) if self.window is None else full_end
                state = self.block(kb.index(0), seq_k, state, (lo, visible))
        else:
            full_end = seq_k // w * w
            if full_end:
                state = self.block_loop(full_end, state)
            if full_end < seq_k:
                state = self.block(kb.index(full_end), seq_k - full_end, state, None)
        return state

    def runtime_keys(self, s: SSAValue, seq_k: SSAValue, state: _RowState) -> _RowState:
        """Feed the keys row s sees into its state, T read at run time: full blocks up to
        a multiple of W, then the rest [full_end, visible) either as one block of W that
        ends at or before T (when T >= W; the window drops the keys seen already) or key
        by key (T < W), so no row >= T is read."""
        kb, w = self.kb, self.w
        visible = kb.add(s, self.causal_offset) if self.kind == MaskKind.CAUSAL else seq_k
        first, full_end = self.visible_blocks(visible)
        state = self.block_loop(full_end, state, first)
        last_start = kb.sub(seq_k, w)
        whole_block = kb.insert(llvm.AndOp(kb.icmp("sge", seq_k, w),
                                           kb.icmp("slt", full_end, visible)))
        start = vmath.select(kb, kb.icmp("slt", full_end, last_start), full_end, last_start)
        return self.branch(
            whole_block, state,
            lambda st: self.block(start, w, st, (full_end, visible)),
            lambda st: self.key_loop(full_end, visible, st))

    def visible_blocks(self, visible: SSAValue) -> tuple[Value, SSAValue]:
        """(first, full_end) of a row that sees the keys [first, visible): `first` is 0,
        or with a sliding window W max(0, visible − W), so the keys before it are never
        read (a window costs W keys a row, not T); full_end ends the whole blocks of W
        from first."""
        kb, w = self.kb, self.w
        if self.window is None:
            return 0, kb.sub(visible, kb.srem(visible, w))
        start = kb.sub(visible, self.window)
        first = vmath.select(kb, kb.icmp("sgt", start, 0), start, kb.index(0))
        return first, kb.sub(visible, kb.srem(kb.sub(visible, first), w))

    def key_loop(self, start: SSAValue, stop: SSAValue, state: _RowState) -> _RowState:
        """Feed keys [start, stop) one at a time."""
        with self.kb.loop(start, stop, carried=state.values()) as loop:
            loop.yield_(*self.block(loop.iv, 1, state.like(loop.carried), None).values())
        return state.like(loop.results)

    def branch(self, cond: SSAValue, state: _RowState,
               then: Callable[[_RowState], _RowState],
               otherwise: Callable[[_RowState], _RowState]) -> _RowState:
        """The row state after `then(state)` if `cond` holds, else after `otherwise(state)`."""
        kb = self.kb
        then_block, else_block = kb.new_block(), kb.new_block()
        merge = kb.new_block([v.type for v in state.values()])
        kb.insert(llvm.CondBrOp(cond, then_block, [], else_block, []))
        for block, body in ((then_block, then), (else_block, otherwise)):
            kb.move_to(block)
            kb.insert(llvm.BrOp(merge, *body(state).values()))
        kb.move_to(merge)
        return state.like(list(merge.args))

    def mask_offset(self, b: SSAValue, s: SSAValue, h: SSAValue) -> SSAValue:
        """Start of the mask row of (b, h, s): [S, T] or [1|B, 1|H, S, T] broadcast."""
        kb, mask_shape = self.kb, self.mask_shape
        assert mask_shape is not None
        plane = _product(kb, mask_shape[-2], mask_shape[-1])
        row = kb.mul(s, mask_shape[-1])
        if len(mask_shape) == 2:
            return row
        mask_b, mask_h = mask_shape[0], mask_shape[1]
        assert isinstance(mask_h, int)
        index: Value = 0
        if _may_exceed_one(mask_b):
            index = kb.mul(b, mask_h)
        if mask_h > 1:
            index = kb.add(h, index) if isinstance(index, SSAValue) else h
        if isinstance(index, int):
            return row
        return kb.add(kb.mul(index, plane), row)

    def block_loop(self, stop: Value, state: _RowState, start: Value = 0) -> _RowState:
        """Feed whole blocks of W keys from `start` to `stop` (a multiple of W apart)."""
        with self.kb.loop(start, stop, self.w, carried=state.values()) as loop:
            loop.yield_(*self.block(loop.iv, self.w, state.like(loop.carried), None).values())
        return state.like(loop.results)

    # --------------------------------------------------------------- head-dim chunks

    def for_chunks(self, body) -> None:
        """body(offset, vector) over the vector chunks then the scalar tail of D, as
        loops (the head dim too large to unroll)."""
        self.kb.sweep(0, self.dim, body)

    def chunk_offsets(self) -> list[tuple[int, bool]]:
        """(offset, vector) of every chunk of D when unrolled."""
        w = self.w
        return [(i * w, True) for i in range(self.n_vec)] + [
            (self.n_vec * w + t, False) for t in range(self.d_tail)]

    def load_q(self) -> list[SSAValue]:
        return [self.kb.load(self.q_row, c, vector=vector) for c, vector in self.chunk_offsets()]

    def dot_parts(self, k_row: SSAValue) -> tuple[SSAValue | None, SSAValue | None]:
        """q·k_row as (a vector of partial sums, a scalar sum of the tail of D)."""
        kb = self.kb
        if self.in_registers:
            assert self.q_chunks is not None
            partial = tail = None
            for (c, vector), q in zip(self.chunk_offsets(), self.q_chunks, strict=True):
                kv = kb.load(k_row, c, vector=vector)
                if vector:
                    partial = kb.fmul(q, kv) if partial is None else kb.fma(q, kv, partial)
                else:
                    tail = kb.fmul(q, kv) if tail is None else kb.fma(q, kv, tail)
            return partial, tail
        partial = tail = None
        if self.n_vec:
            with kb.loop(0, self.n_vec * self.w, self.w, carried=[kb.vconst(0.0)]) as loop:
                loop.yield_(kb.fma(kb.load(self.q_row, loop.iv, vector=True),
                                   kb.load(k_row, loop.iv, vector=True), loop.carried[0]))
            partial = loop.results[0]
        if self.d_tail:
            with kb.loop(self.n_vec * self.w, self.dim, carried=[kb.fconst(0.0)]) as loop:
                loop.yield_(kb.fma(kb.load(self.q_row, loop.iv), kb.load(k_row, loop.iv),
                                   loop.carried[0]))
            tail = loop.results[0]
        return partial, tail

    # --------------------------------------------------------------- one block of keys

    def block(self, start: SSAValue, count: int, state: _RowState,
              window: tuple[SSAValue, SSAValue] | None) -> _RowState:
        """Feed keys start .. start+count-1 (count <= W, known) into the row state;
        with `window` = (lo, hi) only keys in [lo, hi) count, the others are dropped."""
        kb, w = self.kb, self.w
        kv_stride = self.kv_heads * self.dim
        first = kb.mul(start, kv_stride)
        k_block, v_block = kb.gep(self.k_base, first), kb.gep(self.v_base, first)
        k_rows = [kb.gep(k_block, j * kv_stride) if j else k_block for j in range(count)]
        v_rows = [kb.gep(v_block, j * kv_stride) if j else v_block for j in range(count)]

        # Scores of the W lanes, scaled and masked; lanes >= count are -inf.
        parts = [self.dot_parts(row) for row in k_rows]
        scores = None
        if self.n_vec:
            scores = transpose_add(kb, [p for p, _ in parts] + [None] * (w - count))
        if self.d_tail:
            tails = kb.vconst(0.0)
            for j, (_, tail) in enumerate(parts):
                tails = insert_lane(kb, tails, tail, j)
            scores = tails if scores is None else kb.fadd(scores, tails)
        assert scores is not None
        scores = kb.fmul(scores, kb.vconst(self.scale))
        if count < w:
            scores = kb.fadd(scores, vector_constant(kb, [0.0] * count + [NEG_INF] * (w - count)))
        scores = self.apply_mask(scores, start, count)
        if window is not None:
            lanes = vector_constant(kb, [float(j) for j in range(w)])
            keys = kb.fadd(lanes, kb.splat(kb.sitofp(start, f32)))
            lo, hi = (kb.splat(kb.sitofp(x, f32)) for x in window)
            dropped = kb.vconst(NEG_INF)
            scores = vmath.select(kb, vmath.fcmp(kb, "olt", keys, lo), dropped, scores)
            scores = vmath.select(kb, vmath.fcmp(kb, "oge", keys, hi), dropped, scores)

        # Online softmax update: m_new, alpha = exp(m - m_new), p = exp(scores - m_new).
        m_new = kb.fmax(state.m, kb.hmax(scores))
        m_ref = vmath.select(kb, vmath.fcmp(kb, "oeq", m_new, NEG_INF), kb.fconst(0.0), m_new)
        # exp(-inf) is exactly 0: dropped keys add nothing, and m = -inf gives alpha = 0
        alpha = vmath.exp(kb, kb.fsub(state.m, m_ref))
        p = vmath.exp(kb, kb.fsub(scores, kb.splat(m_ref)))
        total_new = kb.fma(state.total, alpha, kb.hsum(p))

        p_vectors = [lane_splat(kb, p, j) for j in range(count)] if self.n_vec else []
        p_scalars = [lane(kb, p, j) for j in range(count)] if self.d_tail else []
        alpha_vector = kb.splat(alpha) if self.n_vec else None

        def update(acc: SSAValue, v_offset: Value, vector: bool) -> SSAValue:
            acc = kb.fmul(acc, alpha_vector if vector else alpha)
            for j in range(count):
                weight = p_vectors[j] if vector else p_scalars[j]
                acc = kb.fma(weight, kb.load(v_rows[j], v_offset, vector=vector), acc)
            return acc

        if state.acc is not None:
            acc = [update(a, c, vector)
                   for a, (c, vector) in zip(state.acc, self.chunk_offsets(), strict=True)]
            return _RowState(m_new, total_new, acc)
        self.for_chunks(lambda c, vector: kb.store(
            update(kb.load(self.out_row, c, vector=vector), c, vector), self.out_row, c))
        return _RowState(m_new, total_new, None)

    def apply_mask(self, scores: SSAValue, start: SSAValue, count: int) -> SSAValue:
        kb, w = self.kb, self.w
        if self.mask_row is None:
            return scores
        if count == w:
            mask = kb.load(self.mask_row, start, vector=True)
        else:
            mask = kb.vconst(0.0)
            for j in range(count):
                mask = insert_lane(kb, mask, kb.load(self.mask_row, kb.add(start, j)), j)
        if self.kind == MaskKind.BIAS:
            return kb.fadd(scores, mask)
        # custom: 0 drops the key, anything else (NaN included) keeps it
        return vmath.select(kb, vmath.fcmp(kb, "une", mask, 0.0), scores, kb.vconst(NEG_INF))

    def finish_row(self, state: _RowState) -> None:
        """out_row = acc / total, or zeros when every key was dropped (total == 0)."""
        kb = self.kb
        inverse = vmath.select(kb, vmath.fcmp(kb, "ogt", state.total, 0.0),
                               kb.fdiv(kb.fconst(1.0), state.total), kb.fconst(0.0))
        inverse_vector = kb.splat(inverse) if self.n_vec else None
        if state.acc is not None:
            for a, (c, vector) in zip(state.acc, self.chunk_offsets(), strict=True):
                kb.store(kb.fmul(a, inverse_vector if vector else inverse), self.out_row, c)
            return
        self.for_chunks(lambda c, vector: kb.store(
            kb.fmul(kb.load(self.out_row, c, vector=vector),
                    inverse_vector if vector else inverse), self.out_row, c))


@kernel(lir.AttentionOp, partitioned=True, runtime_dims=True)
def build_attention(op: Operation, name: str, vector_width: int,
                    partitioned: bool = False) -> llvm.FuncOp:
    """Grouped-query attention with an online softmax, fused per query row (see module doc)."""
    assert isinstance(op, lir.AttentionOp)
    return _Attention(op, name, vector_width, partitioned).build()


# ----------------------------------------------------------------------------- slot attention


class _SlotAttention(_Attention):
    """The code generator of one `lir.slot_attention` kernel: row r, head h is a query row
    of `_Attention` whose keys are those of slot slots[r] (base slot·capacity·Hkv·D), visible
    up to positions[r] inclusive. The keys run in whole blocks of W from the first visible
    one, then the rest as one block of W ending at the row's last key (keys already seen
    dropped) when at least W are visible, else key by key: no key past positions[r] (a
    stale row of the slot) is ever read. The kernel is checked: it first checks every
    row's slot and position (each part all of them, so every part returns the same
    status) and, when one is out of range, reads and writes nothing and returns
    STATUS_SLOT_OUT_OF_RANGE."""

    def __init__(self, op: lir.SlotAttentionOp, name: str, vector_width: int,
                 partitioned: bool = False):
        self.head_parameters(op, vector_width)
        self.kind = MaskKind.CAUSAL
        symbols = kernel_symbols(op) if is_dynamic(op) else ()
        self.kb = kb = KernelBuilder(
            name, [PTR] * 6 + [i64] * len(symbols) + [i64, i64] * partitioned,
            vector_width=vector_width, result_type=i32)
        self.q, self.k, self.v, self.slots, self.positions, self.out = kb.args[:6]
        sizes = kb.args[6:6 + len(symbols)]
        self.share = kb.args[6 + len(symbols):] if partitioned else None
        self.mask = self.mask_row = None
        q_shape = RuntimeDims.of(op, sizes).shape(0) if symbols else shape_of(op.q)
        self.rows: Index = kb.product(q_shape[:-1])  # [R, H·D] or [B, S, H·D]
        self.n_slots, self.capacity, _ = shape_of(op.keys)

    def build(self) -> llvm.FuncOp:
        kb = self.kb
        bad = slot_out_of_range(kb, self.slots, self.positions, self.rows, self.n_slots,
                                self.capacity)
        rows = kb.select(bad, kb.index(0), kb.index(self.rows))  # a bad row: no row at all
        if self.share is None:
            with kb.loop(0, rows) as r_loop:
                with kb.loop(0, self.heads) as h_loop:
                    self.slot_row(r_loop.iv, h_loop.iv)
        else:  # items (row, head) in memory order: a part reads few slots
            first, last = kb.part_range(kb.mul(rows, self.heads), *self.share)  # pyright: ignore[reportArgumentType]
            with kb.loop(first, last) as item:
                self.slot_row(kb.sdiv(item.iv, self.heads), kb.srem(item.iv, self.heads))
        kb.ret(kb.select(bad, kb.constant(STATUS_SLOT_OUT_OF_RANGE, i32),
                         kb.constant(STATUS_OK, i32)))
        return kb.finish()

    def slot_row(self, r: SSAValue, h: SSAValue) -> None:
        """out[r, h·D:(h+1)·D] = softmax(scale·q·Kᵀ)·V over the visible keys of r's slot."""
        kb, dim = self.kb, self.dim
        slot = load_index(kb, self.slots, r, i32)  # in range: checked by `build`
        visible = kb.add(load_index(kb, self.positions, r, i32), 1)
        q_offset = kb.mul(kb.add(kb.mul(r, self.heads), h), dim)
        kv_offset = kb.add(kb.mul(slot, self.capacity * self.kv_heads * dim),
                           kb.mul(kb.sdiv(h, self.group), dim))
        self.finish_row(self.slot_keys(visible, self.start_row(q_offset, kv_offset)))

    def slot_keys(self, visible: SSAValue, state: _RowState) -> _RowState:
        """Feed the keys [first, visible) into the row state, none at or past `visible`."""
        kb, w = self.kb, self.w
        first, full_end = self.visible_blocks(visible)
        state = self.block_loop(full_end, state, first)
        whole_block = kb.insert(llvm.AndOp(kb.icmp("sge", visible, w),
                                           kb.icmp("slt", full_end, visible)))
        return self.branch(
            whole_block, state,
            lambda st: self.block(kb.sub(visible, w), w, st, (full_end, visible)),
            lambda st: self.key_loop(full_end, visible, st))


@kernel(lir.SlotAttentionOp, partitioned=True, runtime_dims=True, checked=True)
def build_slot_attention(op: Operation, name: str, vector_width: int,
                         partitioned: bool = False) -> llvm.FuncOp:
    """Batched decoding's attention over slot caches, one query row per (row, head)."""
    assert isinstance(op, lir.SlotAttentionOp)
    return _SlotAttention(op, name, vector_width, partitioned).build()


# ----------------------------------------------------------------------------- rope


def rotate_pair(kb: KernelBuilder, a: SSAValue, b: SSAValue, c: SSAValue,
                s: SSAValue) -> tuple[SSAValue, SSAValue]:
    """One rope pair (scalars or vectors) rotated: (a·c − b·s, b·c + a·s); the q8 kernels'
    fused rope uses it too, for the same bits."""
    return kb.fsub(kb.fmul(a, c), kb.fmul(b, s)), kb.fma(a, s, kb.fmul(b, c))


@kernel(lir.RopeOp, partitioned=True, runtime_dims=True)
def build_rope(op: Operation, name: str, vector_width: int,
               partitioned: bool = False) -> llvm.FuncOp:
    """Rotary embedding of x [S, H·D] or [B, S, H·D] by cos/sin [S, n_rot/2]; dims past
    n_rot of each head are copied. Over `?` dims, B and S are the kernel's size arguments."""
    assert isinstance(op, lir.RopeOp)
    dynamic = is_dynamic(op)
    symbols = kernel_symbols(op) if dynamic else ()
    dim, n_rot = op.head_dim.value.data, op.n_rot.value.data
    style = RopeStyle(op.style.data)
    w = vector_width

    kb = KernelBuilder(name, [PTR] * 4 + [i64] * len(symbols) + [i64, i64] * partitioned,
                       vector_width=w)
    x, cos, sin, out = kb.args[:4]
    sizes, share = kb.args[4:4 + len(symbols)], kb.args[4 + len(symbols):]
    x_shape: tuple[Index, ...] = _rope_shape(op, sizes) if dynamic else shape_of(op.x)
    batch = x_shape[0] if len(x_shape) == 3 else 1
    seq, width = x_shape[-2], x_shape[-1]
    assert isinstance(width, int)
    heads, half = width // dim, n_rot // 2

    def rotate(a: SSAValue, b: SSAValue, c: SSAValue, s: SSAValue) -> tuple[SSAValue, SSAValue]:
        return rotate_pair(kb, a, b, c, s)

    def half_style(x_row: SSAValue, o_row: SSAValue, c_row: SSAValue, s_row: SSAValue) -> None:
        def pair(i: SSAValue, vector: bool) -> None:
            c, s = kb.load(c_row, i, vector=vector), kb.load(s_row, i, vector=vector)
            upper = kb.add(i, half)
            a, b = kb.load(x_row, i, vector=vector), kb.load(x_row, upper, vector=vector)
            ra, rb = rotate(a, b, c, s)
            kb.store(ra, o_row, i)
            kb.store(rb, o_row, upper)

        kb.sweep(0, half, pair)

    def interleaved_style(x_row: SSAValue, o_row: SSAValue, c_row: SSAValue,
                          s_row: SSAValue) -> None:
        evens, odds = list(range(0, 2 * w, 2)), list(range(1, 2 * w, 2))
        low = [i // 2 + (w if i % 2 else 0) for i in range(w)]
        high = [w // 2 + i // 2 + (w if i % 2 else 0) for i in range(w)]
        def pairs(i: SSAValue, vector: bool) -> None:
            """W pairs (2W values, de-interleaved by shuffles), or one pair."""
            if vector:
                first, second = kb.mul(i, 2), kb.add(kb.mul(i, 2), w)
                lo_in = kb.load(x_row, first, vector=True)
                hi_in = kb.load(x_row, second, vector=True)
                a, b = kb.shuffle(lo_in, hi_in, evens), kb.shuffle(lo_in, hi_in, odds)
                ra, rb = rotate(a, b, kb.load(c_row, i, vector=True),
                                kb.load(s_row, i, vector=True))
                kb.store(kb.shuffle(ra, rb, low), o_row, first)
                kb.store(kb.shuffle(ra, rb, high), o_row, second)
                return
            first = kb.mul(i, 2)
            second = kb.add(first, 1)
            ra, rb = rotate(kb.load(x_row, first), kb.load(x_row, second),
                            kb.load(c_row, i), kb.load(s_row, i))
            kb.store(ra, o_row, first)
            kb.store(rb, o_row, second)

        kb.sweep(0, half, pairs)

    rotate_head = half_style if style == RopeStyle.HALF else interleaved_style

    def head(offset: SSAValue, c_row: SSAValue, s_row: SSAValue) -> None:
        """The head x[offset : offset + dim] at the position of cos/sin rows c_row, s_row."""
        x_row, o_row = kb.gep(x, offset), kb.gep(out, offset)
        rotate_head(x_row, o_row, c_row, s_row)
        if n_rot < dim:
            copy_elements(kb, kb.gep(x_row, n_rot), kb.gep(o_row, n_rot), dim - n_rot)

    def trig_rows(s: SSAValue) -> tuple[SSAValue, SSAValue]:
        return kb.gep(cos, kb.mul(s, half)), kb.gep(sin, kb.mul(s, half))

    if not partitioned:
        with kb.loop(0, batch) as b_loop:
            with kb.loop(0, seq) as s_loop:
                c_row, s_row = trig_rows(s_loop.iv)
                position = kb.mul(kb.add(kb.mul(b_loop.iv, seq), s_loop.iv), width)
                with kb.loop(0, heads) as h_loop:
                    head(kb.add(position, kb.mul(h_loop.iv, dim)), c_row, s_row)
    else:  # rows (batch, position), split as a row-driven kernel's (lir-parallelize)
        count = _product(kb, batch, seq)
        first, last = kb.part_range(count, *share)  # pyright: ignore[reportArgumentType]
        with kb.loop(first, last) as item:
            row = kb.srem(item.iv, seq) if _may_exceed_one(batch) else item.iv
            c_row, s_row = trig_rows(row)
            with kb.loop(0, heads) as h_loop:
                head(kb.add(kb.mul(item.iv, width), kb.mul(h_loop.iv, dim)), c_row, s_row)
    kb.ret()
    return kb.finish()


def _rope_shape(op: lir.RopeOp, sizes: Sequence[SSAValue]) -> tuple[Index, ...]:
    """The shape of x of a dynamic rope, with the kernel's size arguments for symbols;
    DynamicKernelError where the kernel cannot take a symbol."""
    x, cos, sin, out = operand_shapes(op)
    if any(isinstance(d, int) and d < 0 for d in x + cos + sin + out):
        raise DynamicKernelError(f"{op.name}: every ? dim (attribute {OPERAND_DIMS}) must be "
                                 f"named by a symbol, got {[x, cos, sin, out]}")
    for what, shape in (("x", x), ("cos", cos), ("sin", sin)):
        if not isinstance(shape[-1], int):
            raise DynamicKernelError(f"{op.name}: the last dim of {what} must be static, "
                                     f"got {shape}")
    if not _compatible(out, x):
        raise DynamicKernelError(
            f"{op.name}: out's shape must be compatible with x's shape {x}, got {out}")
    return RuntimeDims.of(op, sizes).shape(0)
