"""Kernels of `lir.argmax`, `lir.top_k` and `lir.sample` as llvm-dialect functions.

All three work row by row over the last axis (static; the leading dims may be run-time
sizes) with scalar loops: a row is read a few times, nothing is sorted and no scratch
buffer beyond a few stack slots is needed.

- argmax: one pass keeping the best value and its index (a NaN beats every number, the
  first of equals wins).
- top_k: insertion into the sorted out row (values and indices), skipping an element at
  once when the row is full and it does not beat the last kept one.
- sample: thresholds found by bisection over the 32 bits of an order-preserving key of the
  f32 logits (`order_key`), each step one counting pass: the k-th largest for top-k, the
  value where the mass of the most likely kept tokens reaches p for top-p (equal values at
  a threshold are taken by the lower index, as a stable sort would); then the softmax at
  the temperature and one Philox4x32-10 draw (`philox`), walked in index order. The
  reference (`rlx_mlir.core.reference_kernels.sample`) computes the same sets with the
  same float64 sums in the same order.
"""

from __future__ import annotations

from collections.abc import Sequence

from xdsl.dialects import llvm
from xdsl.dialects.builtin import f32, f64, i1, i32, i64
from xdsl.ir import Operation, SSAValue

from rlx_mlir.core import philox as P
from rlx_mlir.dialects import lir
from rlx_mlir.passes.lir_to_llvm import vmath
from rlx_mlir.passes.lir_to_llvm.attention import lane as lane_of
from rlx_mlir.passes.lir_to_llvm.builder import PTR, Index, KernelBuilder
from rlx_mlir.passes.lir_to_llvm.dynamic import (
    DynamicKernelError,
    RuntimeDims,
    kernel_symbols,
    runtime_rows,
)
from rlx_mlir.passes.lir_to_llvm.record import kernel


def _row_geometry(kb: KernelBuilder, op: Operation, size_args: tuple[SSAValue, ...]
                  ) -> tuple[Index, int]:
    """(rows, n): the product of the leading dims of operand 0 and its static last axis."""
    shape = RuntimeDims.of(op, size_args).shape(0)
    if not isinstance(shape[-1], int):
        raise DynamicKernelError(f"{op.name}: the last axis must be static, got "
                                 f"{list(shape)}")
    return runtime_rows(kb, shape[:-1]), shape[-1]


def _better(kb: KernelBuilder, a: SSAValue, b: SSAValue) -> SSAValue:
    """a ranks before b: a > b, or a is NaN and b is not (i1)."""
    nan_over = vmath.and_(kb, kb.fcmp("uno", a, a), kb.fcmp("ord", b, b))
    return kb.or_(kb.fcmp("ogt", a, b), nan_over)


def _trunc(kb: KernelBuilder, value: SSAValue, ty=i32) -> SSAValue:
    return kb.insert(llvm.TruncOp(value, ty))


def _zext(kb: KernelBuilder, value: SSAValue, ty=i64) -> SSAValue:
    return kb.insert(llvm.ZExtOp(value, ty))


def _f64(kb: KernelBuilder, value: SSAValue) -> SSAValue:
    return kb.insert(llvm.FPExtOp(value, f64))


ARGMAX_CHAINS = 4
"""Independent (best, index) vector pairs an argmax row keeps: each step's compare and
selects wait on the step before in its chain only, so a long row (a vocabulary of
262,144 logits) is not one chain of dependent selects."""


def _argmax_row(kb: KernelBuilder, row: SSAValue, n: int) -> SSAValue:
    """The index (i64) of the best value of row[0:n]: W lanes at a time in ARGMAX_CHAINS
    interleaved chains (vector v in chain v mod chains), each lane keeping its best value
    and index (f32, exact below 2^23); then the chains and the lanes compared (ties to
    the lower index: the sequential scan's first best), then a scalar tail."""
    w = kb.vector_width
    if n < 2 * w or n >= 1 << 23:
        return _argmax_scalar(kb, row, 0, n, kb.load(row, 0), kb.constant(0, i64))
    iota = kb.insert(llvm.UndefOp(kb.vec))
    for lane in range(w):
        iota = kb.insert(llvm.InsertElementOp(iota, kb.fconst(float(lane)), kb.constant(lane, i32)))
    chains = max(1, min(ARGMAX_CHAINS, n // w))
    start = [(kb.load(row, c * w, vector=True), kb.fadd(iota, kb.vconst(float(c * w))))
             for c in range(chains)]

    def step(at: SSAValue, best: SSAValue, index: SSAValue, offset: int) -> tuple[SSAValue, SSAValue]:
        x = kb.load(row, kb.add(at, offset), vector=True)
        better = _better(kb, x, best)
        position = kb.fadd(iota, kb.splat(kb.sitofp(kb.add(at, offset), f32)))
        return kb.select(better, x, best), kb.select(better, position, index)

    stride = chains * w
    whole = n // stride * stride
    carried = [value for pair in start for value in pair]
    with kb.loop(stride, whole, stride, carried=carried) as loop:
        pairs = [step(loop.iv, loop.carried[2 * c], loop.carried[2 * c + 1], c * w)
                 for c in range(chains)]
        loop.yield_(*(value for pair in pairs for value in pair))
    pairs = [(loop.results[2 * c], loop.results[2 * c + 1]) for c in range(chains)]
    end = n // w * w
    for c, at in enumerate(range(whole, end, w)):  # the last whole vectors, one per chain
        pairs[c] = step(kb.index(0), *pairs[c], at)
    best, index = pairs[0]
    for value, place in pairs[1:]:
        best, index = _best_of(kb, (best, index), (value, place))
    lanes_v, lanes_i = kb.alloca(w), kb.alloca(w)
    kb.store(best, lanes_v, align=4)
    kb.store(index, lanes_i, align=4)
    with kb.loop(1, w, carried=[kb.load(lanes_v, 0), kb.load(lanes_i, 0)]) as lane:
        lane.yield_(*_best_of(kb, lane.carried, (kb.load(lanes_v, lane.iv),
                                                 kb.load(lanes_i, lane.iv))))
    best, index = lane.results
    # an f32 integer below 2^23 as an i64: its bits after adding 2^23 (exact)
    whole_index = kb.sub(vmath.bits(kb, kb.fadd(index, 2.0**23)), 0x4B000000)
    return _argmax_scalar(kb, row, end, n, best, kb.sext(whole_index))


def _best_of(kb: KernelBuilder, first: Sequence[SSAValue], second: Sequence[SSAValue]
             ) -> tuple[SSAValue, SSAValue]:
    """(value, index) of the better of two candidates (scalars or lanes): the better
    value, or of equal values (two NaNs are equal here) the lower index."""
    (best, best_index), (value, index) = first, second
    same = kb.or_(kb.fcmp("oeq", value, best),
                  vmath.and_(kb, kb.fcmp("uno", value, value), kb.fcmp("uno", best, best)))
    wins = kb.or_(_better(kb, value, best),
                  vmath.and_(kb, same, kb.fcmp("olt", index, best_index)))
    return kb.select(wins, value, best), kb.select(wins, index, best_index)


def _argmax_scalar(kb: KernelBuilder, row: SSAValue, start: int, n: int, best: SSAValue,
                   index: SSAValue) -> SSAValue:
    """Continue an argmax from (best, index) over row[start:n] one element at a time."""
    with kb.loop(start, n, carried=[best, index]) as loop:
        x = kb.load(row, loop.iv)
        better = _better(kb, x, loop.carried[0])
        loop.yield_(kb.select(better, x, loop.carried[0]),
                    kb.select(better, loop.iv, loop.carried[1]))
    return loop.results[1]


@kernel(lir.ArgmaxOp, runtime_dims=True)
def build_argmax(op: Operation, name: str, vector_width: int) -> llvm.FuncOp:
    """out[r] = the index of the best value of row r (ties to the lower index)."""
    symbols = kernel_symbols(op)
    kb = KernelBuilder(name, [PTR, PTR] + [i64] * len(symbols), vector_width=vector_width)
    x, out = kb.args[:2]
    rows, n = _row_geometry(kb, op, kb.args[2:])
    with kb.loop(0, rows) as r:
        best = _argmax_row(kb, kb.gep(x, kb.mul(r.iv, n)), n)
        kb.store(_trunc(kb, best), out, r.iv, element=i32)
    kb.ret()
    return kb.finish()


def _first_beaten(kb: KernelBuilder, count: SSAValue, beats) -> SSAValue:
    """The first slot t in [0, count) with beats(t) (i64), else count."""
    with kb.loop(0, count, carried=[count]) as t:
        first = vmath.and_(kb, kb.icmp("eq", t.carried[0], count), beats(t.iv))
        t.yield_(kb.select(first, t.iv, t.carried[0]))
    return t.results[0]


def _insert_at(kb: KernelBuilder, vals: SSAValue, ids: SSAValue, at: SSAValue, last: SSAValue,
               value: SSAValue, index: SSAValue) -> None:
    """Shift slots [at, last) one right (the one at `last` is overwritten), then put
    (value, index) at `at`."""
    with kb.loop(0, kb.sub(last, at)) as s:
        dst = kb.sub(last, s.iv)
        src = kb.sub(dst, 1)
        kb.store(kb.load(vals, src), vals, dst)
        kb.store(kb.load(ids, src, element=i32), ids, dst, element=i32)
    kb.store(value, vals, at)
    kb.store(_trunc(kb, index), ids, at, element=i32)


def _select_top(kb: KernelBuilder, row: SSAValue, n: int, k: Index, vals: SSAValue,
                ids: SSAValue, better) -> None:
    """vals[0:k], ids[0:k] = the k best elements of row[0:n] by `better`, best first, equals
    by the lower index: each element is inserted after its equals, or skipped at once when
    the buffer is full and it does not beat the last one."""
    last_slot = kb.fold_add(k, -1)
    with kb.loop(0, n, carried=[kb.constant(0, i64)]) as i:
        count = i.carried[0]
        value = kb.load(row, i.iv)
        full = kb.icmp("sge", count, k)
        enters = kb.or_(kb.icmp("slt", count, k), better(value, kb.load(vals, last_slot)))
        with kb.if_(enters):
            at = _first_beaten(kb, count, lambda t: better(value, kb.load(vals, t)))
            _insert_at(kb, vals, ids, at, kb.select(full, kb.index(last_slot), count), value, i.iv)
        i.yield_(kb.select(full, count, kb.add(count, 1)))


@kernel(lir.TopKOp, runtime_dims=True)
def build_top_k(op: Operation, name: str, vector_width: int) -> llvm.FuncOp:
    """out[r], indices_out[r] = the k best values of row r and their indices, best first
    (`_select_top` straight into the out rows)."""
    assert isinstance(op, lir.TopKOp)
    k = op.k.value.data
    symbols = kernel_symbols(op)
    kb = KernelBuilder(name, [PTR, PTR, PTR] + [i64] * len(symbols), vector_width=vector_width)
    x, values, indices = kb.args[:3]
    rows, n = _row_geometry(kb, op, kb.args[3:])
    with kb.loop(0, rows) as r:
        _select_top(kb, kb.gep(x, kb.mul(r.iv, n)), n, k, kb.gep(values, kb.mul(r.iv, k)),
                    kb.gep(indices, kb.mul(r.iv, k), i32), lambda a, b: _better(kb, a, b))
    kb.ret()
    return kb.finish()


# ----------------------------------------------------------------------------- sample

SMALL_TOP_K = 256
"""A draw with 0 < top_k <= this (and < V) works on a stack buffer of the top-k elements
after one pass over the row; larger k, or none, works on the row by thresholds."""


def philox(kb: KernelBuilder, counter: list[SSAValue], key: list[SSAValue]) -> list[SSAValue]:
    """Philox4x32-10 of four i32 counter words under two i32 key words (straight-line)."""
    c0, c1, c2, c3 = counter
    k0, k1 = key
    for r in range(P.ROUNDS):
        if r:
            k0, k1 = kb.add(k0, _u32(P.W0)), kb.add(k1, _u32(P.W1))
        p0 = kb.mul(_zext(kb, c0), P.M0)
        p1 = kb.mul(_zext(kb, c2), P.M1)
        hi0, lo0 = _trunc(kb, vmath.lshr(kb, p0, 32)), _trunc(kb, p0)
        hi1, lo1 = _trunc(kb, vmath.lshr(kb, p1, 32)), _trunc(kb, p1)
        c0, c1, c2, c3 = (vmath.xor(kb, vmath.xor(kb, hi1, c1), k0), lo1,
                          vmath.xor(kb, vmath.xor(kb, hi0, c3), k1), lo0)
    return [c0, c1, c2, c3]


def _u32(value: int) -> int:
    """A uint32 constant as the signed i32 with its bits."""
    return value - (1 << 32) if value >= 1 << 31 else value


def order_key(kb: KernelBuilder, x: SSAValue) -> SSAValue:
    """The i32 bits of f32 `x`, mapped so that unsigned order is float order."""
    bits = vmath.bits(kb, x)
    negative = kb.icmp("slt", bits, 0)
    return kb.select(negative, vmath.xor(kb, bits, -1), vmath.or_(kb, bits, _u32(0x80000000)))


def _key_greater(kb: KernelBuilder, a: SSAValue, b: SSAValue) -> SSAValue:
    return kb.icmp("ugt", order_key(kb, a), order_key(kb, b))


def _if_value(kb: KernelBuilder, cond: SSAValue, then, otherwise: SSAValue) -> SSAValue:
    """cond ? then() : otherwise, with then() emitted on its own branch (not computed when
    cond is false, unlike `select`)."""
    then_block, merge = kb.new_block(), kb.new_block([otherwise.type])
    kb.insert(llvm.CondBrOp(cond, then_block, [], merge, [otherwise]))
    kb.move_to(then_block)
    kb.insert(llvm.BrOp(merge, then()))
    kb.move_to(merge)
    return merge.args[0]


def largest_key(kb: KernelBuilder, holds) -> SSAValue:
    """The largest uint32 t with holds(t) (true at 0, monotone), bit by bit."""
    with kb.loop(0, 32, carried=[kb.constant(0, i32)]) as bit:
        shift = _trunc(kb, kb.sub(31, bit.iv))
        candidate = vmath.or_(kb, bit.carried[0], vmath.shl(kb, kb.constant(1, i32), shift))
        bit.yield_(kb.select(holds(candidate), candidate, bit.carried[0]))
    return bit.results[0]


class _Candidates:
    """The elements a draw chooses among, in index order, with the kept-set thresholds in
    stack slots: a whole row (`ids` None; top-k kept by its threshold `tk` and the count of
    its ties `ties_k`) or a buffer of the most likely elements sorted by index (every one
    kept by top-k)."""

    def __init__(self, kb: KernelBuilder, values: SSAValue, ids: SSAValue | None, count: Index,
                 slots: dict[str, SSAValue]):
        self.kb, self.values, self.ids, self.count, self.slots = kb, values, ids, count, slots
        self.all_kept_k = ids is not None
        """A buffer holds only elements top-k keeps."""

    def get(self, name: str, ty) -> SSAValue:
        return self.kb.load(self.slots[name], element=ty)

    def put(self, name: str, value: SSAValue, ty) -> None:
        self.kb.store(value, self.slots[name], element=ty)

    def sweep(self, body, init: list[SSAValue], need=None) -> list[SSAValue]:
        """Fold body(index, x, key, w, kept_k, kept, carried) -> carried over the elements:
        w = exp(x - m) (float64; computed only where need(key, kept_k), default kept_k, or
        for a tie at the top-p threshold, else 0), kept_k and kept the membership after
        top-k and after top-p (tie counters carried along)."""
        kb = self.kb
        tk, ties_k = self.get("tk", i32), self.get("ties_k", i64)
        vp, target = self.get("vp", i32), self.get("target", f64)
        above, m = self.get("above", f64), self.get("m", f32)
        zero64 = kb.constant(0.0, f64)
        with kb.loop(0, self.count, carried=[kb.constant(0, i64), above, *init]) as j:
            seen, before, *carried = j.carried
            x = kb.load(self.values, j.iv)
            index = j.iv if self.ids is None else kb.sext(kb.load(self.ids, j.iv, element=i32))
            key = order_key(kb, x)
            tie_k = kb.icmp("eq", key, tk)
            kept_k = kb.constant(1, i1) if self.all_kept_k else kb.or_(
                kb.icmp("ugt", key, tk), vmath.and_(kb, tie_k, kb.icmp("slt", seen, ties_k)))
            tie_p = vmath.and_(kb, kept_k, kb.icmp("eq", key, vp))
            wanted = kb.or_(need(key, kept_k) if need else kept_k, tie_p)
            w = _if_value(kb, wanted, lambda x=x: _f64(kb, vmath.exp(kb, kb.fsub(x, m))), zero64)
            kept = vmath.and_(kb, kept_k, kb.or_(
                kb.icmp("ugt", key, vp), vmath.and_(kb, tie_p, kb.fcmp("olt", before, target))))
            new = body(index, x, key, w, kept_k, kept, carried)
            j.yield_(kb.add(seen, _zext(kb, tie_k)),
                     kb.fadd(before, kb.select(tie_p, w, zero64)), *new)
        return j.results[2:]


@kernel(lir.SampleOp, runtime_dims=True)
def build_sample(op: Operation, name: str, vector_width: int) -> llvm.FuncOp:
    """out[r] = the token drawn from row r (reference_kernels.sample, step by step). A
    rank-0 parameter is read once; one per row ([R]) is read in the row loop. With
    `row_positions`, row r draws with counter row 0 at its own position."""
    assert isinstance(op, lir.SampleOp)
    symbols = kernel_symbols(op)
    has_position = op.position is not None
    has_rows = op.row_positions is not None
    pointers = 6 + int(has_rows)
    kb = KernelBuilder(name, [PTR] * pointers + [i64] * (int(has_position) + len(symbols)),
                       vector_width=vector_width)
    logits, out = kb.args[0], kb.args[pointers - 1]
    position = kb.args[pointers] if has_position else kb.constant(0, i64)
    rows, n = _row_geometry(kb, op, kb.args[pointers + int(has_position):])
    reads = [_ParamRead(kb, ptr, ty, per_row=getattr(op, name).type.get_shape() != ())
             for ptr, (name, ty) in zip(kb.args[1:5], SAMPLE_PARAMS, strict=True)]
    slots = {name: kb.alloca(1, ty, align=8) for name, ty in (
        ("tk", i32), ("ties_k", i64), ("vp", i32), ("target", f64), ("above", f64),
        ("m", f32))}
    small = min(SMALL_TOP_K, n)
    buffers = (kb.alloca(small), kb.alloca(small, i32))
    with kb.loop(0, rows) as r:
        temperature, top_k, top_p, seed = (read.at(r.iv) for read in reads)
        counter_row = r.iv
        if has_rows:  # row 0 at the row's own position: what a one-row call there draws
            counter_row = kb.constant(0, i64)
            position = kb.load(kb.args[5], r.iv, element=i64)
        params = _Params(temperature, top_k, top_p, seed, position)
        row = kb.gep(logits, kb.mul(r.iv, n))
        best = _argmax_row(kb, row, n)
        kb.store(_trunc(kb, best), out, r.iv, element=i32)
        with kb.if_(kb.fcmp("ogt", params.temperature, 0.0)):
            choice = _draw(kb, row, n, best, counter_row, params, slots, buffers)
            kb.store(_trunc(kb, choice), out, r.iv, element=i32)
    kb.ret()
    return kb.finish()


SAMPLE_PARAMS = (("temperature", f32), ("top_k", i32), ("top_p", f32), ("seed", i64))
"""The sampling parameters of `lir.sample`, in operand order, with their element types."""


class _ParamRead:
    """A sampling parameter as the kernel uses it (top_k sign-extended to i64): a rank-0
    one loaded once, before the row loop; one per row loaded at the row."""

    def __init__(self, kb: KernelBuilder, ptr: SSAValue, ty, per_row: bool):
        self.kb, self.ptr, self.ty = kb, ptr, ty
        self.shared = None if per_row else self._load(0)

    def _load(self, index: SSAValue | int) -> SSAValue:
        value = self.kb.load(self.ptr, index, element=self.ty)
        return self.kb.sext(value) if self.ty == i32 else value

    def at(self, r: SSAValue) -> SSAValue:
        return self.shared if self.shared is not None else self._load(r)


class _Params:
    """The sampling parameters as the kernel read them."""

    def __init__(self, temperature: SSAValue, top_k: SSAValue, top_p: SSAValue, seed: SSAValue,
                 position: SSAValue):
        self.temperature, self.top_k, self.top_p = temperature, top_k, top_p
        self.seed, self.position = seed, position


def _draw(kb: KernelBuilder, row: SSAValue, n: int, best: SSAValue, r: SSAValue,
          params: _Params, slots: dict[str, SSAValue], buffers: tuple[SSAValue, SSAValue]
          ) -> SSAValue:
    """The token (i64) drawn from `row` at temperature > 0."""
    # everything kept until the filters say otherwise (every key is >= 0; target +inf)
    kb.store(kb.load(row, best), slots["m"])
    kb.store(kb.constant(0, i32), slots["tk"], element=i32)
    kb.store(kb.index(n), slots["ties_k"], element=i64)
    kb.store(kb.constant(0, i32), slots["vp"], element=i32)
    kb.store(kb.constant(float("inf"), f64), slots["target"], element=f64)
    kb.store(kb.constant(0.0, f64), slots["above"], element=f64)
    top_k, zero64 = params.top_k, kb.constant(0.0, f64)
    filters = vmath.and_(kb, kb.icmp("sgt", top_k, 0), kb.icmp("slt", top_k, n))
    small = vmath.and_(kb, filters, kb.icmp("sle", top_k, SMALL_TOP_K))
    top_p = kb.fcmp("olt", params.top_p, 1.0)
    every = vmath.and_(kb, _not(kb, filters), _not(kb, top_p))
    choice = kb.alloca(1, i64, align=8)
    with kb.if_(every):  # no top-k, no top-p: a server's default
        kb.store(_draw_every(kb, row, n, best, r, params), choice, element=i64)
    with kb.if_(small):  # the k best in a buffer, sorted by index
        buffer = _best_by_index(kb, row, n, top_k, buffers, slots)
        with kb.if_(top_p):
            (total,) = buffer.sweep(lambda i, x, key, w, kept_k, kept, s: [kb.fadd(s[0], w)],
                                    [zero64])
            _top_p(kb, buffer, kb.fmul(_f64(kb, params.top_p), total))
        kb.store(_draw_from(kb, buffer, best, r, params), choice, element=i64)
    with kb.if_(vmath.and_(kb, _not(kb, small), _not(kb, every))):
        whole = _Candidates(kb, row, None, n, slots)
        with kb.if_(filters):  # top-k by its threshold: the k-th largest key, by bisection
            tk = largest_key(kb, lambda t: kb.icmp("sge", _count_at_least(kb, row, n, t), top_k))
            # keys > tk: those >= tk + 1, none when tk is the largest key (tk + 1 wraps to 0)
            above = kb.select(kb.icmp("eq", tk, -1), kb.index(0),
                              _count_at_least(kb, row, n, kb.add(tk, 1)))
            whole.put("tk", tk, i32)
            whole.put("ties_k", kb.sub(top_k, above), i64)
        kb.store(_draw_from(kb, whole, best, r, params, skip=top_p), choice, element=i64)
        with kb.if_(top_p):
            kb.store(_top_p_draw(kb, whole, row, n, best, r, params, buffers), choice,
                     element=i64)
    return kb.load(choice, element=i64)


def _not(kb: KernelBuilder, cond: SSAValue) -> SSAValue:
    return vmath.xor(kb, cond, kb.constant(1, i1))


def _best_by_index(kb: KernelBuilder, row: SSAValue, n: int, count: Index,
                   buffers: tuple[SSAValue, SSAValue], slots: dict[str, SSAValue]
                   ) -> _Candidates:
    """The `count` elements of largest key (ties by the lower index) in the buffers, sorted
    by index."""
    _select_top(kb, row, n, count, *buffers, lambda a, b: _key_greater(kb, a, b))
    return _sorted_by_index(kb, count, buffers, slots)


def _sorted_by_index(kb: KernelBuilder, count: Index, buffers: tuple[SSAValue, SSAValue],
                     slots: dict[str, SSAValue]) -> _Candidates:
    """The first `count` slots of the buffers sorted by index, in place (an insertion sort:
    count is small), as candidates."""
    vals, ids = buffers
    with kb.loop(1, count) as a:
        value, index = kb.load(vals, a.iv), kb.load(ids, a.iv, element=i32)
        at = _first_beaten(kb, a.iv, lambda t: kb.icmp("sgt", kb.load(ids, t, element=i32), index))
        _insert_at(kb, vals, ids, at, a.iv, value, kb.sext(index))
    return _Candidates(kb, vals, ids, count, slots)


def _top_p_draw(kb: KernelBuilder, whole: _Candidates, row: SSAValue, n: int, best: SSAValue,
                r: SSAValue, params: _Params, buffers: tuple[SSAValue, SSAValue]) -> SSAValue:
    """Top-p over the whole row (after top-k by threshold, or none), then the draw. When the
    tokens of key above the SMALL_TOP_K-th one already reach the mass, the top-p set lies
    among them: the search and the draw run on that buffer (the same sums: the others add
    only zeros); else on the row."""
    zero64 = kb.constant(0.0, f64)
    (total,) = whole.sweep(lambda i, x, key, w, kept_k, kept, s: [
        kb.fadd(s[0], kb.select(kept_k, w, zero64))], [zero64])
    target = kb.fmul(_f64(kb, params.top_p), total)
    count = min(SMALL_TOP_K, n)
    _select_top(kb, row, n, count, *buffers, lambda a, b: _key_greater(kb, a, b))
    floor = order_key(kb, kb.load(buffers[0], count - 1))  # the smallest key in the buffer
    buffer = _sorted_by_index(kb, count, buffers, whole.slots)

    def above_floor(key: SSAValue, kept_k: SSAValue) -> SSAValue:
        return kb.icmp("ugt", key, floor)

    (mass,) = buffer.sweep(lambda i, x, key, w, kept_k, kept, s: [
        kb.fadd(s[0], kb.select(above_floor(key, kept_k), w, zero64))], [zero64],
        need=above_floor)
    choice = kb.alloca(1, i64, align=8)
    fits = kb.fcmp("oge", mass, target)
    with kb.if_(fits):
        _top_p(kb, buffer, target, floor)
        kb.store(_draw_from(kb, buffer, best, r, params), choice, element=i64)
    with kb.if_(_not(kb, fits)):
        _top_p(kb, whole, target)
        kb.store(_draw_from(kb, whole, best, r, params), choice, element=i64)
    return kb.load(choice, element=i64)


def _count_at_least(kb: KernelBuilder, row: SSAValue, n: int, t: SSAValue) -> SSAValue:
    """How many elements of row[0:n] have a key >= t (i64)."""
    with kb.loop(0, n, carried=[kb.constant(0, i64)]) as i:
        hit = kb.icmp("uge", order_key(kb, kb.load(row, i.iv)), t)
        i.yield_(kb.add(i.carried[0], _zext(kb, hit)))
    return i.results[0]


def _top_p(kb: KernelBuilder, c: _Candidates, target: SSAValue,
           floor: SSAValue | None = None) -> None:
    """Set the top-p threshold of the candidates (kept by top-k) for the mass `target`:
    vp, the largest key whose kept tokens of key >= vp reach it, and the mass above vp.
    With `floor`, keys up to it are known to reach the mass (not summed)."""
    zero64 = kb.constant(0.0, f64)

    def mass_at_least(t: SSAValue) -> SSAValue:
        def at_least(key: SSAValue, kept_k: SSAValue) -> SSAValue:
            return vmath.and_(kb, kept_k, kb.icmp("uge", key, t))

        (mass,) = c.sweep(lambda i, x, key, w, kept_k, kept, s: [
            kb.fadd(s[0], kb.select(at_least(key, kept_k), w, zero64))], [zero64],
            need=at_least)
        return mass

    def holds(t: SSAValue) -> SSAValue:
        def reaches() -> SSAValue:
            return kb.fcmp("oge", mass_at_least(t), target)

        if floor is None:
            return reaches()
        return _if_value(kb, kb.icmp("ugt", t, floor), reaches, kb.constant(1, i1))

    vp = largest_key(kb, holds)

    def above_vp(key: SSAValue, kept_k: SSAValue) -> SSAValue:
        return vmath.and_(kb, kept_k, kb.icmp("ugt", key, vp))

    (above,) = c.sweep(lambda i, x, key, w, kept_k, kept, s: [
        kb.fadd(s[0], kb.select(above_vp(key, kept_k), w, zero64))], [zero64], need=above_vp)
    c.put("vp", vp, i32)
    c.put("target", target, f64)
    c.put("above", above, f64)


def _draw_from(kb: KernelBuilder, c: _Candidates, best: SSAValue, r: SSAValue,
               params: _Params, skip: SSAValue | None = None) -> SSAValue:
    """The draw at the temperature among the kept candidates: the first, in index order,
    whose cumulative weight exceeds u times the total (u from Philox); else the last kept
    one; else `best`. With `skip` (an i1), nothing runs when it holds (returns best)."""
    zero64 = kb.constant(0.0, f64)
    if skip is not None:
        return _if_value(kb, _not(kb, skip), lambda: _draw_from(kb, c, best, r, params), best)
    m = c.get("m", f32)

    def scaled(kept: SSAValue, x: SSAValue) -> SSAValue:
        """exp((x - m) / T) in float64 where kept, else 0."""
        return _if_value(kb, kept, lambda: _f64(kb, vmath.exp(kb, kb.fdiv(
            kb.fsub(x, m), params.temperature))), zero64)

    def nothing(key: SSAValue, kept_k: SSAValue) -> SSAValue:
        return kb.constant(0, i1)

    (total_q,) = c.sweep(lambda i, x, key, w, kept_k, kept, s: [
        kb.fadd(s[0], scaled(kept, x))], [zero64], need=nothing)
    goal = kb.fmul(_uniform(kb, r, params), total_q)

    def walk(i, x, key, w, kept_k, kept, s):
        cumulative, found, choice, last = s
        cumulative = kb.fadd(cumulative, scaled(kept, x))
        hit = vmath.and_(kb, vmath.and_(kb, kept, kb.fcmp("ogt", cumulative, goal)),
                         _not(kb, found))
        return [cumulative, kb.or_(found, hit), kb.select(hit, i, choice),
                kb.select(kept, i, last)]

    _, found, choice, last = c.sweep(walk, [zero64, kb.constant(0, i1), best, best],
                                     need=nothing)
    return kb.select(found, choice, last)


def _uniform(kb: KernelBuilder, r: SSAValue, params: _Params) -> SSAValue:
    """The draw's u in [0, 1) (float64 of a 24-bit f32): Philox4x32-10 of (row, position)
    under the seed."""
    counter = [_trunc(kb, r), _trunc(kb, params.position),
               _trunc(kb, vmath.lshr(kb, params.position, 32)), kb.constant(0, i32)]
    seed = params.seed
    bits = philox(kb, counter, [_trunc(kb, seed), _trunc(kb, vmath.lshr(kb, seed, 32))])[0]
    return _f64(kb, kb.fmul(kb.sitofp(vmath.lshr(kb, bits, 8), f32), 2.0**-24))


def _draw_every(kb: KernelBuilder, row: SSAValue, n: int, best: SSAValue, r: SSAValue,
                params: _Params) -> SSAValue:
    """`_draw_from` when every token is kept (no top-k, no top-p): the same weights
    exp((x - m) / T) and float64 sums in index order, the exps W at a time. A server's
    default request (temperature 1, no top-k, top-p 1) drew from Gemma 3's 262,144 logits
    in ~4.5 ms on one thread with the scalar sweeps."""
    w = kb.vector_width
    full = n // w * w
    m = kb.load(row, best)
    m_vec, t_vec = kb.splat(m), kb.splat(params.temperature)

    def weights(i: SSAValue) -> list[SSAValue]:
        """The float64 weights of row[i:i + W]."""
        x = kb.load(row, i, vector=True)
        e = vmath.exp(kb, kb.fdiv(kb.fsub(x, m_vec), t_vec))
        return [_f64(kb, lane_of(kb, e, j)) for j in range(w)]

    def weight(i: int) -> SSAValue:
        x = kb.load(row, i)
        return _f64(kb, vmath.exp(kb, kb.fdiv(kb.fsub(x, m), params.temperature)))

    def fold(state: list[SSAValue], body) -> list[SSAValue]:
        """body(state, weight, index) -> state over the row in index order: whole
        vectors in a loop, then the scalar rest."""
        if full:
            with kb.loop(0, full, step=w, carried=state) as v:
                now = list(v.carried)
                for j, q in enumerate(weights(v.iv)):
                    now = body(now, q, kb.add(v.iv, j))
                v.yield_(*now)
            state = v.results
        for i in range(full, n):
            state = body(state, weight(i), kb.index(i))
        return state

    (total,) = fold([kb.constant(0.0, f64)], lambda s, q, i: [kb.fadd(s[0], q)])
    goal = kb.fmul(_uniform(kb, r, params), total)

    def walk(state: list[SSAValue], q: SSAValue, index: SSAValue) -> list[SSAValue]:
        cumulative, found, choice = state
        cumulative = kb.fadd(cumulative, q)
        hit = vmath.and_(kb, kb.fcmp("ogt", cumulative, goal), _not(kb, found))
        return [cumulative, kb.or_(found, hit), kb.select(hit, index, choice)]

    state = fold([kb.constant(0.0, f64), kb.constant(0, i1), best], walk)
    _, found, choice = state
    return kb.select(found, choice, kb.index(n - 1))  # else the last (kept) token
