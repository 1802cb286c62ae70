"""Kernels of the recurrences over time, `lir.selective_scan` and `lir.gated_delta_net`,
as llvm-dialect functions.

Both run one independent *work item* at a time — a (batch row, channel) of the selective
scan, a (batch row, head) of the gated delta net — and loop over the time steps inside
it, so the item's state stays in L1 for the whole sequence: a small stack buffer, or,
with `return_state`, the item's slice of the output state itself (the packed `out` holds
the flat output, then the flat final state). The state's contiguous axis (n of the scan's
[h, n] state, the value dim m of the delta net's [n, m] state) is swept W floats at a
time with a scalar tail. The partitioned variants (`PARTITIONED`) take two more i64
arguments (part, parts) and run part p's share of the work items (`part_range`), so
channels or heads spread over the threads with no barrier inside.

A symbolic sequence length s (`?` in the operands' second dim) is read at run time
(`RUNTIME_DIMS`, ABI of dynamic.py: its size argument after the pointers, before part and
parts): it bounds the time loop and strides the rows; the batch, the channels or heads and
the state are static (`return_state` needs a static s: its packed result has a static size).
"""

from __future__ import annotations

from collections.abc import Callable

from xdsl.dialects import llvm
from xdsl.dialects.builtin import i64
from xdsl.ir import Operation, SSAValue

from rlx_mlir.core.shape_inference import numel
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
)
from rlx_mlir.passes.lir_to_llvm.record import kernel

ChunkBody = Callable[[SSAValue, bool], None]
"""Emits the work on W (vector) or 1 (scalar) consecutive elements at an offset."""


def sweep(kb: KernelBuilder, count: int, body: ChunkBody) -> None:
    """body(offset, vector) over [0, count): whole vectors of W elements, then a scalar
    tail."""
    w = kb.vector_width
    vector_end = count // w * w
    if vector_end:
        with kb.loop(0, vector_end, w) as loop:
            body(loop.iv, True)
    if vector_end < count:
        with kb.loop(vector_end, count) as loop:
            body(loop.iv, False)


def sweep_sum(kb: KernelBuilder, count: int, term: Callable[[SSAValue, bool], SSAValue]
              ) -> SSAValue:
    """Σ over [0, count) of term(offset, vector): vector partial sums, reduced once, plus
    the scalar tail."""
    w = kb.vector_width
    vector_end = count // w * w
    total = kb.fconst(0.0)
    if vector_end:
        with kb.loop(0, vector_end, w, carried=[kb.vconst(0.0)]) as loop:
            loop.yield_(kb.fadd(loop.carried[0], term(loop.iv, True)))
        total = kb.hsum(loop.results[0])
    if vector_end < count:
        with kb.loop(vector_end, count, carried=[total]) as loop:
            loop.yield_(kb.fadd(loop.carried[0], term(loop.iv, False)))
        total = loop.results[0]
    return total


def broadcast(kb: KernelBuilder, scalar: SSAValue, vector: bool) -> SSAValue:
    return kb.splat(scalar) if vector else scalar


def _kernel(op: Operation, name: str, pointers: int, vector_width: int, partitioned: bool
            ) -> tuple[KernelBuilder, list[SSAValue], Index, tuple[SSAValue, SSAValue] | None]:
    """The kernel's builder, its pointers, the number of time steps s (an int, or the i64
    size argument of a symbolic s) and the (part, parts) arguments when partitioned."""
    symbols = kernel_symbols(op) if is_dynamic(op) else ()
    kb = KernelBuilder(name, [PTR] * pointers + [i64] * len(symbols) + [i64, i64] * partitioned,
                       vector_width=vector_width)
    args = list(kb.args)
    sizes = args[pointers:pointers + len(symbols)]
    share = (args[-2], args[-1]) if partitioned else None
    steps = _steps(op, RuntimeDims.of(op, sizes)) if symbols else shape_of(op.operands[0])[1]
    return kb, args[:pointers], steps, share


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


def _item_state(kb: KernelBuilder, out: SSAValue, item: SSAValue, size: int,
                output_elements: int, returned: bool, scratch: SSAValue | None
                ) -> SSAValue:
    """The state buffer of one work item: its slice of the packed out's final state when
    the op returns the state, else the stack scratch."""
    if not returned:
        assert scratch is not None
        return scratch
    return kb.gep(out, kb.add(kb.mul(item, size), output_elements))


def _seed_state(kb: KernelBuilder, state: SSAValue, initial: SSAValue | None,
                item: SSAValue, size: int) -> None:
    """state[0:size] = initial[item·size : (item+1)·size], or zeros."""
    source = None if initial is None else kb.gep(initial, kb.mul(item, size))

    def seed(i: SSAValue, vector: bool) -> None:
        value = (kb.vconst(0.0) if vector else kb.fconst(0.0)) if source is None else \
            kb.load(source, i, vector=vector)
        kb.store(value, state, i)

    sweep(kb, size, seed)


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
    has_initial = op.initial_state is not None
    returned = op.return_state is not None
    kb, ptrs, steps, share = _kernel(op, name, 6 + has_initial, vector_width, partitioned)
    x, delta, a, b, c = ptrs[:5]
    initial = ptrs[5] if has_initial else None
    out = ptrs[-1]
    scratch = None if returned else kb.alloca(n)

    first, last = _items(kb, batch * channels, share)
    with kb.loop(first, last) as item_loop:
        item = item_loop.iv
        row, channel = kb.sdiv(item, channels), kb.srem(item, channels)
        state = _item_state(kb, out, item, n, numel(shape_of(op.x)) if returned else 0,
                            returned, scratch)
        _seed_state(kb, state, initial, item, n)
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

            kb.store(sweep_sum(kb, n, update), out, at)
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
    has_initial = op.initial_state is not None
    returned = op.return_state is not None
    kb, ptrs, steps, share = _kernel(op, name, 6 + has_initial, vector_width, partitioned)
    q, k, v, g, beta = ptrs[:5]
    initial = ptrs[5] if has_initial else None
    out = ptrs[-1]
    scratch = None if returned else kb.alloca(n * m)
    kv = kb.alloca(m)                       # Sᵀk, then δ

    first, last = _items(kb, batch * heads, share)
    with kb.loop(first, last) as item_loop:
        item = item_loop.iv
        row, head = kb.sdiv(item, heads), kb.srem(item, heads)
        state = _item_state(kb, out, item, n * m, numel(shape_of(op.v)) if returned else 0,
                            returned, scratch)
        _seed_state(kb, state, initial, item, n * m)
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

            sweep(kb, m, delta_row)
            _update_and_read(kb, state, k_t, q_t, kv, o_t, n, m)
    kb.ret()
    return kb.finish()


def _decay_and_project(kb: KernelBuilder, state: SSAValue, k_t: SSAValue, kv: SSAValue,
                       decay: SSAValue, n: int, m: int) -> None:
    """S = decay·S and kv = Sᵀk_t = Σᵢ k_t[i]·S[i, :] (the decayed S)."""

    def zero(j: SSAValue, vector: bool) -> None:
        kb.store(kb.vconst(0.0) if vector else kb.fconst(0.0), kv, j)

    sweep(kb, m, zero)
    with kb.loop(0, n) as i_loop:
        s_row = kb.gep(state, kb.mul(i_loop.iv, m))
        k_i = kb.load(k_t, i_loop.iv)

        def step(j: SSAValue, vector: bool) -> None:
            decayed = kb.fmul(kb.load(s_row, j, vector=vector), broadcast(kb, decay, vector))
            kb.store(decayed, s_row, j)
            kb.store(kb.fma(broadcast(kb, k_i, vector), decayed, kb.load(kv, j, vector=vector)),
                     kv, j)

        sweep(kb, m, step)


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

        sweep(kb, m, step)
