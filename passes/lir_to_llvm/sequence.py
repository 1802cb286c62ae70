"""Kernels of the recurrences over time, `lir.selective_scan` and `lir.gated_delta_net`,
as llvm-dialect functions.

Both run one independent *work item* at a time — a (batch row, channel) of the selective
scan, a (batch row, head) of the gated delta net — and loop over the time steps inside
it, so the item's state stays in L1 for the whole sequence: a small stack buffer, or,
with `return_state`, the item's slice of the final state buffer `state_out` itself (the
kernel's last pointer, after `out`). The state's contiguous axis (n of the scan's
[h, n] state, the value dim m of the delta net's [n, m] state) is swept W floats at a
time with a scalar tail. The partitioned variants (`@kernel(..., partitioned=True)`) take two more i64
arguments (part, parts) and run part p's share of the work items (`KernelBuilder.part_range`), so
channels or heads spread over the threads with no barrier inside.

A symbolic sequence length s (`?` in the operands' second dim) is read at run time
(`runtime_dims=True`, ABI of dynamic.py: its size argument after the pointers, before part and
parts): it bounds the time loop and strides the rows. The forward kernels also take a
symbolic batch b (axis 0, a batched decoder's sequences): the work items b · channels (or
heads) are counted at run time. The channels or heads and the per-item state are static;
the backward kernels take a symbolic s only.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass

from xdsl.dialects import llvm
from xdsl.dialects.builtin import i64
from xdsl.ir import Operation, SSAValue

from rlx_mlir.dialects import lir
from rlx_mlir.dialects.common import shape_of
from rlx_mlir.passes.lir_to_llvm import vmath
from rlx_mlir.passes.lir_to_llvm.builder import PTR, KernelBuilder, Value
from rlx_mlir.passes.lir_to_llvm.dynamic import (
    DynamicKernelError,
    Index,
    RuntimeDims,
    is_dynamic,
    kernel_symbols,
    memref_operands,
)
from rlx_mlir.passes.lir_to_llvm.record import kernel


def broadcast(kb: KernelBuilder, scalar: SSAValue, vector: bool) -> SSAValue:
    return kb.splat(scalar) if vector else scalar


@dataclass
class _Sequence:
    """A sequence kernel under construction: its builder, the five input pointers, the
    optional initial state, `out`, the optional final state `state_out`, the number of time
    steps s (an int, or the i64 size argument of a symbolic s), (part, parts) when
    partitioned, and where each work item keeps its state of `state_size` floats (its slice
    of `state_out` with `return_state`, else the stack `scratch`)."""

    kb: KernelBuilder
    inputs: list[SSAValue]
    initial: SSAValue | None
    out: SSAValue
    state_out: SSAValue | None
    steps: Index
    share: tuple[SSAValue, SSAValue] | None
    state_size: int
    scratch: SSAValue | None
    batch: Index = 1
    """The batch rows b (an int, or the i64 size argument of a symbolic b)."""

    @contextmanager
    def items(self, count: Index, inner: int) -> Iterator[tuple[SSAValue, SSAValue, SSAValue]]:
        """Loop over this call's work items of `count` = rows · `inner` (all when serial),
        yielding (row, index within the row, the item's seeded state buffer)."""
        kb = self.kb
        first, last = _items(kb, count, self.share)
        with kb.loop(first, last) as item_loop:
            item = item_loop.iv
            row, within = kb.sdiv(item, inner), kb.srem(item, inner)
            state = _item_state(kb, self.state_out, item, self.state_size, self.scratch)
            _seed_state(kb, state, self.initial, item, self.state_size)
            yield row, within, state


def _kernel(op: Operation, name: str, vector_width: int, partitioned: bool, state_size: int
            ) -> _Sequence:
    """The kernel's prologue: arguments (one pointer per memref operand by operand
    definition: 5 inputs, [initial_state], out, [state_out]; then [s], [part, parts]) and,
    without `state_out`, the state scratch."""
    pointers = len(memref_operands(op))
    symbols = kernel_symbols(op) if is_dynamic(op) else ()
    kb = KernelBuilder(name, [PTR] * pointers + [i64] * len(symbols) + [i64, i64] * partitioned,
                       vector_width=vector_width)
    args = list(kb.args)
    sizes = args[pointers:pointers + len(symbols)]
    share = (args[-2], args[-1]) if partitioned else None
    batch, steps = (_batch_and_steps(op, RuntimeDims.of(op, sizes)) if symbols
                    else shape_of(op.operands[0])[:2])
    *inputs, initial, out, state_out = _pointers(op, args[:pointers])
    return _Sequence(kb, inputs, initial, out, state_out, steps, share, state_size,
                     None if state_out is not None else kb.alloca(state_size), batch)


def _pointers(op: lir.KernelOp, ptrs: list[SSAValue]) -> list[SSAValue | None]:
    """The kernel's pointer arguments (one per memref operand) by operand definition, None
    for an absent optional operand: the five inputs, `initial_state`, `out`, `state_out`."""
    given = iter(ptrs)
    return [None if getattr(op, name) is None else next(given)
            for name, _ in type(op).get_irdl_definition().operands]


def _steps(op: Operation, dims: RuntimeDims) -> Index:
    """The run-time s of a sequence op whose only symbol is s (axis 1 of its operands)."""
    batch, steps = _batch_and_steps(op, dims)
    if not isinstance(batch, int):
        raise DynamicKernelError(f"{op.name}: the batch (axis 0) must be static here, got "
                                 f"operands {', '.join(str(tuple(s)) for s in dims.shapes)}")
    return steps


def _batch_and_steps(op: Operation, dims: RuntimeDims) -> tuple[Index, Index]:
    """(b, s) of a forward sequence op over symbols: s (axis 1 of its operands) is one,
    and the batch (axis 0 of every operand that has one) may be another (a batched
    decoder's sequences); any other symbol is refused."""
    first = dims.shapes[0]
    batch = first[0]
    others = [d for shape in dims.shapes for i, d in enumerate(shape)
              if isinstance(d, str) and not (i == 1 and d == first[1])
              and not (i == 0 and d == batch)]
    if others or not isinstance(first[1], str):
        raise DynamicKernelError(
            f"{op.name}: only the sequence length (axis 1) and the batch (axis 0) may be "
            f"symbolic, got operands {', '.join(str(tuple(s)) for s in dims.shapes)}")
    return (dims.size(batch) if isinstance(batch, str) else batch), dims.size(first[1])


def _times(kb: KernelBuilder, batch: Index, inner: int) -> Index:
    """batch · inner: an int when the batch is static, else an i64 op."""
    return batch * inner if isinstance(batch, int) else kb.mul(batch, inner)


def _items(kb: KernelBuilder, count: Index, share: tuple[SSAValue, SSAValue] | None
           ) -> tuple[Value, Value]:
    """The work items [first, last) of `count` this call runs (all when serial)."""
    return (0, count) if share is None else kb.part_range(count, *share)


def _item_state(kb: KernelBuilder, state_out: SSAValue | None, item: SSAValue, size: int,
                scratch: SSAValue | None) -> SSAValue:
    """The state buffer of one work item: its slice of `state_out` when the op returns
    the final state, else the stack scratch."""
    if state_out is None:
        assert scratch is not None
        return scratch
    return kb.gep(state_out, kb.mul(item, size))


def _seed_state(kb: KernelBuilder, state: SSAValue, initial: SSAValue | None,
                item: SSAValue, size: int) -> None:
    """state[0:size] = initial[item·size : (item+1)·size], or zeros."""
    source = None if initial is None else kb.gep(initial, kb.mul(item, size))

    def seed(i: SSAValue, vector: bool) -> None:
        value = (kb.vconst(0.0) if vector else kb.fconst(0.0)) if source is None else \
            kb.load(source, i, vector=vector)
        kb.store(value, state, i)

    kb.sweep(0, size, seed)


# ----------------------------------------------------------------------------- selective scan


@kernel(lir.SelectiveScanOp, partitioned=True, runtime_dims=True)
def build_selective_scan(op: Operation, name: str, vector_width: int,
                         partitioned: bool = False) -> llvm.FuncOp:
    """y[b, t, c] = Σⱼ state[j]·C[b, t, j] after state = exp(Δ·A[c])⊙state + Δ·x·B[b, t]
    (Δ = delta[b, t, c], x = x[b, t, c]): one (b, c) item at a time, its state [n] in L1
    across the s steps."""
    assert isinstance(op, lir.SelectiveScanOp)
    channels = shape_of(op.x)[2]
    n = shape_of(op.a)[1]
    seq = _kernel(op, name, vector_width, partitioned, n)
    kb, steps, out = seq.kb, seq.steps, seq.out
    x, delta, a, b, c = seq.inputs

    with seq.items(_times(kb, seq.batch, channels), channels) as (row, channel, state):
        a_row = kb.gep(a, kb.mul(channel, n))
        with kb.loop(0, steps) as t_loop:
            step = kb.add(kb.mul(row, steps), t_loop.iv)             # b·s + t
            at = kb.add(kb.mul(step, channels), channel)            # [b, t, c]
            dt = kb.load(delta, at)
            dx = kb.fmul(dt, kb.load(x, at))
            b_row, c_row = kb.gep(b, kb.mul(step, n)), kb.gep(c, kb.mul(step, n))

            def update(j: SSAValue, vector: bool) -> SSAValue:
                decay = vmath.exp(kb, kb.fmul(broadcast(kb, dt, vector),
                                              kb.load(a_row, j, vector=vector)))
                new = kb.fma(decay, kb.load(state, j, vector=vector),
                             kb.fmul(broadcast(kb, dx, vector), kb.load(b_row, j, vector=vector)))
                kb.store(new, state, j)
                return kb.fmul(new, kb.load(c_row, j, vector=vector))

            kb.store(kb.sweep_sum(n, update), out, at)
    kb.ret()
    return kb.finish()


# ----------------------------------------------------------------------------- gated delta net


@kernel(lir.GatedDeltaNetOp, partitioned=True, runtime_dims=True)
def build_gated_delta_net(op: Operation, name: str, vector_width: int,
                          partitioned: bool = False) -> llvm.FuncOp:
    """The gated delta rule, one (b, head) item at a time with its state S [n, m] in L1:
    per step, pass 1 decays S by exp(g) and accumulates kv = Sᵀk into a stack row; then
    δ = β(v − kv); pass 2 adds k δᵀ to S and accumulates o = Sᵀq straight into out."""
    assert isinstance(op, lir.GatedDeltaNetOp)
    _, _, heads, n = shape_of(op.q)
    m = shape_of(op.v)[3]
    seq = _kernel(op, name, vector_width, partitioned, n * m)
    kb, steps, out = seq.kb, seq.steps, seq.out
    q, k, v, g, beta = seq.inputs
    kv = kb.alloca(m)                       # Sᵀk, then δ

    with seq.items(_times(kb, seq.batch, heads), heads) as (row, head, state):
        with kb.loop(0, steps) as t_loop:
            at = kb.add(kb.mul(kb.add(kb.mul(row, steps), t_loop.iv), heads), head)  # [b, t, H]
            k_t, q_t = kb.gep(k, kb.mul(at, n)), kb.gep(q, kb.mul(at, n))
            v_t, o_t = kb.gep(v, kb.mul(at, m)), kb.gep(out, kb.mul(at, m))
            decay = vmath.exp(kb, kb.load(g, at))
            _decay_and_project(kb, state, k_t, kv, decay, n, m)
            beta_t = kb.load(beta, at)

            def delta_row(j: SSAValue, vector: bool) -> None:
                diff = kb.fsub(kb.load(v_t, j, vector=vector), kb.load(kv, j, vector=vector))
                kb.store(kb.fmul(broadcast(kb, beta_t, vector), diff), kv, j)
                kb.store(kb.vconst(0.0) if vector else kb.fconst(0.0), o_t, j)

            kb.sweep(0, m, delta_row)
            _update_and_read(kb, state, k_t, q_t, kv, o_t, n, m)
    kb.ret()
    return kb.finish()


def _decay_and_project(kb: KernelBuilder, state: SSAValue, k_t: SSAValue, kv: SSAValue,
                       decay: SSAValue, n: int, m: int) -> None:
    """S = decay·S and kv = Sᵀk_t = Σᵢ k_t[i]·S[i, :] (the decayed S)."""

    def zero(j: SSAValue, vector: bool) -> None:
        kb.store(kb.vconst(0.0) if vector else kb.fconst(0.0), kv, j)

    kb.sweep(0, m, zero)
    with kb.loop(0, n) as i_loop:
        s_row = kb.gep(state, kb.mul(i_loop.iv, m))
        k_i = kb.load(k_t, i_loop.iv)

        def step(j: SSAValue, vector: bool) -> None:
            decayed = kb.fmul(kb.load(s_row, j, vector=vector), broadcast(kb, decay, vector))
            kb.store(decayed, s_row, j)
            kb.store(kb.fma(broadcast(kb, k_i, vector), decayed, kb.load(kv, j, vector=vector)),
                     kv, j)

        kb.sweep(0, m, step)


def _update_and_read(kb: KernelBuilder, state: SSAValue, k_t: SSAValue, q_t: SSAValue,
                     delta: SSAValue, o_t: SSAValue, n: int, m: int) -> None:
    """S = S + k_t δᵀ and o_t = Sᵀq_t = Σᵢ q_t[i]·S[i, :] (the updated S; o_t is zero)."""
    with kb.loop(0, n) as i_loop:
        s_row = kb.gep(state, kb.mul(i_loop.iv, m))
        k_i, q_i = kb.load(k_t, i_loop.iv), kb.load(q_t, i_loop.iv)

        def step(j: SSAValue, vector: bool) -> None:
            updated = kb.fma(broadcast(kb, k_i, vector), kb.load(delta, j, vector=vector),
                             kb.load(s_row, j, vector=vector))
            kb.store(updated, s_row, j)
            kb.store(kb.fma(broadcast(kb, q_i, vector), updated, kb.load(o_t, j, vector=vector)),
                     o_t, j)

        kb.sweep(0, m, step)


# ----------------------------------------------------------------------------- backward
# The reverse passes keep the forward's state before each step in the op's `states_out`
# ([b, s, h, n] / [b, s, H, n, m], arena-planned like any buffer): a first pass over time
# runs the recurrence and saves them, a second one walks the steps from last to first,
# recomputing each step from its saved state and carrying the state's cotangent (its
# slice of `d_initial_state_out`, or a stack buffer). Storing rather than inverting the
# decay keeps it exact when exp(Δ·A) or exp(g) underflows.


@dataclass
class _Backward:
    """A backward kernel under construction: its builder, its pointers by operand name
    (None for an absent optional one), the number of time steps, (part, parts)."""

    kb: KernelBuilder
    ptr: dict[str, SSAValue | None]
    steps: Index
    share: tuple[SSAValue, SSAValue] | None

    def reverse_step(self, iv: SSAValue) -> SSAValue:
        """The time step s-1-iv of the iv-th reverse iteration."""
        steps = self.steps
        return self.kb.sub(steps - 1 if isinstance(steps, int) else self.kb.sub(steps, 1), iv)


def _backward_kernel(op: Operation, name: str, vector_width: int, partitioned: bool
                     ) -> _Backward:
    """The prologue of a backward kernel: one pointer per memref operand (by operand
    definition), then [s], then [part, parts]."""
    pointers = len(memref_operands(op))
    symbols = kernel_symbols(op) if is_dynamic(op) else ()
    kb = KernelBuilder(name, [PTR] * pointers + [i64] * len(symbols) + [i64, i64] * partitioned,
                       vector_width=vector_width)
    args = list(kb.args)
    sizes = args[pointers:pointers + len(symbols)]
    steps = _steps(op, RuntimeDims.of(op, sizes)) if symbols else shape_of(op.operands[0])[1]
    names = [name for name, _ in type(op).get_irdl_definition().operands]
    ptr = dict(zip(names, _pointers(op, args[:pointers]), strict=True))
    return _Backward(kb, ptr, steps, (args[-2], args[-1]) if partitioned else None)


def _sweep_sums(kb: KernelBuilder, count: int,
                term: Callable[[SSAValue, bool], tuple[SSAValue, SSAValue]]
                ) -> tuple[SSAValue, SSAValue]:
    """Two sums over [0, count) at once (`KernelBuilder.sweep_sum` with a pair of terms)."""
    w = kb.vector_width
    vector_end = count // w * w
    totals = (kb.fconst(0.0), kb.fconst(0.0))
    if vector_end:
        with kb.loop(0, vector_end, w, carried=[kb.vconst(0.0), kb.vconst(0.0)]) as loop:
            first, second = term(loop.iv, True)
            loop.yield_(kb.fadd(loop.carried[0], first), kb.fadd(loop.carried[1], second))
        totals = (kb.hsum(loop.results[0]), kb.hsum(loop.results[1]))
    if vector_end < count:
        with kb.loop(vector_end, count, carried=list(totals)) as loop:
            first, second = term(loop.iv, False)
            loop.yield_(kb.fadd(loop.carried[0], first), kb.fadd(loop.carried[1], second))
        totals = (loop.results[0], loop.results[1])
    return totals


def _copy(kb: KernelBuilder, source: SSAValue, target: SSAValue, size: Index) -> None:
    """target[0:size] = source[0:size]."""
    kb.sweep(0, size, lambda i, vector: kb.store(kb.load(source, i, vector=vector), target, i))


def _zero(kb: KernelBuilder, target: SSAValue, size: Index) -> None:
    """target[0:size] = 0."""
    kb.sweep(0, size, lambda i, vector: kb.store(
        kb.vconst(0.0) if vector else kb.fconst(0.0), target, i))


def _zero_rows(kb: KernelBuilder, target: SSAValue, first: Value, last: Value,
               size: Index) -> None:
    """Rows [first, last) of `size` floats of `target` = 0."""
    with kb.loop(first, last) as row_loop:
        _zero(kb, kb.gep(target, kb.mul(row_loop.iv, size)), size)


def _accumulate(kb: KernelBuilder, target: SSAValue, j: SSAValue, vector: bool,
                value: SSAValue) -> None:
    """target[j] += value."""
    kb.store(kb.fadd(kb.load(target, j, vector=vector), value), target, j)


@kernel(lir.SelectiveScanBackwardOp, partitioned=True, runtime_dims=True)
def build_selective_scan_backward(op: Operation, name: str, vector_width: int,
                                  partitioned: bool = False) -> llvm.FuncOp:
    """The reversed selective scan, one (b, c) item at a time, its state h [n] and the
    state's cotangent dh [n] in L1. dB, dC [b, s, n] and dA (per batch row, [b, h, n])
    sum over a row's channels, so threads split whole batch rows (each zeroes its rows of
    them first) and a row's items run in order on one thread. Per item: the forward
    saves h_{t-1} into `states_out`; then from t = s-1 down, with a = exp(Δ·A[c]) and
    h_t = a⊙h_{t-1} + Δx·B_t, one pass adds dy·C_t to dh, dy·h_t to dC_t and Δx·dh to
    dB_t, summing du = dh·B_t; a second adds Δ·r to dA[c] (r = dh⊙h_{t-1}⊙a), sums r·A[c]
    and decays dh by a; dx = du·Δ, dΔ = du·x + Σ r·A[c]."""
    assert isinstance(op, lir.SelectiveScanBackwardOp)
    batch, _, channels = shape_of(op.x)
    n = shape_of(op.a)[1]
    bw = _backward_kernel(op, name, vector_width, partitioned)
    kb, p, steps = bw.kb, bw.ptr, bw.steps
    x, delta, a, b, c, dy = (p[k] for k in ("x", "delta", "a", "b", "c", "dy"))
    dx, d_delta, d_a, d_b, d_c, states = (
        p[k] for k in ("out", "d_delta_out", "d_a_out", "d_b_out", "d_c_out", "states_out"))
    assert None not in (x, delta, a, b, c, dy, dx, d_delta, d_a, d_b, d_c, states)
    first, last = _items(kb, batch, bw.share)                     # batch rows
    row_size = kb.fold_mul(steps, n)                              # of dB, dC
    for target, size in ((d_a, channels * n), (d_b, row_size), (d_c, row_size)):
        _zero_rows(kb, target, first, last, size)
    h = kb.alloca(n)
    scratch = None if p["d_initial_state_out"] is not None else kb.alloca(n)

    with kb.loop(kb.fold_mul(first, channels), kb.fold_mul(last, channels)) as item_loop:
        item = item_loop.iv
        row, channel = kb.sdiv(item, channels), kb.srem(item, channels)
        a_row, da_row = kb.gep(a, kb.mul(channel, n)), kb.gep(d_a, kb.mul(item, n))

        def at_step(t: SSAValue) -> tuple[SSAValue, SSAValue]:
            step = kb.add(kb.mul(row, steps), t)                          # b·s + t
            return step, kb.add(kb.mul(step, channels), channel)          # [b, t, c]

        _seed_state(kb, h, p["initial_state"], item, n)
        with kb.loop(0, steps) as t_loop:
            step, at = at_step(t_loop.iv)
            _copy(kb, h, kb.gep(states, kb.mul(at, n)), n)
            dt = kb.load(delta, at)
            u = kb.fmul(dt, kb.load(x, at))
            b_row = kb.gep(b, kb.mul(step, n))

            def advance(j: SSAValue, vector: bool) -> None:
                decay = vmath.exp(kb, kb.fmul(broadcast(kb, dt, vector),
                                              kb.load(a_row, j, vector=vector)))
                kb.store(kb.fma(decay, kb.load(h, j, vector=vector),
                                kb.fmul(broadcast(kb, u, vector), kb.load(b_row, j, vector=vector))),
                         h, j)

            kb.sweep(0, n, advance)

        dh = _item_state(kb, p["d_initial_state_out"], item, n, scratch)
        _seed_state(kb, dh, p["d_final_state"], item, n)
        with kb.loop(0, steps) as r_loop:
            step, at = at_step(bw.reverse_step(r_loop.iv))
            dt, xt, dyt = kb.load(delta, at), kb.load(x, at), kb.load(dy, at)
            u = kb.fmul(dt, xt)
            prev = kb.gep(states, kb.mul(at, n))
            b_row, c_row = kb.gep(b, kb.mul(step, n)), kb.gep(c, kb.mul(step, n))
            db_row, dc_row = kb.gep(d_b, kb.mul(step, n)), kb.gep(d_c, kb.mul(step, n))

            def decay_at(j: SSAValue, vector: bool) -> SSAValue:
                return vmath.exp(kb, kb.fmul(broadcast(kb, dt, vector),
                                             kb.load(a_row, j, vector=vector)))

            def read(j: SSAValue, vector: bool) -> SSAValue:
                b_j = kb.load(b_row, j, vector=vector)
                h_j = kb.fma(decay_at(j, vector), kb.load(prev, j, vector=vector),
                             kb.fmul(broadcast(kb, u, vector), b_j))
                _accumulate(kb, dc_row, j, vector, kb.fmul(broadcast(kb, dyt, vector), h_j))
                dh_j = kb.fma(broadcast(kb, dyt, vector), kb.load(c_row, j, vector=vector),
                              kb.load(dh, j, vector=vector))
                kb.store(dh_j, dh, j)
                _accumulate(kb, db_row, j, vector, kb.fmul(broadcast(kb, u, vector), dh_j))
                return kb.fmul(dh_j, b_j)

            du = kb.sweep_sum(n, read)

            def decay(j: SSAValue, vector: bool) -> SSAValue:
                decay_j = decay_at(j, vector)
                dh_j = kb.load(dh, j, vector=vector)
                r = kb.fmul(kb.fmul(dh_j, kb.load(prev, j, vector=vector)), decay_j)
                _accumulate(kb, da_row, j, vector, kb.fmul(broadcast(kb, dt, vector), r))
                kb.store(kb.fmul(dh_j, decay_j), dh, j)
                return kb.fmul(r, kb.load(a_row, j, vector=vector))

            through_decay = kb.sweep_sum(n, decay)
            kb.store(kb.fmul(du, dt), dx, at)
            kb.store(kb.fma(du, xt, through_decay), d_delta, at)
    kb.ret()
    return kb.finish()


@kernel(lir.GatedDeltaNetBackwardOp, partitioned=True, runtime_dims=True)
def build_gated_delta_net_backward(op: Operation, name: str, vector_width: int,
                                   partitioned: bool = False) -> llvm.FuncOp:
    """The reversed gated delta rule, one (b, head) item at a time (the items share no
    gradient, so threads split them): the forward saves S_{t-1} into `states_out`; then
    from t = s-1 down, it recomputes S' = exp(g)·S_{t-1}, kv = S'ᵀk and δ = β(v − kv)
    from the saved state and, with dS the state's cotangent: pass A (rows i) dq_i =
    Σⱼ (S'ᵢⱼ + kᵢδⱼ)·doⱼ, dS += q doᵀ, dk_i = Σⱼ dSᵢⱼδⱼ, dδ = dSᵀk; then dβ = dδ·(v − kv),
    dv = β·dδ, dkv = −β·dδ; pass B dk_i += Σⱼ S'ᵢⱼ·dkvⱼ, dS' = dS + k dkvᵀ,
    dg = Σ S'⊙dS', dS = exp(g)·dS'."""
    assert isinstance(op, lir.GatedDeltaNetBackwardOp)
    batch, _, heads, n = shape_of(op.q)
    m = shape_of(op.v)[3]
    bw = _backward_kernel(op, name, vector_width, partitioned)
    kb, p, steps = bw.kb, bw.ptr, bw.steps
    q, k, v, g, beta, do = (p[key] for key in ("q", "k", "v", "g", "beta", "do"))
    dq, dk, dv, dg, d_beta, states = (
        p[key] for key in ("out", "d_k_out", "d_v_out", "d_g_out", "d_beta_out", "states_out"))
    assert None not in (q, k, v, g, beta, do, dq, dk, dv, dg, d_beta, states)
    size = n * m
    state = kb.alloca(size)                 # S, then S' of the step being reversed
    kv, delta, d_delta = kb.alloca(m), kb.alloca(m), kb.alloca(m)
    scratch = None if p["d_initial_state_out"] is not None else kb.alloca(size)
    first, last = _items(kb, batch * heads, bw.share)

    with kb.loop(first, last) as item_loop:
        item = item_loop.iv
        row, head = kb.sdiv(item, heads), kb.srem(item, heads)

        def at_step(t: SSAValue) -> SSAValue:
            return kb.add(kb.mul(kb.add(kb.mul(row, steps), t), heads), head)  # [b, t, H]

        def recompute(at: SSAValue) -> tuple[SSAValue, SSAValue, SSAValue]:
            """S = exp(g)·S, kv = Sᵀk, δ = β(v − kv) into `delta`, (v − kv) into `kv`;
            returns (exp(g), k_t, β)."""
            decay = vmath.exp(kb, kb.load(g, at))
            k_t, v_t = kb.gep(k, kb.mul(at, n)), kb.gep(v, kb.mul(at, m))
            _decay_and_project(kb, state, k_t, kv, decay, n, m)
            beta_t = kb.load(beta, at)

            def delta_row(j: SSAValue, vector: bool) -> None:
                diff = kb.fsub(kb.load(v_t, j, vector=vector), kb.load(kv, j, vector=vector))
                kb.store(diff, kv, j)
                kb.store(kb.fmul(broadcast(kb, beta_t, vector), diff), delta, j)

            kb.sweep(0, m, delta_row)
            return decay, k_t, beta_t

        _seed_state(kb, state, p["initial_state"], item, size)
        with kb.loop(0, steps) as t_loop:
            at = at_step(t_loop.iv)
            _copy(kb, state, kb.gep(states, kb.mul(at, size)), size)
            _, k_t, _ = recompute(at)
            _rank_one_update(kb, state, k_t, delta, n, m)

        ds = _item_state(kb, p["d_initial_state_out"], item, size, scratch)
        _seed_state(kb, ds, p["d_final_state"], item, size)
        with kb.loop(0, steps) as r_loop:
            at = at_step(bw.reverse_step(r_loop.iv))
            _copy(kb, kb.gep(states, kb.mul(at, size)), state, size)
            decay, k_t, beta_t = recompute(at)
            q_t, do_t = kb.gep(q, kb.mul(at, n)), kb.gep(do, kb.mul(at, m))
            dq_t, dk_t = kb.gep(dq, kb.mul(at, n)), kb.gep(dk, kb.mul(at, n))
            _zero(kb, d_delta, m)
            _through_read(kb, state, ds, q_t, k_t, do_t, delta, d_delta, dq_t, dk_t, n, m)

            def through_delta(j: SSAValue, vector: bool) -> SSAValue:
                dd = kb.load(d_delta, j, vector=vector)
                beta_v = broadcast(kb, beta_t, vector)
                kb.store(kb.fmul(beta_v, dd), dv, kb.add(kb.mul(at, m), j))
                kb.store(kb.fneg(kb.fmul(beta_v, dd)), d_delta, j)        # now dkv
                return kb.fmul(dd, kb.load(kv, j, vector=vector))

            kb.store(kb.sweep_sum(m, through_delta), d_beta, at)
            kb.store(_through_decay(kb, state, ds, k_t, d_delta, dk_t, decay, n, m), dg, at)
    kb.ret()
    return kb.finish()


def _rank_one_update(kb: KernelBuilder, state: SSAValue, k_t: SSAValue, delta: SSAValue,
                     n: int, m: int) -> None:
    """S = S + k_t δᵀ."""
    with kb.loop(0, n) as i_loop:
        s_row = kb.gep(state, kb.mul(i_loop.iv, m))
        k_i = kb.load(k_t, i_loop.iv)

        def step(j: SSAValue, vector: bool) -> None:
            kb.store(kb.fma(broadcast(kb, k_i, vector), kb.load(delta, j, vector=vector),
                            kb.load(s_row, j, vector=vector)), s_row, j)

        kb.sweep(0, m, step)


def _through_read(kb: KernelBuilder, state: SSAValue, ds: SSAValue, q_t: SSAValue,
                  k_t: SSAValue, do_t: SSAValue, delta: SSAValue, d_delta: SSAValue,
                  dq_t: SSAValue, dk_t: SSAValue, n: int, m: int) -> None:
    """Pass A of the reversed step, row i of S' (`state`) and dS (`ds`) at a time:
    dq_i = Σⱼ (S'ᵢⱼ + kᵢδⱼ)doⱼ; dSᵢⱼ += qᵢdoⱼ; dk_i = Σⱼ dSᵢⱼδⱼ; dδⱼ += kᵢdSᵢⱼ."""
    with kb.loop(0, n) as i_loop:
        i = i_loop.iv
        s_row, ds_row = kb.gep(state, kb.mul(i, m)), kb.gep(ds, kb.mul(i, m))
        k_i, q_i = kb.load(k_t, i), kb.load(q_t, i)

        def step(j: SSAValue, vector: bool) -> tuple[SSAValue, SSAValue]:
            do_j, delta_j = kb.load(do_t, j, vector=vector), kb.load(delta, j, vector=vector)
            s_ij = kb.fma(broadcast(kb, k_i, vector), delta_j, kb.load(s_row, j, vector=vector))
            ds_ij = kb.fma(broadcast(kb, q_i, vector), do_j, kb.load(ds_row, j, vector=vector))
            kb.store(ds_ij, ds_row, j)
            _accumulate(kb, d_delta, j, vector, kb.fmul(broadcast(kb, k_i, vector), ds_ij))
            return kb.fmul(s_ij, do_j), kb.fmul(ds_ij, delta_j)

        dq_i, dk_i = _sweep_sums(kb, m, step)
        kb.store(dq_i, dq_t, i)
        kb.store(dk_i, dk_t, i)


def _through_decay(kb: KernelBuilder, state: SSAValue, ds: SSAValue, k_t: SSAValue,
                   dkv: SSAValue, dk_t: SSAValue, decay: SSAValue, n: int, m: int
                   ) -> SSAValue:
    """Pass B of the reversed step, row i at a time: dk_i += Σⱼ S'ᵢⱼ dkvⱼ;
    dS'ᵢⱼ = dSᵢⱼ + kᵢ dkvⱼ; dS = decay·dS'. Returns dg = Σ S'⊙dS'."""
    with kb.loop(0, n, carried=[kb.fconst(0.0)]) as i_loop:
        i = i_loop.iv
        s_row, ds_row = kb.gep(state, kb.mul(i, m)), kb.gep(ds, kb.mul(i, m))
        k_i = kb.load(k_t, i)

        def step(j: SSAValue, vector: bool) -> tuple[SSAValue, SSAValue]:
            s_ij, dkv_j = kb.load(s_row, j, vector=vector), kb.load(dkv, j, vector=vector)
            dsp = kb.fma(broadcast(kb, k_i, vector), dkv_j, kb.load(ds_row, j, vector=vector))
            kb.store(kb.fmul(broadcast(kb, decay, vector), dsp), ds_row, j)
            return kb.fmul(s_ij, dkv_j), kb.fmul(s_ij, dsp)

        dk_i, dg_i = _sweep_sums(kb, m, step)
        kb.store(kb.fadd(kb.load(dk_t, i), dk_i), dk_t, i)
        i_loop.yield_(kb.fadd(i_loop.carried[0], dg_i))
    return i_loop.results[0]
