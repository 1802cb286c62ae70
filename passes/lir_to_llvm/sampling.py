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

from xdsl.dialects import llvm
from xdsl.dialects.builtin import f32, f64, i1, i32, i64
from xdsl.ir import Operation, SSAValue

from rlx_mlir.core import philox as P
from rlx_mlir.dialects import lir
from rlx_mlir.passes.lir_to_llvm import vmath
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


def _argmax_row(kb: KernelBuilder, row: SSAValue, n: int) -> SSAValue:
    """The index (i64) of the best value of row[0:n]: W lanes at a time, each keeping its
    best value and index (f32, exact below 2^23), then the lanes compared (ties to the
    lower index), then a scalar tail."""
    w = kb.vector_width
    if n < 2 * w or n >= 1 << 23:
        return _argmax_scalar(kb, row, 0, n, kb.load(row, 0), kb.constant(0, i64))
    iota = kb.insert(llvm.UndefOp(kb.vec))
    for lane in range(w):
        iota = kb.insert(llvm.InsertElementOp(iota, kb.fconst(float(lane)), kb.constant(lane, i32)))
    end = n // w * w
    with kb.loop(w, end, w, carried=[kb.load(row, 0, vector=True), iota]) as loop:
        x = kb.load(row, loop.iv, vector=True)
        better = _better(kb, x, loop.carried[0])
        at = kb.fadd(iota, kb.splat(kb.sitofp(loop.iv, f32)))
        loop.yield_(kb.select(better, x, loop.carried[0]), kb.select(better, at, loop.carried[1]))
    lanes_v, lanes_i = kb.alloca(w), kb.alloca(w)
    kb.store(loop.results[0], lanes_v, align=4)
    kb.store(loop.results[1], lanes_i, align=4)
    with kb.loop(1, w, carried=[kb.load(lanes_v, 0), kb.load(lanes_i, 0)]) as lane:
        value, index = kb.load(lanes_v, lane.iv), kb.load(lanes_i, lane.iv)
        best, best_index = lane.carried
        same = kb.or_(kb.fcmp("oeq", value, best),
                      vmath.and_(kb, kb.fcmp("uno", value, value), kb.fcmp("uno", best, best)))
        wins = kb.or_(_better(kb, value, best),
                      vmath.and_(kb, same, kb.fcmp("olt", index, best_index)))
        lane.yield_(kb.select(wins, value, best), kb.select(wins, index, best_index))
    best, index = lane.results
    # an f32 integer below 2^23 as an i64: its bits after adding 2^23 (exact)
    whole = kb.sub(vmath.bits(kb, kb.fadd(index, 2.0**23)), 0x4B000000)
    return _argmax_scalar(kb, row, end, n, best, kb.sext(whole))


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


@kernel(lir.TopKOp, runtime_dims=True)
def build_top_k(op: Operation, name: str, vector_width: int) -> llvm.FuncOp:
    """out[r], indices_out[r] = the k best values of row r and their indices, best first:
    each element is inserted into the sorted out row (after its equals), or skipped when
    the row is full and it does not beat the last one."""
    assert isinstance(op, lir.TopKOp)
    k = op.k.value.data
    symbols = kernel_symbols(op)
    kb = KernelBuilder(name, [PTR, PTR, PTR] + [i64] * len(symbols), vector_width=vector_width)
    x, values, indices = kb.args[:3]
    rows, n = _row_geometry(kb, op, kb.args[3:])
    with kb.loop(0, rows) as r:
        row = kb.gep(x, kb.mul(r.iv, n))
        vals = kb.gep(values, kb.mul(r.iv, k))
        ids = kb.gep(indices, kb.mul(r.iv, k), i32)
        with kb.loop(0, n, carried=[kb.constant(0, i64)]) as i:
            count = i.carried[0]
            value = kb.load(row, i.iv)
            full = kb.icmp("sge", count, k)
            enters = kb.or_(kb.icmp("slt", count, k), _better(kb, value, kb.load(vals, k - 1)))
            with kb.if_(enters):
                # the insertion point: the first kept value that `value` beats (else the end)
                with kb.loop(0, count, carried=[count]) as t:
                    first = vmath.and_(kb, kb.icmp("eq", t.carried[0], count),
                                       _better(kb, value, kb.load(vals, t.iv)))
                    t.yield_(kb.select(first, t.iv, t.carried[0]))
                at = t.results[0]
                last = kb.select(full, kb.index(k - 1), count)  # the slot that gets filled
                with kb.loop(0, kb.sub(last, at)) as s:  # shift [at, last) one slot right
                    dst = kb.sub(last, s.iv)
                    src = kb.sub(dst, 1)
                    kb.store(kb.load(vals, src), vals, dst)
                    kb.store(kb.load(ids, src, element=i32), ids, dst, element=i32)
                kb.store(value, vals, at)
                kb.store(_trunc(kb, i.iv), ids, at, element=i32)
            i.yield_(kb.select(full, count, kb.add(count, 1)))
    kb.ret()
    return kb.finish()


# ----------------------------------------------------------------------------- sample


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


class _Row:
    """One row of a sample kernel: its logits, the kept-set thresholds (stack slots), and
    the passes over it."""

    def __init__(self, kb: KernelBuilder, row: SSAValue, n: int, slots: dict[str, SSAValue]):
        self.kb, self.row, self.n, self.slots = kb, row, n, slots

    def get(self, name: str, ty) -> SSAValue:
        return self.kb.load(self.slots[name], element=ty)

    def put(self, name: str, value: SSAValue, ty) -> None:
        self.kb.store(value, self.slots[name], element=ty)

    def largest_key(self, holds) -> SSAValue:
        """The largest uint32 t with holds(t) (true at 0, monotone), bit by bit."""
        kb = self.kb
        with kb.loop(0, 32, carried=[kb.constant(0, i32)]) as bit:
            shift = _trunc(kb, kb.sub(31, bit.iv))
            candidate = vmath.or_(kb, bit.carried[0], vmath.shl(kb, kb.constant(1, i32), shift))
            bit.yield_(kb.select(holds(candidate), candidate, bit.carried[0]))
        return bit.results[0]

    def sweep(self, body, init: list[SSAValue]) -> list[SSAValue]:
        """Fold body(i, x, key, w, kept_k, kept, carried) -> carried over the row, with the
        top-k and top-p membership of each element (tie counters carried along)."""
        kb = self.kb
        tk, ties_k = self.get("tk", i32), self.get("ties_k", i64)
        vp, target = self.get("vp", i32), self.get("target", f64)
        above, m = self.get("above", f64), self.get("m", f32)
        zero64 = kb.constant(0.0, f64)
        with kb.loop(0, self.n, carried=[kb.constant(0, i64), above, *init]) as i:
            seen, before, *carried = i.carried
            x = kb.load(self.row, i.iv)
            key = order_key(kb, x)
            w = _f64(kb, vmath.exp(kb, kb.fsub(x, m)))
            tie_k = kb.icmp("eq", key, tk)
            kept_k = kb.or_(kb.icmp("ugt", key, tk),
                            vmath.and_(kb, tie_k, kb.icmp("slt", seen, ties_k)))
            tie_p = vmath.and_(kb, kept_k, kb.icmp("eq", key, vp))
            kept = vmath.and_(kb, kept_k, kb.or_(
                kb.icmp("ugt", key, vp), vmath.and_(kb, tie_p, kb.fcmp("olt", before, target))))
            new = body(i.iv, x, key, w, kept_k, kept, carried)
            i.yield_(kb.add(seen, _zext(kb, tie_k)),
                     kb.fadd(before, kb.select(tie_p, w, zero64)), *new)
        return i.results[2:]


@kernel(lir.SampleOp, runtime_dims=True)
def build_sample(op: Operation, name: str, vector_width: int) -> llvm.FuncOp:
    """out[r] = the token drawn from row r (reference_kernels.sample, step by step)."""
    assert isinstance(op, lir.SampleOp)
    symbols = kernel_symbols(op)
    has_position = op.position is not None
    kb = KernelBuilder(name, [PTR] * 6 + [i64] * (int(has_position) + len(symbols)),
                       vector_width=vector_width)
    logits, t_ptr, k_ptr, p_ptr, seed_ptr, out = kb.args[:6]
    position = kb.args[6] if has_position else kb.constant(0, i64)
    rows, n = _row_geometry(kb, op, kb.args[6 + int(has_position):])
    temperature = kb.load(t_ptr)
    top_k = kb.sext(kb.load(k_ptr, element=i32))
    top_p = kb.load(p_ptr)
    seed = kb.load(seed_ptr, element=i64)
    key = [_trunc(kb, seed), _trunc(kb, vmath.lshr(kb, seed, 32))]
    slots = {name: kb.alloca(1, ty, align=8) for name, ty in (
        ("tk", i32), ("ties_k", i64), ("vp", i32), ("target", f64), ("above", f64),
        ("m", f32))}
    zero64 = kb.constant(0.0, f64)
    with kb.loop(0, rows) as r:
        row = _Row(kb, kb.gep(logits, kb.mul(r.iv, n)), n, slots)
        best = _argmax_row(kb, row.row, n)
        kb.store(_trunc(kb, best), out, r.iv, element=i32)
        with kb.if_(kb.fcmp("ogt", temperature, 0.0)):
            _draw(kb, row, best, r.iv, temperature, top_k, top_p,
                  [_trunc(kb, r.iv), _trunc(kb, position),
                   _trunc(kb, vmath.lshr(kb, position, 32)), kb.constant(0, i32)], key, out,
                  zero64)
    kb.ret()
    return kb.finish()


def _draw(kb: KernelBuilder, row: _Row, best: SSAValue, r: SSAValue, temperature: SSAValue,
          top_k: SSAValue, top_p: SSAValue, counter: list[SSAValue], key: list[SSAValue],
          out: SSAValue, zero64: SSAValue) -> None:
    """Store the token drawn from `row` (temperature > 0) to out[r]."""
    n = row.n
    row.put("m", kb.load(row.row, best), f32)
    # everything kept until the filters say otherwise (every key is >= 0; target +inf)
    row.put("tk", kb.constant(0, i32), i32)
    row.put("ties_k", kb.index(n), i64)
    row.put("vp", kb.constant(0, i32), i32)
    row.put("target", kb.constant(float("inf"), f64), f64)
    row.put("above", zero64, f64)

    def count_at_least(t: SSAValue) -> SSAValue:
        with kb.loop(0, n, carried=[kb.constant(0, i64)]) as i:
            hit = kb.icmp("uge", order_key(kb, kb.load(row.row, i.iv)), t)
            i.yield_(kb.add(i.carried[0], _zext(kb, hit)))
        return i.results[0]

    with kb.if_(vmath.and_(kb, kb.icmp("sgt", top_k, 0), kb.icmp("slt", top_k, n))):
        tk = row.largest_key(lambda t: kb.icmp("sge", count_at_least(t), top_k))
        # keys > tk: those >= tk + 1, none when tk is the largest key (tk + 1 wraps to 0)
        above_k = kb.select(kb.icmp("eq", tk, -1), kb.index(0), count_at_least(kb.add(tk, 1)))
        row.put("tk", tk, i32)
        row.put("ties_k", kb.sub(top_k, above_k), i64)

    with kb.if_(kb.fcmp("olt", top_p, 1.0)):
        (total,) = row.sweep(lambda i, x, key, w, kept_k, kept, c: [
            kb.fadd(c[0], kb.select(kept_k, w, zero64))], [zero64])
        target = kb.fmul(_f64(kb, top_p), total)

        def mass_at_least(t: SSAValue) -> SSAValue:
            (mass,) = row.sweep(lambda i, x, key, w, kept_k, kept, c: [kb.fadd(c[0], kb.select(
                vmath.and_(kb, kept_k, kb.icmp("uge", key, t)), w, zero64))], [zero64])
            return mass

        vp = row.largest_key(lambda t: kb.fcmp("oge", mass_at_least(t), target))
        (above,) = row.sweep(lambda i, x, key, w, kept_k, kept, c: [kb.fadd(c[0], kb.select(
            vmath.and_(kb, kept_k, kb.icmp("ugt", key, vp)), w, zero64))], [zero64])
        row.put("vp", vp, i32)
        row.put("target", target, f64)
        row.put("above", above, f64)

    def scaled(x: SSAValue) -> SSAValue:
        return _f64(kb, vmath.exp(kb, kb.fdiv(kb.fsub(x, row.get("m", f32)), temperature)))

    (total_q,) = row.sweep(lambda i, x, key, w, kept_k, kept, c: [
        kb.fadd(c[0], kb.select(kept, scaled(x), zero64))], [zero64])
    bits = philox(kb, counter, key)[0]
    u = kb.fmul(kb.sitofp(vmath.lshr(kb, bits, 8), f32), 2.0**-24)
    goal = kb.fmul(_f64(kb, u), total_q)

    def walk(i, x, key, w, kept_k, kept, c):
        cumulative, found, choice, last = c
        cumulative = kb.fadd(cumulative, kb.select(kept, scaled(x), zero64))
        hit = vmath.and_(kb, vmath.and_(kb, kept, kb.fcmp("ogt", cumulative, goal)),
                         vmath.xor(kb, found, kb.constant(1, i1)))
        return [cumulative, kb.or_(found, hit), kb.select(hit, i, choice),
                kb.select(kept, i, last)]

    _, found, choice, last = row.sweep(walk, [zero64, kb.constant(0, i1), best, best])
    kb.store(_trunc(kb, kb.select(found, choice, last)), out, r, element=i32)

