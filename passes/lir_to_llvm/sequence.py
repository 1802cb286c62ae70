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
parts): it bounds the time loop and strides the rows; the batch, the channels or heads and
the state (`state_out` included) are static.
"""

from __future__ import annotations

from collections.abc import Iterator
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

    @contextmanager
    def items(self, count: int, inner: int) -> Iterator[tuple[SSAValue, SSAValue, SSAValue]]:
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
    steps = _steps(op, RuntimeDims.of(op, sizes)) if symbols else shape_of(op.operands[0])[1]
    *inputs, initial, out, state_out = _pointers(op, args[:pointers])
    return _Sequence(kb, inputs, initial, out, state_out, steps, share, state_size,
                     None if state_out is not None else kb.alloca(state_size))


def _pointers(op: lir.KernelOp, ptrs: list[SSAValue]) -> list[SSAValue | None]:
    """The kernel's pointer arguments (one per memref operand) by operand definition, None
    for an absent optional operand: the five inputs, `initial_state`, `out`, `state_out`."""
    given = iter(ptrs)
    return [None if getattr(op, name) is None else next(given)
            for name, _ in type(op).get_irdl_definition().operands]


def _steps(op: Operation, dims: RuntimeDims) -> Index:
    """The run-time s of a sequence op whose only symbol is s (axis 1 of its operands)."""
    first = dims.shapes[0]
    others = [d for shape in dims.shapes for i, d in enumerate(shape)
              if isinstance(d, str) and (i != 1 or d != first[1])]
    if others or not isinstance(first[1], str):
        raise DynamicKernelError(
            f"{op.name}: only the sequence length (axis 1) may be symbolic, got operands "
            f"{', '.join(str(tuple(s)) for s in dims.shapes)}")
    return dims.size(first[1])


def _items(kb: KernelBuilder, count: int, share: tuple[SSAValue, SSAValue] | None
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
    batch, _, channels = shape_of(op.x)
    n = shape_of(op.a)[1]
    seq = _kernel(op, name, vector_width, partitioned, n)
    kb, steps, out = seq.kb, seq.steps, seq.out
    x, delta, a, b, c = seq.inputs

    with seq.items(batch * channels, channels) as (row, channel, state):
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
    batch, _, heads, n = shape_of(op.q)
    m = shape_of(op.v)[3]
    seq = _kernel(op, name, vector_width, partitioned, n * m)
    kb, steps, out = seq.kb, seq.steps, seq.out
    q, k, v, g, beta = seq.inputs
    kv = kb.alloca(m)                       # Sᵀk, then δ

    with seq.items(batch * heads, heads) as (row, head, state):
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
